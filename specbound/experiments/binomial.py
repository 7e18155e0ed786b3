"""Exact binomial statistics: the Clopper-Pearson interval of an observed error rate (mpmath)."""

from __future__ import annotations

from collections.abc import Callable
import math

import mpmath
import numpy as np

from specbound.experiments.config import ExperimentError


# --------------------------------------------------------------------------- Clopper-Pearson


def binomial_tail_upper(k: int, m: int, q) -> "mpmath.mpf":  # noqa: F821
    """``P(X >= k)`` for ``X ~ Binomial(m, q)``, to mpmath's working precision.

    Uses the identity ``P(X >= k) = I_q(k, m - k + 1)`` (regularised incomplete beta function)
    and evaluates ``I`` by :func:`regularized_beta`; ``k <= 0`` gives 1 and ``k > m`` gives 0.
    """

    if k <= 0:
        return mpmath.mpf(1)
    if k > m:
        return mpmath.mpf(0)
    return regularized_beta(k, m - k + 1, q)


def regularized_beta(a: int, b: int, x) -> "mpmath.mpf":  # noqa: F821
    """``I_x(a, b)`` for integers ``a, b >= 1`` and ``0 <= x <= 1``, at mpmath's working precision.

    The continued fraction of DLMF 8.17.22 (evaluated by the modified Lentz method), used where it
    converges fast, ``x < (a + 1)/(a + b + 2)``, and through ``I_x(a, b) = 1 - I_{1-x}(b, a)``
    otherwise; it needs ``O(sqrt(max(a, b)))`` terms.  (``mpmath.betainc``'s hypergeometric series
    fails to converge for counts of ~10^4 near ``x = 1/2``.)
    """

    x = mpmath.mpf(x)
    if x <= 0:
        return mpmath.mpf(0)
    if x >= 1:
        return mpmath.mpf(1)
    # closed forms at b = 1 or a = 1 (P(X >= m) and P(X >= 1) of a binomial)
    if b == 1:
        return x**a
    if a == 1:
        return -mpmath.expm1(b * mpmath.log1p(-x))
    if x > mpmath.mpf(a + 1) / (a + b + 2):
        return 1 - regularized_beta(b, a, 1 - x)
    log_front = (a * mpmath.log(x) + b * mpmath.log1p(-x)
                 - mpmath.log(a) - (mpmath.loggamma(a) + mpmath.loggamma(b) - mpmath.loggamma(a + b)))
    tiny = mpmath.mpf(10) ** (-3 * mpmath.mp.dps)
    eps = mpmath.mpf(10) ** (-mpmath.mp.dps)

    def guard(t):
        return tiny if abs(t) < tiny else t

    # modified Lentz: h = 1/(1 + d_1/(1 + d_2/(1 + ...))), the terms d_i in pairs (even, odd)
    c = mpmath.mpf(1)
    d = 1 / guard(1 - (a + b) * x / (a + 1))  # d_1 = -(a+b) x / (a+1)
    h = d
    for j in range(1, 10 * int(math.isqrt(max(a, b))) + 100):
        even = j * (b - j) * x / ((a + 2 * j - 1) * (a + 2 * j))
        d = 1 / guard(1 + even * d)
        c = guard(1 + even / c)
        h *= d * c
        odd = -(a + j) * (a + b + j) * x / ((a + 2 * j) * (a + 2 * j + 1))
        d = 1 / guard(1 + odd * d)
        c = guard(1 + odd / c)
        step = d * c
        h *= step
        if abs(step - 1) < eps:
            return mpmath.exp(log_front) * h
    raise ExperimentError(f"incomplete beta I_x({a}, {b}) did not converge at x = {x}")


def _bisect(increasing: Callable, target, lo: float, hi: float, iterations: int) -> tuple[float, float]:
    """Bracket ``[a, b]`` of the root of ``increasing(x) = target`` with ``increasing(a) < target <=
    increasing(b)``; both ends are float64 numbers (the midpoint is rounded to float), stopped
    when they are a few ulps apart."""
    a, b = lo, hi
    for _ in range(iterations):
        mid = 0.5 * (a + b)
        if mid <= a or mid >= b or b - a <= 4 * 2.0**-53 * b:  # a few ulps apart: done
            break
        if increasing(mid) < target:
            a = mid
        else:
            b = mid
    return a, b


def _bracket(increasing: Callable, target, guess: tuple[float, float]) -> tuple[float, float]:
    """``guess`` if ``increasing(lo) < target <= increasing(hi)`` there, else the whole ``[0, 1]``."""
    lo, hi = guess
    if lo > 0.0 and not increasing(lo) < target:
        lo = 0.0
    if hi < 1.0 and not increasing(hi) >= target:
        hi = 1.0
    return lo, hi


def clopper_pearson(errors: int, m: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) two-sided interval for a binomial proportion.

    For ``errors`` failures out of ``m`` trials, returns ``(lo, hi)`` with
    ``P_lo(X >= errors) <= (1 - confidence)/2`` (``lo = 0`` when ``errors = 0``) and
    ``P_hi(X <= errors) <= (1 - confidence)/2`` (``hi = 1`` when ``errors = m``).  Each end is found
    by bisection on the binomial tail (:func:`binomial_tail_upper`, 30 digits) and rounded
    *outwards* to float64, so the returned interval contains the exact one.
    """

    if not (isinstance(m, (int, np.integer)) and isinstance(errors, (int, np.integer))):
        raise ExperimentError("clopper_pearson: errors and m must be integers")
    if m < 1 or not 0 <= errors <= m:
        raise ExperimentError(f"clopper_pearson: need m >= 1 and 0 <= errors <= m, got {errors}/{m}")
    if not 0 < confidence < 1:
        raise ExperimentError(f"clopper_pearson: confidence must lie in (0, 1), got {confidence}")
    with mpmath.workdps(30):
        tail = (1 - mpmath.mpf(repr(float(confidence)))) / 2  # the decimal the user typed
        # Start from a wide normal-approximation bracket (checked below, else [0, 1]): the far-away
        # bisection steps are the expensive ones for the continued fraction.
        rate = errors / m
        spread = 12 * math.sqrt(rate * (1 - rate) / m) + 12 / m
        guess = (max(0.0, rate - spread), min(1.0, rate + spread))
        # P_q(X >= k) increases with q; the lower end solves it = tail.
        lo = 0.0
        if errors > 0:
            f = lambda q: binomial_tail_upper(errors, m, mpmath.mpf(q))  # noqa: E731
            lo, _ = _bisect(f, tail, *_bracket(f, tail, guess), 400)
        # P_q(X <= k) = 1 - P_q(X >= k+1) decreases with q; the upper end solves it = tail.
        hi = 1.0
        if errors < m:
            g = lambda q: binomial_tail_upper(errors + 1, m, mpmath.mpf(q))  # noqa: E731
            _, hi = _bisect(g, 1 - tail, *_bracket(g, 1 - tail, guess), 400)
    return lo, hi
