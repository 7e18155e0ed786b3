"""The k-class theorem (proofs_notes/k_class.md) certified on a tiny network with a 3-row read-out W,
against the hand computations of tests/certified/test_hand_bound.py and test_occam_hand.py run with the
note's changes typed in by hand: the factor 2 of the margin operator in every kappa and in the read-out's
scale (c), the read-out covered in k N dimensions at the radius of W's *largest* row norm (b), the Occam
route's output cover at gamma/4 and read-out weight k N (d).  Nothing is imported from ``derivation``;
tests/properties/test_mutation_k_class.py shows each check fails when one of these is wrong.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import mpmath
import numpy as np
from flint import arb

from specbound.certified.bound import certify_bound
from specbound.certified.factored import enclose
from specbound.certified.radii import exact_value
from specbound.matrices import AnalysisWeights
from specbound.plan import BoundSettings, OccamPlan

from .test_hand_bound import EMP, M_GRID, N_SAMPLES, contains, hand, mpf, plan, tiny
from .test_occam_hand import K_GAMMA, OCCAM_P, ROUTES, hand_occam, margins

#: rows of norms 3/4 (the largest), 1/2 and sqrt(2)/4: the mean and the smallest give other grid points
W = np.array([[0.75, 0.0], [0.0, 0.5], [0.25, 0.25]])
K = W.shape[0]


def tiny_k() -> AnalysisWeights:
    return replace(tiny(), readout=W)


def certified_k(routes=("rademacher",), weights: AnalysisWeights | None = None):
    w = weights if weights is not None else tiny_k()
    st = BoundSettings(n=N_SAMPLES, delta=0.05, routes=routes)
    pl = plan()
    kw = {}
    if "occam" in routes:
        gamma = float(Fraction(17, 16) ** K_GAMMA)
        pl = replace(pl, occam=OccamPlan(m=M_GRID, p_index=tuple(int(q * M_GRID) for q in OCCAM_P), k_gamma=K_GAMMA))
        kw["margins"] = margins(gamma)[0]
    return certify_bound(w, st, pl, [enclose(x) for x in w.matrices], arb(EMP.numerator) / EMP.denominator, **kw)


def test_the_certified_k_class_rademacher_route_equals_the_hand_computation():
    cb = certified_k()
    with mpmath.workdps(50):
        ref = hand(lip=2, k_rows=K, readout_norm=Fraction(0.75))
    assert cb.k_w == ref["k_w"]
    balls = cb.balls()
    for key in ("ss_closed", "ss_exact", "SS", "DD", "Lambda", "confidence", "complexity", "bound"):
        assert contains(balls[key], ref[key]), (key, balls[key], ref[key])
        assert balls[key].rad() < 1e-30 * (1 + abs(float(ref[key]))), key
    assert mpf(exact_value(cb.upper)) >= ref["bound"] * (1 - mpmath.mpf(10) ** -40)


def test_the_certified_k_class_occam_route_equals_the_hand_computation():
    cb = certified_k(ROUTES)
    gamma = float(Fraction(17, 16) ** K_GAMMA)
    _, count = margins(gamma)
    o = cb.occam
    assert o.count == count
    with mpmath.workdps(50):
        ref = hand_occam(count, lip=2, k_rows=K, readout_norm=Fraction(0.75))
    for key, ball in (("gamma", o.gamma), ("H", o.H), ("Lambda", o.Lambda), ("C", o.mass)):
        assert contains(ball, ref[key]), (key, ball, ref[key])
    for rec, ent, share in zip(o.matrices, ref["entropies"], ref["shares"]):
        assert contains(rec.entropy, ent) and contains(rec.share, share)
    up = mpf(exact_value(o.bound.upper()))
    assert ref["bound"] * (1 - mpmath.mpf(10) ** -40) <= up <= ref["bound"] * (1 + mpmath.mpf(10) ** -9)


def test_the_read_out_radius_is_the_largest_row_norm():
    cb = certified_k()
    assert contains(cb.readout_norm, mpmath.mpf(3) / 4)
    # another row order, the same radius; a larger second row takes over
    assert certified_k(weights=replace(tiny(), readout=W[::-1].copy())).k_w == cb.k_w
    bigger = W.copy()
    bigger[2] = [1.0, 1.0]
    assert contains(certified_k(weights=replace(tiny(), readout=bigger)).readout_norm, mpmath.sqrt(2))


def test_one_read_out_row_keeps_the_binary_theorem():
    binary = certify_bound(tiny(), BoundSettings(n=N_SAMPLES, delta=0.05), plan(),
                           [enclose(x) for x in tiny().matrices], arb(EMP.numerator) / EMP.denominator)
    one_row = certified_k(weights=replace(tiny(), readout=W[:1].copy()))
    assert binary.bound.upper() == one_row.bound.upper()
