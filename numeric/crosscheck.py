"""Does the fast float evaluation agree with the certified one?  (docs/design.md section 2.)

Both are the same program: :func:`specbound.certified.evaluation.evaluate`, run once in the numpy
context on float facts and once in the Arb context on certified facts, so they take the same
branches and apply the same edge policy.  What can differ is only the arithmetic (float64 against
balls) and the facts (float spectra against enclosures, the structural rank against a proven one),
and that is what the tolerances below account for.  The quantities compared are the driver's, in
one list (:data:`MATRIX_QUANTITIES`, :data:`NETWORK_QUANTITIES`).

Contract checked by :func:`crosscheck`, for a :class:`~specbound.numeric.bound.NumericBound` and a
:class:`~specbound.certified.bound.CertifiedBound` evaluated at the **same plan**:

1. *Singular values* (when the enclosures are given): each float ``sigma_i`` lies in its certified
   enclosure ``[lower_i, upper_i]`` -- no widening at all (float64).
2. *Derived quantities* (radii, Lipschitz constants, kappa, per-matrix terms and entropies, SS, DD,
   Lambda, confidence, bound): each float value lies in the certified ball widened by
   ``DERIVED_REL_TOL`` times its magnitude -- they are results of float arithmetic chains of at
   most a few hundred correctly rounded operations, whose relative error is far below 1e-12.
3. *Schatten powers* ``S_p`` (p > 0): the ball is widened by ``DERIVED_REL_TOL`` plus the float
   SVD's own error propagated through ``x -> x^p``: with ``e = SVD_ERROR * sigma_1`` (a backward
   stable SVD moves every singular value by at most that), the float sum may be off by up to
   ``sum_i |(sigma_i + e)^p - sigma_i^p|``.  For small p the tiny singular values dominate this.
4. *Grid indices* (k_c, k_s) and the rank used at p = 0 are integers: they must be equal, except
   that the fast path's rank (the structural cap) may exceed the certified proven rank; then that
   matrix's quantities, and every total, are only checked one-sided (numeric >= certified lower).
5. The numeric bound (which ``evaluate`` rounds up by its stated tolerance) is never below the
   certified lower endpoint -- checked strictly.

float32 evaluations use ``numeric.tolerance`` (FLOAT32_DERIVED_REL_TOL) for everything, singular values
relative to sigma_1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from specbound.certified.arb import float_lower, float_upper

from .evaluation import FLOAT32_DERIVED_REL_TOL, NumericBound
from .terms import compiled_theorem

DERIVED_REL_TOL = 1e-12
"""Relative widening of certified balls for float64 values derived by float arithmetic."""

SVD_ERROR = 1e-13
"""Float64 SVD backward error, relative to sigma_1, assumed when propagating into S_p (about
450 unit roundoffs: LAPACK's bound is a modest multiple of max(m, n) * eps)."""


@dataclass(frozen=True)
class Disagreement:
    """One value outside its (widened) certified ball."""

    matrix: str  #: matrix name, or "network"
    quantity: str
    numeric: float
    certified: str  #: the ball as printed by Arb
    note: str = ""

    def __str__(self) -> str:
        extra = f" ({self.note})" if self.note else ""
        return f"{self.matrix} {self.quantity}: numeric {self.numeric!r} not in certified {self.certified}{extra}"


@dataclass(frozen=True)
class CrossCheckReport:
    """Outcome of :func:`crosscheck`: how many values were compared, what disagreed, what was only
    checked one-sided (and why)."""

    checked: int
    disagreements: tuple[Disagreement, ...]
    one_sided: tuple[str, ...]
    derived_tol: float
    singular_tol: float
    dtype: str
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.disagreements

    def summary(self) -> str:
        head = (f"crosscheck ({self.dtype}): {self.checked} values, {len(self.disagreements)} disagreements; "
                f"derived tol {self.derived_tol:g} relative, singular values tol {self.singular_tol:g}")
        lines = [head] + [f"  {d}" for d in self.disagreements]
        lines += [f"  one-sided: {s}" for s in self.one_sided] + [f"  note: {s}" for s in self.notes]
        return "\n".join(lines)


def _endpoints(ball) -> tuple[float, float]:
    """Float endpoints that enclose an Arb ball (outward-rounded)."""
    return float_lower(ball), float_upper(ball)


class _Checker:
    def __init__(self, rel: float):
        self.rel = rel
        self.count = 0
        self.bad: list[Disagreement] = []

    def inside(self, matrix: str, quantity: str, value: float, ball, *, extra: float = 0.0,
               one_sided: bool = False, rel: float | None = None, note: str = "") -> None:
        """value in [lo - w, hi + w] with w = rel |value| + extra (one-sided: only the lower end)."""
        self.count += 1
        lo, hi = _endpoints(ball)
        w = (self.rel if rel is None else rel) * abs(value) + extra
        ok = math.isfinite(value) and value >= lo - w and (one_sided or value <= hi + w)
        if not ok:
            self.bad.append(Disagreement(matrix, quantity, float(value), str(ball), note))

    def equal(self, matrix: str, quantity: str, a, b, note: str = "") -> None:
        self.count += 1
        if a != b:
            self.bad.append(Disagreement(matrix, quantity, float(a) if a is not None else math.nan,
                                         str(b), note or "integer choice differs"))


def certified_upper(certified, numeric: NumericBound | None = None) -> float:
    """Upper Dudley integration limit of the theorem in force (1/4 centred, 1/2 uncentred); it depends
    on the Dudley variant only, never on an overridden lemma constant (so the generated table holds it)."""
    variants = numeric.variants if numeric is not None and numeric.variants else {}
    settings = replace(certified.settings, overrides=())
    ct = compiled_theorem(settings, variants.get("activation", "gelu"), variants.get("model", "plain"),
                          int(variants.get("k_cls", 1)))
    return float(ct.dd_upper)


#: per-matrix quantities after the radii, in the order checked: (name, numeric record attribute,
#: certified record attribute, only one-sided where the numeric rank is the structural cap)
MATRIX_QUANTITIES = (
    ("s_radius", "s", "s_radius", True),
    ("gamma", "gamma", "gamma", False),
    ("kappa", "kappa", "kappa", False),
    ("contribution", "ss_term", "contribution", True),
    ("ss_entropy", "ss_entropy", "ss_entropy", True),
    ("dd_piece", "dd_piece", "dd_piece", True),
    ("lam", "lam", "lam", False),
)

#: network quantities, in the order checked: (name, numeric attribute, certified attribute, factor
#: of the numeric value, one-sided where a matrix's numeric rank is the structural cap)
NETWORK_QUANTITIES = (
    ("B_w", "B_w", "B_w", 1.0, False),
    ("rho", "rho", "rho", 1.0, False),
    ("ss_closed", "ss_closed", "ss_closed", 1.0, True),
    ("ss_exact", "ss_objective", "ss_exact", 1.0, True),
    ("SS", "ss", "SS", 1.0, True),
    ("DD", "dd", "DD", 1.0, True),
    ("complexity", "complexity", "complexity", 2.0, True),  # numeric keeps min(SS, DD), certified 2 min
    ("Lambda", "Lambda", "Lambda", 1.0, False),
    ("confidence", "confidence", "confidence", 1.0, False),
)


def _schatten_slack(sigma: np.ndarray, p: float, err: float) -> float:
    """sum_i |(sigma_i + err)^p - sigma_i^p|: how far an SVD error of ``err`` can move S_p."""
    s = sigma[sigma > 0]
    if s.size == 0 or p <= 0:
        return 0.0
    return float(np.sum((s + err) ** p - s ** p)) + float(np.sum(sigma == 0)) * err ** p


def crosscheck(numeric: NumericBound, certified, enclosures: Sequence | None = None) -> CrossCheckReport:
    """Compare every float value of ``numeric`` with the balls of ``certified`` (module docstring).

    ``certified`` is a ``specbound.certified.bound.CertifiedBound`` for the same weights, settings
    and plan; ``enclosures`` (optional) the ``SingularValueEnclosure`` of each matrix, in order.
    """
    f32 = numeric.dtype == "float32"
    rel = FLOAT32_DERIVED_REL_TOL if f32 else DERIVED_REL_TOL
    chk = _Checker(rel)
    one_sided: list[str] = []
    notes: list[str] = []
    if tuple(numeric.plan.p_index) != tuple(certified.plan.p_index) or numeric.plan.k_rho != certified.plan.k_rho:
        notes.append("the two evaluations use different plans: values are not comparable")
    if len(numeric.matrices) != len(certified.matrices):
        raise ValueError("numeric and certified evaluations cover different numbers of matrices")

    any_rank_gap = False
    upper = float(certified_upper(certified, numeric))
    alpha = float(numeric.plan.alpha_D)
    cancel = upper / (upper - alpha) if alpha < upper else 1.0
    for j, (nm, cm) in enumerate(zip(numeric.matrices, certified.matrices)):
        name = nm.name
        sigma = numeric.singular_values[j, : nm.rank_cap]
        sv_tol = FLOAT32_DERIVED_REL_TOL * float(sigma[0]) if f32 and sigma.size else 0.0
        if enclosures is not None:
            enc = enclosures[j]
            for i, value in enumerate(sigma):
                chk.inside(name, f"sigma_{i + 1}", float(value), enc.ball(i), rel=0.0, extra=sv_tol)
        chk.inside(name, "spectral_norm", nm.spectral, cm.spectral_norm, rel=0.0, extra=sv_tol)
        chk.equal(name, "k_c", nm.k_c, cm.k_c)
        chk.inside(name, "c_radius", nm.c, cm.c_radius)
        rank_gap = nm.p_index == 0 and nm.rank_used != cm.proven_rank
        if rank_gap:
            any_rank_gap = True
            one_sided.append(f"{name}: rank used {nm.rank_used} (structural cap) vs proven {cm.proven_rank}")
            chk.count += 1
            if nm.rank_used < cm.proven_rank:
                chk.bad.append(Disagreement(name, "rank", nm.rank_used, str(cm.proven_rank),
                                            "numeric rank below the certified proven rank"))
        elif nm.p_index > 0:
            err = (FLOAT32_DERIVED_REL_TOL if f32 else SVD_ERROR) * float(sigma[0]) if sigma.size else 0.0
            slack = _schatten_slack(sigma.astype(np.float64), float(nm.p), err)
            chk.inside(name, "schatten_power", nm.schatten, cm.schatten_power, extra=slack)
            chk.equal(name, "k_s", nm.k_s, cm.k_s)
        for quantity, num_attr, cert_attr, by_rank in MATRIX_QUANTITIES:
            # I_p(alpha) = int_alpha^upper u^(-p/2) du is a difference of two terms: near alpha = upper
            # the float value loses about log10(upper / (upper - alpha)) digits
            chk.inside(name, quantity, getattr(nm, num_attr), getattr(cm, cert_attr),
                       one_sided=by_rank and rank_gap, rel=rel * cancel if quantity == "dd_piece" else None)

    for l, (lip, a) in enumerate(zip(numeric.lipschitz, numeric.alpha)):
        chk.inside("network", f"layer_lipschitz_{l}", float(lip), certified.layer_lipschitz[l])
        chk.inside("network", f"alpha_{l}", float(a), certified.alphas[l])
    for quantity, num_attr, cert_attr, factor, by_rank in NETWORK_QUANTITIES:
        chk.inside("network", quantity, factor * getattr(numeric, num_attr), getattr(certified, cert_attr),
                   one_sided=by_rank and any_rank_gap)
    g = any_rank_gap
    raw = numeric.bound / (1.0 + numeric.tolerance)  # the float value before the upward rounding
    if numeric.includes_empirical and certified.rademacher is not None:
        # the numeric bound is the main theorem's (the Rademacher route); the reported certified bound may
        # be the Occam route's, which the float path does not evaluate
        chk.inside("network", "bound", raw, certified.rademacher, one_sided=g)
        final = certified.rademacher
    else:
        chk.inside("network", "partial", raw, certified.partial, one_sided=g)
        final = certified.partial
    # never below the certified lower endpoint (the one-sided promise of docs/design.md section 2), checked on its own
    lo, _ = _endpoints(final)
    chk.count += 1
    if not numeric.bound >= lo:
        chk.bad.append(Disagreement("network", "bound >= certified lower", numeric.bound, str(final),
                                    "numeric bound below the certified lower endpoint"))
    return CrossCheckReport(chk.count, tuple(chk.bad), tuple(one_sided), rel,
                            FLOAT32_DERIVED_REL_TOL if f32 else 0.0, numeric.dtype, tuple(notes))
