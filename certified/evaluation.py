"""The bound evaluated once, against an arithmetic context (proofs_notes/theory.md section 7).

:func:`evaluate` is the one driver of the main theorem.  It is written against a context ``ctx``
(:mod:`specbound.certified.context`: Arb balls per matrix, or float64 numpy arrays) and a compiled
theorem (``ctx.theorem``, :class:`specbound.certified.compiled.CompiledTheorem`, every formula
called by name); it only decides *which* field applies to which matrix and combines the values.
The certified bound (``certify_bound``, certified/bound.py) and the fast float evaluation
(``numeric.evaluation``) are this driver run in the two contexts, so they take the same branches
and apply the same edge policy (docs/design.md section 2, "One evaluation"):

* ``alpha_D`` must lie in ``(0, dd_upper]``; outside, the plan is refused.  At ``alpha_D = dd_upper``
  every Dudley piece is an integral over an empty range, hence exactly 0 (each piece field vanishes
  there identically, checked symbolically in tests/derivation): ``ctx.vanish``.
* The Dudley weights must be > 0 (the read-out's only when it is trained; a fixed read-out's is
  ignored) with exact sum <= 1.  Float rounding may overshoot: an exact sum in
  ``(1, 1 + DUDLEY_OVERSHOOT]`` is divided by itself, exactly, and those rescaled weights are what
  both contexts evaluate (and the certificate records); a larger sum is refused.
* ``u_j > 0`` for every matrix and ``u_w > 0`` for a trained read-out; a p index outside ``P_m``,
  a plan for another grid ``m`` or another number of matrices, and a zero read-out are refused.
* A matrix at ``p = 0`` of proven rank 0 needs no cover: its entropy and Dudley piece are exactly 0
  and its ``u_j`` adds nothing to ``U`` (no formula is evaluated there).

What differs between the layers is only the *facts* they feed in (:class:`Facts`): the certified
layer rounds certified enclosures onto the grids exactly (certified/radii.py), the float layer
rounds float spectra; each reads its own read-out norm and empirical term.

Routes.  The shared part (radii, layer constants, alpha, gamma, kappa: :func:`network`) is
evaluated once per plan; a *route* turns it into a bound.  :func:`rademacher` is the main theorem's
route (SS, DD, Lambda, confidence) at a :class:`~specbound.plan.BoundPlan`; :func:`occam` the Occam
route (proofs_notes/occam_route.md: allocation rule, entropy H_theta(gamma), mass C, the certified
upper count K^ and BinInv) at an :class:`~specbound.plan.OccamPlan`, whose margin gamma plays the part
of rho in :func:`network` (so ``kappa`` is kappa^gamma).  Each route runs at the level
``settings.route_level()`` (delta split between the routes evaluated).  The only inputs from the
sample are ``facts.empirical`` (Rademacher) and ``facts.count`` (Occam): SS and DD take none, which
the one-McDiarmid-step confidence needs (proofs_notes/sharpenings.md S3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from specbound.errors import CertificationError, SpecboundError
from specbound.matrices import AnalysisWeights, NamedMatrix
from specbound.plan import BoundPlan, BoundSettings, OccamPlan
from specbound.vocabulary import READOUT_TRAINED, kv_group

DUDLEY_OVERSHOOT = Fraction(1, 10**9)
"""How far past 1 the exact sum of a plan's Dudley weights may lie and still be rescaled (float
rounding of weights that were meant to sum to at most 1); beyond it the plan is refused."""


# -- what the driver is fed -----------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Structure:
    """Which matrix feeds which theorem symbol: integer index arrays over the canonical matrix order.

    ``heads[sym]`` (L, H): the row of the matrix feeding head symbol ``sym`` of layer l and head h
    (for the shared key matrix, the head's key/value group); ``layers[sym]`` (L,): the row feeding
    layer symbol ``sym``; ``group`` (H,): each head's key/value group; ``layer``/``head`` (J,):
    each matrix's layer and head (0 for a per-layer matrix); ``dims`` (J,): ``m_j + n_j``;
    ``rows``/``cols`` (J,): ``m_j``, ``n_j`` (the volumetric cover's dimension is their product);
    ``rank_cap`` (J,): the structural rank cap ``r_max``.
    """

    matrices: tuple[NamedMatrix, ...]
    kinds: np.ndarray
    layer: np.ndarray
    head: np.ndarray
    heads: Mapping[str, np.ndarray]
    layers: Mapping[str, np.ndarray]
    group: np.ndarray
    num_groups: int
    dims: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    rank_cap: np.ndarray
    width: int
    num_layers: int
    variant: str


def structure_of(weights: AnalysisWeights, layout: Mapping) -> Structure:
    """The :class:`Structure` of ``weights`` under a variant's layout (symbol names; a table's
    ``LAYOUTS[variant]``).  A matrix the layout needs but the weights lack is a SpecboundError."""
    mats = tuple(weights.matrices)
    where = {(m.layer, m.kind, m.head): j for j, m in enumerate(mats)}
    H, L = weights.num_heads, weights.num_layers
    group = [kv_group(h, H, weights.num_kv_heads) for h in range(H)]
    as_i = lambda x: np.array(x, dtype=np.int64)  # noqa: E731
    try:
        heads = {sym: as_i([[where[(l, kind, group[h] if kind == layout["shared"] else h)] for h in range(H)]
                            for l in range(L)]).reshape(L, H) for sym, kind in layout["head"].items()}
        layers = {sym: as_i([where[(l, kind, -1)] for l in range(L)]) for sym, kind in layout["layer"].items()}
    except KeyError as exc:
        raise SpecboundError(f"weights lack matrix (layer, type, head) = {exc.args[0]}") from None
    return Structure(
        matrices=mats, kinds=np.array([m.kind for m in mats], dtype=object),
        layer=as_i([m.layer for m in mats]), head=as_i([max(m.head, 0) for m in mats]), heads=heads,
        layers=layers, group=as_i(group), num_groups=max(group, default=-1) + 1,
        dims=as_i([sum(m.shape) for m in mats]), rows=as_i([m.shape[0] for m in mats]),
        cols=as_i([m.shape[1] for m in mats]), rank_cap=as_i([m.rank_cap for m in mats]),
        width=int(weights.width), num_layers=int(L), variant=weights.variant)


@dataclass(frozen=True, eq=False)
class Radii:
    """The grid radii of every matrix at a plan, in the context's arithmetic.

    ``p`` (exact): the index each matrix is evaluated at; ``k_c``/``c``: ``c~_j = beta_c^k_c >=
    ||W_j||``; ``k_s``/``s``: ``s~_j = beta_s^k_s >= S_p(W_j)`` for p > 0, and at p = 0 ``s`` is the
    rank bound used (``k_s`` unused there); ``rank`` (J,) the integer rank bound used at p = 0;
    ``detail``: what the layer rounded from (certified roundings, float Schatten powers).
    """

    p: tuple[Fraction, ...]
    k_c: Any
    c: Any
    k_s: Any
    s: Any
    rank: np.ndarray
    detail: Any = None


@dataclass(frozen=True)
class Readout:
    """The read-out in the theorem: ``kind`` "trained" (covered, on the grid: ``B_w = beta_w^k_w``)
    or "fixed" (``B_w = ||w||``, ``k_w`` None); ``norm`` = ||w|| (1 for a missing read-out)."""

    kind: str
    norm: Any
    k_w: int | None
    B_w: Any

    @property
    def trained(self) -> bool:
        return self.kind == READOUT_TRAINED


class Facts(Protocol):
    """What one layer knows about the network, fed to :func:`evaluate`.

    ``settings``; ``structure``; ``m``: the grid P_m the settings fix; ``readout(ctx)``;
    ``radii(ctx, plan)``: :class:`Radii` at the plan's p (may refuse a plan it cannot round);
    ``empirical(ctx, rho)``: the empirical ramp loss at margin ``rho`` (None: not given);
    ``count(ctx, gamma)``: the margin count ``K^ >= #{i : y_i f(X_i) <= gamma}`` (Arb: the certified
    upper count of condition C4; float: the count of the float margins) or None without a sample.
    """

    settings: BoundSettings
    structure: Structure
    m: int

    def readout(self, ctx) -> Readout: ...

    def radii(self, ctx, plan: BoundPlan) -> Radii: ...

    def empirical(self, ctx, rho): ...

    def count(self, ctx, gamma) -> int | None: ...


# -- the shared part: radii and sensitivities -----------------------------------------------------

@dataclass(frozen=True, eq=False)
class Network:
    """Everything every route uses: radii, read-out, the plan's margin ``rho`` (``beta_rho^k_rho`` for
    the Rademacher route, ``gamma = beta_gamma^k_gamma`` for the Occam route) and the sensitivities
    (layer constants ``lipschitz`` (L,), ``alpha`` (L,), ``gamma``/``kappa`` (J,), kappa at that margin)."""

    radii: Radii
    readout: Readout
    rho: Any
    lipschitz: Any
    alpha: Any
    gamma: Any
    kappa: Any


def network_sensitivities(ctx, structure: Structure, c, B_w, rho) -> tuple:
    """(lipschitz (L,), alpha (L,), gamma (J,), kappa) from the spectral radii ``c`` (J,).

    ``L_l`` = ``layer_lipschitz`` of the layer's radii and the sum over heads of ``head_summand``;
    ``alpha_{L-1} = 1``, ``alpha_l = alpha_step(alpha_{l+1}, L_{l+1})``; ``gamma_j`` the matrix
    kind's sensitivity (a shared key matrix: of its group sum ``Sigma_g``); ``kappa_j =
    kappa(B_w, alpha_{l(j)}, gamma_j, rho)`` (``rho`` may be an array: kappa broadcasts).
    """
    ct = ctx.theorem
    lay, names = ct.layout, ct.names
    L, J = structure.num_layers, len(structure.matrices)
    head_c = {sym: c[ix] for sym, ix in structure.heads.items()}  # (L, H) each
    layer_c = {sym: c[ix] for sym, ix in structure.layers.items()}  # (L,) each
    head = ctx.field("head_summand", **head_c)
    sigma_h = ctx.sum(ctx.broadcast(head, (L, len(structure.group))), axis=-1)
    lip = ctx.broadcast(ctx.field("layer_lipschitz", **layer_c, **{names["head_sum"]: sigma_h}), (L,))
    alphas = [ctx.one]
    for l in range(L - 1, 0, -1):
        alphas.append(ctx.field("alpha_step", alpha=alphas[-1], mathcal_L=lip[l]))
    alpha = ctx.vector(alphas[::-1])
    if lay["shared"] is not None:  # Sigma_g per (layer, group): the heads' group summands added up
        per_head = ctx.broadcast(ctx.field("group_summand", **head_c), (L, len(structure.group)))
        sigma_g = ctx.group_sum(per_head, structure.group, structure.num_groups)
    gamma = ctx.broadcast(ctx.zero, (J,)).copy()
    layer, head_of = structure.layer, structure.head
    for kind, key in lay["gamma_key"].items():
        ix = np.flatnonzero(structure.kinds == kind)
        if not ix.size:
            continue
        args = {name: val[layer[ix]] for name, val in layer_c.items()}
        if kind == lay["shared"]:
            args[names["group_sum"]] = sigma_g[layer[ix], head_of[ix]]
        elif structure.matrices[ix[0]].head >= 0:
            args |= {name: val[layer[ix], head_of[ix]] for name, val in head_c.items()}
        gamma[ix] = ctx.broadcast(ctx.field("gamma_" + key, **args), ix.shape)
    kappa = ctx.field("kappa", B_w=B_w, alpha=alpha[layer], gamma=gamma, rho=rho)
    return lip, alpha, gamma, kappa


def check_grid(plan: BoundPlan | OccamPlan, J: int, m: int) -> None:
    """The plan is for ``J`` matrices on the grid ``P_m``; a CertificationError says what is wrong."""
    sizes = {len(plan.p_index)} | ({len(plan.u), len(plan.vartheta)} if isinstance(plan, BoundPlan) else set())
    if sizes != {J}:
        raise CertificationError(f"plan covers {len(plan.p_index)} matrices, the network has {J}")
    if plan.m != m:
        raise CertificationError(f"plan uses the grid m = {plan.m}, the settings fix m = {m}")
    for i in plan.p_index:
        if not 0 <= i <= 2 * m:
            raise CertificationError(f"plan: p index {i} is not on P_m (m = {m})")


def network(ctx, facts: Facts, plan: BoundPlan | OccamPlan) -> Network:
    """The shared part of every route at ``plan`` (refuses a plan for another network or grid, and
    a zero read-out: the network is then constant); kappa at the plan's margin."""
    st = facts.settings
    check_grid(plan, len(facts.structure.matrices), facts.m)
    readout = facts.readout(ctx)
    if not readout.B_w > 0:
        raise CertificationError("the read-out is zero: the network is constant, no margin bound")
    radii = facts.radii(ctx, plan)
    rho = ctx.exact(plan.margin(st))
    lip, alpha, gamma, kappa = network_sensitivities(ctx, facts.structure, radii.c, readout.B_w, rho)
    return Network(radii, readout, rho, lip, alpha, gamma, kappa)


