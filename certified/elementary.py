"""Elementwise exp and Phi in binary64 with *proven* error bounds (no libm accuracy claims).

The routines are plain numpy arithmetic (+, -, *, rint, max, bit construction of 2**k), whose
rounding is fixed by IEEE 754 (assumption F1 of proofs_notes/fast_forward.md).  Their error bounds
are computed here in Arb from the routines' own constants (proofs_notes/fast_forward.md steps 1-2):

* :func:`exp_nonpositive`: ``exp(z)`` for ``z <= 0`` -- Cody-Waite reduction ``z = k ln2 + r``,
  degree-11 Taylor polynomial in Horner form, exact scaling by ``2**k``.  Relative error at most
  :func:`exp_error_bound` on ``[-708, 0]``; below -708 the input is clamped (absolute error < 2**-1019).
* :func:`phi`: the standard normal cdf ``Phi(t) = 1/2 + t g(t^2)`` by the Taylor series of ``g`` in
  Horner form, valid on ``|t| <= t_max`` with absolute error :func:`phi_error_bound`.

Public API: :func:`exp_nonpositive`, :func:`exp_program`, :func:`exp_error_bound`, :func:`phi`, :func:`phi_degree`,
:func:`phi_coefficients`, :func:`phi_error_bound`, :data:`EXP_CLAMP`, :data:`EXP_UNDERFLOW_ERROR`.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from flint import arb

from specbound.certified import kernels
from specbound.certified.arb import pow2, precision

BOUND_PREC = 128
"""Arb bits for the error bounds (their widths only, never validity)."""

EXP_CLAMP = -708.0
"""Inputs below are clamped: ``exp(-708)`` is normal and ``2**k`` with ``k >= -1021`` stays normal."""

EXP_UNDERFLOW_EXP = -1019
"""``EXP_UNDERFLOW_ERROR = 2**-1019`` bounds the absolute error for clamped inputs (> 2 exp(-708))."""

EXP_DEGREE = 11
"""Taylor degree: remainder r^12 e^r / 12! < 1e-14 relative on |r| <= ln2/2, far below what the
forward bound needs (its softmax terms are ~1e-14 against eps ~1e-10); one Horner step costs ~4% of
the pass."""

_LN2_FLOAT = math.log(2.0)
INV_LN2 = 1.4426950408889634  # fl(1/ln 2); its exact error is bounded in Arb
LN2_HI = math.floor(_LN2_FLOAT * 2.0**32) / 2.0**32  # 32 significant bits: k * LN2_HI exact for |k| < 2**21
with precision(BOUND_PREC):
    # ln 2 - LN2_HI rounded from a 128-bit ball (not from the float ln 2, whose error would be
    # multiplied by |k| <= 1021); |ln2 - LN2_HI - LN2_LO| is bounded in Arb anyway.
    LN2_LO = float((arb.log(arb(2)) - arb(LN2_HI)).mid())
EXP_COEFFS = tuple(1.0 / math.factorial(j) for j in range(EXP_DEGREE + 1))
_K_MAX = 1021  # |k| <= 1021 on [-708, 0]
EXP_LOOP_ARGS = (np.array(EXP_COEFFS), EXP_CLAMP, INV_LN2, LN2_HI, LN2_LO)
"""The program's constants as :mod:`specbound.certified.kernels` takes them (defined here, once)."""

HORNER_UNDERFLOW_EXP = -1074
"""Each Horner step's product may underflow (a subnormal ``r``) and lose ``2**-1075``; the additions
do not (their results are >= a normal coefficient).  ``EXP_DEGREE * 2**-1074`` bounds the sum
(note step 1.3)."""

PHI_UNDERFLOW_EXP = -1000
"""``2**-1000`` covers every underflow of :func:`phi` on ``|t| <= 4``, degree <= 200: of ``t*t``, of the
Horner products and of ``t * q`` (note step 2.3)."""


def _u() -> arb:
    return pow2(-53)


def _gamma(n: int) -> arb:
    nu = arb(n) * _u()
    return nu / (1 - nu)


