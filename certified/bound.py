"""The certified bound: the main theorem of proofs_notes/theory.md section 7 evaluated in Arb.

Every formula is an expression of :func:`specbound.derivation.theorem.assemble`, printed to ball
arithmetic by :class:`specbound.derivation.backends.ArbPrinter` (ahead of time into
certified/generated.py by scripts/generate_derived.py, or at run time when a constant is
overridden); this module only decides *which* expression applies to which matrix and feeds it
certified inputs:

* radii ``c~_j = beta_c**k_c >= ||W_j||``, ``s~_j = beta_s**k_s >= S_{p_j}(W_j)`` (or a proven rank
  for ``p_j = 0``), ``B~_w = beta_w**k_w >= ||w||`` (trained read-out) and ``rho~ = beta_rho**k_rho``
  (:mod:`specbound.certified.radii`);
* the plan's float choices (``p_j``, ``u``, ``alpha_D``, ``vartheta``), taken as exact binary
  numbers.  proofs_notes/theory.md sections 6-7: the theorem holds for every choice, so they cannot break it.

Guarantee of :func:`certify_bound`: with probability >= 1 - delta over the sample, the 0-1 risk of
the network is <= ``result.bound.upper()`` (when an empirical term is given; a user-supplied one is
the user's claim).  ``SS`` is the minimum of the closed form and the exact single-scale objective
at the plan's ``u``; ``DD`` is the Dudley closed form at the plan's ``alpha_D``, ``vartheta``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Sequence

import numpy as np
from flint import arb, fmpq

from specbound.certified import generated
from specbound.certified.arb import WORK_PREC, precision, sum_arb
from specbound.certified.enclosure import SingularValueEnclosure
from specbound.certified.forward_ls import ROPE_COS, ROPE_SIN, rope_norm_bound
from specbound.certified.radii import MatrixRounding, index_up, power_ball, round_matrix
from specbound.errors import CertificationError
from specbound.matrices import AnalysisWeights
from specbound.plan import BoundPlan, BoundSettings, generated_theorem_applies
from specbound.vocabulary import kv_group


# ------------------------------------------------------------------------------------------------
# compiled theorem


class Evaluators:
    """Arb callables of every theorem expression the bound needs (one set per theorem variant).

    ``ev.<name>`` for the names of :func:`specbound.derivation.evaluated.certified_expressions`
    (positional arguments in the order listed there; ``head``, ``layer`` and ``gamma[key]`` take a
    mapping symbol name -> ball).  ``fixed``: the read-out is fixed (proofs_notes/theory.md section
    7, last paragraph): the combiners drop H_w, u_w and lambda(k_w).  ``origin``: "generated"
    (certified/generated.py, printed from the SymPy source by scripts/generate_derived.py; no SymPy
    import) or "sympy" (compiled at run time: lemma-constant overrides, or a patched register).
    """

    def __init__(self, fns: dict, fixed: bool, dd_upper: Fraction, rho_R: Fraction | None, layout: dict,
                 origin: str):
        self.fns, self.fixed, self.dd_upper, self.rho_R = fns, fixed, dd_upper, rho_R
        self.layout, self.origin = layout, origin
        self.gamma = {name[len("gamma_"):]: fn for name, fn in fns.items() if name.startswith("gamma_")}

    def __getattr__(self, name: str):
        try:
            return self.__dict__["fns"][name]
        except KeyError:
            raise AttributeError(name) from None


_CACHE: dict[tuple, Evaluators] = {}

#: the expressions called with a mapping name -> value instead of positional arguments
_NAMED = ("head", "layer")


def _named(fn, names: tuple[str, ...]):
    """A callable of a mapping symbol name -> ball (names the expression does not contain are
    ignored; a missing one is a KeyError, never a silent default)."""
    return lambda values: fn(*(values[a] for a in names))


def _wrap(name: str, fn, names: tuple[str, ...]):
    return _named(fn, names) if name in _NAMED or name.startswith("gamma_") else fn


def _generated(key: tuple, fixed: bool) -> Evaluators | None:
    row = generated.THEOREMS.get(key + (fixed,))
    if row is None:
        return None
    fns = {name: _wrap(name, generated.FUNCTIONS[i], generated.ARGS[i]) for name, i in row.items()}
    const = generated.CONSTANTS[key]
    rho_R = Fraction(const["rho_R"]) if "rho_R" in const else None
    return Evaluators(fns, fixed, Fraction(const["dd_upper"]), rho_R, generated.LAYOUTS[key[3]], "generated")


def _from_sympy(settings: BoundSettings, activation: str, fixed: bool, model: str) -> Evaluators:
    from specbound.derivation import evaluated
    from specbound.derivation.backends import to_arb
    from specbound.derivation.theorem import theorem_for

    T = theorem_for(settings, activation, model)
    fns = {}
    for name, (expr, args) in evaluated.certified_expressions(T, fixed).items():
        args = tuple(args) if args is not None else tuple(sorted(expr.free_symbols, key=str))
        fns[name] = _wrap(name, to_arb(expr, args), tuple(str(a) for a in args))
    const = evaluated.constants_of(T)
    rho_R = Fraction(const["rho_R"]) if "rho_R" in const else None
    return Evaluators(fns, fixed, Fraction(const["dd_upper"]), rho_R, evaluated.layouts()[model], "sympy")


def evaluators(settings: BoundSettings, activation: str, fixed: bool, model: str = "plain") -> Evaluators:
    """The Arb callables of the theorem in force for ``settings``, ``activation`` and ``model``:
    the generated ones unless a lemma constant is overridden (or the register patched)."""
    key = (settings.massart, settings.dudley, activation, model)
    if not generated_theorem_applies(settings):
        # an override is any number: compiled from the SymPy source (not cached: the register may change)
        return _from_sympy(settings, activation, fixed, model)
    hit = _CACHE.get(key + (fixed,))
    if hit is None:
        hit = _generated(key, fixed)
        if hit is None:  # an unknown variant: the derivation layer says why, in one line
            hit = _from_sympy(settings, activation, fixed, model)
        _CACHE[key + (fixed,)] = hit
    return hit


def _group_summand(values) -> arb:
    i = generated.GROUP_SUMMAND
    return _named(generated.FUNCTIONS[i], generated.ARGS[i])(values)


def layer_radii(weights: AnalysisWeights, radius) -> tuple[list[dict], list[list[dict]], list[dict]]:
    """The theorem symbols (by name) of every layer fed from the radii ``radius(layer, kind, head)``
    (the layout of ``weights.variant``, :func:`specbound.derivation.assembly.layout`).

    Returns, per layer, the layer symbols (e.g. ``c_in, c_out`` or ``c_G, c_U, c_D``), per layer
    and head the head symbols (``c_A, c_V`` or ``c_Q, c_K, c_V`` with K of the head's group), and
    per layer the group sums ``{g: Sigma_g}`` of the LS models (empty otherwise).
    """
    lay = generated.LAYOUTS[weights.variant]
    H, G = weights.num_heads, weights.num_kv_heads
    layer_vals, head_vals, groups = [], [], []
    for l in range(weights.num_layers):
        layer_vals.append({sym: radius(l, kind, -1) for sym, kind in lay["layer"].items()})
        heads = []
        for h in range(H):
            heads.append({sym: radius(l, kind, kv_group(h, H, G) if kind == lay["shared"] else h)
                          for sym, kind in lay["head"].items()})
        head_vals.append(heads)
        sums: dict[int, arb] = {}
        if lay["shared"] is not None:
            for h in range(H):
                g = kv_group(h, H, G)
                sums[g] = sums.get(g, arb(0)) + _group_summand(heads[h])
        groups.append(sums)
    return layer_vals, head_vals, groups


def matrix_symbols(weights: AnalysisWeights, mat, layer_vals, head_vals, groups) -> dict:
    """The symbols (by name) a covered matrix's sensitivity may use: its layer's, its head's (for
    a shared key matrix: ``Sigma_g`` of its group) -- the sensitivity expression picks what it needs."""
    values = dict(layer_vals[mat.layer])
    if mat.head >= 0:
        if mat.kind == generated.LAYOUTS[weights.variant]["shared"]:
            values[generated.NAMES["group_sum"]] = groups[mat.layer][mat.head]
        else:
            values.update(head_vals[mat.layer][mat.head])
    return values


# ------------------------------------------------------------------------------------------------
# records


def q(x) -> fmpq:
    """An exact fmpq from a Fraction, int or float (a float is its exact binary value)."""
    f = Fraction(x)
    return fmpq(f.numerator, f.denominator)


def decimal_fraction(x: float) -> Fraction:
    """The rational the user typed for a float parameter (its shortest decimal repr), e.g. 0.05 -> 1/20."""
    return Fraction(repr(float(x)))


@dataclass(frozen=True)
class CertifiedMatrixTerm:
    """One covered matrix in the certified bound (every ball encloses the stated real)."""

    layer: int
    head: int
    type: str
    shape: tuple[int, int]
    spectral_norm: arb  #: ||W_j||
    schatten_power: arb  #: S_p(W_j) at the chosen p (rank ball for p = 0)
    proven_rank: int  #: a proven upper bound on rank(W_j)
    r_max: int  #: structural rank cap of the prior
    p: Fraction
    k_c: int
    k_s: int | None
    c_radius: arb  #: c~_j = beta_c**k_c
    s_radius: arb  #: s~_j = beta_s**k_s, or the proven rank for p = 0
    gamma: arb
    alpha: arb  #: alpha of the matrix's layer
    kappa: arb
    contribution: arb  #: its closed-form single-scale term
    ss_entropy: arb  #: H_j(u_j / kappa_j)
    dd_piece: arb  #: its Dudley closed-form piece
    lam: arb  #: its part of Lambda
    u: Fraction
    vartheta: Fraction

    @property
    def name(self) -> str:
        return f"L{self.layer}.{self.type}" if self.head < 0 else f"L{self.layer}.H{self.head}.{self.type}"


@dataclass(frozen=True)
class CertifiedBound:
    """Every intermediate ball of one certified evaluation, plus what was asked and chosen.

    ``bound`` is None when no empirical term was supplied (then ``partial`` = complexity +
    confidence is what is certified, and it is *not* a bound on the risk).
    """

    settings: BoundSettings
    plan: BoundPlan
    m: int
    bases: dict  #: name -> Fraction (beta_c, beta_s, beta_w, beta_rho)
    delta: Fraction
    matrices: tuple[CertifiedMatrixTerm, ...]
    layer_lipschitz: tuple[arb, ...]
    alphas: tuple[arb, ...]
    readout: str  #: "trained" or "fixed"
    readout_norm: arb  #: ||w|| (1 for a missing read-out)
    k_w: int | None
    B_w: arb
    k_rho: int
    rho: arb
    ss_closed: arb
    ss_exact: arb
    SS: arb
    DD: arb
    Lambda: arb
    confidence: arb
    complexity: arb  #: 2 min(SS, DD)
    empirical: arb | None
    bound: arb | None
    partial: arb  #: complexity + confidence
    alpha_D: Fraction
    vartheta_w: Fraction | None
    u_w: Fraction | None
    notes: dict = field(default_factory=dict)

    @property
    def upper(self) -> arb | None:
        """The certified number: upper endpoint of the bound (None without an empirical term)."""
        return None if self.bound is None else self.bound.upper()

    def balls(self) -> dict[str, arb]:
        """The scalar intermediate balls by name (for the certificate and for comparison)."""
        out = {"readout_norm": self.readout_norm, "B_w": self.B_w, "rho": self.rho,
               "ss_closed": self.ss_closed, "ss_exact": self.ss_exact, "SS": self.SS, "DD": self.DD,
               "Lambda": self.Lambda, "confidence": self.confidence, "complexity": self.complexity,
               "partial": self.partial}
        for i, (a, lip) in enumerate(zip(self.alphas, self.layer_lipschitz)):
            out[f"alpha_{i}"] = a
            out[f"layer_lipschitz_{i}"] = lip
        if self.empirical is not None:
            out["empirical"] = self.empirical
        if self.bound is not None:
            out["bound"] = self.bound
        return out


# ------------------------------------------------------------------------------------------------
# evaluation


def readout_ball(w: np.ndarray | None) -> arb:
    """Ball containing ||w||_2 of the float64 read-out taken as exact (1 for a missing read-out)."""
    if w is None:
        return arb(1)
    w = np.asarray(w, dtype=np.float64).ravel()
    if not np.all(np.isfinite(w)):
        raise CertificationError("read-out vector contains NaN or Inf")
    with precision(WORK_PREC):
        total = sum_arb(arb(float(v)) ** 2 for v in w)  # exact squares, sum rounded outward
        return total.sqrt() if total > 0 else arb(0)


def grid_m(settings: BoundSettings, weights: AnalysisWeights) -> int:
    """m of P_m: the user's fixed m, else ``ceil(L + ln N)`` (:func:`specbound.derivation.posthoc.grid_size`,
    the one definition; any m fixed before the sample is valid)."""
    if settings.grid_m is not None:
        return int(settings.grid_m)
    return exact_grid_size(weights.num_layers, weights.width)


def exact_grid_size(num_layers: int, width: int) -> int:
    """``ceil(L + ln N)`` exactly (``specbound.derivation.posthoc.grid_size``), from an Arb ball
    of ``L + ln N``: the ceiling is exact once the ball's endpoints have the same ceiling, which
    happens at some precision unless ``L + ln N`` is an integer, i.e. ``N = 1`` (``ln N`` is
    transcendental for an integer ``N > 1``)."""
    L, N = int(num_layers), int(width)
    if L < 1 or N < 1:
        raise ValueError(f"grid_size needs L >= 1 and N >= 1, got L={L}, N={N}")
    if N == 1:
        return L
    prec = 64
    while True:
        with precision(prec):
            x = arb(L) + arb(N).log()
            lo, hi = x.lower().ceil(), x.upper().ceil()
        if lo == hi:
            return int(lo.unique_fmpz())
        prec *= 2


def _positive_choice(value: float, what: str) -> Fraction:
    f = Fraction(float(value))
    if not f > 0:
        raise CertificationError(f"plan: {what} must be > 0, got {value!r}")
    return f


def _check_rotation_bound(weights: AnalysisWeights, rho_R: Fraction | None, notes: dict) -> None:
    """rope_attention needs rho_R >= max ||R_ts||, which is <= max (c^2 + s^2) over the binary64
    tables the model uses (proofs_notes/rope_attention.md); checked exactly here.  Weights without
    tables are the analysis model with exact rotations (rho_R = 1), said in a note."""
    if rho_R is None:
        return
    tables = (weights.extra.get(ROPE_COS), weights.extra.get(ROPE_SIN))
    if tables[0] is None or tables[1] is None:
        notes["rho_R"] = (f"no rotary tables supplied: rho_R = {rho_R} assumes rotations of norm <= "
                          f"{rho_R} (exact rotations: 1)")
        return
    top = rope_norm_bound(np.asarray(tables[0], dtype=np.float64), np.asarray(tables[1], dtype=np.float64))
    if Fraction(top) > rho_R:
        raise CertificationError(
            f"the rotary tables have max c^2 + s^2 = {float(top)!r} > rho_R = {rho_R}: pass "
            f"--override rho_R=<a number >= {float(top)!r}> (rope_attention)")
    notes["rho_R"] = f"rotary tables checked exactly: max c^2 + s^2 = {float(top)!r} <= rho_R = {rho_R}"


def certify_bound(
    weights: AnalysisWeights,
    settings: BoundSettings,
    plan: BoundPlan,
    enclosures: Sequence[SingularValueEnclosure],
    empirical: arb | None,
    *,
    roundings: Sequence[MatrixRounding] | None = None,
    k_w: int | None = None,
) -> CertifiedBound:
    """Evaluate the main theorem in Arb for ``weights`` at the grid point the plan selects.

    ``enclosures[j]`` must be a certified enclosure of ``weights.matrices[j]``; ``empirical`` a
    ball whose upper endpoint is >= the empirical ramp loss at margin ``rho~`` (or None).
    Returns every intermediate ball; ``result.bound.upper()`` is the certified bound.

    ``roundings`` / ``k_w`` (for a verifier) impose given grid points instead of the minimal ones;
    the caller must have checked that they dominate certified enclosures
    (:func:`specbound.certified.radii.dominates`), otherwise the result is not a bound.
    """
    J = len(weights.matrices)
    if len(enclosures) != J:
        raise CertificationError(f"expected {J} enclosures, got {len(enclosures)}")
    if len(plan.p_index) != J or len(plan.u) != J or len(plan.vartheta) != J:
        raise CertificationError(f"plan covers {len(plan.p_index)} matrices, the network has {J}")
    readout = settings.readout
    notes = {}
    if readout == "trained" and weights.readout is None:
        readout = "fixed"
        notes["readout"] = "checkpoint has no read-out: a fixed unit vector (B_w = 1) is assumed"
    fixed = readout == "fixed"
    ev = evaluators(settings, weights.activation, fixed, weights.variant)
    _check_rotation_bound(weights, ev.rho_R, notes)
    m = grid_m(settings, weights)
    if plan.m != m:
        raise CertificationError(f"plan uses the grid m = {plan.m}, the settings fix m = {m}")
    L = weights.num_layers
    bases = {"beta_c": settings.base_c(L, weights.variant), "beta_s": Fraction(settings.beta_s),
             "beta_w": Fraction(settings.beta_w), "beta_rho": Fraction(settings.beta_rho)}
    n = settings.n
    delta = decimal_fraction(settings.delta)

    with precision(WORK_PREC):
        rounded: list[MatrixRounding] = []
        for j, enc in enumerate(enclosures):
            if not 0 <= plan.p_index[j] <= 2 * m:
                raise CertificationError(f"plan: p index {plan.p_index[j]} is not on P_m (m = {m})")
            if roundings is not None:
                rounded.append(roundings[j])
            else:
                rounded.append(round_matrix(enc, plan.p(j), bases["beta_c"], bases["beta_s"]))
        c = [power_ball(bases["beta_c"], r.k_c) for r in rounded]

        # per-layer Lipschitz constants and amplifications alpha_l = prod_{k > l} L_k (radii only)
        idx = {(mat.layer, mat.kind, mat.head): j for j, mat in enumerate(weights.matrices)}

        def radius(layer, kind, head=-1):
            return c[idx[(layer, kind, head)]]

        layer_vals, head_vals, groups = layer_radii(weights, radius)
        lips = []
        for l in range(L):
            heads = sum_arb(ev.head(hv) for hv in head_vals[l])
            lips.append(ev.layer(layer_vals[l] | {generated.NAMES["head_sum"]: heads}))
        alphas = [arb(1)] * L
        for l in range(L - 2, -1, -1):
            alphas[l] = ev.step(lips[l + 1], alphas[l + 1])

        # read-out radius and margin
        w_norm = readout_ball(weights.readout)
        if fixed:
            k_w, B_w = None, w_norm
        else:
            k_w = index_up(w_norm, bases["beta_w"]) if k_w is None else int(k_w)
            B_w = power_ball(bases["beta_w"], k_w)
        if not B_w > 0:
            raise CertificationError("the read-out is zero: the network is constant, no margin bound")
        rho = power_ball(bases["beta_rho"], plan.k_rho)

        alpha_D = _positive_choice(plan.alpha_D, "alpha_D")
        upper_limit = ev.dd_upper
        if alpha_D > upper_limit:
            raise CertificationError(f"plan: alpha_D = {plan.alpha_D} exceeds {upper_limit}")
        # Dudley weights must be > 0 with sum <= 1: rescale the exact values if floats overshoot.
        theta = [_positive_choice(v, "vartheta") for v in plan.vartheta]
        theta_w = None if fixed else _positive_choice(plan.vartheta_w, "vartheta_w")
        total = sum(theta) + (theta_w or 0)
        if total > 1:
            theta = [t / total for t in theta]
            theta_w = None if fixed else theta_w / total
        us = [Fraction(float(v)) for v in plan.u]
        u_w = None if fixed else _positive_choice(plan.u_w, "u_w")

        records = []
        for j, (mat, r) in enumerate(zip(weights.matrices, rounded)):
            l = mat.layer
            g = ev.gamma[ev.layout["gamma_key"][mat.kind]](
                matrix_symbols(weights, mat, layer_vals, head_vals, groups))
            kap = ev.kappa(B_w, alphas[l], g, rho)
            shape = mat.shape
            d, r_max = shape[0] + shape[1], mat.rank_cap
            if r.p == 0:
                s_rad = arb(r.rank)
                args = (c[j], d, kap, n, 0, r_max, r.rank)
                term = ev.ss_term_rank(*args)
                lam = ev.lam_matrix_rank(r.k_c, 0, m, r_max)
            else:
                s_rad = power_ball(bases["beta_s"], r.k_s)
                args = (c[j], d, kap, n, q(r.p), r_max, s_rad)
                term = ev.ss_term(*args)
                lam = ev.lam_matrix(r.k_c, r.k_s, m, r_max)
            # exact single-scale entropy at u_j; a rank-0 matrix has entropy exactly 0
            # (never evaluate 0 * log(inf) at a degenerate u).
            if r.p == 0 and r.rank == 0:
                ent = arb(0)
                piece = arb(0)
            else:
                if not us[j] > 0:
                    raise CertificationError(f"plan: u of {mat.name} must be > 0")
                if r.p == 0:
                    ent = ev.ss_entropy_rank(c[j], d, kap, 0, r_max, r.rank, q(us[j]))
                    piece = ev.dd_piece_rank(q(alpha_D), c[j], d, kap, 0, r_max, r.rank, q(theta[j]))
                else:
                    ent = ev.ss_entropy(c[j], d, kap, q(r.p), r_max, s_rad, q(us[j]))
                    fn = ev.dd_piece_p2 if r.p == 2 else ev.dd_piece
                    piece = fn(q(alpha_D), c[j], d, kap, q(r.p), r_max, s_rad, q(theta[j]))
            records.append(CertifiedMatrixTerm(
                layer=l, head=mat.head, type=mat.kind, shape=shape, spectral_norm=r.spectral,
                schatten_power=r.schatten, proven_rank=r.rank, r_max=r_max, p=r.p, k_c=r.k_c,
                k_s=r.k_s, c_radius=c[j], s_radius=s_rad, gamma=g, alpha=alphas[l], kappa=kap,
                contribution=term, ss_entropy=ent, dd_piece=piece, lam=lam, u=us[j],
                vartheta=theta[j]))

        N = weights.width
        T_sum = sum_arb(rec.contribution for rec in records)
        ss_closed = ev.ss_closed(B_w, N, n, rho, T_sum)
        H_total = sum_arb(rec.ss_entropy for rec in records)
        U_total = sum_arb(arb(q(u)) for u, rec in zip(us, records) if not (rec.p == 0 and rec.proven_rank == 0))
        if not fixed:
            H_total += ev.ss_entropy_w(B_w, N, rho, q(u_w))
            U_total += arb(q(u_w))
        ss_exact = ev.ss_objective(H_total, U_total, n)
        SS = arb.min(ss_closed, ss_exact)
        D_sum = sum_arb(rec.dd_piece for rec in records)
        DD = ev.dd_closed(B_w, N, n, rho, q(alpha_D), D_sum, q(theta_w) if theta_w else 1)
        Lambda_sum = sum_arb(rec.lam for rec in records)
        Lambda = ev.Lambda_total(Lambda_sum, plan.k_rho, k_w if k_w is not None else 0)
        conf = ev.confidence(Lambda, q(delta), n)
        complexity = ev.complexity(DD, SS)
        bound = None if empirical is None else ev.bound(DD, Lambda, SS, q(delta), empirical, n)
        partial = complexity + conf

    return CertifiedBound(
        settings=settings, plan=plan, m=m, bases=bases, delta=delta, matrices=tuple(records),
        layer_lipschitz=tuple(lips), alphas=tuple(alphas), readout=readout, readout_norm=w_norm,
        k_w=k_w, B_w=B_w, k_rho=plan.k_rho, rho=rho, ss_closed=ss_closed, ss_exact=ss_exact, SS=SS,
        DD=DD, Lambda=Lambda, confidence=conf, complexity=complexity, empirical=empirical,
        bound=bound, partial=partial, alpha_D=alpha_D, vartheta_w=theta_w, u_w=u_w, notes=notes)
