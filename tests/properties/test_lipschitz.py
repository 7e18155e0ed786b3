"""Lipschitz lemmas (proofs_notes/theory.md section 2, register items 1-9) against the brute-force model.

Every right-hand side is a derivation constant evaluated at the sampled norms
(:mod:`constants`); every left-hand side is the model of :mod:`reference`.  ``target`` pushes
Hypothesis towards the worst ratio it can find.
"""

from __future__ import annotations

import math
from dataclasses import replace

import mpmath
import numpy as np
import pytest
from hypothesis import given, target
from hypothesis import strategies as st

from . import cases
from . import checks as C
from . import reference as ref
from .constants import COMPANION, DERIVED, Constants

activations = st.sampled_from(cases.ACTIVATIONS)


# ---------------------------------------------------------------- softmax_linf_l1


@given(st.one_of(cases.softmax_cases(), cases.softmax_witnesses()))
def test_softmax_l1_change_is_at_most_half_the_oscillation(case):
    target(C.holds(C.softmax_osc_sides, case, DERIVED))


@given(st.one_of(cases.softmax_cases(), cases.softmax_witnesses()))
def test_softmax_l1_change_is_at_most_C_sm_times_linf(case):
    target(C.holds(C.softmax_sides, case, DERIVED))


@pytest.mark.parametrize("delta", ["1e-1", "1e-3", "1e-6"])
def test_softmax_constant_is_tight_at_T2(delta):
    # z = 0, z' = (delta, -delta): ||sigma - sigma'||_1 = tanh(delta), so the ratio -> 1.
    with mpmath.workdps(50):
        d = mpmath.mpf(delta)
        lhs, rhs = C.softmax_sides((ref.to_mp([0, 0]), np.array([d, -d], dtype=object)), DERIVED, mp=True)
        ratio = lhs / rhs
        assert ratio <= 1
        assert ratio >= 1 - d**2  # tanh(d)/d >= 1 - d^2/3


# ---------------------------------------------------------------- proj_unit_ball


@given(cases.proj_cases())
def test_projection_onto_unit_ball_is_1_lipschitz(case):
    target(C.holds(C.proj_sides, case, DERIVED))


# ---------------------------------------------------------------- attention


@given(st.one_of(cases.attn_input_cases(), cases.attn_input_witnesses()))
def test_attention_input_lipschitz(case):
    target(C.holds(C.attn_input_sides, case, DERIVED))


@given(st.one_of(cases.attn_qk_cases(), cases.attn_qk_witnesses()))
def test_attention_score_matrix_sensitivity(case):
    target(C.holds(C.attn_qk_sides, case, DERIVED))


@given(cases.attn_v_cases())
def test_attention_value_matrix_sensitivity(case):
    target(C.holds(C.attn_v_sides, case, DERIVED))


# ---------------------------------------------------------------- ff_lipschitz (a), (b), (c)


@given(st.one_of(cases.ff_input_cases(), cases.ff_input_witnesses()), activations)
def test_feed_forward_input_lipschitz(case, activation):
    target(C.holds(C.ff_input_sides, case, Constants(activation)))


@given(st.one_of(cases.ff_min_cases(), cases.ff_min_witnesses()), activations)
def test_feed_forward_M_in_sensitivity(case, activation):
    target(C.holds(C.ff_min_sides, case, Constants(activation)))


@given(st.one_of(cases.ff_mout_cases(), cases.ff_mout_witnesses()), activations)
def test_feed_forward_M_out_sensitivity(case, activation):
    target(C.holds(C.ff_mout_sides, case, Constants(activation)))


def witness_b(h: float = 1e-7):
    """proofs_notes/theory.md section 2 witness (b): y = e1, M_in = sqrt2 e1e1^T, M_out = I, M_in' = M_in + h e1e1^T."""
    e = np.zeros((2, 2))
    e[0, 0] = 1.0
    y = np.array([[1.0, 0.0]])
    return y, math.sqrt(2) * e, (math.sqrt(2) + h) * e, np.eye(2)


def witness_c(h: float = 1e-3):
    """proofs_notes/theory.md section 2 witness (c): M_in = 5 e1e1^T, M_out' = M_out + h e1e1^T."""
    e = np.zeros((2, 2))
    e[0, 0] = 1.0
    y = np.array([[1.0, 0.0]])
    return y, 5.0 * e, np.eye(2), np.eye(2) + h * e


def _mp_ratio(sides, case, K):
    with mpmath.workdps(ref.MP_DPS):
        lhs, rhs = sides(case, K, mp=True)
        return lhs / rhs


