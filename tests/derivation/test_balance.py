"""balance_single_scale: the closed form of the single-scale infimum (proofs_notes/theory.md sections 7, 10)."""

import mpmath
import sympy as sp

from specbound.derivation import REGISTRY, assemble
from specbound.derivation.symbols import c, d, kappa, m_rows, n, n_cols, p, r_max, s, u
from specbound.derivation.theorem import C_P, G_BALANCE, U_STAR, _b


def _zero(expr):
    """Symbolic zero test for expressions with real powers of positive symbols."""
    expr = sp.expand_power_base(sp.powdenest(expr, force=True), force=True)
    return sp.simplify(sp.powsimp(expr, force=True)) == 0


def test_C_2_is_2_and_C_p_tends_to_1_as_p_to_0():
    assert sp.simplify(C_P.subs(p, 2)) == 2
    assert sp.limit(C_P, p, 0, "+") == 1


def test_C_p_lies_in_1_2_and_increases_on_0_2():
    mpmath.mp.dps = 30
    try:
        f = sp.lambdify(p, C_P, "mpmath")
        pts = [mpmath.mpf(k) / 200 for k in range(1, 401)]
        vals = [f(x) for x in pts]
        assert all(1 < v <= 2 + mpmath.mpf(10) ** -25 for v in vals)
        assert all(a < b for a, b in zip(vals, vals[1:]))
    finally:
        mpmath.mp.dps = 15


def test_paper_step_value_and_exact_minimiser():
    paper_u = _b ** (1 / (p + 2))
    assert _zero(G_BALANCE.subs(u, paper_u) - 2 * paper_u)
    assert _zero(sp.diff(G_BALANCE, u).subs(u, U_STAR))
    assert _zero(G_BALANCE.subs(u, U_STAR) / _b ** (1 / (p + 2)) - C_P)


def test_closed_form_is_above_a_numerical_single_scale_optimum():
    """One matrix (p = 1) plus nothing else: the closed form >= the exact objective's minimum."""
    th = assemble()
    vals = {s: 3, c: 2, d: 16, r_max: 8, kappa: 5, n: 1000, p: 1, m_rows: 8, n_cols: 8}
    H = sp.lambdify(u, th.ss_matrix_entropy.subs(vals), "mpmath")
    obj = lambda x: x + mpmath.sqrt(H(x) / (2 * 1000))  # centred Massart, same coefficient
    best = min(obj(mpmath.mpf(10) ** (-k / 40)) for k in range(0, 200))
    closed = th.ss_matrix_term.subs(vals)
    assert best <= float(closed)


def test_rank_term_is_the_p0_case():
    th = assemble()
    vals = {s: 3, c: 2, d: 16, r_max: 8, kappa: 5, n: 1000}
    # at p = 0, C_0 = 1 and the exponent is 1/2
    a0 = th.a_matrix_rank.subs(vals)
    assert sp.simplify(th.ss_matrix_term_rank.subs(vals) - (sp.sqrt(a0 / 2000) + sp.Rational(1, 1000))) == 0


def test_lemma_statement_holds_with_equality():
    lhs, rhs = REGISTRY["balance_single_scale"].statement.args
    diff = sp.lambdify((p, _b), lhs - rhs, "mpmath")
    mpmath.mp.dps = 50
    try:
        for pv in ("0.01", "0.5", "1", "1.9", "2"):
            for bv in ("1e-6", "0.3", "7"):
                assert abs(diff(mpmath.mpf(pv), mpmath.mpf(bv))) < mpmath.mpf(10) ** -40
    finally:
        mpmath.mp.dps = 15
