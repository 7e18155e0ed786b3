"""The certified bound: the main theorem of proofs_notes/theory.md section 7 evaluated in Arb.

The evaluation itself is the one driver :func:`specbound.certified.evaluation.evaluate` run in the
Arb context (:class:`specbound.certified.context.ArbContext`), with the theorem's fields compiled
to ball arithmetic (:class:`specbound.certified.compiled.CompiledTheorem`: certified/generated.py,
printed from the SymPy source by scripts/generate_derived.py, or compiled at run time when a
constant is overridden).  This module feeds it certified facts and keeps every intermediate ball:

* radii ``c~_j = beta_c**k_c >= ||W_j||``, ``s~_j = beta_s**k_s >= S_{p_j}(W_j)`` (or a proven rank
  for ``p_j = 0``), ``B~_w = beta_w**k_w >= ||w||`` (trained read-out) and ``rho~ = beta_rho**k_rho``
  (:mod:`specbound.certified.radii`), decided by exact comparisons;
* the plan's float choices (``p_j``, ``u``, ``alpha_D``, ``vartheta``), taken as exact binary
  numbers.  proofs_notes/theory.md sections 6-7: the theorem holds for every choice, so they cannot break it.

Guarantee of :func:`certify_bound`: with probability >= 1 - delta over the sample, the 0-1 risk of
the network is <= ``result.bound.upper()`` (when an empirical term is given; a user-supplied one is
the user's claim).  ``SS`` is the minimum of the closed form and the exact single-scale objective
at the plan's ``u``; ``DD`` is the Dudley closed form at the plan's ``alpha_D``, ``vartheta``.

Two routes (``settings.routes``): the main theorem (Rademacher route) and the Occam route
(proofs_notes/occam_route.md, :func:`specbound.certified.evaluation.occam`), each at level
``delta / len(routes)``; the Occam route takes the certified upper margin count ``K^`` from the
margin enclosures of the sample (:func:`specbound.certified.margins.count_upper`, condition C4) and
the certified BinInv (certified/binomial.py).  ``result.bound`` is the smaller of the routes' bounds
(occam_route.md step 5), ``result.route`` names the one attaining it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Sequence

import numpy as np
from flint import arb, fmpq

from specbound.certified import generated
from specbound.certified.arb import WORK_PREC, interval, precision, sum_arb
from specbound.certified.compiled import CACHE, CompiledTheorem, compiled_theorem
from specbound.certified.context import ArbContext
from specbound.certified.enclosure import SingularValueEnclosure
from specbound.certified.evaluation import (
    Radii, Readout, Structure, decimal_fraction, evaluate, occam, structure_of,
)
from specbound.certified.forward_ls import ROPE_COS, ROPE_SIN, rope_norm_bound
from specbound.certified.margins import MarginEnclosures, count_upper
from specbound.certified.radii import MatrixRounding, exact_value, index_up, power_ball, round_matrix
from specbound.errors import CertificationError
from specbound.matrices import AnalysisWeights
from specbound.plan import BoundPlan, BoundSettings, OccamPlan
from specbound.vocabulary import READOUT_FIXED, READOUT_TRAINED, ROUTE_OCCAM, ROUTE_RADEMACHER

_CACHE = CACHE  #: the compiled theorems (tests that patch the register clear it)


def arb_theorem(settings: BoundSettings, activation: str, model: str = "plain", outputs: int = 1) -> CompiledTheorem:
    """The theorem in force for ``settings``, ``activation``, ``model`` and ``outputs`` (the read-out rows
    k: 1 binary, k >= 2 the k-class theorem of proofs_notes/k_class.md) in Arb (generated, or compiled
    from SymPy when a lemma constant is overridden)."""
    return compiled_theorem(generated, settings, activation, model, outputs)


# ------------------------------------------------------------------------------------------------
# records


def q(x) -> fmpq:
    """An exact fmpq from a Fraction, int or float (a float is its exact binary value)."""
    f = Fraction(x)
    return fmpq(f.numerator, f.denominator)


@dataclass(frozen=True)
class CertifiedMatrixTerm:
    """One covered matrix in the certified bound (every ball encloses the stated real)."""

    layer: int
    head: int
    kind: str
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
        return f"L{self.layer}.{self.kind}" if self.head < 0 else f"L{self.layer}.H{self.head}.{self.kind}"


@dataclass(frozen=True)
class OccamMatrixTerm:
    """One covered matrix in the Occam route (its own p and grid radii; every ball encloses the stated real)."""

    p: Fraction
    k_c: int
    k_s: int | None
    proven_rank: int
    schatten_power: arb  #: S_p(W_j) at the route's p (rank ball at p = 0)
    c_radius: arb
    s_radius: arb
    kappa: arb  #: kappa^gamma_j = B_w alpha gamma_j / gamma
    weight: arb  #: omega_j of the allocation rule (an exact integer)
    share: arb  #: vartheta_j = omega_j / Omega
    entropy: arb  #: H_j(eps_j)
    lam: arb  #: its part of Lambda


@dataclass(frozen=True)
class CertifiedOccam:
    """The Occam route of one certified evaluation (proofs_notes/occam_route.md).

    ``gamma`` = beta_gamma^k_gamma (the count is taken there); ``count`` = K^ (certified upper count, None
    without margin enclosures), ``count_method`` the pass that produced the enclosures; ``H`` =
    H_theta(gamma), ``mass`` = C at ``level``; ``inversion`` the certified BinInv
    (:class:`specbound.certified.binomial.Inversion`) and ``bound`` its value (None without a count).
    """

    plan: OccamPlan
    beta_gamma: Fraction
    k_gamma: int
    gamma: arb
    level: Fraction
    matrices: tuple[OccamMatrixTerm, ...]
    Omega: arb
    share_w: arb | None
    entropy_w: arb | None
    H: arb
    Lambda: arb
    mass: arb
    count: int | None
    count_method: str
    inversion: object | None
    bound: arb | None

    def balls(self) -> dict[str, arb]:
        out = {"occam_gamma": self.gamma, "occam_Omega": self.Omega, "occam_H": self.H,
               "occam_Lambda": self.Lambda, "occam_C": self.mass}
        if self.entropy_w is not None:
            out["occam_entropy_w"] = self.entropy_w
        if self.bound is not None:
            out["occam_bound"] = self.bound
        return out


@dataclass(frozen=True)
class CertifiedBound:
    """Every intermediate ball of one certified evaluation, plus what was asked and chosen.

    The Rademacher route's parts are the top-level fields (``rademacher`` its bound at its level);
    ``occam`` the Occam route (None when not evaluated).  ``bound`` is the reported bound, the smaller
    of the routes' bounds, and ``route`` the route attaining it; ``bound`` is None when no route has
    one (no empirical term and no margin count: then ``partial`` = complexity + confidence is what is
    certified, and it is *not* a bound on the risk).
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
    routes: tuple[str, ...] = (ROUTE_RADEMACHER,)
    rademacher: arb | None = None  #: the Rademacher route's bound at its level (None without empirical term)
    occam: CertifiedOccam | None = None
    route: str | None = None  #: the route whose bound is reported

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
        if self.rademacher is not None:
            out["rademacher_bound"] = self.rademacher
        if self.bound is not None:
            out["bound"] = self.bound
        if self.occam is not None:
            out |= self.occam.balls()
        return out