def _horner(x: np.ndarray, coeffs: tuple[float, ...]) -> np.ndarray:
    """``fl`` Horner evaluation of ``sum_j coeffs[j] x^j``: ``p = c_n; p = fl(fl(p x) + c_j)``.  (The first
    product ``fl(c_n x)`` is formed directly, without filling an array with ``c_n`` first: the same value.)"""
    if len(coeffs) == 1:
        return np.full_like(x, coeffs[0])
    p = np.multiply(x, coeffs[-1])
    p += coeffs[-2]
    for c in coeffs[-3::-1]:
        p *= x
        p += c
    return p


# --------------------------------------------------------------------------- exp


def exp_nonpositive(z: np.ndarray) -> np.ndarray:
    """``exp(z)`` entrywise for a float64 array with every entry ``<= 0``.

    Contract (proofs_notes/fast_forward.md step 1): for ``z in [-708, 0]`` the result is
    ``exp(z)(1 + theta)`` with ``|theta| <= exp_error_bound()``; for ``z < -708`` it is
    ``EXP(-708)``, within ``2**-1019`` of ``exp(z)``; ``EXP(0) = 1`` exactly.

    Large arrays run the compiled loop of the same program (:mod:`specbound.certified.kernels`: the same
    operations per entry, the same bits) when numba is present; otherwise, and for small arrays, numpy.
    """
    z = np.asarray(z, dtype=np.float64)
    if kernels.AVAILABLE and z.size >= kernels.MIN_SIZE:
        return kernels.exp_nonpositive_loop(z, *EXP_LOOP_ARGS)
    return exp_program(z)


def exp_program(z: np.ndarray) -> np.ndarray:
    """The numpy program of :func:`exp_nonpositive` (the one the error bound analyses), on any array size."""
    z = np.maximum(np.asarray(z, dtype=np.float64), EXP_CLAMP)  # a new array: reused below
    k = z * INV_LN2
    np.rint(k, out=k)
    r = k * LN2_HI  # exact
    np.subtract(z, r, out=r)  # fl(z - k LN2_HI)
    np.multiply(k, LN2_LO, out=z)  # fl(k LN2_LO)
    r -= z
    p = _horner(r, EXP_COEFFS)
    bits = k.astype(np.int64)
    bits += 1023
    bits <<= 52  # the bit pattern of 2**k (normal: -1021 <= k <= 0)
    p *= bits.view(np.float64)  # exact: power of two, normal result
    return p


@lru_cache(maxsize=None)
def _exp_bound_parts() -> tuple[arb, arb]:
    """(eta_exp, r_max) in Arb (step 1 of the note)."""
    with precision(BOUND_PREC):
        u = _u()
        ln2 = arb.log(arb(2))
        zmax = -arb(EXP_CLAMP)
        theta_k = zmax * abs(arb(INV_LN2) - 1 / ln2) + u * zmax * arb(INV_LN2)
        rstar = ln2 * (arb(1) / 2 + theta_k)
        rho1 = rstar + _K_MAX * abs(ln2 - arb(LN2_HI))
        delta0 = u * rho1 + _K_MAX * u * abs(arb(LN2_LO)) + _K_MAX * abs(ln2 - arb(LN2_HI) - arb(LN2_LO))
        delta_r = delta0 + u * (rstar + delta0)
        rmax = rstar + delta_r
        n = EXP_DEGREE
        horner = (_gamma(2 * n) * sum((abs(arb(c)) * rmax**j for j, c in enumerate(EXP_COEFFS)), arb(0))
                  + n * pow2(HORNER_UNDERFLOW_EXP))
        coeff = sum((abs(arb(c) - 1 / arb.fac_ui(j)) * rmax**j for j, c in enumerate(EXP_COEFFS)), arb(0))
        tail = rmax ** (n + 1) * rmax.exp() / arb.fac_ui(n + 1)
        a = (horner + coeff + tail) * rmax.exp()
        eta = (1 + a) * delta_r.exp() - 1
        return arb(eta.upper()), arb(rmax.upper())


