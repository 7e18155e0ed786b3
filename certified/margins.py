"""Certified margin enclosures: the one interface between a certified forward pass and the bound.

Every certified forward pass (the Arb pass, the fast pass with its a-priori error, a per-sample pass)
hands the bound the same thing: for each sample ``i`` of S two binary64 numbers

    ``lower[i] <= m_i <= upper[i]``,   ``m_i = y_i f(X_i)``  (k classes: ``f_y - max_{y' != y} f_{y'}``)

for the exact real network and inputs.  A binary64 number is an exact rational, so these endpoints
are exact; ``-inf`` / ``+inf`` stand for "not certified" (a non-finite or undecided sample), never
NaN.  Everything the theorem takes from S is a function of these two arrays, evaluated here once:

* the empirical ramp loss at ``rho`` (Rademacher route): :func:`ramp_loss_bounds`, exact sums;
* the certified *upper* margin count ``K^(gamma) >= #{i : m_i <= gamma}`` (Occam route, condition
  C4 of proofs_notes/occam_route.md): :func:`count_upper` -- a sample counts unless its enclosure
  lies certainly above ``gamma``, so undecided and non-finite samples count;
* the certified 0-1 error count range: :func:`errors_lower` / :func:`undecided` (informational).

Floats only *choose* here (which samples to redo, :meth:`MarginEnclosures.straddling`); every count
and sum that reaches the bound is an exact comparison or an exact sum of these endpoints.

Public API: :class:`MarginEnclosures`, :func:`from_balls`, :func:`from_center_radius`,
:func:`ramp_loss_bounds`, :func:`count_upper`, :func:`count_lower`, :func:`errors_lower`,
:func:`undecided`, :func:`exact_float_sum`, :func:`from_output_enclosures` (k-row read-outs),
:func:`margin_ball` (one sample's margin from Arb output balls), :func:`ramp_loss_sums`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from flint import arb, fmpq

from specbound.certified.arb import float_lower, float_upper, precision

SUM_PREC = 128
"""Arb bits of the final division by ``n`` and ``rho`` (the sums themselves are exact)."""


@dataclass(frozen=True, eq=False)
class MarginEnclosures:
    """Per-sample certified enclosures ``lower[i] <= y_i f(X_i) <= upper[i]`` of the exact margins.

    ``lower`` and ``upper`` are float64 arrays of shape (n,) with no NaN and ``lower <= upper``
    (``-inf`` / ``+inf`` where nothing is certified).  ``method`` names the pass that produced them
    ("arb", "fast", "interval", or a "+"-joined mix after :meth:`refined`); ``redone`` counts the
    samples whose enclosure came from a second (Arb) evaluation.

    Optional exact form (:func:`from_center_radius` with an ``arb`` radius): ``center`` (n,) binary64 and
    ``radius`` an exact point with ``|center[i] - m_i| <= radius`` for every sample with a finite centre;
    ``lower``/``upper`` are then its outward rounding, and :func:`ramp_loss_sums` uses the exact edges
    ``center -+ radius`` (the sums the a-priori pass always used).  :meth:`refined` drops it.
    """

    lower: np.ndarray
    upper: np.ndarray
    method: str = ""
    redone: int = 0
    center: np.ndarray | None = None
    radius: arb | None = None

    def __post_init__(self) -> None:
        lo = np.asarray(self.lower, dtype=np.float64)
        hi = np.asarray(self.upper, dtype=np.float64)
        if lo.ndim != 1 or lo.shape != hi.shape:
            raise ValueError(f"margin enclosures need two arrays of shape (n,), got {lo.shape} and {hi.shape}")
        if np.isnan(lo).any() or np.isnan(hi).any():
            raise ValueError("margin enclosures may not hold NaN (use -inf / +inf for 'not certified')")
        if not (lo <= hi).all():
            raise ValueError("margin enclosures need lower <= upper for every sample")
        # private read-only copies: a caller's later write cannot change a certified result
        lo, hi = lo.copy(), hi.copy()
        lo.setflags(write=False)
        hi.setflags(write=False)
        object.__setattr__(self, "lower", lo)
        object.__setattr__(self, "upper", hi)
        if (self.center is None) != (self.radius is None):
            raise ValueError("the exact form needs both a centre array and a radius")
        if self.center is not None:
            c = np.array(self.center, dtype=np.float64)
            if c.shape != lo.shape or not (isinstance(self.radius, arb) and self.radius.rad() == 0
                                           and self.radius >= 0):
                raise ValueError("the exact form needs centres of shape (n,) and an exact radius >= 0")
            c.setflags(write=False)
            object.__setattr__(self, "center", c)

    def subset(self, keep: np.ndarray) -> MarginEnclosures:
        """The enclosures of the samples selected by the boolean mask or index array ``keep`` (the exact
        form is kept)."""
        c = None if self.center is None else self.center[keep]
        return MarginEnclosures(self.lower[keep], self.upper[keep], self.method, 0, c, self.radius)

    @property
    def n(self) -> int:
        return int(self.lower.shape[0])

    @property
    def width(self) -> np.ndarray:
        """``upper - lower`` per sample (float, informational; inf where not certified)."""
        with np.errstate(invalid="ignore", over="ignore"):
            return np.where(np.isfinite(self.lower) & np.isfinite(self.upper), self.upper - self.lower, np.inf)

    def midpoints(self) -> np.ndarray:
        """Float estimates of the margins, for *choosing* only (rho, gamma): the midpoint where both
        endpoints are finite, else the finite endpoint, else 0."""
        lo, hi = self.lower, self.upper
        with np.errstate(invalid="ignore", over="ignore"):
            mid = lo / 2 + hi / 2
        mid = np.where(np.isfinite(lo) & ~np.isfinite(hi), lo, mid)
        mid = np.where(~np.isfinite(lo) & np.isfinite(hi), hi, mid)
        return np.where(np.isfinite(mid), mid, 0.0)

    def straddling(self, thresholds: Iterable[float]) -> np.ndarray:
        """Indices of the samples whose enclosure contains one of ``thresholds`` (or is not finite):
        the ones a sharper pass could still decide.  A float choice only."""
        lo, hi = self.lower, self.upper
        mask = ~(np.isfinite(lo) & np.isfinite(hi))
        for t in thresholds:
            mask |= (lo <= t) & (t <= hi)
        return np.flatnonzero(mask)

    def refined(self, indices: Sequence[int] | np.ndarray, lower: np.ndarray, upper: np.ndarray,
                method: str = "arb") -> MarginEnclosures:
        """These enclosures with samples ``indices`` sharpened by a second certified evaluation
        ``lower, upper`` of the same margins: both are valid, so their intersection is."""
        idx = np.asarray(indices, dtype=np.int64)
        lo, hi = self.lower.copy(), self.upper.copy()
        new_lo = np.asarray(lower, dtype=np.float64)
        new_hi = np.asarray(upper, dtype=np.float64)
        if new_lo.shape != idx.shape or new_hi.shape != idx.shape:
            raise ValueError("refined: one (lower, upper) pair per index")
        lo[idx] = np.maximum(lo[idx], new_lo)
        hi[idx] = np.minimum(hi[idx], new_hi)
        if not (lo[idx] <= hi[idx]).all():
            # two certified enclosures of one real number always meet; disjoint ones mean a bug
            raise ArithmeticError("refined: the two certified enclosures of a margin are disjoint")
        methods = self.method if (not idx.size or method in self.method.split("+")) else f"{self.method}+{method}"
        return MarginEnclosures(lo, hi, methods, self.redone + int(np.unique(idx).size))


def from_balls(balls: Sequence[arb], method: str = "arb") -> MarginEnclosures:
    """Enclosures from one Arb ball per sample (outward rounding to binary64; a non-finite ball gives
    ``[-inf, +inf]``)."""
    lo = np.array([float_lower(b) for b in balls], dtype=np.float64)
    hi = np.array([float_upper(b) for b in balls], dtype=np.float64)
    return MarginEnclosures(lo.reshape(-1), hi.reshape(-1), method, 0)


def _next_down(a: np.ndarray) -> np.ndarray:
    return np.nextafter(a, -np.inf)


def _next_up(a: np.ndarray) -> np.ndarray:
    return np.nextafter(a, np.inf)


def from_center_radius(center: np.ndarray, radius: float | np.ndarray | arb, method: str = "fast") -> MarginEnclosures:
    """Enclosures ``[center - radius, center + radius]`` rounded outward, for a pass that proves
    ``|center[i] - m_i| <= radius[i]`` (``radius`` a float >= the exact error bound, or one per sample;
    or an exact ``arb`` point, which is also kept as the exact form of :class:`MarginEnclosures`).

    Needs binary64 round-to-nearest (the caller's pass checks it): ``fl(c - r)`` is within half an ulp
    of ``c - r``, so one step down lies below it (and one step up above ``c + r``).  A non-finite
    centre or radius gives ``[-inf, +inf]``; an overflow gives an infinite endpoint, still valid.
    """
    c = np.asarray(center, dtype=np.float64).reshape(-1)
    exact = radius if isinstance(radius, arb) else None
    if exact is not None:
        radius = float_upper(exact) if exact.is_finite() else math.inf
        if exact.rad() != 0:  # a ball: its upper endpoint is the exact point
            exact = exact.upper() if exact.is_finite() else None
    r = np.broadcast_to(np.asarray(radius, dtype=np.float64), c.shape)
    if (r < 0).any():
        raise ValueError("a radius must be nonnegative")
    ok = np.isfinite(c) & np.isfinite(r)
    with np.errstate(over="ignore", invalid="ignore"):
        lo = np.where(ok, _next_down(c - r), -np.inf)
        hi = np.where(ok, _next_up(c + r), np.inf)
    if exact is not None:
        return MarginEnclosures(lo, hi, method, 0, c, exact)
    return MarginEnclosures(lo, hi, method, 0)


def from_output_enclosures(lower: np.ndarray, upper: np.ndarray, labels: np.ndarray,
                           method: str = "interval") -> MarginEnclosures:
    """Margin enclosures from per-class output enclosures ``lower[i, c] <= f_c(X_i) <= upper[i, c]``.

    One read-out row (``lower``, ``upper`` of shape (n,) or (n, 1)): labels are +-1 and the margin is
    ``y f`` -- ``[lower, upper]`` for ``y = +1`` and ``[-upper, -lower]`` for ``y = -1`` (exact negation).
    ``k >= 2`` rows: labels are class indices ``0..k-1`` and the margin ``f_y - max_{y' != y} f_{y'}`` is
    enclosed by ``[lower_y - max_{y'} upper_{y'}, upper_y - max_{y'} lower_{y'}]`` (``max f_{y'}`` lies between
    the maxima of the endpoints), each difference rounded outward by one binary64 step (round to nearest
    then ``nextafter``).  A tie ``m = 0`` is an error for the counts (they count ``m <= gamma``)."""
    lo = np.asarray(lower, dtype=np.float64)
    hi = np.asarray(upper, dtype=np.float64)
    y = np.asarray(labels)
    if lo.ndim == 1:
        lo, hi = lo[:, None], hi[:, None]
    if lo.ndim != 2 or lo.shape != hi.shape or y.shape != (lo.shape[0],):
        raise ValueError(f"output enclosures of shape {lo.shape} / {hi.shape} do not match labels {y.shape}")
    n, k = lo.shape
    if k == 1:
        if not np.isin(y, (-1, 1)).all():
            raise ValueError("one read-out row needs labels +-1")
        neg = y < 0
        return MarginEnclosures(np.where(neg, -hi[:, 0], lo[:, 0]), np.where(neg, -lo[:, 0], hi[:, 0]), method, 0)
    if not (np.issubdtype(y.dtype, np.integer) and ((y >= 0) & (y < k)).all()):
        raise ValueError(f"{k} read-out rows need class labels in 0..{k - 1}")
    rows = np.arange(n)
    others = np.ones((n, k), dtype=bool)
    others[rows, y] = False
    max_hi = np.where(others, hi, -np.inf).max(axis=1)
    max_lo = np.where(others, lo, -np.inf).max(axis=1)
    with np.errstate(invalid="ignore", over="ignore"):
        m_lo = _next_down(lo[rows, y] - max_hi)
        m_hi = _next_up(hi[rows, y] - max_lo)
    # inf - inf cannot occur for lower <= upper; a NaN would mean "not certified"
    m_lo = np.where(np.isnan(m_lo), -np.inf, m_lo)
    m_hi = np.where(np.isnan(m_hi), np.inf, m_hi)
    return MarginEnclosures(m_lo, m_hi, method, 0)


def margin_ball(outputs: Sequence[arb], label: int) -> arb:
    """A ball containing the margin of one sample from balls containing its outputs (the Arb pass).

    One output (``label`` +-1): ``y f`` (exact negation).  ``k >= 2`` outputs (``label`` a class in
    ``0..k-1``): ``M_y = f_y - max_{c != y} f_c`` lies in ``[lo_y - max_{c != y} hi_c, hi_y - max_{c != y} lo_c]``
    (proofs_notes/k_class.md (e)); the two ends are Arb differences of exact endpoints, the lower end
    taken at its lower and the upper end at its upper endpoint.  A non-finite output gives a non-finite
    ball (not certified: the ramp and the counts then take their worst value)."""
    k = len(outputs)
    if k == 1:
        if label not in (-1, 1):
            raise ValueError("one read-out row needs labels +-1")
        return -outputs[0] if label < 0 else outputs[0]
    y = int(label)
    if not 0 <= y < k:
        raise ValueError(f"{k} read-out rows need class labels in 0..{k - 1}")
    if not all(b.is_finite() for b in outputs):
        return arb(0, math.inf)
    others = [b for c, b in enumerate(outputs) if c != y]
    max_hi = max((b.upper() for b in others), key=_exact_point)
    max_lo = max((b.lower() for b in others), key=_exact_point)
    lo = (outputs[y].lower() - max_hi).lower()
    hi = (outputs[y].upper() - max_lo).upper()
    return lo.union(hi)  # both are exact points: the union is the interval [lo, hi], rounded outward


def _exact_point(point: arb) -> Fraction:
    man, exp = point.mid().man_exp()
    return Fraction(int(man)) * Fraction(2) ** int(exp)


# ------------------------------------------------------------------------------- exact sums


def exact_float_sum(values: np.ndarray) -> Fraction:
    """The exact sum of finite binary64 numbers: each is ``m 2^e`` with an integer ``|m| < 2^53``; the
    ``m`` are split into 26-bit halves and summed as int64 per exponent (no overflow below 2^36 terms)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        return Fraction(0)
    if not np.isfinite(v).all():
        raise ValueError("exact_float_sum needs finite values")
    frac, exp = np.frexp(v)
    mant = (frac * 2.0**53).astype(np.int64)  # exact: |frac| in [1/2, 1) or 0
    hi, lo = mant >> 26, mant & ((1 << 26) - 1)  # mant = hi 2^26 + lo exactly
    order = np.argsort(exp, kind="stable")
    exp, hi, lo = exp[order], hi[order], lo[order]
    starts = np.flatnonzero(np.r_[True, exp[1:] != exp[:-1]])
    his, los = np.add.reduceat(hi, starts), np.add.reduceat(lo, starts)
    total = Fraction(0)
    for e, h, l in zip(exp[starts].tolist(), his.tolist(), los.tolist()):
        total += Fraction((int(h) << 26) + int(l)) * Fraction(2) ** (int(e) - 53)
    return total


def _ball(x: Fraction) -> arb:
    return arb(fmpq(x.numerator, x.denominator))


# ------------------------------------------------------------------------------- what the bound takes


def _positive(rho: arb, what: str) -> arb:
    r = rho if isinstance(rho, arb) else arb(rho)
    if not (r.is_finite() and r > 0):
        raise ValueError(f"{what} must be a certainly positive finite real, got {rho!r}")
    return r


def _ramp_side(edge: np.ndarray, r: arb, upper_side: bool) -> arb:
    """``sum_i l_rho(v_i)`` bounded at the per-sample points ``edge`` (upper side: ``edge = lower``,
    the ramp being nonincreasing; lower side: ``edge = upper``), as a ball; its outer endpoint bounds
    the true sum.  Samples are classed by exact comparisons: ``edge <= 0`` -> 1, ``edge >= rho`` -> 0,
    else ``1 - edge/rho``; a sample whose edge lies inside the ball of ``rho`` gets a per-sample
    clamped Arb value (only when ``rho`` is not an exact point)."""
    r_lo, r_hi = float_lower(r), float_upper(r)
    ones = int(np.count_nonzero(edge <= 0))
    zero = edge >= r_hi  # certainly >= every point of rho
    mid = (edge > 0) & (edge < r_lo)
    odd = ~(edge <= 0) & ~zero & ~mid  # edge within rho's ball (never for an exact rho)
    m = int(np.count_nonzero(mid))
    with precision(SUM_PREC):
        total = arb(ones + m) - _ball(exact_float_sum(edge[mid])) / r
        for v in edge[odd].tolist():
            t = 1 - arb(v) / r
            total += arb(max(0, min(1, float_upper(t) if upper_side else float_lower(t))))
    return total


def _exact_sides(c: np.ndarray, eps: arb, r: arb) -> tuple[arb, arb] | None:
    """The ramp sums at the exact edges ``c -+ eps`` (every ``c`` finite): classes by exact comparisons,
    ``ones + m + (m eps - S) / rho`` and ``ones + m - (m eps + S) / rho`` with ``S`` the exact sum of the
    mid centres (proofs_notes/fast_forward.md step 8).  None when some edge is not certainly on one side
    of 0 or rho (then the float edges decide)."""
    r_lo, r_hi = float_lower(r), float_upper(r)
    e_hi = float_upper(eps)
    zero = c - e_hi >= r_hi  # float pre-selection, checked exactly below
    one = c + e_hi < 0
    mid = ~zero & ~one
    ones, m = int(np.count_nonzero(one)), int(np.count_nonzero(mid))
    if zero.any() and not (arb(float(c[zero].min())) - eps >= r):
        return None
    if one.any() and not (arb(float(c[one].max())) + eps < 0):
        return None
    if mid.any() and not (arb(float(c[mid].min())) - eps > 0 and arb(float(c[mid].max())) + eps < r):
        return None
    S = _ball(exact_float_sum(c[mid]))
    return ones + m + (m * eps - S) / r, ones + m - (m * eps + S) / r


def ramp_loss_sums(margins: MarginEnclosures, rho: arb, prec: int = SUM_PREC) -> tuple[arb, arb]:
    """Balls ``(U, L)`` whose upper / lower endpoints bound ``sum_i l_rho(m_i)`` from above / below (not
    divided by n, not clamped): the sums :func:`ramp_loss_bounds` divides, for a caller that adds the
    exact sums of other samples (e.g. those redone in Arb) before dividing.  With the exact form the
    edges are ``center -+ radius`` exactly where every sample lies certainly off 0 and rho."""
    r = _positive(rho, "the margin rho")
    with precision(max(prec, SUM_PREC)):
        if margins.center is not None and margins.n and np.isfinite(margins.center).all():
            sides = _exact_sides(margins.center, margins.radius, r)
            if sides is not None:
                return sides
        return _ramp_side(margins.lower, r, True), _ramp_side(margins.upper, r, False)


def ramp_loss_bounds(margins: MarginEnclosures, rho: arb) -> tuple[arb, arb]:
    """Exact points ``(upper, lower)`` with ``lower <= (1/n) sum_i l_rho(m_i) <= upper`` for every
    margins ``m_i`` in the enclosures, ``l_rho(u) = min(1, max(0, 1 - u/rho))``, ``rho > 0``.

    The ramp is nonincreasing, so ``l_rho(lower[i])`` bounds sample i's loss from above and
    ``l_rho(upper[i])`` from below; the sums are exact and only the division is rounded (outward).
    An empty sample gives ``(0, 0)``."""
    r = _positive(rho, "the margin rho")
    n = margins.n
    if n == 0:
        return arb(0), arb(0)
    up_sum, lo_sum = ramp_loss_sums(margins, r)
    with precision(SUM_PREC):
        up = (up_sum / n).upper()
        lo = (lo_sum / n).lower()
        if up > 1:
            up = arb(1)
        if lo < 0:
            lo = arb(0)
    return up, lo


def count_upper(margins: MarginEnclosures, gamma: arb) -> int:
    """A certified upper count ``K^ >= #{i : m_i <= gamma}`` (condition C4): sample i is left out
    only when ``lower[i] > gamma`` for every point of the ball ``gamma``; undecided, infinite and
    near-threshold samples count."""
    g_hi = float_upper(gamma if isinstance(gamma, arb) else arb(gamma))
    return int(np.count_nonzero(~(margins.lower > g_hi)))


def count_lower(margins: MarginEnclosures, gamma: arb) -> int:
    """A certified lower count ``<= #{i : m_i <= gamma}``: samples with ``upper[i] <= gamma`` certainly."""
    g_lo = float_lower(gamma if isinstance(gamma, arb) else arb(gamma))
    return int(np.count_nonzero(margins.upper <= g_lo))


def errors_lower(margins: MarginEnclosures) -> int:
    """Samples certainly misclassified (``m_i < 0`` certainly; a tie ``m_i = 0`` is an error too, but
    only a certified ``upper < 0`` is counted here)."""
    return int(np.count_nonzero(margins.upper < 0))


def undecided(margins: MarginEnclosures) -> int:
    """Samples whose sign is not certified: the enclosure contains 0 or is not finite."""
    lo, hi = margins.lower, margins.upper
    return int(np.count_nonzero(~(np.isfinite(lo) & np.isfinite(hi)) | ((lo <= 0) & (0 <= hi))))


def max_radius(margins: MarginEnclosures) -> float:
    """Half the largest enclosure width (float, informational; inf if any sample is not certified)."""
    w = margins.width
    return float(w.max() / 2) if w.size else 0.0


__all__ = (
    "MarginEnclosures",
    "count_lower",
    "count_upper",
    "errors_lower",
    "exact_float_sum",
    "from_balls",
    "from_center_radius",
    "from_output_enclosures",
    "margin_ball",
    "max_radius",
    "ramp_loss_bounds",
    "ramp_loss_sums",
    "undecided",
)