# ------------------------------------------------------------------------------------------------
# evaluation


def readout_ball(w: np.ndarray | None) -> arb:
    """Ball containing ||w||_2 of the float64 read-out taken as exact (1 for a missing read-out); for a
    k-row read-out W (k, N) a ball containing its *largest row norm* max_c ||w_c||_2, the radius of the
    read-out cover over W (proofs_notes/k_class.md (b): not the Frobenius or the mean row norm)."""
    if w is None:
        return arb(1)
    w = np.asarray(w, dtype=np.float64)
    if not np.all(np.isfinite(w)):
        raise CertificationError("read-out vector contains NaN or Inf")
    rows = w.reshape(1, -1) if w.ndim <= 1 else w.reshape(w.shape[0], -1)
    with precision(WORK_PREC):
        norms = []
        for row in rows:
            total = sum_arb(arb(float(v)) ** 2 for v in row)  # exact squares, sum rounded outward
            norms.append(total.sqrt() if total > 0 else arb(0))
        if len(norms) == 1:
            return norms[0]
        # max_c ||w_c|| lies in [max_c lower_c, max_c upper_c] (the maximum is monotone in each argument);
        # from exact endpoints, not arb.max (which may return a wide ball)
        lo = max((b.lower() for b in norms), key=exact_value)
        hi = max((b.upper() for b in norms), key=exact_value)
        return interval(lo, hi)


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
            f"the rotary tables have max c^2 + s^2 = {float(top)!r} > rho_R = {rho_R}, so they are not "
            f"rotations of norm <= rho_R (rope_attention): store tables with c^2 + s^2 <= 1 (the reference "
            f"model's rope_tables are adjusted so), or, from Python, certify with rho_R >= {float(top)!r} in "
            f"BoundSettings(overrides=...)")
    notes["rho_R"] = f"rotary tables checked exactly: max c^2 + s^2 = {float(top)!r} <= rho_R = {rho_R}"