# -- the combiners: which form for which read-out (one definition, also the planner's) ------------

def ss_closed(field, trained: bool, T_sum, *, B_w, N, n, rho):
    """SS closed form from the sum of the matrix terms; a fixed read-out has no cover term
    (proofs_notes/theory.md section 7, fixed w).  ``field(name, **values)``: ``ctx.field`` or a
    :class:`~specbound.certified.compiled.CompiledTheorem`."""
    if trained:
        return field("ss_closed", B_w=B_w, N=N, T_sum=T_sum, n=n, rho=rho)
    return field("ss_closed_fixed", T_sum=T_sum, n=n)


def dd_closed(field, trained: bool, D_sum, *, B_w, N, n, rho, alpha_D, vartheta_w):
    """Dudley closed form from the sum of the matrix pieces (without the read-out's piece when fixed)."""
    if trained:
        return field("dd_closed", B_w=B_w, N=N, D_sum=D_sum, alpha_D=alpha_D, n=n, rho=rho, vartheta_w=vartheta_w)
    return field("dd_closed_fixed", D_sum=D_sum, alpha_D=alpha_D, n=n)


def lambda_total(field, trained: bool, Lambda_sum, *, k_rho, k_w):
    """Lambda(theta) from the per-matrix sum; a fixed read-out is not on the grid (no lambda(k_w))."""
    if trained:
        return field("Lambda_total", Lambda_sum=Lambda_sum, k_rho=k_rho, k_w=k_w)
    return field("Lambda_total_fixed", Lambda_sum=Lambda_sum, k_rho=k_rho)


