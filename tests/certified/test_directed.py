"""The directed-rounding steps of certified/directed.py: each returns a bound on the side it promises of the
exact value (checked in exact rational arithmetic), and the compiled steps return the bits of the numpy
programs whose contracts are proven (compared on adversarial inputs and with Hypothesis)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from specbound.certified import directed as dr
from specbound.certified import kernels

SPECIAL = np.array([0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, -2.2250738585072014e-308,
                    1e-310, 1.0, -1.0, 0.5, 1.5, 2.0**52, 2.0**53 + 2, 1.7976931348623157e308,
                    -1.7976931348623157e308, 1e300, np.inf, -np.inf, np.nan, 3.0, 0.1, 1e-5])


def adversarial(rng, n=4000) -> np.ndarray:
    wide = rng.standard_normal(n) * 10.0 ** rng.uniform(-320, 305, n)
    return np.concatenate([SPECIAL, wide])


def same_bits(a, b) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(((a.view(np.int64) == b.view(np.int64)) | (np.isnan(a) & np.isnan(b))).all())


ONE = [("up", dr._np_up), ("down", dr._np_down), ("upn", dr._np_upn), ("sqrt_up", dr._np_sqrt_up)]
TWO = [("add_up", dr._np_add_up), ("mul_up", dr._np_mul_up), ("div_up", dr._np_div_up),
       ("sub_down", dr._np_sub_down)]


def _public(name):
    return getattr(dr, name)


need_numba = pytest.mark.skipif(not kernels.AVAILABLE, reason="numba is not installed (or SPECBOUND_JIT=0)")


@need_numba
@pytest.mark.parametrize("name, reference", ONE)
def test_compiled_one_argument_steps_are_the_numpy_programs_bit_for_bit(name, reference):
    x = adversarial(np.random.default_rng(0))
    with np.errstate(all="ignore"):
        assert same_bits(_public(name)(x), reference(x))
        assert same_bits(_public(name)(x.reshape(2, -1)), reference(x.reshape(2, -1)))
        for v in SPECIAL[:8]:
            assert same_bits(_public(name)(float(v)), reference(float(v)))


@need_numba
@pytest.mark.parametrize("name, reference", TWO)
def test_compiled_two_argument_steps_are_the_numpy_programs_bit_for_bit(name, reference):
    rng = np.random.default_rng(1)
    a, b = adversarial(rng), adversarial(rng)
    col, row = a[:40, None], b[None, :30]
    with np.errstate(all="ignore"):
        assert same_bits(_public(name)(a, b), reference(a, b))
        assert same_bits(_public(name)(col, row), reference(col, row))  # broadcasting
        assert same_bits(_public(name)(a, 2.0), reference(a, 2.0))  # a scalar
        assert same_bits(_public(name)(1.0, 3.0), reference(1.0, 3.0))


@need_numba
def test_compiled_add_up_of_many_terms_steps_left_to_right_as_the_program():
    rng = np.random.default_rng(2)
    xs = [np.abs(adversarial(rng)) for _ in range(4)]
    with np.errstate(all="ignore"):
        assert same_bits(dr.add_up(*xs), dr._np_add_up(*xs))
        assert same_bits(dr.add_up(1.0, xs[0], 2.0**-1000), dr._np_add_up(1.0, xs[0], 2.0**-1000))
        assert dr.add_up(xs[0]) is xs[0]


@need_numba
@settings(max_examples=300, deadline=None)
@given(arrays(np.float64, st.integers(1, 50), elements=st.floats(allow_nan=True, allow_infinity=True, width=64)),
       arrays(np.float64, st.integers(1, 50), elements=st.floats(allow_nan=True, allow_infinity=True, width=64)))
def test_property_compiled_steps_equal_the_programs(x, y):
    n = min(x.size, y.size)
    x, y = x[:n], y[:n]
    with np.errstate(all="ignore"):
        for name, reference in ONE:
            assert same_bits(_public(name)(x), reference(x)), name
        for name, reference in TWO:
            assert same_bits(_public(name)(x, y), reference(x, y)), name


def test_a_step_computed_with_one_rounding_fewer_differs_from_the_program():
    # the comparison can fail: the upper step with x (1 + 2^-52) + eta rounded once (a fused multiply-add)
    # is a different function of x than the program's two roundings on these arguments
    x = np.abs(adversarial(np.random.default_rng(3)))[np.isfinite(adversarial(np.random.default_rng(3)))][:2000]
    fused = np.array([float(Fraction(v) * Fraction(1 + 2**-52) + Fraction(2**-1074)) if v < 1e308 else math.inf
                      for v in x])
    with np.errstate(all="ignore"):
        assert not same_bits(fused, dr._np_upn(x))


@pytest.mark.parametrize("name", ["up", "upn", "add_up", "mul_up", "div_up", "sqrt_up"])
def test_upper_steps_bound_the_exact_value_from_above(name):
    rng = np.random.default_rng(4)
    a = np.abs(rng.standard_normal(300)) * 10.0 ** rng.uniform(-310, 300, 300)
    b = np.abs(rng.standard_normal(300)) * 10.0 ** rng.uniform(-5, 5, 300) + 1e-300
    exact = {"up": lambda u, v: Fraction(u), "upn": lambda u, v: Fraction(u),
             "add_up": lambda u, v: Fraction(u) + Fraction(v), "mul_up": lambda u, v: Fraction(u) * Fraction(v),
             "div_up": lambda u, v: Fraction(u) / Fraction(v)}
    with np.errstate(all="ignore"):
        got = _public(name)(a) if name in ("up", "upn", "sqrt_up") else _public(name)(a, b)
    for u, v, g in zip(a, b, got):
        if not math.isfinite(g):
            continue
        if name == "sqrt_up":
            assert Fraction(g) ** 2 >= Fraction(u)
        else:
            assert Fraction(g) > exact[name](u, v)  # strictly above: the step moves past the rounded value


@pytest.mark.parametrize("name", ["down", "sub_down"])
def test_lower_steps_bound_the_exact_value_from_below(name):
    rng = np.random.default_rng(5)
    a = rng.standard_normal(300) * 10.0 ** rng.uniform(-310, 300, 300)
    b = rng.standard_normal(300) * 10.0 ** rng.uniform(-310, 300, 300)
    with np.errstate(all="ignore"):
        got = dr.down(a) if name == "down" else dr.sub_down(a, b)
    for u, v, g in zip(a, b, got):
        if math.isfinite(g):
            assert Fraction(g) < (Fraction(u) if name == "down" else Fraction(u) - Fraction(v))


def test_a_sum_of_one_square_is_einsums_value_bit_for_bit():
    m = adversarial(np.random.default_rng(6)).reshape(-1, 1)
    with np.errstate(all="ignore"):
        assert same_bits(dr.sum_squares(m), np.einsum("...i,...i->...", m, m))
        m3 = m.reshape(-1)[:4020].reshape(4, 3, 335, 1)
        assert same_bits(dr.sum_squares(m3), np.einsum("...i,...i->...", m3, m3))