@dataclass(frozen=True, eq=False)
class CertifiedFacts:
    """The certified facts of a network (:class:`specbound.certified.evaluation.Facts`): singular-value
    enclosures rounded onto the grids by exact comparisons (or given roundings, for a verifier), the
    read-out norm as a ball, and the certified empirical term."""

    weights: AnalysisWeights
    settings: BoundSettings
    structure: Structure
    m: int
    bases: dict
    enclosures: Sequence[SingularValueEnclosure]
    empirical_ball: arb | None
    readout_kind: str
    roundings: Sequence[MatrixRounding] | None = None
    k_w: int | None = None
    margins: MarginEnclosures | None = None
    given_count: int | None = None

    def readout(self, ctx) -> Readout:
        w_norm = readout_ball(self.weights.readout)
        if self.readout_kind == READOUT_FIXED:
            return Readout(READOUT_FIXED, w_norm, None, w_norm)
        k_w = index_up(w_norm, self.bases["beta_w"]) if self.k_w is None else int(self.k_w)
        return Readout(READOUT_TRAINED, w_norm, k_w, power_ball(self.bases["beta_w"], k_w))

    def radii(self, ctx, plan: BoundPlan) -> Radii:
        """Each matrix rounded at the plan's p (a proven zero matrix at p = 0: certified/radii.py)."""
        rounded = list(self.roundings) if self.roundings is not None else [
            round_matrix(enc, plan.p(j), self.bases["beta_c"], self.bases["beta_s"])
            for j, enc in enumerate(self.enclosures)]
        s = [arb(r.rank) if r.p == 0 else power_ball(self.bases["beta_s"], r.k_s) for r in rounded]
        return Radii(p=tuple(r.p for r in rounded), k_c=ctx.vector([r.k_c for r in rounded]),
                     c=ctx.vector([power_ball(self.bases["beta_c"], r.k_c) for r in rounded]),
                     k_s=ctx.vector([r.k_s for r in rounded]), s=ctx.vector(s),
                     rank=np.array([r.rank for r in rounded], dtype=np.int64), detail=rounded)

    def empirical(self, ctx, rho) -> arb | None:
        return self.empirical_ball

    def count(self, ctx, gamma) -> int | None:
        """The certified upper count ``K^ >= #{i : y_i f(X_i) <= gamma}`` (condition C4): undecided and
        non-finite samples count (:func:`specbound.certified.margins.count_upper`); a verifier's given
        count when there are no enclosures."""
        return self.given_count if self.margins is None else count_upper(self.margins, gamma)


