"""The wire form of Arb balls and enclosures round-trips bit for bit (certified.serialisation)."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest
from flint import arb, ctx

from specbound.certified.gram_enclosure import enclose_matrices
from specbound.certified.serialisation import (
    arb_from_wire, arb_to_wire, enclosure_from_wire, enclosure_to_wire,
)
from specbound.matrices import NamedMatrix


def same(a: arb, b: arb) -> bool:
    """Bit-identical: the same exact midpoint and the same exact radius (compared as integers)."""
    if not a.is_finite() or not b.is_finite():
        return a.str(radius=True) == b.str(radius=True)
    return a.mid().man_exp() == b.mid().man_exp() and a.rad().man_exp() == b.rad().man_exp()


def random_ball(r: random.Random) -> arb:
    with ctx.workprec(r.choice([53, 64, 200, 1000, 3000])):
        mid = arb(r.getrandbits(r.randint(1, 2900))) * arb(2) ** r.randint(-10**6, 10**6) * r.choice([1, -1])
        if r.random() < 0.3:
            return mid  # radius 0
        return arb(mid, arb(r.random()) * arb(2) ** r.randint(-10**5, 10**5))


def test_random_balls_round_trip_bit_for_bit():
    r = random.Random(7)
    for _ in range(2000):
        a = random_ball(r)
        w = pickle.loads(pickle.dumps(arb_to_wire(a)))  # what crosses the process boundary
        assert same(arb_from_wire(w), a)


EXTREME = [
    lambda: arb(0), lambda: arb(1), lambda: arb(-1), lambda: arb(0, 1), lambda: arb(-3, "1e-300"),
    lambda: arb(2) ** (10**9), lambda: -(arb(2) ** -(10**9)), lambda: arb(5e-324), lambda: arb(1.7976931348623157e308),
    lambda: arb("1e-100000", "1e-100020"), lambda: arb(0, arb(2) ** (2**40)), lambda: arb(1) / 3,
    lambda: arb("inf"), lambda: arb("nan"), lambda: arb(0, "inf"),
]


@pytest.mark.parametrize("make", EXTREME)
def test_extreme_balls_round_trip(make):
    with ctx.workprec(300):
        a = make()
    assert same(arb_from_wire(arb_to_wire(a)), a)


def test_wire_has_no_floats():
    # exact integers only: a float anywhere would mean a rounding
    w = arb_to_wire(arb(1) / 3)
    assert all(type(v) is int for v in w)


def test_the_comparison_can_fail():
    a = arb(1) / 3
    assert not same(a, a + arb(0, 2.0**-200))
    assert not same(a, a.mid())


def test_enclosures_round_trip():
    rng = np.random.default_rng(3)
    mats = [NamedMatrix(0, -1, "M_in", rng.standard_normal((12, 20))),
            NamedMatrix(0, 0, "QK", rng.standard_normal((12, 3)), rng.standard_normal((3, 12))),
            NamedMatrix(0, -1, "M_out", np.zeros((20, 12)))]
    for route in ("gram-eig", "eft"):
        for enc in enclose_matrices(mats, method=route):
            back = enclosure_from_wire(pickle.loads(pickle.dumps(enclosure_to_wire(enc))))
            assert back.shape == enc.shape and back.zero_count == enc.zero_count
            assert back.method == enc.method and back.rank_cap == enc.rank_cap
            assert len(back.lower) == len(enc.lower) and len(back.upper) == len(enc.upper)
            assert all(same(x, y) for x, y in zip(back.lower + back.upper, enc.lower + enc.upper))
            for name in ("delta", "eta_u", "eta_v"):
                x, y = getattr(back, name), getattr(enc, name)
                assert (x is None and y is None) or same(x, y)