def test_witness_b_needs_L_phi_in_gamma_M_in():
    ours = _mp_ratio(C.ff_min_sides, witness_b(), DERIVED)
    code = Constants(replace={("ff_lipschitz", "M_in"): COMPANION[("ff_lipschitz", "M_in")]})
    companion = _mp_ratio(C.ff_min_sides, witness_b(), code)
    assert ours <= 1
    assert ours > 1 - 1e-6  # tight: the ratio is phi'(sqrt2 + O(h)) / L_phi
    assert companion > 1.12  # the companion code's gamma_M_in = ||M_out|| is violated


def test_witness_c_needs_norm_M_in_in_gamma_M_out():
    ours = _mp_ratio(C.ff_mout_sides, witness_c(), DERIVED)
    code = Constants(replace={("ff_lipschitz", "M_out"): COMPANION[("ff_lipschitz", "M_out")]})
    companion = _mp_ratio(C.ff_mout_sides, witness_c(), code)
    assert ours <= 1
    assert ours > 1 - 1e-5  # Phi(5) = 1 - 2.9e-7
    assert companion > 4.99  # the companion code's gamma_M_out = 1 is violated


# ---------------------------------------------------------------- gelu_constants


def _derived(name: str, activation: str = "gelu") -> float:
    return float(Constants(activation).symbol(name))


@pytest.mark.parametrize(
    "phi, dphi",
    [(ref.phi_gelu, ref.dphi_gelu)],
    ids=["erf"],
)
def test_gelu_constants_on_a_dense_grid(phi, dphi):
    t = np.linspace(-12, 12, 240_001)
    L_phi, B_phi = _derived("L_phi"), _derived("B_phi")
    slopes = np.abs(dphi(t))
    assert slopes.max() <= L_phi * (1 + 1e-12)
    assert slopes.max() >= L_phi * (1 - 1e-9)  # and attained (near sqrt 2): the constant is sharp
    nz = t != 0
    assert np.max(np.abs(phi(t[nz]) / t[nz])) <= B_phi * (1 + 1e-15)
    # difference quotients of phi itself (independent of the derivative formula)
    quot = np.abs(np.diff(phi(t)) / np.diff(t))
    assert quot.max() <= L_phi * (1 + 1e-9)


@given(st.floats(-40, 40))
def test_gelu_slope_and_ratio_in_mpmath(t):
    L_phi, B_phi = DERIVED.symbol("L_phi"), DERIVED.symbol("B_phi")
    with mpmath.workdps(40):
        tm = mpmath.mpf(t)
        assert abs(mpmath.ncdf(tm) + tm * mpmath.npdf(tm)) <= L_phi
        if t != 0:
            assert abs(tm * mpmath.ncdf(tm)) <= B_phi * abs(tm)


def test_erf_constant_is_not_valid_for_tanh_gelu():
    # The tanh approximation is steeper (sup ~ 1.128993 > 1.128904): a separate constant is needed.
    t = np.linspace(1.3, 1.6, 30_001)
    assert np.abs(ref.dphi_gelu_tanh(t)).max() > _derived("L_phi") + 5e-5


@pytest.mark.xfail(
    not Constants("gelu_tanh").has_activation(),
    reason="derivation has no gelu_tanh constants yet (specbound.matrices.ACTIVATIONS lists gelu_tanh)",
    strict=True,
)
def test_gelu_tanh_constants_on_a_dense_grid():
    K = Constants("gelu_tanh")
    t = np.linspace(-12, 12, 240_001)
    assert np.abs(ref.dphi_gelu_tanh(t)).max() <= float(K.symbol("L_phi")) * (1 + 1e-12)
    nz = t != 0
    assert np.max(np.abs(ref.phi_gelu_tanh(t[nz]) / t[nz])) <= float(K.symbol("B_phi")) * (1 + 1e-15)


# ---------------------------------------------------------------- layer composition


def _constants_for(case):
    return Constants(case[0].activation)


@given(st.one_of(cases.network_cases(), cases.scalar_network_cases()))
def test_changing_one_matrix_moves_f_by_at_most_Bw_alpha_gamma(case):
    target(C.holds(C.network_sides, case, _constants_for(case)))


@given(st.one_of(cases.network_cases(residual=True), cases.scalar_network_cases(residual=True)))
def test_residual_variant_changing_one_matrix(case):
    target(C.holds(C.network_sides, case, _constants_for(case)))


# ---------------------------------------------------------------- network_cover (register 15)


@given(cases.network_cover_cases(), st.booleans())
def test_network_cover_telescoping_bound(case, residual):
    net, centre, x = case
    if residual:  # same weights, residual model (R)
        net, centre = replace(net, residual=True), replace(centre, residual=True)
    target(C.holds(C.network_cover_sides, (net, centre, x), Constants(net.activation)))