def certified_facts(
    weights: AnalysisWeights,
    settings: BoundSettings,
    enclosures: Sequence[SingularValueEnclosure],
    empirical: arb | None,
    *,
    roundings: Sequence[MatrixRounding] | None = None,
    k_w: int | None = None,
    margins: MarginEnclosures | None = None,
) -> tuple[ArbContext, CertifiedFacts, dict]:
    """The Arb context (theorem in force) and the certified facts of ``weights`` that
    :func:`specbound.certified.evaluation.evaluate` runs on, with the notes that qualify them (a
    missing read-out, the rotary tables); arguments as for :func:`certify_bound`."""
    J = len(weights.matrices)
    if len(enclosures) != J:
        raise CertificationError(f"expected {J} enclosures, got {len(enclosures)}")
    if margins is not None and margins.n != settings.n:
        raise CertificationError(f"margin enclosures of {margins.n} samples for n = {settings.n}")
    readout = settings.readout
    notes = {}
    if readout == READOUT_TRAINED and weights.readout is None:
        readout = READOUT_FIXED
        notes["readout"] = "checkpoint has no read-out: a fixed unit vector (B_w = 1) is assumed"
    ct = arb_theorem(settings, weights.activation, weights.variant, weights.num_outputs)
    _check_rotation_bound(weights, ct.rho_R, notes)
    bases = {"beta_c": settings.base_c(weights.num_layers, weights.variant), "beta_s": Fraction(settings.beta_s),
             "beta_w": Fraction(settings.beta_w), "beta_rho": Fraction(settings.beta_rho),
             "beta_gamma": Fraction(settings.beta_gamma)}
    facts = CertifiedFacts(weights, settings, structure_of(weights, ct.layout), grid_m(settings, weights), bases,
                           enclosures, empirical, readout, roundings, k_w, margins)
    return ArbContext(ct), facts, notes


def _occam_record(ev, plan: OccamPlan, facts: CertifiedFacts) -> CertifiedOccam:
    """The Occam route's records from one evaluation by :func:`specbound.certified.evaluation.occam`."""
    net, t = ev.network, ev.terms
    rad = net.radii
    mats = tuple(OccamMatrixTerm(
        p=r.p, k_c=r.k_c, k_s=r.k_s, proven_rank=r.rank, schatten_power=r.schatten, c_radius=rad.c[j],
        s_radius=rad.s[j], kappa=net.kappa[j], weight=t.weight[j], share=t.share[j], entropy=t.entropy[j],
        lam=t.lam[j]) for j, r in enumerate(rad.detail))
    inv = t.inversion
    return CertifiedOccam(
        plan=plan, beta_gamma=facts.bases["beta_gamma"], k_gamma=t.k_gamma, gamma=t.gamma, level=t.level,
        matrices=mats, Omega=t.Omega, share_w=t.share_w, entropy_w=t.entropy_w, H=t.H, Lambda=t.Lambda,
        mass=t.mass, count=t.count, count_method=facts.margins.method if facts.margins is not None else "",
        inversion=inv, bound=t.bound)


def reported(candidates: dict[str, arb | None]) -> tuple[arb | None, str | None]:
    """The smallest bound of the routes (by upper endpoint, exactly) and its route's name; both routes'
    statements hold together with probability >= 1 - delta (occam_route.md step 5), so their minimum does."""
    best, name = None, None
    for route, value in candidates.items():
        if value is not None and (best is None or value.upper() < best.upper()):
            best, name = value, route
    return best, name


