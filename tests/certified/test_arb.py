"""Specification of certified.arb: exact conversions, directed float endpoints, certificate strings."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from flint import arb

from specbound.certified.arb import (
    ball_from_str,
    ball_to_str,
    float_lower,
    float_upper,
    interval,
    pow2,
    scale_exponent,
    scaled_by_pow2,
    to_arb,
    to_arb_mat,
)
from specbound.errors import NonFiniteError


@pytest.mark.parametrize("x", [0.1, -1e-300, 5e-324, 1.7976931348623157e308, 0.0, 1 / 3])
def test_float_converts_exactly(x):
    a = to_arb(x)
    assert a.is_exact()
    # the exact binary value, compared through an independent exact rational
    q = Fraction(x)
    assert a == arb(q.numerator) / arb(q.denominator) or q == 0


def test_matrix_conversion_is_exact():
    w = np.array([[0.1, -2.5], [1e-310, 3.0]])
    m = to_arb_mat(w)
    assert all(e.is_exact() for e in m.entries())
    assert m[1, 0] == arb(1e-310)


def test_non_finite_is_rejected():
    with pytest.raises(NonFiniteError):
        to_arb(float("nan"))
    with pytest.raises(NonFiniteError):
        to_arb_mat(np.array([[1.0, np.inf]]))


@pytest.mark.parametrize("ball", [arb(2).sqrt(), arb(1) / 3, -arb(1) / 3, arb(10) ** -320, arb("1e-400"), arb(0)])
def test_directed_endpoints(ball):
    lo, hi = float_lower(ball), float_upper(ball)
    assert arb(lo) <= ball.lower() and ball.upper() <= arb(hi)
    assert lo <= hi


def test_directed_endpoints_beyond_double_range():
    big = arb(2) ** 2000
    assert float_upper(big) == math.inf
    assert float_lower(big) == np.finfo(np.float64).max
    assert float_lower(-big) == -math.inf


def test_string_round_trip_contains_the_ball():
    for x in [arb(2).sqrt(), arb(1) / 7 * arb(2) ** -1000, interval(arb(1), arb(1.5))]:
        text = ball_to_str(x)
        back = ball_from_str(text)
        assert back.contains(x), (text, back)


def test_powers_of_two_are_exact_everywhere():
    for e in (-1074, -1022, 0, 1023, 5000):
        p = pow2(e)
        assert p.is_exact() and p.man_exp() == (1, e)


def test_scaling_is_exact_or_counts_its_losses():
    w = np.array([[1e300, 1e-300], [3.0, 0.0]])
    e = scale_exponent(w)
    assert 2.0 ** (e - 1) <= 1e300 < 2.0**e
    s, inexact = scaled_by_pow2(w, e)
    assert inexact == 1  # 1e-300 * 2^-997 falls below the subnormal grid
    up, none_lost = scaled_by_pow2(np.array([[5e-324]]), -10)
    assert none_lost == 0 and up[0, 0] == 5e-324 * 1024
