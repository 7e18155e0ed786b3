"""Post hoc prior, Lambda, Massart/Dudley variants and allocation_23 (proofs_notes/theory.md sections 5, 6, 7, 10)."""

import mpmath
import sympy as sp

from specbound.derivation import REGISTRY, assemble
from specbound.derivation.symbols import D_sum, alpha_D, k, p, u


def test_prior_sums_to_one_by_telescoping():
    pi_Z = REGISTRY["posthoc_union"].constants["pi_Z"]
    i = sp.Symbol("i", integer=True, positive=True)
    tail = sp.summation(pi_Z.subs(k, i), (i, 1, sp.oo))
    assert sp.simplify(pi_Z.subs(k, 0) + 2 * tail) == 1
    assert sum(pi_Z.subs(k, j) for j in range(-50, 51)) < 1


def test_lambda_is_minus_log_prior():
    post = REGISTRY["posthoc_union"].constants
    for j in (-7, 0, 3, 10**6):
        assert sp.simplify(post["lambda"].subs(k, j) + sp.log(post["pi_Z"].subs(k, j))) == 0


def test_grid_resolution():
    m = assemble().grid_m
    L, N = sorted(m.free_symbols, key=str)
    assert m.subs({L: 2, N: 128}) == 2 + 5  # ceil(2 + log 128) = ceil(6.85) = 7


def test_centred_forms_are_default_and_uncentred_named():
    centred, uncentred = assemble(), assemble(massart="uncentred", dudley="uncentred")
    assert centred.dd_upper == sp.Rational(1, 4) and uncentred.dd_upper == sp.Rational(1, 2)
    H = sp.Symbol("H_total", nonnegative=True)
    n = sp.Symbol("n", positive=True, integer=True)
    assert centred.ss_objective.free_symbols >= {n}
    ratio = sp.simplify((uncentred.ss_objective - uncentred.ss_objective.subs(H, 0))
                        / (centred.ss_objective - centred.ss_objective.subs(H, 0)))
    assert ratio == 2  # sqrt(2/n) / sqrt(1/(2n))


def test_dudley_integral_closed_forms():
    th = assemble()
    for pv in (sp.Integer(0), sp.Rational(1, 3), sp.Integer(1), sp.Rational(3, 2)):
        exact = sp.integrate(u ** (-pv / 2), (u, alpha_D, sp.Rational(1, 4)))
        assert sp.simplify(th.dd_I_p.subs(p, pv) - exact) == 0
    assert sp.simplify(th.dd_I_2 - sp.integrate(1 / u, (u, alpha_D, sp.Rational(1, 4)))) == 0


def test_allocation_23_lagrange_solution():
    b1, b2, b3, k1, k2, k3, e, lam = sp.symbols("b1 b2 b3 k1 k2 k3 e lam", positive=True)
    e1, e2, e3 = sp.symbols("e1 e2 e3", positive=True)
    # stationarity of sum b/e^2 + lam (sum k e - e): -2 b_j / e_j^3 + lam k_j = 0 -> e_j = (2 b_j/(lam k_j))^{1/3}
    ej = [(2 * b / (lam * kk)) ** sp.Rational(1, 3) for b, kk in ((b1, k1), (b2, k2), (b3, k3))]
    for (b, kk), ejv in zip(((b1, k1), (b2, k2), (b3, k3)), ej):
        assert sp.simplify(sp.diff(b / e1**2 + lam * kk * e1, e1).subs(e1, ejv)) == 0
    lam_star = sp.solve(sp.Eq(k1 * ej[0] + k2 * ej[1] + k3 * ej[2], e), lam)[0]
    value = sum(b / x**2 for b, x in zip((b1, b2, b3), ej)).subs(lam, lam_star)
    cons = REGISTRY["allocation_23"].constants
    S = next(iter(cons["minimum"].free_symbols - {sp.Symbol("epsilon", positive=True)}))
    summand_syms = sorted(cons["summand"].free_symbols, key=str)  # b_j, kappa_j
    total = sum(cons["summand"].subs(dict(zip(summand_syms, pair)))
                for pair in ((b1, k1), (b2, k2), (b3, k3)))
    claimed = cons["minimum"].subs({S: total, sp.Symbol("epsilon", positive=True): e})
    vals = {b1: 2, b2: 5, b3: sp.Rational(1, 3), k1: 3, k2: sp.Rational(1, 2), k3: 7, e: sp.Rational(2, 3)}
    assert abs(sp.N(value.subs(vals) - claimed.subs(vals), 30)) < 1e-25
    # and no other feasible allocation does better (random feasible points)
    import random
    rng = random.Random(0)
    for _ in range(200):
        w = [rng.random() + 1e-3 for _ in range(3)]
        kv, bv, ev = [3, 0.5, 7], [2, 5, 1 / 3], 2 / 3
        tot = sum(wi * ki for wi, ki in zip(w, kv))
        eps_j = [wi * ev / tot for wi in w]
        assert sum(bj / x**2 for bj, x in zip(bv, eps_j)) >= float(claimed.subs(vals)) * (1 - 1e-12)


