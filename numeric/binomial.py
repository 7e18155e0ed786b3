"""A float64 estimate of the one-sided binomial inversion, for *choosing* (the planner's Occam route).

``BinInv(n, k, e^-C) = max{p : P(Bin(n, p) <= k) >= e^-C}`` (proofs_notes/binomial_inversion.md),
estimated from its kl relaxation ``klInv(k/n, C/n)`` (at most about ``log(8k)/2`` nats of ``C`` looser)
by bisection, with the closed forms at ``k = 0`` (``-expm1(-C/n)``) and ``k = n`` (1).  Floats only: the
certified value is :func:`specbound.certified.binomial.invert`; this one is never reported as a bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class FloatInversion:
    """A float estimate of BinInv (``value``) and the form it comes from (``method``)."""

    value: float
    method: str


def kl(q: float, p: float) -> float:
    """``kl(q || p)`` in float64 (``0 log 0 = 0``), for ``0 <= q <= 1`` and ``0 < p < 1``."""
    out = 0.0
    if q > 0:
        out += q * math.log(q / p)
    if q < 1:
        out += (1 - q) * math.log((1 - q) / (1 - p))
    return out


def bininv_estimate(n: int, k: int, C: float) -> FloatInversion:
    """A float estimate of ``BinInv(n, k, e^-C)`` (see the module docstring); ``C`` is clipped at 0."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"binomial inversion needs n >= 1 and 0 <= k <= n, got n={n}, k={k}")
    C = max(float(C), 0.0)
    if not math.isfinite(C):
        return FloatInversion(1.0, "closed")
    if k >= n:
        return FloatInversion(1.0, "closed")
    if k == 0:
        return FloatInversion(-math.expm1(-C / n), "closed")
    q, c = k / n, C / n
    lo, hi = q, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if not lo < mid < hi:
            break
        lo, hi = (mid, hi) if kl(q, mid) < c else (lo, mid)
    return FloatInversion(hi, "kl")