def certify_bound(
    weights: AnalysisWeights,
    settings: BoundSettings,
    plan: BoundPlan,
    enclosures: Sequence[SingularValueEnclosure],
    empirical: arb | None,
    *,
    margins: MarginEnclosures | None = None,
    roundings: Sequence[MatrixRounding] | None = None,
    k_w: int | None = None,
    occam_roundings: Sequence[MatrixRounding] | None = None,
    count: int | None = None,
) -> CertifiedBound:
    """Evaluate the theorem's routes in Arb for ``weights``: the main theorem at the grid point the plan
    selects and, when ``settings.routes`` lists it, the Occam route at ``plan.occam``.

    ``enclosures[j]`` must be a certified enclosure of ``weights.matrices[j]``; ``empirical`` a
    ball whose upper endpoint is >= the empirical ramp loss at margin ``rho~`` (or None); ``margins``
    certified enclosures of ``y_i f(X_i)`` on the same sample (:mod:`specbound.certified.margins`), from
    which the Occam route's count K^ is taken (None: the Occam route has no count and no bound).
    Returns every intermediate ball; ``result.bound.upper()`` is the certified bound.

    ``roundings`` / ``occam_roundings`` / ``k_w`` (for a verifier) impose given grid points instead of the
    minimal ones (at the Rademacher plan's and the Occam plan's p); the caller must have checked that they
    dominate certified enclosures (:func:`specbound.certified.radii.dominates`), otherwise the result is
    not a bound.  ``count`` (a verifier that does not recompute the sample) imposes K^ when ``margins`` is
    None; the caller vouches that it is an upper count.
    """
    if ROUTE_RADEMACHER not in settings.routes:
        raise CertificationError(f"the routes must include {ROUTE_RADEMACHER!r}, got {settings.routes}")
    ctx, facts, notes = certified_facts(weights, settings, enclosures, empirical, roundings=roundings, k_w=k_w,
                                        margins=margins)
    occ = None
    with precision(WORK_PREC):
        ev = evaluate(ctx, facts, plan)
        if ROUTE_OCCAM in settings.routes:
            if plan.occam is None:
                raise CertificationError("the Occam route needs its plan (plan.occam): none was chosen")
            ofacts = replace(facts, roundings=occam_roundings, given_count=None if count is None else int(count))
            occ = _occam_record(evaluate(ctx, ofacts, plan.occam, route=occam), plan.occam, ofacts)
    net, t = ev.network, ev.terms
    rad, ch = net.radii, t.choices
    records = []
    for j, (mat, r) in enumerate(zip(weights.matrices, rad.detail)):
        records.append(CertifiedMatrixTerm(
            layer=mat.layer, head=mat.head, kind=mat.kind, shape=mat.shape, spectral_norm=r.spectral,
            schatten_power=r.schatten, proven_rank=r.rank, r_max=mat.rank_cap, p=r.p, k_c=r.k_c, k_s=r.k_s,
            c_radius=rad.c[j], s_radius=rad.s[j], gamma=net.gamma[j], alpha=net.alpha[mat.layer],
            kappa=net.kappa[j], contribution=t.term[j], ss_entropy=t.entropy[j], dd_piece=t.piece[j],
            lam=t.lam[j], u=ch.u[j], vartheta=ch.vartheta[j]))
    rd = net.readout
    rademacher = None if empirical is None else t.bound
    bound, route = reported({ROUTE_RADEMACHER: rademacher, ROUTE_OCCAM: None if occ is None else occ.bound})
    return CertifiedBound(
        settings=settings, plan=plan, m=facts.m, bases=facts.bases, delta=decimal_fraction(settings.delta),
        matrices=tuple(records), layer_lipschitz=tuple(net.lipschitz), alphas=tuple(net.alpha), readout=rd.kind,
        readout_norm=rd.norm, k_w=rd.k_w, B_w=rd.B_w, k_rho=plan.k_rho, rho=net.rho, ss_closed=t.ss_closed,
        ss_exact=t.ss_exact, SS=t.SS, DD=t.DD, Lambda=t.Lambda, confidence=t.confidence, complexity=t.complexity,
        empirical=empirical, bound=bound, partial=t.partial, alpha_D=ch.alpha_D,
        vartheta_w=ch.vartheta_w, u_w=ch.u_w, notes=notes, routes=tuple(settings.routes), rademacher=rademacher,
        occam=occ, route=route)
