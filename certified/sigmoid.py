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

Public API: :func:`sigmoid`, :func:`silu`, :func:`gelu_tanh`, :func:`sigmoid_error_bound`,
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
from specbound.certified.elementary import exp_error_bound, exp_nonpositive, phi_degree, phi_error_bound

BOUND_PREC = 128

GELU_TANH_C1 = 2.0 * math.sqrt(2.0 / math.pi)
"""fl(2 sqrt(2/pi)) (the factor 2 of ``2v`` folded in); its exact error is bounded in Arb."""
GELU_TANH_C2 = 0.044715
"""fl(0.044715); its exact error against the decimal 0.044715 is bounded in Arb."""

L_PHI_SILU = Fraction(109983932012886692, 10**17)  # proofs_notes/silu_constants.md
L_PHI_GELU_TANH = Fraction(113, 100)  # proofs_notes/gelu_constants.md step 6


def sigmoid(y: np.ndarray) -> np.ndarray:
    """``SIG(y)`` entrywise (step 10 of the note): exp of ``-|y|`` only, no cancellation."""
    y = np.asarray(y, dtype=np.float64)
    e = exp_nonpositive(-np.abs(y))
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


__all__ = (
    "GELU_TANH_C1",
    "GELU_TANH_C2",
    "ActivationBounds",
    "activation_bounds",
    "gelu_tanh",
    "gelu_tanh_argument_bound",
    "gelu_tanh_parts",
    "sigmoid",
    "sigmoid_error_bound",
    "silu",
    "silu_parts",
)
