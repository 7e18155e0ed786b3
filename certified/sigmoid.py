"""The logistic sigmoid, SiLU and the tanh GELU in binary64 with proven error bounds (no libm claims).

The routines are numpy arithmetic around :func:`specbound.certified.elementary.exp_nonpositive`
(proofs_notes/interval_forward.md step 10):

* :func:`sigmoid`: ``SIG(y) = fl(1 / fl(1 + E))`` for ``y >= 0`` and ``fl(E / fl(1 + E))`` for ``y < 0``,
  ``E = EXP(-|y|)``.  ``|SIG(y) - sigma(y)| <= kappa_sigma sigma(y) + 2**-1019`` for every finite y.
* :func:`silu`: ``fl(t SIG(t))``; per entry ``|err| <= kappa_1 |t| + tau``.
* :func:`gelu_tanh`: ``t (1 + tanh v) / 2 = t sigma(2 v)``, ``2v = C1 (t + C2 t^3)``, ``C1 = 2 sqrt(2/pi)``,
  ``C2 = 0.044715``; per entry ``|err| <= kappa_1 |t| + kappa_2 |t| |y| + tau`` with ``y`` the computed
  ``2v`` (returned alongside).

:func:`activation_bounds` returns the constants ``(L_phi, kappa_1, kappa_2, tau)`` of every activation
as binary64 upper bounds of exact Arb points (GELU through ``elementary.phi`` with its ``E_Phi``).

Public API: :func:`sigmoid`, :func:`sigmoid_program`, :func:`silu`, :func:`gelu_tanh`, :func:`sigmoid_error_bound`,
:func:`activation_bounds`, :class:`ActivationBounds`, :data:`GELU_TANH_C1`, :data:`GELU_TANH_C2`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np
from flint import arb

from specbound.certified.arb import pow2, precision
from specbound.certified.directed import float_up, gamma_arb
from specbound.certified import kernels
from specbound.certified.elementary import (
    EXP_LOOP_ARGS, exp_error_bound, exp_nonpositive, exp_program, phi_degree, phi_error_bound,
)

BOUND_PREC = 128

GELU_TANH_C1 = 2.0 * math.sqrt(2.0 / math.pi)
"""fl(2 sqrt(2/pi)) (the factor 2 of ``2v`` folded in); its exact error is bounded in Arb."""
GELU_TANH_C2 = 0.044715
"""fl(0.044715); its exact error against the decimal 0.044715 is bounded in Arb."""

L_PHI_SILU = Fraction(109983932012886692, 10**17)  # proofs_notes/silu_constants.md
L_PHI_GELU_TANH = Fraction(113, 100)  # proofs_notes/gelu_constants.md step 6


def sigmoid(y: np.ndarray) -> np.ndarray:
    """``SIG(y)`` entrywise (step 10 of the note): exp of ``-|y|`` only, no cancellation.  Large arrays run the
    compiled loop of this program (:mod:`specbound.certified.kernels`, the same bits) when numba is present."""
    y = np.asarray(y, dtype=np.float64)
    if kernels.AVAILABLE and y.size >= kernels.MIN_SIZE:
        return kernels.sigmoid_loop(y, *EXP_LOOP_ARGS)
    return sigmoid_program(y)


def sigmoid_program(y: np.ndarray) -> np.ndarray:
    """The numpy program of :func:`sigmoid` (the one the note analyses)."""
    y = np.asarray(y, dtype=np.float64)
    e = exp_program(-np.abs(y))
    d = e + 1.0
    num = np.where(y >= 0, 1.0, e)
    return num / d


def silu(t: np.ndarray) -> np.ndarray:
    """``fl(t SIG(t))`` entrywise."""
    s = sigmoid(t)
    s *= t
    return s


def silu_parts(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(fl(t SIG(t)), SIG(t))``: :func:`silu` and the sigmoid it multiplies (kept for the derivative)."""
    s = sigmoid(t)
    return s * t, s


