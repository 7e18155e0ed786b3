"""Backends: mpmath (reference), Arb (encloses the reference), torch (broadcasts)."""

import random

import mpmath
import pytest
import sympy as sp
from flint import arb, ctx

from specbound.derivation import assemble
from specbound.derivation.backends import arb_source, compile_expr, to_arb, to_mpmath, to_torch

FIELDS_WITH_CEILING = ("entropy_schatten", "ss_matrix_entropy", "dd_matrix_entropy")
CHECKED = ("head_summand", "layer_lipschitz", "gamma_A", "gamma_V", "gamma_M_in", "gamma_M_out",
           "kappa", "entropy_schatten", "entropy_rank", "entropy_readout", "ss_matrix_entropy",
           "ss_matrix_term", "ss_matrix_term_rank", "ss_readout_term", "dd_I_p", "dd_I_2",
           "dd_matrix_piece", "dd_matrix_piece_rank", "dd_matrix_piece_p2", "dd_readout_piece", "dd_closed", "lambda_matrix",
           "lambda_matrix_rank", "Lambda_total", "confidence", "ss_closed", "corollary_explicit", "C_p")

TH = assemble()
EXPRS = dict(TH.items())


def _random_point(expr, rng):
    """Exact rational inputs: positive reals in (0.01, 10), integers for integer symbols."""
    vals = {}
    for sym in sorted(expr.free_symbols, key=str):
        if sym.is_integer:
            vals[sym] = rng.randint(0 if sym.is_nonnegative and not sym.is_positive else 1, 60) \
                if str(sym) not in ("k_c", "k_s", "k_w", "k_rho") else rng.randint(-40, 40)
        elif str(sym) == "p":
            vals[sym] = sp.Rational(rng.randint(1, 199), 100)  # p in (0, 2)
        elif str(sym) in ("delta", "hat_E"):
            vals[sym] = sp.Rational(rng.randint(1, 999), 1000)  # (0, 1)
        elif str(sym) == "alpha_D":
            vals[sym] = sp.Rational(rng.randint(1, 249), 1000)  # (0, 1/4)
        else:
            vals[sym] = sp.Rational(rng.randint(1, 1000), 100)
    return vals


def test_mpmath_50_digit_evaluation():
    mpmath.mp.dps = 50
    try:
        f = to_mpmath(TH.constants["L_phi"], [])
        assert mpmath.nstr(f(), 50) == mpmath.nstr(
            (1 + mpmath.erf(1)) / 2 + mpmath.exp(-1) / mpmath.sqrt(mpmath.pi), 50)
        assert mpmath.nstr(f(), 30).startswith("1.128904145185154786")
    finally:
        mpmath.mp.dps = 15


@pytest.mark.parametrize("name", CHECKED)
def test_arb_ball_contains_the_50_digit_mpmath_value(name):
    expr = EXPRS[name]
    args = sorted(expr.free_symbols, key=str)
    rng = random.Random(hash(name) & 0xFFFF)
    f_arb, f_mp = to_arb(expr, args), to_mpmath(expr, args)
    mpmath.mp.dps = 50
    try:
        for _ in range(8):
            point = _random_point(expr, rng)
            ref = f_mp(*(mpmath.mpf(v.p) / v.q if isinstance(v, sp.Rational) else mpmath.mpf(v)
                         for v in (point[a] for a in args)))
            ball = f_arb(*(arb(v.p) / v.q if isinstance(v, sp.Rational) and v.q != 1 else int(v)
                           for v in (point[a] for a in args)))
            assert ball.is_finite(), (name, point)
            old = ctx.prec
            ctx.prec = 240  # the reference ball: 50 digits, radius ~1e-50 relative
            try:
                ref_ball = arb(mpmath.nstr(ref, 50))
                if name in FIELDS_WITH_CEILING:
                    # ceiling of the upper endpoint: the ball is an upper bound, not an enclosure
                    assert ball.upper() >= ref_ball.lower(), (name, point, ball, ref)
                else:
                    assert ball.contains(ref_ball), (name, point, ball, ref)
            finally:
                ctx.prec = old
            assert ball.rad() < abs(ball.mid()) * arb("1e-10") + arb("1e-10")
    finally:
        mpmath.mp.dps = 15


