"""Directed rounding in binary64 with numpy: upper and lower bounds of error formulas, evaluated fast.

Contract (proofs_notes/interval_forward.md step 0): with binary64 round-to-nearest and gradual underflow
(``fast_forward.check_float_environment``), ``up(fl(z)) >= z`` and ``down(fl(z)) <= z`` for every real
``z`` whose correctly rounded value is ``fl(z)``; every function here applies one such step after each
correctly rounded operation, so on nonnegative upper bounds (sums, products, square roots) and positive
lower bounds (divisors) it returns an upper bound of the exact formula.  Arrays broadcast; ``inf``
propagates (an overflowed bound is a valid, useless bound).

Also the per-model binary64 constants of the error analysis, each an exact Arb point rounded up:
:func:`gamma_up` (``gamma_n``), :func:`norm_factor_up` / :func:`norm_factor_down` (step 1).

Public API: :data:`UNIT_ROUNDOFF`, :data:`ETA`, :data:`UP_FACTOR`, :data:`ULP_FACTOR`, :func:`up`, :func:`upn`, :func:`down`, :func:`add_up`, :func:`mul_up`,
:func:`div_up`, :func:`sub_down`, :func:`sqrt_up`, :func:`sqrt_down`, :func:`gamma_up`,
:func:`float_up`, :func:`norm_up`, :func:`norm_down`, :func:`sq_norm_up`, :func:`sum_squares`, :func:`sum_up`.
"""

from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace

import numpy as np
from flint import arb

from specbound.certified import kernels
from specbound.certified.arb import float_lower, float_upper, pow2, precision

UNIT_ROUNDOFF = 2.0**-53
ETA = 2.0**-1074
"""The smallest positive subnormal binary64 number (the underflow unit of a product or a sum of them)."""

_INF = np.inf
BOUND_PREC = 128


_UP = 1.0 + 2.0**-52
UP_FACTOR = _UP
"""``1 + 2^-52``: the factor of the upper step ``fl(fl(x (1 + 2^-52)) + eta)`` (for compiled formulas elsewhere)."""
_ULP = 2.0**-52
ULP_FACTOR = _ULP
"""``2^-52``: the relative step of :func:`up` / :func:`down` (for compiled formulas elsewhere)."""


def _np_up(x):
    """An upper step for any finite ``x``: ``fl(fl(x + fl(|x| 2^-52)) + eta) >= nextafter(x, +inf)``.

    ``|x| 2^-52`` is exact (a power-of-two scaling) or, below the normal range, within eta of it; for
    normal x in a binade whose spacing is ``2^(e-52) <= |x| 2^-52``, ``x + |x| 2^-52`` is at least the
    next float up, and rounding is monotone; for subnormal x every sum is exact.  (An infinite x may give
    NaN, which the pass treats as not certified.)  About five times cheaper than ``nextafter``."""
    y = np.abs(x)
    y *= _ULP
    y += x
    y += ETA
    return y


def _np_down(x):
    """A lower step for any finite ``x`` (the mirror of :func:`up`): ``fl(fl(x - fl(|x| 2^-52)) - eta)``."""
    y = np.abs(x)
    y *= -_ULP
    y += x
    y -= ETA
    return y


def _np_upn(x):
    """An upper step for *nonnegative* ``x``: ``fl(fl(x (1 + 2^-52)) + eta) >= nextafter(x, +inf)``.

    For normal x in [2^e, 2^(e+1)) the gap above is 2^(e-52) <= x 2^-52, so the product rounds to at
    least x + gap (monotone rounding); for subnormal or zero x the product rounds to x or x + eta and
    adding eta is exact.  About ten times cheaper than ``nextafter`` in numpy."""
    y = np.multiply(x, _UP)
    y += ETA
    return y


def _np_add_up(*xs):
    """Upper bound of ``x_1 + ... + x_k`` for nonnegative upper bounds ``x_i`` (one step per addition)."""
    if len(xs) == 1:
        return xs[0]
    total = xs[0]
    for x in xs[1:]:
        total = np.add(total, x)  # a new array (or scalar): the step up (as upn) runs in place
        total *= _UP
        total += ETA
    return total


def _np_mul_up(a, b):
    """Upper bound of ``a b`` for nonnegative upper bounds ``a``, ``b``."""
    return _np_upn(np.multiply(a, b))


def _np_div_up(a, b):
    """Upper bound of ``a / b`` for a nonnegative upper bound ``a`` and a positive lower bound ``b``."""
    return _np_upn(np.divide(a, b))