# -- the main theorem's route ---------------------------------------------------------------------

@dataclass(frozen=True)
class Choices:
    """The plan's float choices as the exact rationals that are evaluated (``u_w``/``vartheta_w``
    None for a fixed read-out); ``rescaled``: the Dudley weights were divided by their exact sum."""

    alpha_D: Fraction
    u: tuple[Fraction, ...]
    u_w: Fraction | None
    vartheta: tuple[Fraction, ...]
    vartheta_w: Fraction | None
    rescaled: bool = False


def _positive(value, what: str) -> Fraction:
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise CertificationError(f"plan: {what} must be a finite number > 0, got {value!r}")
    return Fraction(v)


def choices(plan: BoundPlan, dd_upper: Fraction, trained: bool) -> Choices:
    """The exact choices of the main theorem at ``plan`` under the edge policy of the module docstring."""
    alpha_D = _positive(plan.alpha_D, "alpha_D")
    if alpha_D > dd_upper:
        raise CertificationError(f"plan: alpha_D = {plan.alpha_D} exceeds the Dudley limit {dd_upper}")
    u = tuple(_positive(v, "u") for v in plan.u)
    u_w = _positive(plan.u_w, "u_w") if trained else None
    theta = tuple(_positive(v, "vartheta") for v in plan.vartheta)
    theta_w = _positive(plan.vartheta_w, "vartheta_w") if trained else None
    total = sum(theta, Fraction(0)) + (theta_w or 0)
    if total > 1 + DUDLEY_OVERSHOOT:
        raise CertificationError(f"plan's Dudley weights sum to more than 1 ({float(total)!r})")
    if total <= 1:
        return Choices(alpha_D, u, u_w, theta, theta_w)
    return Choices(alpha_D, u, u_w, tuple(t / total for t in theta), None if theta_w is None else theta_w / total,
                   rescaled=True)


