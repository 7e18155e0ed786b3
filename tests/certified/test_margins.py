"""The margin-enclosure interface: what the bound takes from S, checked against exact brute force.

The reference computations below use only ``fractions.Fraction`` on the endpoints (no import of the
sums or counts under test): the ramp loss of a sample is ``min(1, max(0, 1 - v/rho))`` evaluated
exactly, and the counts are plain comparisons.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from flint import arb
from hypothesis import given, settings
from hypothesis import strategies as st

from specbound.certified.margins import (
    MarginEnclosures, count_lower, count_upper, errors_lower, exact_float_sum, from_balls,
    from_center_radius, from_output_enclosures, ramp_loss_bounds, ramp_loss_sums, undecided,
)


def _ramp(v: Fraction, rho: Fraction) -> Fraction:
    return min(Fraction(1), max(Fraction(0), 1 - v / rho))


def _ramp_edge(v: float, rho: Fraction) -> Fraction:
    """The ramp at an endpoint (inf endpoints: the ramp's limits)."""
    if v == -math.inf:
        return Fraction(1)
    if v == math.inf:
        return Fraction(0)
    return _ramp(Fraction(v), rho)


def _exact(point: arb) -> Fraction:
    man, exp = point.mid().man_exp()
    assert point.rad() == 0
    return Fraction(int(man)) * Fraction(2) ** int(exp)


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
endpoint = st.one_of(finite, st.just(-math.inf), st.just(math.inf), st.just(0.0), st.just(2.0))


@st.composite
def enclosures(draw):
    pairs = draw(st.lists(st.tuples(endpoint, endpoint), min_size=1, max_size=40))
    lo = np.array([min(a, b) for a, b in pairs])
    hi = np.array([max(a, b) for a, b in pairs])
    return MarginEnclosures(lo, hi, "test")


@settings(max_examples=200, deadline=None)
@given(enclosures(), st.sampled_from([Fraction(1, 2), Fraction(2), Fraction(8), Fraction(3, 1024)]))
def test_the_ramp_loss_enclosure_is_the_exact_sum_at_the_endpoints(m, rho):
    up, lo = ramp_loss_bounds(m, arb(rho.numerator) / rho.denominator)
    n = m.n
    want_up = sum((_ramp_edge(v, rho) for v in m.lower.tolist()), Fraction(0)) / n
    want_lo = sum((_ramp_edge(v, rho) for v in m.upper.tolist()), Fraction(0)) / n
    # the division by n (and by a dyadic rho) is the only rounding: outward, and tiny
    assert _exact(up) >= want_up and _exact(up) - want_up <= Fraction(1, 2**100)
    assert _exact(lo) <= want_lo and want_lo - _exact(lo) <= Fraction(1, 2**100)


def test_a_rho_that_is_not_an_exact_point_still_gives_outer_bounds():
    rho = arb(1) / 3  # a ball around 1/3
    lo = np.array([0.1, float(Fraction(1, 3)), 0.5, -1.0])
    m = MarginEnclosures(lo, lo + 0.0, "test")
    up, low = ramp_loss_bounds(m, rho)
    exact = sum((_ramp(Fraction(v), Fraction(1, 3)) for v in lo.tolist()), Fraction(0)) / 4
    assert _exact(low) <= exact <= _exact(up)


@settings(max_examples=200, deadline=None)
@given(enclosures(), st.sampled_from([0.0, 0.5, 2.0, 8.0, 1e-300]))
def test_the_upper_count_counts_every_sample_that_may_lie_at_or_below_gamma(m, gamma):
    K = count_upper(m, arb(gamma))
    assert K == sum(1 for v in m.lower.tolist() if not v > gamma)
    assert count_lower(m, arb(gamma)) == sum(1 for v in m.upper.tolist() if v <= gamma)
    assert count_lower(m, arb(gamma)) <= K


def test_an_undecided_sample_is_counted_but_a_float_midpoint_count_would_drop_it():
    # margin enclosed in [7.9, 8.3]: its midpoint 8.1 is above gamma = 8, the true margin may not be
    m = MarginEnclosures(np.array([7.9, 9.0, -np.inf]), np.array([8.3, 9.5, np.inf]), "test")
    assert count_upper(m, arb(8)) == 2  # the straddling one and the non-finite one
    float_count = int(np.count_nonzero(m.midpoints() <= 8))
    assert float_count == 1  # the mutant "count the float estimates" would certify too little


def test_a_gamma_ball_counts_against_its_upper_end():
    g = arb(8) + arb("+/- 1e-10")
    m = MarginEnclosures(np.array([8.0 + 2.0**-40]), np.array([9.0]), "test")
    assert count_upper(m, g) == 1  # 8 + 2^-40 is inside the ball's reach


def test_from_center_radius_lies_outside_the_exact_interval():
    rng = np.random.default_rng(1)
    c = rng.normal(size=500) * 10.0 ** rng.integers(-5, 5, size=500)
    r = np.abs(rng.normal(size=500)) * 1e-3
    m = from_center_radius(c, r)
    for ci, ri, lo, hi in zip(c.tolist(), r.tolist(), m.lower.tolist(), m.upper.tolist()):
        assert Fraction(lo) <= Fraction(ci) - Fraction(ri)
        assert Fraction(hi) >= Fraction(ci) + Fraction(ri)


def test_from_center_radius_marks_non_finite_samples_as_not_certified():
    m = from_center_radius(np.array([np.nan, np.inf, 1.0]), 0.5)
    assert m.lower.tolist()[:2] == [-math.inf, -math.inf] and m.upper.tolist()[:2] == [math.inf, math.inf]
    assert undecided(m) == 2


def test_from_balls_rounds_outward():
    balls = [arb(1) / 3, arb(-2) / 7 + arb("+/- 1e-30"), arb("nan")]
    m = from_balls(balls)
    assert Fraction(m.lower[0]) < Fraction(1, 3) < Fraction(m.upper[0])
    assert Fraction(m.lower[1]) < Fraction(-2, 7) < Fraction(m.upper[1])
    assert m.lower[2] == -math.inf and m.upper[2] == math.inf


def test_refined_intersects_and_refuses_disjoint_enclosures():
    m = MarginEnclosures(np.array([0.0, 1.0]), np.array([2.0, 3.0]), "fast")
    r = m.refined([0], np.array([0.5]), np.array([5.0]))
    assert r.lower.tolist() == [0.5, 1.0] and r.upper.tolist() == [2.0, 3.0]
    assert r.redone == 1 and r.method == "fast+arb"
    with pytest.raises(ArithmeticError):
        m.refined([1], np.array([4.0]), np.array([5.0]))


def test_the_enclosures_refuse_nan_and_reversed_pairs_and_cannot_be_changed_afterwards():
    with pytest.raises(ValueError):
        MarginEnclosures(np.array([np.nan]), np.array([1.0]))
    with pytest.raises(ValueError):
        MarginEnclosures(np.array([2.0]), np.array([1.0]))
    lo = np.array([0.0])
    m = MarginEnclosures(lo, np.array([1.0]))
    lo[0] = 5.0
    assert m.lower[0] == 0.0
    with pytest.raises(ValueError):
        m.lower[0] = 3.0


def test_error_and_undecided_counts():
    m = MarginEnclosures(np.array([-2.0, -1.0, 0.0, 1.0]), np.array([-1.0, 1.0, 0.0, 2.0]))
    assert errors_lower(m) == 1
    assert undecided(m) == 2  # [-1, 1] and the tie [0, 0]


def test_straddling_selects_the_samples_a_sharper_pass_could_decide():
    m = MarginEnclosures(np.array([-1.0, 0.5, 7.5, 9.0]), np.array([0.1, 0.6, 8.5, 10.0]))
    assert m.straddling([0.0, 8.0]).tolist() == [0, 2]


@settings(max_examples=100, deadline=None)
@given(st.lists(finite, max_size=60))
def test_exact_float_sum_is_the_rational_sum(values):
    assert exact_float_sum(np.array(values, dtype=np.float64)) == sum((Fraction(v) for v in values), Fraction(0))


# ------------------------------------------------------------------------------- k read-out rows


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 5), st.lists(st.tuples(finite, st.floats(0, 10)), min_size=2, max_size=30), st.data())
def test_k_row_margins_enclose_f_y_minus_the_largest_other_output(k, pairs, data):
    # brute force over the corners is not needed: the margin is monotone in f_y and antitone in each
    # f_y', so its extremes over the box are at lo_y - max hi_y' and hi_y - max lo_y'
    n = len(pairs) // k
    if n == 0:
        return
    c = np.array([p[0] for p in pairs[: n * k]]).reshape(n, k)
    r = np.array([p[1] for p in pairs[: n * k]]).reshape(n, k)
    lo, hi = c - r, c + r
    y = np.array(data.draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n)))
    m = from_output_enclosures(lo, hi, y)
    for i in range(n):
        others = [j for j in range(k) if j != y[i]]
        exact_lo = Fraction(lo[i, y[i]]) - max(Fraction(hi[i, j]) for j in others)
        exact_hi = Fraction(hi[i, y[i]]) - max(Fraction(lo[i, j]) for j in others)
        assert Fraction(m.lower[i]) <= exact_lo and Fraction(m.upper[i]) >= exact_hi