def _np_sub_down(a, b):
    """Lower bound of ``a - b`` for a lower bound ``a`` and an upper bound ``b``."""
    return _np_down(a - b)


def _np_sqrt_up(a):
    """Upper bound of ``sqrt(a)`` for a nonnegative upper bound ``a`` (IEEE sqrt is correctly rounded)."""
    return _np_upn(np.sqrt(a))


# ---------------------------------------------------------------------------- compiled steps
#
# The same steps as numpy ufuncs compiled by numba (specbound.certified.kernels): per entry the very operations
# of the numpy programs above, in the same order (no fused multiply-add, no reassociation), so the same bits
# (tests/certified/test_directed.py compares them on adversarial inputs), in one pass instead of two to four.
# Only a choice of speed; without numba the numpy programs run.  The scalar programs below are what gets
# compiled; the constants are binary64 facts, frozen into the compiled code (cached on disk).


def _up1(x):
    return (abs(x) * _ULP + x) + ETA


def _down1(x):
    return (abs(x) * -_ULP + x) - ETA


def _upn1(x):
    return x * _UP + ETA


def _add_up2(a, b):
    return (a + b) * _UP + ETA


def _mul_up2(a, b):
    return (a * b) * _UP + ETA


def _div_up2(a, b):
    return (a / b) * _UP + ETA


def _sub_down2(a, b):
    x = a - b
    return (abs(x) * -_ULP + x) - ETA


def _sqrt_up1(a):
    return np.sqrt(a) * _UP + ETA


_COMPILED = None


def _compiled() -> SimpleNamespace:
    """The compiled steps, built on first use (loading them costs about half a second per process)."""
    global _COMPILED
    if _COMPILED is None:
        nb = kernels.numba_module()
        def ufunc(signature):
            def make(fn):
                compiled = nb.vectorize([signature], cache=True)(fn)
                return getattr(compiled, "ufunc", compiled)  # the plain numpy ufunc: numba's wrapper costs a call
            return make

        one, two = ufunc("float64(float64)"), ufunc("float64(float64, float64)")
        _COMPILED = SimpleNamespace(up=one(_up1), down=one(_down1), upn=one(_upn1), sqrt_up=one(_sqrt_up1),
                                    add_up=two(_add_up2), mul_up=two(_mul_up2), div_up=two(_div_up2),
                                    sub_down=two(_sub_down2))
    return _COMPILED


def up(x):
    """An upper step for any finite ``x`` (:func:`_np_up`'s program; compiled when numba is present)."""
    return (_COMPILED or _compiled()).up(x) if kernels.AVAILABLE else _np_up(x)


def down(x):
    """A lower step for any finite ``x`` (:func:`_np_down`'s program)."""
    return (_COMPILED or _compiled()).down(x) if kernels.AVAILABLE else _np_down(x)


def upn(x):
    """An upper step for *nonnegative* ``x`` (:func:`_np_upn`'s program)."""
    return (_COMPILED or _compiled()).upn(x) if kernels.AVAILABLE else _np_upn(x)


def add_up(*xs):
    """Upper bound of ``x_1 + ... + x_k`` for nonnegative upper bounds ``x_i`` (one step per addition, left to
    right: :func:`_np_add_up`'s program)."""
    if not kernels.AVAILABLE:
        return _np_add_up(*xs)
    step = (_COMPILED or _compiled()).add_up
    total = xs[0]
    for x in xs[1:]:
        total = step(total, x)
    return total


def mul_up(a, b):
    """Upper bound of ``a b`` for nonnegative upper bounds ``a``, ``b``."""
    return (_COMPILED or _compiled()).mul_up(a, b) if kernels.AVAILABLE else _np_mul_up(a, b)


def div_up(a, b):
    """Upper bound of ``a / b`` for a nonnegative upper bound ``a`` and a positive lower bound ``b``."""
    return (_COMPILED or _compiled()).div_up(a, b) if kernels.AVAILABLE else _np_div_up(a, b)


def sub_down(a, b):
    """Lower bound of ``a - b`` for a lower bound ``a`` and an upper bound ``b``."""
    return (_COMPILED or _compiled()).sub_down(a, b) if kernels.AVAILABLE else _np_sub_down(a, b)