def exp_error_bound() -> arb:
    """Exact point ``eta_exp``: relative error bound of :func:`exp_nonpositive` on ``[-708, 0]``."""
    return _exp_bound_parts()[0]


EXP_UNDERFLOW_ERROR = 2.0**EXP_UNDERFLOW_EXP


# --------------------------------------------------------------------------- Phi


def _phi_coeff_ball(j: int) -> arb:
    """Exact ``b_j = (-1)^j / (sqrt(2 pi) 2^j j! (2j+1))`` as a ball."""
    return (-1) ** j / ((2 * arb.pi()).sqrt() * pow2(j) * arb.fac_ui(j) * (2 * j + 1))


@lru_cache(maxsize=None)
def phi_coefficients(degree: int) -> tuple[float, ...]:
    """Binary64 roundings of ``b_0..b_degree`` (their errors are bounded in :func:`phi_error_bound`)."""
    with precision(BOUND_PREC):
        return tuple(float(_phi_coeff_ball(j).mid()) for j in range(int(degree) + 1))


def phi_degree(t_max: float, target: float = 2.0**-47) -> int:
    """Smallest degree (in ``s = t^2``) whose series tail on ``|t| <= t_max`` is below ``target``.

    Only a *choice*: :func:`phi_error_bound` accounts for whatever degree is used."""
    s = (t_max * t_max) / 2
    term = math.exp(s) / math.sqrt(2 * math.pi)
    for n in range(1, 200):
        term *= s / n  # (s/2)^n e^{s/2} / (n! sqrt(2 pi))
        if term * s / (n + 1) < target:
            return n
    raise ValueError(f"no polynomial degree reaches {target} on |t| <= {t_max}")


def phi(t: np.ndarray, coeffs: tuple[float, ...]) -> np.ndarray:
    """``Phi(t)`` entrywise: ``fl(1/2 + fl(t * q))``, ``q`` Horner in ``fl(t*t)`` with ``coeffs``.

    Contract: for ``|t| <= t_max``, ``|result - Phi(t)| <= phi_error_bound(t_max, len(coeffs)-1)``.
    """
    s = t * t
    q = _horner(s, coeffs)
    q *= t
    q += 0.5
    return q


def phi_error_bound(t_max: arb | float, degree: int) -> arb:
    """Exact point ``E_Phi`` (proofs_notes/fast_forward.md step 2) for :func:`phi` on ``|t| <= t_max``."""
    return _phi_error_bound(t_max, degree, tail=True)


def _phi_error_bound(t_max: arb | float, degree: int, tail: bool) -> arb:
    """:func:`phi_error_bound`; ``tail=False`` drops the series remainder (only for the mutation test)."""
    coeffs = phi_coefficients(degree)
    with precision(BOUND_PREC):
        u = _u()
        t = arb(t_max) if not isinstance(t_max, arb) else t_max
        t = arb(abs(t).upper())
        smax = t * t * (1 + u)
        sqrt2pi = (2 * arb.pi()).sqrt()
        half = (smax / 2).exp()
        G = half / sqrt2pi
        arg = u * t * t * half / (2 * sqrt2pi)
        horner = _gamma(2 * degree) * sum((abs(arb(c)) * smax**j for j, c in enumerate(coeffs)), arb(0))
        coeff = sum((abs(arb(c) - _phi_coeff_ball(j)) * smax**j for j, c in enumerate(coeffs)), arb(0))
        rem = (smax / 2) ** (degree + 1) / arb.fac_ui(degree + 1) * half / sqrt2pi if tail else arb(0)
        B = arg + horner + coeff + rem
        tq = t * (G + B)
        e = t * B + u * tq + u * (1 + 2 * tq) + pow2(PHI_UNDERFLOW_EXP)
        return arb(e.upper())


__all__ = (
    "EXP_CLAMP",
    "EXP_UNDERFLOW_ERROR",
    "exp_error_bound",
    "exp_nonpositive",
    "exp_program",
    "phi",
    "phi_coefficients",
    "phi_degree",
    "phi_error_bound",
)