@dataclass(frozen=True, eq=False)
class MainTerms:
    """The main theorem's values (context numbers).  Per matrix (J,): ``term`` (closed-form
    single-scale term), ``entropy`` (H_j(u_j / kappa_j)), ``piece`` (Dudley piece), ``lam`` (its
    part of Lambda).  ``bound`` includes the empirical term when ``empirical`` is not None, else it
    is taken as 0 (then ``bound`` = ``partial`` = complexity + confidence)."""

    choices: Choices
    term: Any
    entropy: Any
    piece: Any
    lam: Any
    ss_closed: Any
    ss_exact: Any
    SS: Any
    DD: Any
    Lambda: Any
    confidence: Any
    complexity: Any
    empirical: Any
    bound: Any
    partial: Any


def rademacher(ctx, facts: Facts, net: Network, plan: BoundPlan) -> MainTerms:
    """The main theorem (proofs_notes/theory.md section 7) at the plan: ``SS`` = min of the
    closed form and the exact single-scale objective at the plan's ``u``, ``DD`` the Dudley closed
    form at ``alpha_D`` and ``vartheta``, the post hoc union's ``Lambda`` and confidence, and
    ``bound = empirical + 2 min(SS, DD) + confidence``."""
    f, st, S = ctx.field, facts.settings, facts.structure
    rd, rad, rho, kap = net.readout, net.radii, net.rho, net.kappa
    ch = choices(plan, ctx.theorem.dd_upper, rd.trained)
    is0 = np.array([q == 0 for q in rad.p], dtype=bool)
    two = np.array([q == 2 for q in rad.p], dtype=bool)
    mid = ~is0 & ~two
    rank0 = is0 & (np.asarray(rad.rank) == 0)  # needs no cover: entropy and piece exactly 0
    live0 = is0 & ~rank0
    n, N = ctx.exact(st.n), ctx.exact(S.width)
    d, r, p = ctx.exact_vector(S.dims.tolist()), ctx.exact_vector(S.rank_cap.tolist()), ctx.exact_vector(rad.p)
    vol = dict(m=ctx.exact_vector(S.rows.tolist()), n_c=ctx.exact_vector(S.cols.tolist()))  # sharpenings S1
    c, s = rad.c, rad.s
    B_w = rd.B_w

    # single scale: the closed form, and the exact objective at the plan's u
    term = ctx.select(is0, f("ss_matrix_term_rank", where=is0, c=c, d=d, kappa=kap, n=n, r_max=r, s=s),
                      f("ss_matrix_term", where=~is0, c=c, d=d, kappa=kap, n=n, p=p, s=s))
    closed = ss_closed(f, rd.trained, ctx.sum(term), B_w=B_w, N=N, n=n, rho=rho)
    u = ctx.exact_vector(ch.u)
    ent = ctx.select(rank0, ctx.zero, ctx.select(
        is0, f("ss_matrix_entropy_rank", where=live0, c=c, d=d, kappa=kap, r_max=r, s=s, u=u, **vol),
        f("ss_matrix_entropy", where=~is0, c=c, d=d, kappa=kap, p=p, r_max=r, s=s, u=u, **vol)))
    H_total, U_total = ctx.sum(ent), ctx.sum(ctx.select(rank0, ctx.zero, u))
    if rd.trained:
        u_w = ctx.exact(ch.u_w)
        H_total = H_total + f("ss_readout_entropy", B_w=B_w, N=N, rho=rho, u_w=u_w)
        U_total = U_total + u_w
    ss_exact = f("ss_objective", H_total=H_total, U_total=U_total, n=n)
    SS = ctx.min(closed, ss_exact)

    # Dudley: the closed form at the plan's alpha_D and weights
    a, theta = ctx.exact(ch.alpha_D), ctx.exact_vector(ch.vartheta)
    dd = dict(alpha_D=a, c=c, d=d, kappa=kap, s=s, vartheta=theta)
    piece = ctx.select(rank0, ctx.zero, ctx.select(
        is0, f("dd_matrix_piece_rank", where=live0, r_max=r, **dd),
        ctx.select(two, f("dd_matrix_piece_p2", where=two, **dd), f("dd_matrix_piece", where=mid, p=p, **dd))))
    piece = ctx.vanish(ch.alpha_D == ctx.theorem.dd_upper, piece)  # an empty integration range
    DD = dd_closed(f, rd.trained, ctx.sum(piece), B_w=B_w, N=N, n=n, rho=rho, alpha_D=a,
                   vartheta_w=ctx.exact(ch.vartheta_w) if rd.trained else None)

    # the post hoc union over the grid, confidence and bound
    lam = matrix_prices(ctx, facts, rad)
    k_rho = ctx.exact(plan.k_rho)
    Lambda = lambda_total(f, rd.trained, ctx.sum(lam), k_rho=k_rho, k_w=ctx.exact(rd.k_w) if rd.trained else None)
    delta = ctx.exact(st.route_level())  # delta / (K routes): occam_route.md step 5, selection.md item 4
    confidence = f("confidence", Lambda=Lambda, delta=delta, n=n)
    complexity = f("complexity", DD=DD, SS=SS)
    empirical = facts.empirical(ctx, rho)
    bound = f("bound", DD=DD, Lambda=Lambda, SS=SS, delta=delta, n=n,
              hat_E=ctx.zero if empirical is None else empirical)
    return MainTerms(ch, term, ent, piece, lam, closed, ss_exact, SS, DD, Lambda, confidence, complexity,
                     empirical, bound, complexity + confidence)


