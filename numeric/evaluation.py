"""The whole bound of proofs_notes/theory.md section 7 in floating point: the fast, uncertified evaluation.

Every formula is a field of the assembled theorem (:func:`specbound.derivation.theorem.assemble`),
evaluated through numeric/generated.py (numpy source printed from the SymPy expressions) or, with an
overridden constant, compiled from SymPy (:func:`numeric.terms.compiled_theorem`); this module only
*feeds* those expressions (spectral radii, layer products, per-matrix Schatten radii) and *combines*
their values (sums over matrices, minima).  Nothing here retypes a formula.

Contract.  :func:`evaluate_plan` returns float values of the bound for a given plan (the planner, which builds
on this module, chooses one) -- plain floating point, no error bounds.  docs/design.md section 2: every float64 value must lie in
the certified enclosure (``numeric.crosscheck`` checks it), and the bound it reports is never below
the certified lower endpoint.

Rank for p = 0.  The theorem needs a *proven* rank bound; the fast path uses the structural cap
``r_max = min(m, n, head dim)`` (0 only when a factor is exactly zero), never a thresholded
numerical rank.  For the same reason a factored matrix contributes only its top ``r_max`` singular
values to a Schatten power: the others are exactly 0 for the exact product, while the float64
product's are rounding noise whose p-th powers (p = 1/m) would not be small.

Precision and devices.  The singular values are the one heavy step: torch on CPU or CUDA, float64
by default; ``dtype=torch.float32`` runs them in float32 (then every derived value carries a
relative error of about ``FLOAT32_DERIVED_REL_TOL``; stated tolerance below).  Everything after them
is a few hundred numbers, evaluated in float64 numpy wherever the spectra ran.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Mapping

import numpy as np

from specbound.errors import SpecboundError
from specbound.matrices import AnalysisWeights
from specbound.plan import BoundPlan, BoundSettings

from .terms import (
    CompiledTheorem, NetworkFacts, as_margins, compiled_theorem, dd_closed, dtype_name, grid_up, lambda_total,
    network_facts, power, schatten_at, sensitivities, singular_values, ss_closed,
)

__all__ = ["FLOAT32_DERIVED_REL_TOL", "FLOAT64_REL_TOL", "NumericBound", "NumericMatrixTerm",
           "evaluate_facts", "evaluate_plan", "singular_values"]

FLOAT32_DERIVED_REL_TOL = 1e-4
"""Stated tolerance of the float32 path: every reported value (singular values relative to
sigma_1, all derived quantities relative to themselves) within 1e-4 of the float64 value, unless
a grid rounding (a ceiling of log_beta) lands on the other side of a grid point."""

# -- the evaluation -------------------------------------------------------------------------------

@dataclass(frozen=True)
class NumericMatrixTerm:
    """Float values of one matrix in one evaluation.

    ``schatten`` is S_p(W) at the chosen p > 0 (float), or the rank bound used at p = 0
    (``rank_used``, the structural cap); ``k_s``/``s`` the Schatten radius (p > 0) or None/rank.
    ``ss_term`` is the matrix's closed-form single-scale term (its contribution to SS closed),
    ``ss_entropy`` H_j(u_j/kappa_j) of the exact objective, ``dd_piece`` its Dudley piece,
    ``lam`` its share of Lambda.
    """

    name: str
    layer: int
    head: int
    kind: str
    rows: int
    cols: int
    rank_cap: int
    spectral: float
    p_index: int
    p: Fraction
    schatten: float
    rank_used: int | None
    k_c: int
    c: float
    k_s: int | None
    s: float
    gamma: float
    kappa: float
    u: float
    vartheta: float
    ss_term: float
    ss_entropy: float
    dd_piece: float
    lam: float

    @property
    def contribution(self) -> float:
        """What the matrix adds to the closed-form single-scale complexity."""
        return self.ss_term

    def as_dict(self) -> dict:
        out = dict(self.__dict__)
        out["p"] = str(self.p)
        out["contribution"] = self.ss_term
        return out


@dataclass(frozen=True, eq=False)
class NumericBound:
    """The whole bound in floating point, with its parts and the plan it was evaluated at.

    ``empirical`` is None when neither ``settings.empirical`` nor margins were given; then
    ``bound`` omits the empirical term (it is complexity + confidence only) and
    ``includes_empirical`` is False.  ``ss = min(ss_closed, ss_objective)`` and
    ``complexity = min(ss, dd)``; ``bound = (empirical + 2 complexity + confidence) (1 + tolerance)``:
    rounded up by the stated tolerance so that, as docs/design.md section 2 asks, it is never below the
    certified lower endpoint (the float sum itself can sit an ulp below a tight ball).
    ``singular_values`` (J, K): the top rank-cap singular values, zero-padded.
    ``tolerance``: stated relative tolerance of these values against exact arithmetic.
    """

    plan: BoundPlan
    settings: BoundSettings
    matrices: tuple[NumericMatrixTerm, ...]
    singular_values: np.ndarray
    lipschitz: np.ndarray
    alpha: np.ndarray
    readout: str
    B_w: float
    k_w: int
    rho: float
    k_rho: int
    empirical: float | None
    ss_closed: float
    ss_objective: float
    ss: float
    dd: float
    complexity: float
    Lambda: float
    confidence: float
    bound: float
    dtype: str
    device: str
    tolerance: float
    variants: Mapping[str, str] = field(default_factory=dict)

    @property
    def includes_empirical(self) -> bool:
        return self.empirical is not None

    def as_dict(self) -> dict:
        keys = ("readout", "B_w", "k_w", "rho", "k_rho", "empirical", "ss_closed", "ss_objective", "ss",
                "dd", "complexity", "Lambda", "confidence", "bound", "dtype", "device", "tolerance")
        out = {k: getattr(self, k) for k in keys}
        out["includes_empirical"] = self.includes_empirical
        out["lipschitz"] = self.lipschitz.tolist()
        out["alpha"] = self.alpha.tolist()
        out["matrices"] = [m.as_dict() for m in self.matrices]
        out["plan"] = {"m": self.plan.m, "p_index": list(self.plan.p_index), "k_rho": self.plan.k_rho,
                       "u": list(self.plan.u), "u_w": self.plan.u_w, "alpha_D": self.plan.alpha_D,
                       "vartheta": list(self.plan.vartheta), "vartheta_w": self.plan.vartheta_w}
        return out


FLOAT64_REL_TOL = 1e-12
"""Stated relative tolerance of the float64 path for derived quantities (products, logs, powers
of at most a few hundred rounded operations); singular values carry the SVD's backward error
(about 1e-15 sigma_1 times a small dimension factor)."""


def _check_plan(plan: BoundPlan, facts: NetworkFacts, upper: float) -> None:
    J = len(facts.matrices)
    if len(plan.p_index) != J or len(plan.u) != J or len(plan.vartheta) != J:
        raise SpecboundError(f"plan has {len(plan.p_index)} matrices, the weights have {J}")
    if any(not (0 <= i <= 2 * plan.m) for i in plan.p_index):
        raise SpecboundError(f"plan p_index outside 0..{2 * plan.m}")
    if not (0.0 < plan.alpha_D <= upper) or any(not (u > 0) for u in plan.u) or not (plan.u_w > 0):
        raise SpecboundError(f"plan needs u_j, u_w > 0 and alpha_D in (0, {upper}]")
    if any(not (t > 0) for t in plan.vartheta) or plan.vartheta_w < 0:
        raise SpecboundError("plan needs Dudley weights vartheta_j > 0, vartheta_w >= 0")
    if math.fsum(plan.vartheta) + plan.vartheta_w > 1.0:
        raise SpecboundError("plan's Dudley weights sum to more than 1")


def evaluate_plan(
    weights: AnalysisWeights,
    settings: BoundSettings,
    plan: BoundPlan,
    *,
    margins: np.ndarray | None = None,
    spectra=None,
    dtype="float64",
    device="cpu",
) -> NumericBound:
    """The bound of proofs_notes/theory.md section 7 in floating point for ``plan`` (choose one with
    :func:`numeric.planner.choose_plan`).

    ``margins`` (float y_i f(X_i)) give the empirical ramp loss when ``settings.empirical`` is
    None; ``spectra`` reuses precomputed singular values.  ``dtype`` is the precision of the
    spectra (torch.float64 or torch.float32, or their names; everything after them is float64),
    ``device`` where torch computes them (CPU or CUDA).
    """
    dtype_name(dtype)  # float64 or float32 only, checked before any work
    ct = compiled_theorem(settings, weights.activation, weights.variant)
    facts = network_facts(weights, spectra=spectra, dtype=dtype, device=device)
    return evaluate_facts(ct, facts, settings, plan, margins=margins, dtype=dtype)


def evaluate_facts(ct: CompiledTheorem, facts: NetworkFacts, settings: BoundSettings, plan: BoundPlan, *,
                   margins=None, dtype="float64") -> NumericBound:
    """:func:`evaluate_plan` on already computed network facts (the planner compares plans with it)."""
    _check_plan(plan, facts, ct.dd_upper)
    n, N = float(settings.n), float(facts.width)
    rho = power(settings.beta_rho, plan.k_rho)
    sens = sensitivities(ct, facts, settings, np.float64(rho))
    kappa = sens.kappa
    p_idx = np.array(plan.p_index, dtype=np.int64)
    p = p_idx.astype(np.float64) / plan.m
    is0 = p == 0
    zero_m = (facts.proven_rank == 0) | (facts.spectral == 0)
    if bool((zero_m & ~is0).any()):
        bad = [facts.matrices[j].name for j in np.flatnonzero(zero_m & ~is0).tolist()]
        raise SpecboundError(f"plan chooses p > 0 for zero matrix {bad[0]}; a zero matrix needs p = 0")
    p_pos = np.where(is0, 1.0, p)
    S = schatten_at(facts.values, p_pos)
    k_s = grid_up(S, settings.beta_s)
    s_pos = power(settings.beta_s, k_s)
    s = np.where(is0, facts.proven_rank, s_pos)
    c, d, r = sens.c, facts.dims, facts.rank_cap
    u = np.array(plan.u, dtype=np.float64)
    theta = np.array(plan.vartheta, dtype=np.float64)

    with np.errstate(all="ignore"):  # a formula that does not apply to a matrix is masked out below
        # single scale: closed form and exact objective at the plan's u
        term = np.where(is0, ct("ss_matrix_term_rank", c=c, d=d, kappa=kappa, n=n, r_max=r, s=s),
                        ct("ss_matrix_term", c=c, d=d, kappa=kappa, n=n, p=p_pos, s=s))
        closed = ss_closed(ct, sens, term.sum(), N, n, rho)
        ent = np.where(is0, ct("ss_matrix_entropy_rank", c=c, d=d, kappa=kappa, r_max=r, s=s, u=u),
                       ct("ss_matrix_entropy", c=c, d=d, kappa=kappa, p=p_pos, r_max=r, s=s, u=u))
        ent = np.where(s == 0, 0.0, ent)  # rank 0: entropy 0, never 0 * log(inf)
        # a rank-0 matrix needs no cover, so its u_j -> 0 is admissible: it adds nothing to U
        u_total = np.where(s == 0, 0.0, u).sum()
        if sens.readout == "trained":
            h_w = ct("ss_readout_entropy", B_w=sens.B_w, N=N, rho=rho, u_w=plan.u_w)
            u_total = u_total + plan.u_w
        else:
            h_w = np.float64(0.0)
        ss_obj = ct("ss_objective", H_total=ent.sum() + h_w, U_total=u_total, n=n)
        ss = np.minimum(closed, ss_obj)

        # Dudley closed form at the plan's alpha_D and weights
        a = plan.alpha_D
        p_mid = np.where((p > 0) & (p < 2), p, 1.0)
        piece = np.where(
            is0, ct("dd_matrix_piece_rank", alpha_D=a, c=c, d=d, kappa=kappa, r_max=r, s=s, vartheta=theta),
            np.where(p == 2, ct("dd_matrix_piece_p2", alpha_D=a, c=c, d=d, kappa=kappa, s=s, vartheta=theta),
                     ct("dd_matrix_piece", alpha_D=a, c=c, d=d, kappa=kappa, p=p_mid, s=s, vartheta=theta)))
        # an empty integration range gives exactly 0 (the float formula would leave a cancellation residue)
        piece = np.where((s == 0) | (a >= ct.dd_upper), 0.0, piece)
        dd = dd_closed(ct, sens, piece.sum(), N, n, rho, a, plan.vartheta_w)

    # post hoc union, confidence, bound
    mg = float(plan.m)
    lam = np.where(is0, ct("lambda_matrix_rank", k_c=sens.k_c, m_grid=mg, r_max=r),
                   ct("lambda_matrix", k_c=sens.k_c, k_s=k_s, m_grid=mg))
    Lam = lambda_total(ct, lam.sum(), float(plan.k_rho), sens)
    conf = ct("confidence", Lambda=Lam, delta=settings.delta, n=n)
    empirical = settings.empirical
    if empirical is None and margins is not None:
        marg = as_margins(margins)
        empirical = float(ct("ramp", a=marg, rho=rho).mean())
    bound = ct("bound", DD=dd, Lambda=Lam, SS=ss, delta=settings.delta,
               hat_E=0.0 if empirical is None else empirical, n=n)

    name = dtype_name(dtype)
    tol = FLOAT64_REL_TOL if name == "float64" else FLOAT32_DERIVED_REL_TOL
    vals = {key: np.broadcast_to(np.asarray(t, dtype=np.float64), (len(facts.matrices),)).tolist()
            for key, t in dict(spectral=facts.spectral, S=S, k_c=sens.k_c, c=c, k_s=k_s, s=s, gamma=sens.gamma,
                               kappa=kappa, term=term, ent=ent, piece=piece, lam=lam).items()}
    records = []
    for j, mat in enumerate(facts.matrices):
        zero_p = plan.p_index[j] == 0
        records.append(NumericMatrixTerm(
            name=mat.name, layer=mat.layer, head=mat.head, kind=mat.kind, rows=mat.shape[0],
            cols=mat.shape[1], rank_cap=mat.rank_cap, spectral=vals["spectral"][j],
            p_index=plan.p_index[j], p=plan.p(j),
            schatten=vals["s"][j] if zero_p else vals["S"][j],
            rank_used=int(vals["s"][j]) if zero_p else None, k_c=int(vals["k_c"][j]), c=vals["c"][j],
            k_s=None if zero_p else int(vals["k_s"][j]), s=vals["s"][j], gamma=vals["gamma"][j],
            kappa=vals["kappa"][j], u=plan.u[j], vartheta=plan.vartheta[j], ss_term=vals["term"][j],
            ss_entropy=vals["ent"][j], dd_piece=vals["piece"][j], lam=vals["lam"][j]))
    return NumericBound(
        plan=plan, settings=settings, matrices=tuple(records), singular_values=np.array(facts.values),
        lipschitz=np.array(sens.lipschitz), alpha=np.array(sens.alpha), readout=sens.readout, B_w=sens.B_w,
        k_w=sens.k_w, rho=rho, k_rho=plan.k_rho, empirical=empirical, ss_closed=float(closed),
        ss_objective=float(ss_obj), ss=float(ss), dd=float(dd), complexity=float(np.minimum(ss, dd)),
        Lambda=float(Lam), confidence=float(conf), bound=float(bound) * (1.0 + tol), dtype=name,
        device=facts.device, tolerance=tol,
        variants=dict(ct.variants))
