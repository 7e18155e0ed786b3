"""Lipschitz constants: values, GELU calculus, and composition into alpha and gamma (proofs_notes/theory.md section 2)."""

import mpmath
import sympy as sp

from specbound.derivation import REGISTRY, assemble
from specbound.derivation.lipschitz import GELU, L_PHI_GELU, _t
from specbound.derivation.symbols import B_phi, C_sm, L_phi, c_A, c_in, c_out, c_V, head_sum


def test_L_phi_is_sup_of_gelu_derivative_to_50_digits():
    mpmath.mp.dps = 50
    try:
        dphi = lambda t: mpmath.ncdf(t) + t * mpmath.npdf(t)  # independent: mpmath's normal law
        t_star = mpmath.findroot(lambda t: mpmath.diff(dphi, t), 1.4)
        reference = dphi(t_star)
        assert abs(t_star - mpmath.sqrt(2)) < mpmath.mpf(10) ** -40
        ours = sp.N(L_PHI_GELU, 50)
        assert abs(mpmath.mpf(str(ours)) - reference) < mpmath.mpf(10) ** -45
        assert mpmath.nstr(reference, 19).startswith("1.128904145185154786")
    finally:
        mpmath.mp.dps = 15


def test_gelu_second_derivative_vanishes_exactly_at_plus_minus_sqrt2():
    second = sp.simplify(sp.diff(GELU, _t, 2))
    zeros = sp.solve(sp.Eq(second, 0), _t)
    assert sorted(zeros, key=float) == [-sp.sqrt(2), sp.sqrt(2)]
    assert sp.simplify(sp.diff(GELU, _t).subs(_t, sp.sqrt(2)) - L_PHI_GELU) == 0
    assert sp.N(sp.diff(GELU, _t).subs(_t, -sp.sqrt(2))) < 0  # the other extremum, -0.1289


def test_gelu_lemma_statement_is_an_identity():
    lhs, rhs = REGISTRY["gelu_constants"].statement.args
    assert sp.simplify(lhs - rhs) == 0


def test_softmax_constant_default_is_one_and_overridable():
    assert REGISTRY["softmax_linf_l1"].constants["C_sm"] == 1
    assert assemble({"C_sm": 2}).head_summand == c_V * (1 + 4 * c_A)


def test_layer_constants_compose_to_theory_section_2():
    # proofs_notes/theory.md section 2, typed from the document as the reference
    th = assemble(activation="gelu")
    subs = {L_phi: th.constants["L_phi"], C_sm: 1, B_phi: 1}
    L_l = (L_phi * c_in * c_out * head_sum).subs(subs)
    assert sp.simplify(th.layer_lipschitz - L_l) == 0
    assert sp.simplify(th.head_summand - c_V * (1 + 2 * c_A)) == 0
    table = {"A": C_sm * L_phi * c_V * c_in * c_out, "V": L_phi * c_in * c_out,
             "M_in": L_phi * c_out, "M_out": B_phi * c_in, "w": sp.Integer(1)}
    for key, ref in table.items():
        assert sp.simplify(th.gamma[key] - ref.subs(subs)) == 0, key


def test_gamma_is_head_constant_times_ff_input_constant():
    ff = REGISTRY["ff_lipschitz"].constants
    gam = REGISTRY["sensitivity_gamma"].constants
    assert gam["A"] == REGISTRY["attn_qk_lipschitz"].constants["gamma_head_A"] * ff["input"]
    assert gam["V"] == ff["input"]


def test_relu_constants_are_one():
    th = assemble(activation="relu")
    assert th.constants["L_phi"] == 1 and th.constants["B_phi"] == 1
    assert th.gamma["V"] == c_in * c_out


def test_residual_variant_constants():
    th = assemble(model="residual")
    Lp = th.constants["L_phi"]
    assert sp.simplify(th.layer_lipschitz - (1 + head_sum) * (1 + Lp * c_in * c_out)) == 0
    assert sp.simplify(th.gamma["V"] - (1 + Lp * c_in * c_out)) == 0
    assert th.gamma["M_out"] == c_in