def matrix_prices(ctx, facts: Facts, rad: Radii):
    """Each matrix's part of Lambda(theta) at its grid radii (posthoc_union): ``log(2m+1) + lambda(k_c)``
    plus ``lambda(k_s)`` (p > 0) or ``log(r_max + 1)`` (p = 0).  The same for both routes."""
    f = ctx.field
    is0 = np.array([q == 0 for q in rad.p], dtype=bool)
    m, r = ctx.exact(facts.m), ctx.exact_vector(facts.structure.rank_cap.tolist())
    return ctx.select(is0, f("lambda_matrix_rank", where=is0, k_c=rad.k_c, m_grid=m, r_max=r),
                      f("lambda_matrix", where=~is0, k_c=rad.k_c, k_s=rad.k_s, m_grid=m))


# -- the Occam route ------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class OccamTerms:
    """The Occam route's values (context numbers) at an :class:`~specbound.plan.OccamPlan`.

    Per matrix (J,): ``weight`` (the rule's omega_j), ``share`` (vartheta_j = omega_j / Omega),
    ``entropy`` (H_j(eps_j), the smaller of the rank/Schatten and the volumetric cover), ``lam`` (its
    part of Lambda).  ``share_w``/``entropy_w``: the read-out's (None when fixed).  ``H`` = H_theta(gamma),
    ``Lambda`` (with lambda(k_gamma)), ``mass`` = C at ``level``; ``count`` = K^ (None without a sample),
    ``inversion`` the context's BinInv of (n, K^, C) (``.value``, ``.method``) and ``bound`` its value
    (None without a sample).
    """

    k_gamma: int
    gamma: Any
    weight: Any
    Omega: Any
    share: Any
    share_w: Any
    entropy: Any
    entropy_w: Any
    H: Any
    lam: Any
    Lambda: Any
    level: Fraction
    mass: Any
    count: int | None
    inversion: Any
    bound: Any


