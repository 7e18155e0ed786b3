"""The assembled theorem: built from the lemma objects, overridable, monotone where it must be."""

import pytest
import sympy as sp

from specbound.derivation import DerivationError, REGISTRY, assemble, diff_report
from specbound.derivation.backends import rounding_violations
from specbound.derivation.symbols import (
    B_phi, C_sm, DD, L_phi, Lambda, SS, T_sum, alpha, c_A, c_V, emp, gamma, rho, B_w,
)


def test_no_field_leaks_a_lemma_constant_symbol():
    th = assemble()
    for name, expr in th.items():
        assert not (expr.free_symbols & {C_sm, L_phi, B_phi}), name


def test_every_ceiling_sits_where_the_expression_is_nondecreasing():
    for th in (assemble(), assemble(massart="uncentred", dudley="uncentred"), assemble(model="residual")):
        for name, expr in th.items():
            assert rounding_violations(expr) == [], name


def test_rounding_check_catches_a_decreasing_ceiling():
    x = sp.Symbol("x", positive=True)
    assert rounding_violations(1 / sp.ceiling(x)) != []
    assert rounding_violations(-sp.floor(x)) == []


def test_bound_is_built_from_the_main_theorem_and_rademacher_lemmas():
    th = assemble()
    assert th.bound == REGISTRY["main_theorem"].constants["bound"]
    # the bound itself is nondecreasing in SS, DD, Lambda and the empirical loss: rounding any of
    # them up (a ceiling in its place) can only raise it
    for sym in (SS, DD, emp, Lambda):
        assert rounding_violations(th.bound.subs(sym, sp.ceiling(sym))) == [], sym
        # the check can fail: the same expression with the term's sign flipped is caught
        assert rounding_violations(th.bound.subs(sym, -sp.ceiling(sym))) != [], sym
    assert sp.diff(th.bound.subs(sp.Min(SS, DD), SS), SS) == 2
    delta = next(x for x in th.confidence.free_symbols if str(x) == "delta")
    assert sp.diff(th.confidence, Lambda).subs(delta, sp.Rational(1, 20)).is_positive
    assert th.kappa == B_w * alpha * gamma / rho


def test_override_changes_every_downstream_expression():
    base, over = assemble(), assemble({"C_sm": 2})
    changed = diff_report(base, over)
    names = {line.split(":")[0] for line in changed}
    assert {"constant C_sm", "head_summand", "gamma_A"} <= names
    assert over.head_summand == c_V * (1 + 4 * c_A)
    assert over.overridden == ("C_sm",)
    assert diff_report(base, assemble()) == []


def test_tighter_L_phi_changes_gamma_and_layer():
    names = {line.split(":")[0] for line in diff_report(assemble(), assemble({"L_phi": 1.13}))}
    assert {"gamma_A", "gamma_V", "gamma_M_in", "layer_lipschitz"} <= names
    assert assemble({"L_phi": 1.13}).constants["L_phi"] == sp.Rational(1.13)  # exact binary value


@pytest.mark.parametrize("bad", [{"C_foo": 1}, {"C_sm": -1}, {"C_sm": float("nan")}, {"C_sm": "x"},
                                 {"L_phi": True}])
def test_bad_override_is_one_clear_error(bad):
    with pytest.raises(DerivationError):
        assemble(bad)


def test_unknown_variant_is_an_error():
    with pytest.raises(DerivationError):
        assemble(massart="half")


def test_corollary_is_the_bound_with_the_closed_form():
    th = assemble()
    assert th.corollary.has(T_sum) and not th.corollary.has(SS)
    assert sp.simplify(th.corollary - th.bound.subs(sp.Min(SS, DD), th.ss_closed)) == 0


def test_explicit_corollary_matrix_term_dominates_the_sharp_term():
    th = assemble()
    s_, c_, p_, d_, k_, n_ = sp.symbols("s c p d kappa n", positive=True)
    syms = {str(x): x for x in th.ss_matrix_term.free_symbols}
    for pv in (sp.Rational(1, 4), 1, 2):
        vals = {syms["s"]: 3, syms["c"]: 2, syms["d"]: 16, syms["kappa"]: 5, syms["n"]: 1000, syms["p"]: pv}
        assert th.corollary_matrix_term.subs(vals) >= (th.ss_matrix_term.subs(vals) - sp.Rational(1, 1000))
