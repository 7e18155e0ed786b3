"""numeric/generated.py is exactly what scripts/generate_derived.py prints from the SymPy source
today (it cannot drift from derivation/), and its functions agree with the exact SymPy evaluation."""

from __future__ import annotations

import importlib.util
import os
from fractions import Fraction

import pytest

from specbound.derivation.posthoc import grid_size as exact_grid_size
from specbound.numeric import generated
from specbound.numeric.grid import grid_size, schatten_grid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _generator():
    spec = importlib.util.spec_from_file_location("generate_derived", os.path.join(ROOT, "scripts", "generate_derived.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_checked_in_module_equals_a_fresh_generation():
    with open(os.path.join(ROOT, "numeric", "generated.py")) as fh:
        assert fh.read() == _generator().source(), "run scripts/generate_derived.py"


@pytest.mark.parametrize("layers", [1, 2, 6, 12, 48])
@pytest.mark.parametrize("width", [1, 2, 3, 7, 8, 20, 21, 64, 384, 403, 768, 1096, 1097, 4096, 10**6])
def test_grid_size_equals_the_exact_sympy_ceiling(layers, width):
    assert grid_size(layers, width) == exact_grid_size(layers, width)


@pytest.mark.parametrize("m", [1, 3, 7, 10, 13])
def test_grid_points_are_the_correctly_rounded_rationals(m):
    pts = schatten_grid(m)
    assert [Fraction(float(x)) for x in pts] == [Fraction(float(Fraction(i, m))) for i in range(2 * m + 1)]
    assert pts[0] == 0 and pts[-1] == 2 and generated.grid_point(m, m) == 1


# -- the theorem's fields: generated code == the SymPy source ------------------------------------

import numpy as np  # noqa: E402
import sympy as sp  # noqa: E402
from flint import arb, ctx  # noqa: E402

from specbound.certified import generated as cgen  # noqa: E402
from specbound.derivation import evaluated, symbols  # noqa: E402
from specbound.derivation.assembly import beta_c_expression, default_beta_c  # noqa: E402

KEYS = evaluated.variant_keys()
#: variants whose every field is checked value by value (the others share most functions)
SAMPLED = [k for k in KEYS if k[0] == k[1]][::3] + [("uncentred", "centred", "silu", "ls_residual")]


def test_checked_in_certified_module_equals_a_fresh_generation():
    with open(os.path.join(ROOT, "certified", "generated.py")) as fh:
        assert fh.read() == _generator().certified_source(), "run scripts/generate_derived.py"


def _inputs(names, seed):
    # positive values in a range every field accepts (p in (0, 2), alpha_D small, weights in (0, 1))
    rng = np.random.default_rng(seed)
    out = {}
    for a in names:
        if a == "p":
            out[a] = float(rng.uniform(0.1, 1.9))
        elif a in ("vartheta", "vartheta_w", "delta", "alpha_D", "u", "u_w"):
            out[a] = float(rng.uniform(0.01, 0.5))
        elif a == "k_cls":
            out[a] = float(rng.integers(2, 10))
        elif a in ("n", "N", "d", "r_max", "m_grid"):
            out[a] = float(rng.integers(8, 4096))
        else:
            out[a] = float(rng.uniform(0.5, 3.0))
    return out


@pytest.mark.parametrize("key", SAMPLED, ids=lambda k: "-".join(k))
def test_generated_numpy_fields_equal_the_sympy_expressions(key):
    row = generated.THEOREMS[key]
    exprs = evaluated.table_row(key)  # the binary fields and their k-class twins
    assert set(row) == set(exprs)
    for seed, (name, expr) in enumerate(sorted(exprs.items())):
        fn, names = generated.FUNCTIONS[row[name]], generated.ARGS[row[name]]
        assert names == tuple(sorted((str(s) for s in expr.free_symbols)))
        vals = _inputs(names, seed)
        ref = complex(expr.xreplace({s: sp.Float(vals[str(s)], 50) for s in expr.free_symbols}).evalf(50))
        got = float(fn(*(vals[a] for a in names)))
        if not np.isfinite(ref.real) or abs(ref.imag) > 0:
            continue  # outside the field's domain at these inputs
        assert got == pytest.approx(ref.real, rel=1e-9, abs=1e-300), name


@pytest.mark.parametrize("key", SAMPLED, ids=lambda k: "-".join(k))
def test_generated_arb_fields_contain_the_sympy_value(key):
    row = cgen.THEOREMS[key]
    exprs = evaluated.table_row(key)  # the binary fields and their k-class twins
    assert set(row) == set(exprs)
    for seed, (name, expr) in enumerate(sorted(exprs.items())):
        fn, names = cgen.FUNCTIONS[row[name]], cgen.ARGS[row[name]]
        assert names == tuple(str(a) for a in evaluated.arguments(expr))
        vals = _inputs(names, seed)
        exact = expr.xreplace({s: sp.Float(vals[str(s)], 60) for s in expr.free_symbols}).evalf(50)
        ref = complex(exact)  # the domain check only: its real part is rounded to binary64
        if not np.isfinite(ref.real) or abs(ref.imag) > 0:
            continue
        ball = fn(*(vals[a] for a in names))
        # a ball around the 50-digit value that contains the exact one: the generated ball must
        # meet it (it holds the exact value; an exact ball, e.g. 2 Min(SS, DD), is that value)
        saved, ctx.prec = ctx.prec, 200
        try:
            ref_ball = arb(f"{sp.Float(sp.re(exact), 50)} +/- 1e-40")
        finally:
            ctx.prec = saved
        assert ball.overlaps(ref_ball) and ball.rad() < 1e-10 * (1 + abs(ball.mid())), (name, ball, ref_ball)


def test_both_generated_tables_have_one_list_of_fields_with_the_same_arguments():
    # one compiled-theorem class reads both: same variants, same field names, same argument names
    assert set(generated.THEOREMS) == set(cgen.THEOREMS) == set(KEYS)
    for key in KEYS:
        num, arb_row = generated.THEOREMS[key], cgen.THEOREMS[key]
        assert set(num) == set(arb_row), key
        for name in num:
            assert generated.ARGS[num[name]] == cgen.ARGS[arb_row[name]], (key, name)
    assert (generated.BACKEND, cgen.BACKEND) == ("numpy", "arb")
    assert generated.NAMES == cgen.NAMES == evaluated.NAMES


@pytest.mark.parametrize("key", SAMPLED, ids=lambda k: "-".join(k))
def test_every_dudley_piece_vanishes_at_the_upper_limit(key):
    # the edge policy (certified/evaluation.py): at alpha_D = dd_upper the Dudley integral runs over
    # an empty range, so each piece is exactly 0 -- proven here for the printed fields themselves
    T = evaluated.theorem_of(key)
    fields = evaluated.table_row(key)
    for name in ("dd_matrix_piece", "dd_matrix_piece_p2", "dd_matrix_piece_rank", "dd_readout_piece",
                 "kclass_dd_readout_piece"):
        assert sp.simplify(fields[name].xreplace({symbols.alpha_D: T.dd_upper})) == 0, name


@pytest.mark.parametrize("model", evaluated.VARIANTS["model"])
def test_generated_beta_c_equals_the_exact_default(model):
    for L in (1, 2, 3, 7, 48, 1000):
        assert generated.BETA_C[model](L) == default_beta_c(L, model) == Fraction(
            str(sp.Rational(beta_c_expression(model).subs(sp.Symbol("L", positive=True, integer=True), L))))


def test_generated_constants_and_layouts_equal_the_derivation():
    for key in KEYS:
        assert generated.CONSTANTS[key] == evaluated.constants_of(evaluated.theorem_of(key))
    assert generated.LAYOUTS == cgen.LAYOUTS == evaluated.layouts()
    for key in KEYS:
        assert cgen.CONSTANTS[key] == generated.CONSTANTS[key]
