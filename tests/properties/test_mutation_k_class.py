"""Mutation tests of the k-class theorem (proofs_notes/k_class.md): each wrong constant or direction,
applied alone, makes a catching test FAIL, and the catching tests pass unmutated.

mutant                                                        -> catching test
------------------------------------------------------------  ---------------------------------------------------
Occam output cover gamma/4 -> gamma/2 (read-out scale)        certified/test_k_class_hand.py (Occam: H, C, bound)
Occam output cover gamma/4 -> gamma/2 (matrix scales)         the assembly's guard eps_j = vartheta/(2 kappa)
ramp after the margin operator 2/rho -> 1/rho                 certified/test_k_class_hand.py (Rademacher)
read-out cover in N instead of k N dimensions                 certified/test_k_class_hand.py (Rademacher)
read-out weight N instead of k N (Occam allocation)           certified/test_k_class_hand.py (Occam shares, H)
read-out radius: mean row norm instead of the largest         certified/test_k_class_hand.py (k_w, bound)
read-out radius: smallest row norm instead of the largest     certified/test_k_class_hand.py (k_w, bound)
a tie counted as correct (lower end rounded up, not down)     certified/test_k_class_margins.py (ties)
margin lower end lo_y - max lo_c (not max hi_c), float pass   certified/test_k_class_margins.py (brute force)
margin lower end lo_y - max lo_c (not max hi_c), Arb pass     certified/test_k_class_margins.py (brute force)
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from flint import arb

import specbound.certified.bound as certified_bound
import specbound.certified.margins as margins_module
from specbound.certified.margins import MarginEnclosures
from specbound.derivation import symbols as S

from ..certified import test_k_class_hand as hand_k
from ..certified import test_k_class_margins as tkm
from .test_mutation_assembly import ORIGINAL, _clear_caches, fails, mutated

HAND_K = hand_k.test_the_certified_k_class_rademacher_route_equals_the_hand_computation
OCCAM_K = hand_k.test_the_certified_k_class_occam_route_equals_the_hand_computation
RADIUS = hand_k.test_the_read_out_radius_is_the_largest_row_norm
BOX = tkm.test_the_margin_enclosure_contains_the_exact_range_over_the_output_box_and_is_tight
ARB_BOX = tkm.test_the_arb_margin_ball_contains_the_exact_range_too
TIES = tkm.test_an_exact_tie_is_an_error_it_is_never_certified_correct
KC = ORIGINAL["k_class"].constants


@pytest.fixture(autouse=True)
def _fresh_caches():
    _clear_caches()
    yield
    _clear_caches()


def test_the_catching_tests_pass_unmutated():
    for test in (HAND_K, OCCAM_K, RADIUS, ARB_BOX, TIES):
        assert not fails(test), test.__name__
    assert not fails(BOX, 3)


# ------------------------------------------------------------------------ the theorem's constants


def test_occam_read_out_scale_at_gamma_over_two_is_caught():
    with mutated("k_class", constants={"eps_readout": 2 * KC["eps_readout"]}):
        assert fails(OCCAM_K)


def test_occam_matrix_scales_at_gamma_over_two_are_caught():
    with mutated("k_class", constants={"eps_matrix": 2 * KC["eps_matrix"]}):
        assert fails(OCCAM_K)


def test_ramp_constant_one_over_rho_is_caught():
    with mutated("k_class", constants={"margin_lipschitz": sp.Integer(1), "ramp_lipschitz": 1 / S.rho}):
        assert fails(HAND_K)


def test_read_out_cover_in_n_dimensions_is_caught():
    entropy = KC["readout_entropy"] / S.k_cls
    with mutated("k_class", constants={"readout_entropy": entropy}, covering=entropy):
        assert fails(HAND_K)


def test_read_out_weight_n_is_caught():
    with mutated("k_class", constants={"weight_readout": S.N}):
        assert fails(OCCAM_K)


# ------------------------------------------------------------------------ the read-out radius


def _row_norm_ball(pick):
    def ball(w):
        w = np.atleast_2d(np.asarray(w, dtype=np.float64))
        return arb(float(pick(np.linalg.norm(w, axis=1))))
    return ball


@pytest.mark.parametrize("pick", [np.mean, np.min], ids=["mean", "smallest"])
def test_read_out_radius_from_another_row_norm_is_caught(monkeypatch, pick):
    monkeypatch.setattr(certified_bound, "readout_ball", _row_norm_ball(pick))
    assert fails(HAND_K) or fails(RADIUS)
    assert fails(HAND_K)


# ------------------------------------------------------------------------ the certified margin


def test_a_tie_counted_as_correct_is_caught(monkeypatch):
    monkeypatch.setattr(margins_module, "_next_down", lambda a: np.nextafter(a, np.inf))
    assert fails(TIES)


def _lower_from_lo(lower, upper, labels, method="interval"):
    lo, hi, y = np.asarray(lower, float), np.asarray(upper, float), np.asarray(labels)
    rows = np.arange(lo.shape[0])
    others = np.ones(lo.shape, dtype=bool)
    others[rows, y] = False
    max_lo = np.where(others, lo, -np.inf).max(axis=1)
    return MarginEnclosures(np.nextafter(lo[rows, y] - max_lo, -np.inf), np.nextafter(hi[rows, y] - max_lo, np.inf),
                            method)


def _ball_from_lo(outputs, label):
    others = [b for c, b in enumerate(outputs) if c != label]
    top_lo = max(others, key=lambda b: float(b.lower())).lower()
    top_hi = max(others, key=lambda b: float(b.upper())).upper()
    return ((outputs[label].lower() - top_lo).lower()).union((outputs[label].upper() - top_hi).upper())


def test_margin_lower_end_from_the_lower_ends_of_the_others_is_caught(monkeypatch):
    monkeypatch.setattr(tkm, "from_output_enclosures", _lower_from_lo)
    assert fails(BOX, 3)


def test_arb_margin_lower_end_from_the_lower_ends_of_the_others_is_caught(monkeypatch):
    monkeypatch.setattr(tkm, "margin_ball", _ball_from_lo)
    assert fails(ARB_BOX)
