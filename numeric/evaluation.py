"""The whole bound of proofs_notes/theory.md section 7 in floating point: the fast, uncertified evaluation.

The evaluation is the one driver :func:`specbound.certified.evaluation.evaluate` (the same code
that computes the certified bound) run in the numpy context (:class:`numeric.context.NumpyContext`),
with every formula a field of the assembled theorem evaluated through numeric/generated.py (numpy
source printed from the SymPy expressions) or, with an overridden constant, compiled from SymPy
(:func:`numeric.terms.compiled_theorem`).  This module only *feeds* it float facts
(:class:`FloatFacts`: radii rounded from float spectra) and packs the values.  Nothing here retypes
a formula, and the edge policy is the driver's.

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

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Mapping

import numpy as np

from specbound.certified.evaluation import Radii, Readout, evaluate
from specbound.errors import SpecboundError
from specbound.matrices import AnalysisWeights
from specbound.plan import BoundPlan, BoundSettings
from specbound.vocabulary import READOUT_TRAINED

from .context import NumpyContext
from .grid import grid_size
from .margin_sample import MarginSample, count_at, mean_over
from .terms import (
    CompiledTheorem, NetworkFacts, as_margins, compiled_theorem, dtype_name, grid_up, network_facts, power,
    readout_radius, schatten_at, singular_values,
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


@dataclass(frozen=True, eq=False)
class FloatFacts:
    """The float facts of a network (:class:`specbound.certified.evaluation.Facts`): radii rounded
    from float spectra (``grid_up``), the structural rank at p = 0, the read-out norm and the
    empirical ramp loss (``settings.empirical``, else the mean ramp loss of ``margins``: an array
    or a :class:`~numeric.margin_sample.MarginSample` of size ``settings.n``)."""

    facts: NetworkFacts
    settings: BoundSettings
    margins: np.ndarray | MarginSample | None = None

    @property
    def structure(self):
        return self.facts.structure

    @property
    def m(self) -> int:
        st = self.settings
        return int(st.grid_m) if st.grid_m is not None else grid_size(self.facts.num_layers, self.facts.width)

    def readout(self, ctx) -> Readout:
        kind, B_w, k_w = readout_radius(self.facts, self.settings)
        norm = 1.0 if self.facts.readout_norm is None else self.facts.readout_norm
        return Readout(kind, norm, k_w if kind == READOUT_TRAINED else None, B_w)

    def radii(self, ctx, plan: BoundPlan) -> Radii:
        """Float radii at the plan's p; a plan asking p > 0 for a zero matrix is refused."""
        f, st = self.facts, self.settings
        p_idx = np.array(plan.p_index, dtype=np.int64)
        is0 = p_idx == 0
        zero_m = (f.proven_rank == 0) | (f.spectral == 0)
        if bool((zero_m & ~is0).any()):
            bad = [f.matrices[j].name for j in np.flatnonzero(zero_m & ~is0).tolist()]
            raise SpecboundError(f"plan chooses p > 0 for zero matrix {bad[0]}; a zero matrix needs p = 0")
        S = schatten_at(f.values, np.where(is0, 1.0, p_idx.astype(np.float64) / plan.m))
        k_s = grid_up(S, st.beta_s)
        beta_c = st.base_c(f.num_layers, f.variant)
        k_c = grid_up(f.spectral, beta_c)
        return Radii(p=tuple(plan.p(j) for j in range(len(p_idx))), k_c=k_c, c=power(beta_c, k_c), k_s=k_s,
                     s=np.where(is0, f.proven_rank, power(st.beta_s, k_s)), rank=f.proven_rank.astype(np.int64),
                     detail=S)

    def empirical(self, ctx, rho) -> float | None:
        if self.settings.empirical is not None or self.margins is None:
            return self.settings.empirical
        return float(mean_over(as_margins(self.margins), lambda a: ctx.field("ramp", a=a, rho=rho)))

    def count(self, ctx, gamma) -> int | None:
        """The float margin count ``#{i : margin_i <= gamma}`` (an estimate of K^, for choosing; the
        certified count is taken from margin enclosures, certified/margins.py)."""
        if self.margins is None:
            return None
        return int(count_at(as_margins(self.margins), float(gamma)))


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
    ct = compiled_theorem(settings, weights.activation, weights.variant, weights.num_outputs)
    facts = network_facts(weights, spectra=spectra, dtype=dtype, device=device)
    return evaluate_facts(ct, facts, settings, plan, margins=margins, dtype=dtype)


def evaluate_facts(ct: CompiledTheorem, facts: NetworkFacts, settings: BoundSettings, plan: BoundPlan, *,
                   margins=None, dtype="float64") -> NumericBound:
    """:func:`evaluate_plan` on already computed network facts (the planner compares plans with it)."""
    ev = evaluate(NumpyContext(ct), FloatFacts(facts, settings, margins), plan)
    net, t = ev.network, ev.terms
    rad, ch, rd = net.radii, t.choices, net.readout
    name = dtype_name(dtype)
    tol = FLOAT64_REL_TOL if name == "float64" else FLOAT32_DERIVED_REL_TOL
    J = len(facts.matrices)
    vals = {key: np.broadcast_to(np.asarray(v, dtype=np.float64), (J,)).tolist()
            for key, v in dict(spectral=facts.spectral, S=rad.detail, k_c=rad.k_c, c=rad.c, k_s=rad.k_s, s=rad.s,
                               gamma=net.gamma, kappa=net.kappa, term=t.term, ent=t.entropy, piece=t.piece,
                               lam=t.lam).items()}
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
            kappa=vals["kappa"][j], u=float(ch.u[j]), vartheta=float(ch.vartheta[j]), ss_term=vals["term"][j],
            ss_entropy=vals["ent"][j], dd_piece=vals["piece"][j], lam=vals["lam"][j]))
    return NumericBound(
        plan=plan, settings=settings, matrices=tuple(records), singular_values=np.array(facts.values),
        lipschitz=np.array(net.lipschitz), alpha=np.array(net.alpha), readout=rd.kind, B_w=rd.B_w,
        k_w=0 if rd.k_w is None else rd.k_w, rho=net.rho, k_rho=plan.k_rho, empirical=t.empirical,
        ss_closed=float(t.ss_closed), ss_objective=float(t.ss_exact), ss=float(t.SS), dd=float(t.DD),
        complexity=float(t.complexity) / 2.0, Lambda=float(t.Lambda), confidence=float(t.confidence),
        bound=float(t.bound) * (1.0 + tol), dtype=name, device=facts.device, tolerance=tol,
        variants=dict(ct.variants))