def occam(ctx, facts: Facts, net: Network, plan: OccamPlan) -> OccamTerms:
    """The Occam route (proofs_notes/occam_route.md) at ``plan``: the rule's shares (functions of the
    grid point only, condition C2), the scales ``eps_j = vartheta_j / (2 kappa^gamma_j)`` and
    ``eps_w = vartheta_w gamma / 2``, ``H_theta(gamma)``, ``Lambda`` with ``lambda(k_gamma)``, the mass
    ``C = H + Lambda + log(1/level)``, the margin count ``K^`` at ``gamma`` itself and
    ``bound = BinInv(n, K^, e^-C)``.  A matrix of proven rank 0 at p = 0 has weight, share and entropy
    exactly 0 (no formula is evaluated there)."""
    if not isinstance(plan, OccamPlan):
        raise CertificationError("the Occam route needs an OccamPlan (p_index, k_gamma)")
    f, st, S = ctx.field, facts.settings, facts.structure
    rd, rad, gam, kap = net.readout, net.radii, net.rho, net.kappa
    is0 = np.array([q == 0 for q in rad.p], dtype=bool)
    rank0 = is0 & (np.asarray(rad.rank) == 0)
    live0 = is0 & ~rank0
    N = ctx.exact(S.width)
    shape = dict(d=ctx.exact_vector(S.dims.tolist()), m=ctx.exact_vector(S.rows.tolist()),
                 n_c=ctx.exact_vector(S.cols.tolist()), r_max=ctx.exact_vector(S.rank_cap.tolist()))
    c, s, p = rad.c, rad.s, ctx.exact_vector(rad.p)

    # the allocation rule: exact integers of the grid point, shares omega_j / Omega
    weight = ctx.select(rank0, ctx.zero, ctx.select(
        is0, f("occam_weight_rank", where=live0, s=s, **shape), f("occam_weight", where=~is0, **shape)))
    if rd.trained:
        Omega = f("occam_Omega_total", Omega_sum=ctx.sum(weight), N=N)
        share_w = f("occam_share_readout", N=N, Omega=Omega)
    else:
        Omega, share_w = f("occam_Omega_total_fixed", Omega_sum=ctx.sum(weight)), None
    share = f("occam_share", omega=weight, Omega=Omega)

    # the entropies at the route's scales (rank 0: exactly 0, never 0 log inf)
    ent = ctx.select(rank0, ctx.zero, ctx.select(
        is0, f("occam_entropy_matrix_rank", where=live0, c=c, kappa=kap, s=s, vartheta=share, **shape),
        f("occam_entropy_matrix", where=~is0, c=c, kappa=kap, p=p, s=s, vartheta=share, **shape)))
    if rd.trained:
        H = f("occam_H_total", H_sum=ctx.sum(ent), B_w=rd.B_w, N=N, gamma_m=gam, vartheta_w=share_w)
        ent_w = f("occam_entropy_readout", B_w=rd.B_w, N=N, gamma_m=gam, vartheta_w=share_w)
    else:
        H, ent_w = f("occam_H_total_fixed", H_sum=ctx.sum(ent)), None

    # the union over the grid and the margin grid, the mass, the count and the inversion
    lam = matrix_prices(ctx, facts, rad)
    k_gamma = ctx.exact(plan.k_gamma)
    if rd.trained:
        Lambda = f("occam_Lambda_total", Lambda_sum=ctx.sum(lam), k_gamma=k_gamma, k_w=ctx.exact(rd.k_w))
    else:
        Lambda = f("occam_Lambda_total_fixed", Lambda_sum=ctx.sum(lam), k_gamma=k_gamma)
    level = st.route_level()
    mass = f("occam_confidence_mass", H_theta=H, Lambda=Lambda, delta=ctx.exact(level))
    count = facts.count(ctx, gam)
    inversion = None if count is None else ctx.bininv(int(st.n), min(int(count), int(st.n)), mass)
    return OccamTerms(int(plan.k_gamma), gam, weight, Omega, share, share_w, ent, ent_w, H, lam, Lambda, level,
                      mass, count, inversion, None if inversion is None else inversion.value)


