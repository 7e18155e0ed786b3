"""Rounding onto the grids beta**k (proofs_notes/theory.md section 6): exact checks, never float guesses."""

from fractions import Fraction

import mpmath
import numpy as np
import pytest
from flint import arb, fmpq

from specbound.certified.enclosure import enclose_singular_values
from specbound.certified.arb import precision
from specbound.certified.radii import dominates, exact_value, index_down, index_up, power, round_matrix
from specbound.errors import CertificationError

BASES = [Fraction(2), Fraction(9, 8), Fraction(25, 24), Fraction(3)]


def brute_up(x: Fraction, beta: Fraction) -> int:
    """Smallest k with beta**k >= x by walking the integers (reference)."""
    k = 0
    while beta**k < x:
        k += 1
    while beta ** (k - 1) >= x:
        k -= 1
    return k


@pytest.mark.parametrize("beta", BASES)
@pytest.mark.parametrize("x", [Fraction(1), Fraction(7, 3), Fraction(1, 1000), Fraction(12345, 7)])
def test_index_up_is_the_smallest_dominating_power(beta, x):
    ball = arb(fmpq(x.numerator, x.denominator))
    k = index_up(ball, beta)
    hi = exact_value(ball.upper())
    assert hi >= x
    assert power(beta, k) >= hi and k == brute_up(hi, beta)
    assert dominates(beta, k, ball) and not dominates(beta, k - 1, ball)


@pytest.mark.parametrize("k", [-40, -1, 0, 1, 5, 60])
def test_exact_powers_of_two_round_to_themselves(k):
    x = arb(2) ** k  # exact
    assert index_up(x, 2) == k
    assert index_down(x, 2) == k


def test_exact_power_of_a_non_dyadic_base_is_recognised():
    # (9/8)**3 is dyadic: the ball is exact and must give k = 3, not 4
    x = arb(fmpq(729, 512))
    assert index_up(x, Fraction(9, 8)) == 3
    assert index_down(x, Fraction(9, 8)) == 3


def test_ball_just_above_a_power_rounds_up():
    with precision(300):
        x = arb(2) + arb(2) ** -200  # exact at 300 bits
    assert x.is_exact()
    assert index_up(x, 2) == 2
    assert index_down(x, 2) == 1


@pytest.mark.parametrize("e", [-1070, -300, 300, 1020])
def test_tiny_and_huge_values(e):
    x = arb(3) * arb(2) ** e
    k = index_up(x, Fraction(25, 24))
    hi = Fraction(3) * Fraction(2) ** e
    assert power(Fraction(25, 24), k) >= hi > power(Fraction(25, 24), k - 1)
    kd = index_down(x, 2)
    assert Fraction(2) ** kd <= hi < Fraction(2) ** (kd + 1)


def test_nonpositive_and_unbounded_inputs():
    assert index_up(arb(0), 2) == 0
    with pytest.raises(CertificationError):
        index_up(arb("inf"), 2)
    with pytest.raises(CertificationError):
        index_down(arb(0), 2)
    with pytest.raises(ValueError):
        index_up(arb(1), 1)


def test_zero_matrix_gets_p0_rank0_kc0():
    enc = enclose_singular_values(np.zeros((4, 3)))
    r = round_matrix(enc, Fraction(1, 2), Fraction(9, 8), 2)
    assert (r.p, r.rank, r.k_c, r.k_s, r.zero) == (0, 0, 0, None, True)


def test_p0_uses_the_proven_rank_and_p_positive_dominates_schatten_power():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 5))
    enc = enclose_singular_values(w)
    r0 = round_matrix(enc, 0, Fraction(9, 8), 2)
    assert r0.k_s is None and r0.rank == enc.rank_upper
    # independent reference: 50-digit singular values of the exact binary64 entries; the radii must
    # dominate them with margin to spare (any slack goes the safe way, never below the true value)
    with mpmath.workdps(50):
        sv = sorted((abs(v) for v in mpmath.svd_r(mpmath.matrix(w.tolist()), compute_uv=False)), reverse=True)
        tol = mpmath.mpf(10) ** -40
        r1 = round_matrix(enc, Fraction(1), Fraction(9, 8), 2)
        assert mpmath.mpf(2) ** r1.k_s >= mpmath.fsum(sv) * (1 + tol)
        beta = mpmath.mpf(9) / 8
        assert beta ** r1.k_c >= sv[0] * (1 + tol)
        assert beta ** (r1.k_c - 1) < sv[0] * (1 - tol)  # and the least such power (k_c is not inflated)
        assert mpmath.mpf(2) ** (r1.k_s - 1) < mpmath.fsum(sv) * (1 - tol)
