"""Entropies of the covering lemmas: limits, special cases, monotonicity (proofs_notes/theory.md section 3)."""

import sympy as sp

from specbound.derivation import REGISTRY, assemble
from specbound.derivation.symbols import c, d, eps, kappa, n, p, r_max, s


def test_rank_form_is_the_p_to_zero_limit_of_the_truncation_rank():
    r_bound = REGISTRY["schatten_cover"].constants["r_p_bound"]
    assert sp.limit(r_bound, p, 0, "+") == s
    # with the ceiling, for an integer rank bound s and eps < 2: r_p -> s from the right
    r_p = REGISTRY["schatten_cover"].constants["r_p"]
    for s_val in (1, 3, 64):
        val = r_p.subs({s: s_val, eps: sp.Rational(1, 3), p: sp.Rational(1, 10**6)})
        assert val == s_val


def test_p_equals_two_form():
    H = assemble().entropy_schatten
    ref = sp.Min(sp.Max(0, sp.ceiling(4 * s / eps**2) - 1), r_max) * d * sp.log(1 + 8 * c / eps)
    for vals in ({s: 3, eps: sp.Rational(1, 5), c: 2, d: 10, r_max: 7},
                 {s: sp.Rational(1, 100), eps: 1, c: 2, d: 10, r_max: 7}):
        assert sp.simplify((H.subs(p, 2) - ref).subs(vals)) == 0


def test_entropy_nonincreasing_in_eps_nondecreasing_in_s_and_c():
    H = assemble().entropy_schatten
    grid = [sp.Rational(k, 7) for k in range(1, 30)]
    vals = [H.subs({s: 5, c: 3, d: 8, r_max: 40, p: sp.Rational(1, 2), eps: e}) for e in grid]
    assert all(a >= b for a, b in zip(vals, vals[1:]))
    base = {c: 3, d: 8, r_max: 40, p: 1, eps: sp.Rational(1, 3)}
    hs = [H.subs({**base, s: k}) for k in range(1, 20)]
    assert all(a <= b for a, b in zip(hs, hs[1:]))


def test_per_matrix_closed_term_increases_in_s_and_c():
    t = assemble().ss_matrix_term
    for var in (s, c):
        deriv = sp.diff(t, var)
        # every factor is positive for positive symbols; SymPy proves the sign
        assert sp.simplify(deriv).is_positive or all(
            deriv.subs({s: sv, c: cv, d: 10, kappa: kv, n: 100, p: pv}) > 0
            for sv in (0.5, 2) for cv in (0.5, 3) for kv in (0.1, 10) for pv in (0.25, 1, 2))


def test_rank_zero_matrix_has_zero_entropy():
    H0 = assemble().entropy_rank
    assert H0.subs({s: 0, r_max: 5, d: 4, c: 1, eps: sp.Rational(1, 10)}) == 0


def test_zero_radius_gives_zero_entropy_not_negative():
    # r_p keeps its max(0, .): with s = 0 the ceiling is 0 and the entropy must be 0, never -d log(.)
    H = assemble().entropy_schatten
    assert H.subs({s: 0, r_max: 5, d: 4, c: 1, eps: sp.Rational(1, 10), p: 1}) == 0
