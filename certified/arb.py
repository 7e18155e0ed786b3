"""Exact conversions between binary64 and Arb balls, directed float endpoints, and certificate strings.

Contract of this module: every function either is exact or rounds **outward** (the returned ball or
float is guaranteed to contain, resp. lie on the stated side of, the exact real value).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterable, Iterator

import numpy as np
from flint import arb, arb_mat, ctx

from specbound.errors import NonFiniteError

WORK_PREC = 256
"""Bits used for Arb work in this package (exact for products/sums of float64 data of our sizes)."""

DBL_MAX = float(np.finfo(np.float64).max)


@contextmanager
def precision(bits: int = WORK_PREC) -> Iterator[None]:
    """Temporarily raise ``ctx.prec`` (never lower it); restores the caller's value."""
    old = ctx.prec
    ctx.prec = max(old, int(bits))
    try:
        yield
    finally:
        ctx.prec = old


def check_finite(a: np.ndarray, what: str = "matrix") -> np.ndarray:
    """Return ``a`` as a float64 array; raise NonFiniteError if any entry is NaN or Inf."""
    a = np.asarray(a, dtype=np.float64)
    if not np.all(np.isfinite(a)):
        raise NonFiniteError(f"{what} contains NaN or Inf")
    return a


def to_arb(x: float) -> arb:
    """The exact ball of a finite binary64 number (radius 0)."""
    x = float(x)
    if not math.isfinite(x):
        raise NonFiniteError(f"non-finite value {x!r} cannot be taken as an exact real")
    return arb(x)


def to_arb_mat(a: np.ndarray) -> arb_mat:
    """Exact ``arb_mat`` of a finite 2-D float64 array (python floats convert exactly)."""
    a = check_finite(a)
    if a.ndim != 2:
        raise ValueError("to_arb_mat expects a 2-D array")
    m, n = a.shape
    return arb_mat(m, n, a.ravel().tolist())


def pow2(e: int) -> arb:
    """The exact ball 2**e for any integer e."""
    return arb(2) ** int(e)


def exponent_of(x: float) -> int:
    """The integer e with 2**(e-1) <= |x| < 2**e (x != 0, finite)."""
    return math.frexp(abs(float(x)))[1]


def scale_exponent(a: np.ndarray) -> int:
    """e such that max|a| lies in [2**(e-1), 2**e); 0 for an all-zero array."""
    mx = float(np.max(np.abs(a))) if a.size else 0.0
    return exponent_of(mx) if mx > 0.0 else 0


def scaled_by_pow2(a: np.ndarray, e: int) -> tuple[np.ndarray, int]:
    """``(fl(2**-e a), inexact)`` where ``inexact`` counts entries that lost bits (subnormal range).

    Each inexact entry differs from the exact ``2**-e a`` by at most 2**-1075 (round to nearest).
    """
    s = np.ldexp(a, -int(e))
    if e <= 0:
        return s, 0  # scaling up by a power of two is exact (no overflow: caller chose e from max)
    back = np.ldexp(s, int(e))
    return s, int(np.count_nonzero(back != a))


def float_lower(x: arb) -> float:
    """A binary64 number guaranteed <= every point of the ball ``x`` (-inf if unbounded)."""
    if not x.is_finite():
        return -math.inf
    lo = x.lower()
    f = float(lo)  # rounds to nearest: step down until certainly below
    if math.isinf(f):
        return -math.inf if f < 0 else DBL_MAX
    while arb(f) > lo:
        f = math.nextafter(f, -math.inf)
    return f


def float_upper(x: arb) -> float:
    """A binary64 number guaranteed >= every point of the ball ``x`` (+inf if unbounded)."""
    if not x.is_finite():
        return math.inf
    hi = x.upper()
    f = float(hi)
    if math.isinf(f):
        return math.inf if f > 0 else -DBL_MAX
    while arb(f) < hi:
        f = math.nextafter(f, math.inf)
    return f


def interval(lo: arb, hi: arb) -> arb:
    """A ball containing both ``lo`` and ``hi``, hence the interval [lo, hi].

    Arb radii carry ~30 bits, so a wide interval is widened by ~1e-9 of its width (outward)."""
    with precision(WORK_PREC):
        return lo.union(hi)


def ball_to_str(x: arb, digits: int = 20) -> str:
    """``"[mid +/- rad]"`` text of a ball; Arb's printing adds the decimal conversion error to the
    radius, so the printed ball contains ``x`` (exact balls of radius 0 print as a plain number when
    the decimal is exact)."""
    return x.str(digits, radius=True, more=True)


def ball_from_str(text: str, bits: int = WORK_PREC) -> arb:
    """Parse a ball printed by :func:`ball_to_str`; the result contains the printed ball."""
    with precision(bits):
        return arb(text)


def sum_arb(values: Iterable[arb]) -> arb:
    """Ball sum (rounded outward at the current precision)."""
    total = arb(0)
    for v in values:
        total += v
    return total
