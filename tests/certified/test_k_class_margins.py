"""The certified k-class margin (proofs_notes/k_class.md (e)): its enclosure against brute force and a
50-digit reference network, ties as errors, and the k-class ramp loss and count built on it.

References import nothing from the code under test: the margin range over a box of outputs is found by
brute force over the box's corners with exact rationals (M_y is monotone in every output, so its extremes
are corners), and the tiny networks' outputs come from tests/certified/mp_network.py (50 digits).
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from flint import arb

from specbound.certified.forward_ls import certified_outputs, network_for
from specbound.certified.interval_forward import output_enclosures, prepare
from specbound.certified.margins import (
    count_upper, from_output_enclosures, margin_ball, ramp_loss_bounds, undecided,
)
from specbound.certified.radii import exact_value
from tests.certified.mp_network import DPS, mp_mat, mp_outputs, random_weights


def corner_range(lo: np.ndarray, hi: np.ndarray, y: int) -> tuple[Fraction, Fraction]:
    """min and max of f_y - max_{c != y} f_c over the box [lo, hi] (exact, by its corners)."""
    values = []
    for corner in itertools.product(*[(Fraction(float(a)), Fraction(float(b))) for a, b in zip(lo, hi)]):
        values.append(corner[y] - max(v for c, v in enumerate(corner) if c != y))
    return min(values), max(values)


def boxes(rng, n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n boxes of k outputs: random, some exact points, some with exact ties between the label and a rival."""
    mid = rng.standard_normal((n, k))
    rad = np.abs(rng.standard_normal((n, k))) * rng.choice([0.0, 1e-9, 0.3], (n, k))
    y = rng.integers(0, k, n)
    tie = rng.random(n) < 0.25
    rival = (y + 1 + rng.integers(0, k - 1, n)) % k
    mid[tie, rival[tie]] = mid[tie, y[tie]]  # f_y = f_rival exactly at the centre
    rad[tie] = 0.0
    return mid - rad, mid + rad, y


@pytest.mark.parametrize("k", [2, 3, 4])
def test_the_margin_enclosure_contains_the_exact_range_over_the_output_box_and_is_tight(k):
    rng = np.random.default_rng(k)
    lo, hi, y = boxes(rng, 300, k)
    m = from_output_enclosures(lo, hi, y)
    for i in range(lo.shape[0]):
        a, b = corner_range(lo[i], hi[i], int(y[i]))
        assert Fraction(float(m.lower[i])) <= a and b <= Fraction(float(m.upper[i])), i
        # tight: one outward step of binary64 at the ends (the note's enclosure is the exact range)
        assert m.lower[i] >= np.nextafter(np.nextafter(float(a), -np.inf), -np.inf)
        assert m.upper[i] <= np.nextafter(np.nextafter(float(b), np.inf), np.inf)


def test_the_arb_margin_ball_contains_the_exact_range_too():
    rng = np.random.default_rng(7)
    lo, hi, y = boxes(rng, 120, 3)
    for i in range(lo.shape[0]):
        balls = [arb(float(a) / 2 + float(b) / 2, float(b) / 2 - float(a) / 2 + 1e-300) if a != b else arb(float(a))
                 for a, b in zip(lo[i], hi[i])]
        outer = [(exact_value(bl.lower()), exact_value(bl.upper())) for bl in balls]
        a, b = corner_range(np.array([float(o[0]) for o in outer]), np.array([float(o[1]) for o in outer]), int(y[i]))
        ball = margin_ball(balls, int(y[i]))
        assert exact_value(ball.lower()) <= a and b <= exact_value(ball.upper()), i


def test_an_exact_tie_is_an_error_it_is_never_certified_correct():
    # f = (1, 1, 0) exactly with y = 0: the margin is exactly 0, the arg-max is ambiguous
    lo = hi = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [2.0, 0.0, 0.5]])
    m = from_output_enclosures(lo, hi, np.array([0, 1, 0]))
    assert (m.lower[:2] <= 0).all() and (m.upper[:2] >= 0).all()
    assert undecided(m) == 2
    assert count_upper(m, arb(2.0**-30)) == 2  # ties count in K^ at every gamma > 0 (and 2 - 0.5 = 1.5 not)
    assert count_upper(m, arb(1.4)) == 2 and count_upper(m, arb(1.5)) == 3
    up, low = ramp_loss_bounds(m, arb(1))  # the ramp at a tie is its maximum, 1
    assert exact_value(low) <= Fraction(2, 3) <= exact_value(up)  # the two ties lose 1 each, the third 0
    assert exact_value(low) > Fraction(2, 3) - Fraction(1, 10**30)
    assert margin_ball([arb(1), arb(1), arb(0)], 1).contains(0)


def test_one_read_out_row_keeps_the_signed_binary_margin():
    lo, hi = np.array([-1.0, 0.5]), np.array([-0.5, 2.0])
    m = from_output_enclosures(lo, hi, np.array([-1, 1]))
    assert list(m.lower) == [0.5, 0.5] and list(m.upper) == [1.0, 2.0]
    assert margin_ball([arb(3)], -1) == arb(-3)
    with pytest.raises(ValueError):
        from_output_enclosures(lo, hi, np.array([0, 1]))
    with pytest.raises(ValueError):
        from_output_enclosures(np.zeros((2, 3)), np.zeros((2, 3)), np.array([0, 3]))


@pytest.mark.parametrize("variant,activation", [("plain", "gelu"), ("causal", "relu"), ("ls", "silu")])
def test_both_certified_passes_enclose_the_50_digit_margin_of_a_tiny_k_class_network(variant, activation):
    rng = np.random.default_rng(11)
    w = random_weights(rng, variant=variant, activation=activation, k=3, T=4)
    X = rng.standard_normal((6, 4, w.width))
    y = rng.integers(0, 3, 6)
    lo, hi = output_enclosures(*prepare(w).rows(X))
    m = from_output_enclosures(lo, hi, y)
    net = network_for(w)
    with mpmath.workdps(DPS):
        for i in range(X.shape[0]):
            f = mp_outputs(w, mp_mat(X[i]))
            exact = f[y[i]] - max(v for c, v in enumerate(f) if c != y[i])
            assert mpmath.mpf(float(m.lower[i])) <= exact <= mpmath.mpf(float(m.upper[i])), i
            ball = margin_ball(certified_outputs(net, X[i]), int(y[i]))
            assert mpmath.mpf(exact_value(ball.lower()).numerator) / exact_value(ball.lower()).denominator <= exact
            assert exact <= mpmath.mpf(exact_value(ball.upper()).numerator) / exact_value(ball.upper()).denominator