def test_massart_centred_is_exact_on_a_two_point_class():
    """Independent reference: E max over sigma, enumerated, for centres in [0,1]^n; n = 6."""
    import itertools
    n_val, centres = 6, [[0, 1, 0, 1, 1, 0], [1, 0, 1, 0, 0, 1], [1, 1, 1, 1, 1, 1]]
    emax = mpmath.mpf(0)
    for sig in itertools.product((-1, 1), repeat=n_val):
        emax += max(sum(si * gi for si, gi in zip(sig, g)) for g in centres) / mpmath.mpf(n_val)
    emax /= 2**n_val
    coeff = REGISTRY["massart_single_scale"].constants["coefficient"]
    nn = next(iter(coeff.free_symbols))
    assert emax <= mpmath.sqrt(float(coeff.subs(nn, n_val)) * mpmath.log(len(centres)))


def test_dudley_closed_form_dominates_the_exact_integral():
    """One matrix (p = 1) and the read-out: the closed form >= the integral computed by quadrature."""
    th = assemble()
    sy = {str(x): x for e in (th.dd_matrix_entropy, th.dd_readout_entropy, th.dd_matrix_piece,
                              th.dd_readout_piece) for x in e.free_symbols}
    vals = {"s": 2, "c": 3, "d": 12, "m": 6, "n_c": 6, "r_max": 6, "kappa": 4, "p": 1, "vartheta": sp.Rational(1, 2),
            "vartheta_w": sp.Rational(1, 2), "N": 6, "B_w": 1, "rho": sp.Rational(1, 2),
            "alpha_D": sp.Rational(1, 100)}
    sub = {sy[k]: v for k, v in vals.items() if k in sy}
    H = sp.lambdify(u, th.dd_matrix_entropy.subs(sub) + th.dd_readout_entropy.subs(sub), "mpmath")
    n_val = 500
    lo = mpmath.mpf(1) / 100
    # the integrand jumps at the ceilings; split the range finely and add a margin of 1e-6
    pts = [lo + (mpmath.mpf(1) / 4 - lo) * i / 400 for i in range(401)]
    integral = mpmath.quad(lambda x: mpmath.sqrt(H(x)), pts)
    exact = 4 * lo + 12 / mpmath.sqrt(n_val) * integral
    D = th.dd_matrix_piece.subs(sub)
    closed = th.dd_closed.subs(sub).subs({D_sum: D})
    closed = closed.subs({x: n_val for x in closed.free_symbols if str(x) == "n"})
    assert not closed.free_symbols, closed.free_symbols
    assert exact <= float(closed) * (1 + 1e-9)


def test_dudley_piece_at_p2_is_the_limit_of_the_general_piece():
    th = assemble()
    vals = {str(x): x for x in th.dd_matrix_piece.free_symbols}
    point = {vals["alpha_D"]: sp.Rational(1, 50), vals["c"]: 2, vals["d"]: 8, vals["kappa"]: 3,
             vals["s"]: 5, vals["vartheta"]: sp.Rational(1, 3)}
    general = th.dd_matrix_piece.subs(point)
    near = sp.N(general.subs(vals["p"], 2 - sp.Rational(1, 10**12)), 40)
    at_two = sp.N(th.dd_matrix_piece_p2.subs(point), 40)
    assert abs(near - at_two) < 1e-9 * at_two