def sqrt_up(a):
    """Upper bound of ``sqrt(a)`` for a nonnegative upper bound ``a`` (IEEE sqrt is correctly rounded)."""
    return (_COMPILED or _compiled()).sqrt_up(a) if kernels.AVAILABLE else _np_sqrt_up(a)


def sqrt_down(a):
    """Lower bound of ``sqrt(a)`` for a lower bound ``a`` (negative lower bounds give 0)."""
    return np.maximum(down(np.sqrt(np.maximum(a, 0.0))), 0.0)


def _u() -> arb:
    return pow2(-53)


def gamma_arb(n: int) -> arb:
    """``gamma_n = n u / (1 - n u)`` as a ball (n u < 1 required)."""
    nu = arb(int(n)) * _u()
    if not nu < 1:
        raise ValueError(f"gamma_{n} undefined: n u >= 1")
    return nu / (1 - nu)


def float_up(x: arb | int | float) -> float:
    """The least binary64 number >= every point of ``x`` (exact points: >= x)."""
    return float_upper(x if isinstance(x, arb) else arb(x))


@lru_cache(maxsize=None)
def gamma_up(n: int) -> float:
    """A binary64 number >= gamma_n."""
    with precision(BOUND_PREC):
        return float_up(gamma_arb(n))


@lru_cache(maxsize=None)
def _norm_factors(n: int) -> tuple[float, float, float]:
    """(>= 1/(1-gamma_n), <= 1/(1+gamma_n), >= n eta) for row norms of length n (step 1)."""
    with precision(BOUND_PREC):
        g = gamma_arb(n)
        return float_up(1 / (1 - g)), float_lower(1 / (1 + g)), float_up(arb(int(n)) * arb(ETA))


def sum_squares(m: np.ndarray) -> np.ndarray:
    """``fl(sum_i m_i^2)`` over the last axis (some summation tree: numpy's einsum).  A last axis of length 1 is
    squared directly: one correctly rounded product, with nothing to order or fuse, is the value einsum returns
    too, without einsum's per-row setup (which dominates at one entry per row)."""
    if m.shape[-1] == 1:
        x = m[..., 0]
        return x * x
    return np.einsum("...i,...i->...", m, m)


def sq_norm_up(m: np.ndarray) -> np.ndarray:
    """Upper bounds of ``||m||^2`` over the last axis (step 1: ``(s + n eta) / (1 - gamma_n)``)."""
    n = m.shape[-1]
    hi, _, tiny = _norm_factors(n)
    s = sum_squares(m)
    return mul_up(add_up(s, tiny), hi)


def norm_up(m: np.ndarray) -> np.ndarray:
    """Upper bounds of the Euclidean norms of ``m`` over the last axis."""
    return sqrt_up(sq_norm_up(m))


def norm_down(m: np.ndarray) -> np.ndarray:
    """Lower bounds of the Euclidean norms of ``m`` over the last axis."""
    n = m.shape[-1]
    _, lo, tiny = _norm_factors(n)
    s = sum_squares(m)
    return sqrt_down(down(sub_down(s, tiny) * lo))


def sum_up(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Upper bounds of the sums of *nonnegative* upper bounds over ``axis``: ``(fl(sum) + n eta) / (1 -
    gamma_n)`` rounded up (any summation tree: ``fl(sum) >= (1 - gamma_n) sum``; ``+`` never underflows)."""
    n = x.shape[axis]
    hi, _, tiny = _norm_factors(max(n, 1))
    return mul_up(add_up(np.sum(x, axis=axis), tiny), hi)


def norms_both(m: np.ndarray, with_sum: bool = False):
    """(upper, lower) bounds of the norms over the last axis from one sum of squares (and that float
    sum ``fl(sum m^2)`` itself when ``with_sum``)."""
    n = m.shape[-1]
    hi, lo, tiny = _norm_factors(n)
    s = sum_squares(m)
    out = sqrt_up(mul_up(add_up(s, tiny), hi)), sqrt_down(down(sub_down(s, tiny) * lo))
    return (*out, s) if with_sum else out


__all__ = (
    "ETA",
    "UNIT_ROUNDOFF",
    "ULP_FACTOR",
    "UP_FACTOR",
    "add_up",
    "div_up",
    "down",
    "float_up",
    "gamma_arb",
    "gamma_up",
    "mul_up",
    "norm_down",
    "norm_up",
    "norms_both",
    "sq_norm_up",
    "sqrt_down",
    "sqrt_up",
    "sub_down",
    "sum_squares",
    "sum_up",
    "up",
    "upn",
)