def test_one_read_out_row_is_the_binary_margin_and_labels_are_checked():
    lo, hi = np.array([1.0, -3.0, -np.inf]), np.array([2.0, -1.0, np.inf])
    m = from_output_enclosures(lo, hi, np.array([1, -1, 1]))
    assert m.lower.tolist() == [1.0, 1.0, -math.inf] and m.upper.tolist() == [2.0, 3.0, math.inf]
    with pytest.raises(ValueError):
        from_output_enclosures(lo, hi, np.array([0, 1, 1]))  # binary labels are +-1
    with pytest.raises(ValueError):
        from_output_enclosures(np.zeros((2, 3)), np.ones((2, 3)), np.array([0, 3]))  # class 3 of 3


def test_a_tie_between_classes_is_never_a_certified_positive_margin():
    lo = np.array([[1.0, 1.0, 0.0]])
    m = from_output_enclosures(lo, lo.copy(), np.array([0]))
    assert m.lower[0] <= 0 <= m.upper[0] and count_upper(m, arb(0)) == 1


# ------------------------------------------------------------------------------- the exact form


def test_the_exact_centre_radius_form_gives_the_exact_edge_sums():
    rng = np.random.default_rng(2)
    g = rng.uniform(0.5, 3.5, size=40)
    eps = arb(1) / 3 * arb(2) ** -30  # an exact point that is not a binary64 number
    eps = eps.upper()
    m = from_center_radius(g, eps)
    assert m.center is not None and m.radius == eps
    rho = Fraction(4)
    man, exp = eps.mid().man_exp()
    e = Fraction(int(man)) * Fraction(2) ** int(exp)
    want_up = sum((_ramp(Fraction(v) - e, rho) for v in g.tolist()), Fraction(0))
    want_lo = sum((_ramp(Fraction(v) + e, rho) for v in g.tolist()), Fraction(0))
    U, L = ramp_loss_sums(m, arb(4))
    assert _contains(U, want_up) and _contains(L, want_lo)
    # the float endpoints are the outward rounding of the same enclosure
    for v, lo, hi in zip(g.tolist(), m.lower.tolist(), m.upper.tolist()):
        assert Fraction(lo) <= Fraction(v) - e and Fraction(hi) >= Fraction(v) + e
    sub = m.subset(np.arange(40) < 10)
    assert sub.n == 10 and sub.radius == eps and np.array_equal(sub.center, g[:10])
    assert m.refined([0], np.array([-10.0]), np.array([10.0])).center is None


def _contains(ball: arb, x: Fraction) -> bool:
    from flint import fmpq

    return bool((ball - arb(fmpq(x.numerator, x.denominator))).contains(0))