def gelu_tanh(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(fl(t SIG(y)), y)`` with ``y = fl(c1 fl(t + fl(c2 fl(fl(t t) t))))`` entrywise."""
    g, y, _ = gelu_tanh_parts(t)
    return g, y


def gelu_tanh_parts(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(fl(t SIG(y)), y, SIG(y))``: :func:`gelu_tanh` and the sigmoid it multiplies."""
    t = np.asarray(t, dtype=np.float64)
    y = t * t
    y *= t
    y *= GELU_TANH_C2
    y += t
    y *= GELU_TANH_C1
    s = sigmoid(y)
    return s * t, y, s


@lru_cache(maxsize=None)
def sigmoid_error_bound() -> arb:
    """Exact point ``kappa_sigma = (1+eta_exp)(1+u) / ((1-eta_exp/2)(1-u)) - 1``."""
    with precision(BOUND_PREC):
        eta, u = exp_error_bound(), pow2(-53)
        k = (1 + eta) * (1 + u) / ((1 - eta / 2) * (1 - u)) - 1
        return arb(k.upper())


@lru_cache(maxsize=None)
def gelu_tanh_argument_bound() -> arb:
    """Exact point ``kappa_y``: ``|y - 2v(t)| <= kappa_y |2v(t)| + tau_y`` (step 10)."""
    with precision(BOUND_PREC):
        u = pow2(-53)
        C1 = 2 * (2 / arb.pi()).sqrt()
        C2 = arb(44715) / 10**6
        c1, c2 = arb(GELU_TANH_C1), arb(GELU_TANH_C2)
        e_c = (abs(c2 - C2) + c2 * gamma_arb(3)) / C2
        k = (1 + abs(c1 - C1) / C1) * (1 + e_c) * (1 + u) ** 2 - 1
        return arb(k.upper())


@dataclass(frozen=True)
class ActivationBounds:
    """Binary64 upper bounds of one activation's constants on ``|t| <= t_max`` (step 10):
    ``|phi_hat(t) - phi(t)| <= kappa_1 |t| + kappa_2 |t| |y(t)| + tau`` and ``phi`` is ``L_phi``-Lipschitz.
    ``coeffs``: the Phi polynomial of GELU (empty otherwise)."""

    name: str
    L_phi: float
    kappa_1: float
    kappa_2: float
    tau: float
    t_max: float
    coeffs: tuple[float, ...] = ()


def _erf_gelu_lipschitz() -> arb:
    return (1 + arb(1).erf()) / 2 + 1 / (arb(1).exp() * arb.pi().sqrt())


def activation_bounds(name: str, t_max: float) -> ActivationBounds:
    """The constants of activation ``name`` on ``|t| <= t_max`` (a binary64 bound, checked by the pass)."""
    from specbound.certified.elementary import phi_coefficients

    with precision(BOUND_PREC):
        u = pow2(-53)
        t = arb(float(t_max))
        if name == "relu":
            return ActivationBounds(name, 1.0, 0.0, 0.0, 0.0, float(t_max))
        if name == "gelu":
            degree = phi_degree(float(t_max))
            e_phi = phi_error_bound(t, degree)
            k1 = e_phi + u * (1 + e_phi)
            return ActivationBounds(name, float_up(_erf_gelu_lipschitz()), float_up(k1), 0.0,
                                    float_up(pow2(-1074)), float(t_max), phi_coefficients(degree))
        k_sig = sigmoid_error_bound()
        k1 = k_sig + u * (1 + k_sig)
        if name == "silu":
            tau = t * pow2(-1018) + pow2(-1075)
            return ActivationBounds(name, float_up(arb(L_PHI_SILU.numerator) / L_PHI_SILU.denominator),
                                    float_up(k1), 0.0, float_up(tau), float(t_max))
        if name == "gelu_tanh":
            k_y = gelu_tanh_argument_bound()
            tau_y = (1 + t) * pow2(-1070)
            k2 = (1 + u) * k_y / (4 * (1 - k_y))
            tau = t * (pow2(-1018) + tau_y / (1 - k_y)) + pow2(-1075)
            return ActivationBounds(name, float_up(arb(L_PHI_GELU_TANH.numerator) / L_PHI_GELU_TANH.denominator),
                                    float_up(k1), float_up(k2), float_up(tau), float(t_max))
    raise ValueError(f"no proven float routine for activation {name!r}")


# --------------------------------------------------------------------------- derivatives (interval_adjoint.md step 5)

GELU_PSI = 1.0 / math.sqrt(2.0 * math.pi)
"""fl(1/sqrt(2 pi)): the normal density's constant in the GELU derivative; its exact error is bounded in Arb."""
GELU_TANH_C3 = 3.0 * 0.044715
"""fl(3 C2) of the tanh-GELU derivative; its exact error against 3 * 0.044715 is bounded in Arb."""

SWEEP_END = 8
SWEEP_PIECES = 2048
"""The sweep's pieces ``[i h, (i+1) h]``, ``h = 8/2048 = 2^-8``: exact binary midpoints and radii."""


def derivative(name: str, t: np.ndarray, kept: np.ndarray | None) -> np.ndarray:
    """``d_hat``, a computed ``phi'(t)`` entrywise, by the programs of interval_adjoint.md step 5; ``kept`` is
    what the forward kept: Phi_hat(t) (GELU), SIG(t) (SiLU), SIG(y) (tanh-GELU); unused for ReLU."""
    if name == "relu":
        return (t > 0.0).astype(np.float64)
    if name == "gelu":
        z = t * t
        z *= -0.5
        e = exp_nonpositive(z)
        e *= GELU_PSI
        e *= t
        e += kept
        return e
    m = 1.0 - kept
    m *= kept
    if name == "gelu_tanh":
        yp = t * t
        yp *= GELU_TANH_C3
        yp += 1.0
        yp *= GELU_TANH_C1
        m *= yp
    m *= t
    m += kept
    return m


def _phi2(name: str, t: arb) -> arb:
    """``phi''(t)`` as an Arb ball (interval extension: encloses phi'' over the ball ``t``)."""
    if name == "gelu":
        return (-t * t / 2).exp() / (2 * arb.pi()).sqrt() * (2 - t * t)
    if name == "silu":
        s = 1 / (1 + (-t).exp())
        return s * (1 - s) * (2 + t * (1 - 2 * s))
    C1, C2 = 2 * (2 / arb.pi()).sqrt(), arb(44715) / 10**6
    y = C1 * (t + C2 * t**3)
    s = 1 / (1 + (-y).exp())
    s1 = s * (1 - s)
    y1, y2 = C1 * (1 + 3 * C2 * t * t), 6 * C1 * C2 * t
    return 2 * s1 * y1 + t * s1 * (1 - 2 * s) * y1 * y1 + t * s1 * y2


def _phi2_tail(name: str) -> arb:
    """A bound of ``|phi''(t)|`` for ``|t| >= SWEEP_END`` (step 5: each bound decreases beyond it)."""
    t = arb(SWEEP_END)
    if name == "gelu":  # |phi''| <= t^2 psi(t), decreasing for t >= sqrt 2
        return t * t * (-t * t / 2).exp() / (2 * arb.pi()).sqrt()
    if name == "silu":  # |phi''| <= e^-t (t + 2)
        return (-t).exp() * (t + 2)
    C1, C2 = 2 * (2 / arb.pi()).sqrt(), arb(44715) / 10**6
    y1 = C1 * (1 + 3 * C2 * t * t)
    return (-C1 * t).exp() * (2 * y1 + t * y1 * y1 + 6 * C1 * C2 * t * t)


@lru_cache(maxsize=None)
def second_derivative_bound(name: str) -> float:
    """``L_2 >= sup_t |phi''(t)|`` (binary64 upper bound; interval_adjoint.md step 5): a certified Arb sweep
    of ``|phi''|`` over ``[0, 8]`` in 2048 balls (phi'' is even for all three) and the proven tail beyond."""
    if name == "relu":
        return math.inf  # not smooth: the adjoint uses its kink rule instead
    with precision(BOUND_PREC):
        best = _phi2_tail(name)
        h = SWEEP_END / SWEEP_PIECES  # 2^-8: every midpoint and radius below is an exact binary64 number
        for i in range(SWEEP_PIECES):
            v = abs(_phi2(name, arb((i + 0.5) * h, h / 2)))
            if not v.is_finite():
                raise ValueError(f"phi'' of {name} not enclosed on piece {i}")
            top = arb(v.upper())
            if top > best:
                best = top
        return float_up(best)


def derivative_error_bound(name: str, t_max: float) -> float:
    """``e_d >= |derivative(t) - phi'(t)|`` on ``|t| <= t_max`` (binary64 upper bound of the exact point of
    interval_adjoint.md step 5)."""
    if name == "relu":
        return 0.0
    with precision(BOUND_PREC):
        u, eta = pow2(-53), exp_error_bound()
        tm = arb(float(t_max))
        tiny = pow2(-1074)
        if name == "gelu":
            e_phi = phi_error_bound(tm, phi_degree(float(t_max)))
            a1 = tm * tm * u / 2 + tiny
            u_psi = abs(arb(GELU_PSI) * (2 * arb.pi()).sqrt() - 1)
            k_psi = a1.exp() * (1 + eta) * (1 + u) * (1 + u_psi) - 1
            e = e_phi + (k_psi + u * (1 + k_psi)) / 4 + u * arb("1.2") + (tm + 2) * tiny
            return float_up(e)
        e_s = sigmoid_error_bound() + pow2(-1019)
        if name == "silu":
            e_m = 2 * e_s + u + u * (arb(1) / 4 + 2 * e_s + u) + tiny
            if not tm * e_m < arb("0.05"):
                raise ValueError(f"SiLU arguments up to {t_max:.3g}: the derivative bound needs t_max e_m < 0.05")
            e = e_s + tm * e_m + u * tm * (arb(1) / 4 + e_m) + u * arb("1.2") + 2 * tiny
            return float_up(e)
        C1, C2 = 2 * (2 / arb.pi()).sqrt(), arb(44715) / 10**6
        k_y = gelu_tanh_argument_bound()
        e_y = k_y * C1 * (tm + C2 * tm**3) + (1 + tm) * pow2(-1070)
        e0 = e_s + e_y / 4
        e_m = 2 * e0 + u + u * (arb(1) / 4 + 2 * e0 + u) + tiny
        e_c1 = abs(arb(GELU_TANH_C1) / C1 - 1)
        e_c3 = abs(arb(GELU_TANH_C3) / (3 * C2) - 1)
        k_p = (1 + e_c1) * (1 + e_c3) * (1 + u) ** 4 * (1 + pow2(-1070)) - 1
        yp = C1 * (1 + 3 * C2 * tm * tm)
        prod = (arb(1) / 4 + e_m) * (1 + k_p) * yp  # >= |m_hat Y'_hat|
        e = (e0 + tm * (e_m * (1 + k_p) * yp + k_p * yp / 4 + u * prod)
             + u * tm * prod * (1 + u) + u * (1 + tm * prod * (1 + u)) + (tm + 3) * tiny)
        return float_up(e)


__all__ = (
    "GELU_TANH_C1",
    "GELU_TANH_C2",
    "GELU_TANH_C3",
    "GELU_PSI",
    "ActivationBounds",
    "activation_bounds",
    "derivative",
    "derivative_error_bound",
    "gelu_tanh",
    "gelu_tanh_argument_bound",
    "gelu_tanh_parts",
    "second_derivative_bound",
    "sigmoid",
    "sigmoid_program",
    "sigmoid_error_bound",
    "silu",
    "silu_parts",
)
