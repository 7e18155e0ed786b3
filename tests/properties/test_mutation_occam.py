"""Mutation tests of the Occam route and of the sharpenings S1-S3: every new constant and every
inequality direction, applied one at a time, must make a catching test FAIL (and the same test passes
unmutated).

mutant                                                    -> catching test
--------------------------------------------------------  ----------------------------------------------------
occam_route: eps_w = vartheta_w gamma / 2 -> vartheta_w gamma  certified/test_occam_hand.py (H, C, bound)
occam_route: eps_j at gamma/2 -> gamma                    certified/test_occam_hand.py (the assembly's guard too)
occam_route: weight cap min(., m n) dropped               certified/test_occam_hand.py (shares, H)
route level delta/2 -> delta (log 2 dropped)              certified/test_occam_hand.py (C, bound)
K^: upper count -> a float count of the midpoints         certified/test_occam_hand.py (count)
K^: an undecided (non-finite) sample dropped              certified/test_occam_hand.py (count)
K^: counted at gamma_{k-1} (below the grid margin)        certified/test_occam_hand.py (count, gamma)
BinInv rounded down (one part in 10^9)                    certified/test_occam_hand.py (never below)
S1: volumetric log(1 + 2c/eps) -> log(1 + c/eps)          certified/test_hand_bound.py and test_occam_hand.py
S2: beta_c 1 + 1/(16L) -> 1 + 1/(4L)                      certified/test_hand_bound.py (grid points)
S2: beta_w 17/16 -> 2                                     certified/test_hand_bound.py (k_w)
S3: confidence coefficient 1 -> 3                         certified/test_hand_bound.py
S3: log(1/delta) -> log(2/delta)                          certified/test_hand_bound.py
"""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp
from flint import arb, fmpq

import specbound.certified.bound as certified_bound
from specbound.certified.binomial import Inversion
from specbound.certified.context import ArbContext
from specbound.certified.margins import MarginEnclosures
from specbound.derivation import symbols as S
from specbound.plan import BoundSettings

from ..certified import test_hand_bound, test_occam_hand
from .test_mutation_assembly import ORIGINAL, _clear_caches, fails, mutated

HAND = test_hand_bound.test_the_certified_bound_equals_the_hand_computation_to_many_digits
GRID = test_hand_bound.test_the_grid_points_are_the_hand_ones
OCCAM = test_occam_hand.test_the_certified_occam_route_equals_the_hand_computation


@pytest.fixture(autouse=True)
def _fresh_caches():
    _clear_caches()
    yield
    _clear_caches()


def test_the_catching_tests_pass_unmutated():
    assert not fails(HAND) and not fails(GRID) and not fails(OCCAM)


# ---------------------------------------------------------------- the Occam route's constants


def test_readout_scale_at_gamma_instead_of_gamma_over_two_is_caught():
    with mutated("occam_route", constants={"eps_readout": S.vartheta_w * S.gamma_m}):
        assert fails(OCCAM)


def test_matrix_scale_at_gamma_instead_of_gamma_over_two_is_caught():
    eps = ORIGINAL["occam_route"].constants["eps_matrix"]
    with mutated("occam_route", constants={"eps_matrix": 2 * eps}):
        assert fails(OCCAM)


def test_volumetric_weight_cap_dropped_is_caught():
    with mutated("occam_route", constants={"weight_volumetric": sp.Integer(10**9)}):
        assert fails(OCCAM)


def test_dropping_the_route_split_is_caught(monkeypatch):
    monkeypatch.setattr(BoundSettings, "route_level", lambda self: Fraction(repr(float(self.delta))))
    assert fails(OCCAM)


# ---------------------------------------------------------------- K^ (condition C4)


def _float_count(margins: MarginEnclosures, gamma) -> int:
    return int(np.count_nonzero(margins.midpoints() <= float(gamma.mid())))


def _finite_only(margins: MarginEnclosures, gamma) -> int:
    from specbound.certified.arb import float_upper

    return int(np.count_nonzero(np.isfinite(margins.lower) & ~(margins.lower > float_upper(gamma))))


def _below_grid(margins: MarginEnclosures, gamma) -> int:
    from specbound.certified.margins import count_upper

    return count_upper(margins, gamma * 16 / 17)


@pytest.mark.parametrize("count", [_float_count, _finite_only, _below_grid],
                         ids=["float count", "undecided dropped", "count below gamma_k"])
def test_a_count_that_is_not_a_certified_upper_count_at_gamma_is_caught(monkeypatch, count):
    monkeypatch.setattr(certified_bound, "count_upper", count)
    assert fails(OCCAM)


# ---------------------------------------------------------------- BinInv direction


def test_bininv_rounded_down_is_caught(monkeypatch):
    original = ArbContext.bininv

    def down(self, n, k, C):
        inv = original(self, n, k, C)
        lower = inv.value * arb(fmpq(10**9 - 1, 10**9))
        return Inversion(lower, inv.kl, inv.tail, inv.method)

    monkeypatch.setattr(ArbContext, "bininv", down)
    assert fails(OCCAM)


# ---------------------------------------------------------------- S1, S2, S3


def test_volumetric_constant_2_to_1_is_caught():
    vol = ORIGINAL["lowrank_cover"].constants["unconstrained"]
    mutant = vol.xreplace({sp.Integer(2) * S.c / S.eps: S.c / S.eps})
    assert mutant != vol
    with mutated("lowrank_cover", constants={"unconstrained": mutant}):
        assert fails(OCCAM) or fails(HAND)


def _settings_with(**fixed):
    return functools.partial(BoundSettings, **fixed)


def test_coarser_beta_c_is_caught(monkeypatch):
    L = 1  # the hand network's depth: 1 + 1/(4L) = 5/4
    monkeypatch.setattr(test_hand_bound, "BoundSettings", _settings_with(beta_c=Fraction(5, 4)))
    assert fails(GRID) and L == 1


def test_coarser_beta_w_is_caught(monkeypatch):
    monkeypatch.setattr(test_hand_bound, "BoundSettings", _settings_with(beta_w=Fraction(2)))
    assert fails(GRID)


def test_two_mcdiarmid_steps_coefficient_3_is_caught():
    conf = ORIGINAL["rademacher_generalization"].constants["confidence"]
    with mutated("rademacher_generalization", constants={"confidence": 3 * conf}):
        assert fails(HAND)


def test_log_2_over_delta_is_caught():
    conf = ORIGINAL["rademacher_generalization"].constants["confidence"]
    mutant = conf.xreplace({sp.log(1 / S.delta): sp.log(2 / S.delta)})
    assert mutant != conf
    with mutated("rademacher_generalization", constants={"confidence": mutant}):
        assert fails(HAND)