def test_arb_ceiling_is_exact_integer_of_upper_endpoint():
    x = sp.Symbol("x", positive=True)
    f = to_arb(sp.ceiling(x), [x])
    ball = arb(2) + arb("0 +/- 1e-30")  # straddles the integer 2
    out = f(ball)
    assert out.is_exact() and out == 3
    with pytest.raises(ValueError):
        to_arb(sp.floor(x), [x])  # a bare floor is not an upper bound
    with pytest.raises(ValueError):
        to_arb(1 / sp.ceiling(x), [x])
    g = to_arb(sp.floor(x), [x], check_rounding=False)
    assert g(ball).is_exact() and g(ball) == 1


def test_arb_numbers_are_exact_and_floats_are_taken_exactly():
    x = sp.Symbol("x", positive=True)
    src = arb_source(sp.Rational(1, 3) * x + sp.Integer(7) + sp.pi, [x])
    assert "fmpq(1, 3)" in src and "arb(7)" in src and "arb.pi()" in src
    f = to_arb(x + 1, [x])
    assert f(0.5) == arb(1.5) and f(0.5).is_exact()
    ident = to_arb(x, [x])(0.1)
    assert ident.is_exact() and ident == arb(0.1)  # binary value of 0.1, no decimal re-rounding
    with pytest.raises(TypeError):
        f("0.1")


def test_printer_refuses_unknown_nodes():
    x = sp.Symbol("x", positive=True)
    with pytest.raises(TypeError):
        to_arb(sp.gamma(x), [x])
    with pytest.raises(TypeError):
        to_arb(x + sp.Symbol("y"), [x])


def test_arb_precision_follows_ctx():
    f = to_arb(TH.constants["L_phi"], [])
    old = ctx.prec
    try:
        ctx.prec = 200
        assert f().rad() < arb("1e-55")
    finally:
        ctx.prec = old


def test_torch_broadcasts_and_matches_mpmath():
    torch = pytest.importorskip("torch")
    expr = EXPRS["ss_matrix_term"]
    args = sorted(expr.free_symbols, key=str)  # c, d, kappa, n, p, s
    f = to_torch(expr, args)
    p_grid = torch.linspace(0.125, 2.0, 16).reshape(1, -1)  # all p at once
    c_val = torch.tensor([[0.5], [3.0]])  # two matrices
    out = f(c_val, 16, 5.0, 1000, p_grid, 3.0)
    assert out.shape == (2, 16) and out.dtype == torch.float64
    f_mp = to_mpmath(expr, args)
    for i, cv in enumerate((0.5, 3.0)):
        for j in range(16):
            ref = f_mp(cv, 16, 5.0, 1000, float(p_grid[0, j]), 3.0)
            assert abs(float(out[i, j]) - float(ref)) <= 1e-12 * float(ref)


def test_torch_ceiling_and_min():
    torch = pytest.importorskip("torch")
    expr = EXPRS["entropy_schatten"]
    args = sorted(expr.free_symbols, key=str)
    f, f_mp = to_torch(expr, args), to_mpmath(expr, args)
    vals = dict(c=2.0, d=10, epsilon=0.3, p=0.5, r_max=7, s=1.5)
    ref = f_mp(*(vals[str(a)] for a in args))
    assert abs(float(f(*(vals[str(a)] for a in args))) - float(ref)) < 1e-12 * float(ref)


@pytest.mark.parametrize("build", [
    lambda x, y: sp.log(x) + 1 / x,                 # one argument
    lambda x, y: y / x + sp.log(x) * sp.sqrt(y),    # two, with the numpy helper _f inside
    lambda x, y: sp.Min(x, y) ** sp.Rational(1, 3),
])
def test_numpy_backend_evaluates_the_expression_itself(build):
    # regression: the compiled expression once shared its name with the numpy helper ``_f``, so a
    # helper call (or the wrapper's conversion) re-entered the expression: wrong values or a TypeError
    x, y = sp.symbols("x y", positive=True)
    expr = build(x, y)
    fn = compile_expr(expr, "numpy")
    vals = {x: 2.5, y: 0.75}
    got = float(fn(*(vals[a] for a in fn.args)))
    ref = float(expr.xreplace({s: sp.Float(v, 30) for s, v in vals.items()}).evalf(30))
    assert got == pytest.approx(ref, rel=1e-14)