# -- the driver -----------------------------------------------------------------------------------

Route = Callable[[Any, Facts, Network, Any], Any]


@dataclass(frozen=True, eq=False)
class Evaluation:
    """One evaluation: the shared :class:`Network` and the route's terms (:class:`MainTerms` for
    :func:`rademacher`, :class:`OccamTerms` for :func:`occam`)."""

    network: Network
    terms: Any


def evaluate(ctx, facts: Facts, plan: BoundPlan | OccamPlan, route: Route = rademacher) -> Evaluation:
    """The bound at ``plan`` in the arithmetic of ``ctx`` from ``facts``, by ``route``.

    Arb context: every value is a ball enclosing the exact value of the theorem's expression at
    the facts' radii (the caller sets the working precision).  numpy context: float64 values.
    Refuses (CertificationError, one line) a plan outside the edge policy of the module docstring.
    """
    net = network(ctx, facts, plan)
    return Evaluation(net, route(ctx, facts, net, plan))


def decimal_fraction(x: float) -> Fraction:
    """The rational the user typed for a float parameter (its shortest decimal repr), e.g. 0.05 -> 1/20."""
    return Fraction(repr(float(x)))


__all__ = ["DUDLEY_OVERSHOOT", "Choices", "Evaluation", "Facts", "MainTerms", "Network", "OccamTerms", "Radii",
           "Readout", "Route", "Structure", "check_grid", "choices", "dd_closed", "decimal_fraction", "evaluate",
           "lambda_total", "matrix_prices", "network", "network_sensitivities", "occam", "rademacher", "ss_closed",
           "structure_of"]
