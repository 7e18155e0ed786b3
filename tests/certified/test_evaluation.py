"""One driver, two contexts: each edge of the plan is treated the same way by the certified (Arb)
and the float (numpy) evaluation (the policy of certified/evaluation.py, docs/design.md section 2).

The network is small and dyadic; every expected value below is either a refusal, an exact zero, an
exact rational computed here with Fractions, or the theorem's own field called directly.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from flint import arb

from specbound.certified.arb import WORK_PREC, precision
from specbound.certified.bound import arb_theorem, certified_facts, certify_bound, grid_m, q
from specbound.certified.evaluation import DUDLEY_OVERSHOOT, evaluate, network
from specbound.certified.factored import enclose
from specbound.errors import CertificationError, SpecboundError
from specbound.matrices import AnalysisWeights, NamedMatrix, ordered
from specbound.numeric.context import NumpyContext
from specbound.numeric.crosscheck import crosscheck
from specbound.numeric.evaluation import FloatFacts, evaluate_plan
from specbound.numeric.terms import compiled_theorem, network_facts
from specbound.plan import BoundPlan, BoundSettings


def _dyadic(rng, shape, scale=1.0):
    return np.round(rng.standard_normal(shape) * scale * 64) / 64


def network_of(seed=0, zero_head=False, readout="random") -> AnalysisWeights:
    """2 layers, 2 heads, width 4 (J = 12); ``zero_head``: L1.H1.QK has a zero factor."""
    rng = np.random.default_rng(seed)
    mats = []
    for l in range(2):
        for h in range(2):
            left = np.zeros((4, 2)) if (zero_head and l == 1 and h == 1) else _dyadic(rng, (4, 2))
            mats.append(NamedMatrix(l, h, "QK", left, _dyadic(rng, (2, 4))))
            mats.append(NamedMatrix(l, h, "V_tilde", _dyadic(rng, (4, 2), 0.7), _dyadic(rng, (2, 4), 0.7)))
        mats.append(NamedMatrix(l, -1, "M_in", _dyadic(rng, (4, 5), 0.5)))
        mats.append(NamedMatrix(l, -1, "M_out", _dyadic(rng, (5, 4), 0.5)))
    w = {"random": _dyadic(rng, (4,)), "zero": np.zeros(4), "none": None}[readout]
    return AnalysisWeights(matrices=ordered(mats), num_layers=2, num_heads=2, width=4, head_dim=2, ff_dim=5,
                           activation="gelu", readout=w)


SETTINGS = BoundSettings(n=500, delta=0.05, margin=0.5, empirical=0.125)


def plan_for(w, st=SETTINGS, p="mixed", **changes) -> BoundPlan:
    m, J = grid_m(st, w), len(w.matrices)
    p_index = {"mixed": [(0, 1, m, 2 * m, 3)[j % 5] for j in range(J)], "zeros": [0] * J}[p]
    plan = BoundPlan(m=m, p_index=tuple(p_index), k_rho=-1, u=tuple(0.02 + 0.01 * j for j in range(J)),
                     u_w=0.03, alpha_D=0.01, vartheta=(0.5 / J,) * J, vartheta_w=0.25)
    return replace(plan, **changes)


def both(w, plan, st=SETTINGS):
    """(certified, numeric) evaluations of one plan; each an exception instance when refused."""
    out = []
    for run in (lambda: certify_bound(w, st, plan, [enclose(x) for x in w.matrices], arb(st.empirical)),
                lambda: evaluate_plan(w, st, plan)):
        try:
            out.append(run())
        except SpecboundError as exc:
            out.append(exc)
    return out


def assert_refused_in_both(w, plan, match, st=SETTINGS):
    cert, num = both(w, plan, st)
    for got in (cert, num):
        assert isinstance(got, CertificationError), got
        assert match in str(got) and "\n" not in str(got)


# -- alpha_D --------------------------------------------------------------------------------------

def test_alpha_D_above_the_dudley_limit_is_refused_in_both_contexts():
    w = network_of()
    assert_refused_in_both(w, plan_for(w, alpha_D=0.25 + 2.0 ** -40), "exceeds the Dudley limit 1/4")


def test_alpha_D_at_the_dudley_limit_makes_every_piece_exactly_zero_in_both_contexts():
    # on P_5 the float closed form at p = 1/5, 3/5 leaves a residue of one ulp (2^p - 4 (1/4)^(1 - p/2))
    w, st = network_of(), replace(SETTINGS, grid_m=5)
    cert, num = both(w, plan_for(w, st, alpha_D=0.25), st)
    assert {r.p for r in cert.matrices} >= {0, Fraction(1, 5), Fraction(3, 5), 1, 2}
    assert [(r.dd_piece, math.copysign(1.0, r.dd_piece)) for r in num.matrices] == [(0.0, 1.0)] * 12  # +0
    for r in cert.matrices:
        assert r.dd_piece.contains(0) and r.dd_piece.rad() < 1e-60  # the ball of a vanishing term
    # DD is then the closed form with nothing to sum, in both
    ct = arb_theorem(st, "gelu")
    with precision(WORK_PREC):
        dd0 = ct("dd_closed", B_w=cert.B_w, N=4, D_sum=arb(0), alpha_D=q(Fraction(1, 4)), n=500, rho=cert.rho,
                 vartheta_w=q(cert.vartheta_w))
    assert cert.DD.overlaps(dd0) and dd0.contains(num.dd)


def test_a_ball_that_must_vanish_but_excludes_zero_is_refused():
    ctx = certified_facts(network_of(), SETTINGS, [None] * 12, None)[0]
    x = ctx.vector([arb(0), arb("1e-30 +/- 1e-31")])
    assert ctx.vanish(np.array([True, False]), x) is x
    with pytest.raises(CertificationError, match="excludes 0"):
        ctx.vanish(np.array([True, True]), x)


# -- Dudley weights -------------------------------------------------------------------------------

def _recorded_weights_are_evaluated(cert, num, ct_arb, ct_num):
    # each matrix's piece is the field at the *recorded* weight, in both contexts
    for rc, rn in zip(cert.matrices, num.matrices):
        if rc.p == 0 or rc.p == 2:
            continue
        args = dict(alpha_D=q(cert.alpha_D), c=rc.c_radius, d=sum(rc.shape), kappa=rc.kappa, p=q(rc.p), s=rc.s_radius)
        with precision(WORK_PREC):
            assert str(ct_arb("dd_matrix_piece", vartheta=q(rc.vartheta), **args)) == str(rc.dd_piece)
        assert float(ct_num("dd_matrix_piece", alpha_D=float(cert.alpha_D), c=rn.c, d=float(sum(rc.shape)),
                            kappa=rn.kappa, p=float(rn.p), s=rn.s, vartheta=rn.vartheta)) == rn.dd_piece


def test_dudley_weights_that_overshoot_by_rounding_are_rescaled_and_the_rescaled_ones_evaluated():
    w = network_of()
    J = len(w.matrices)
    third = 1 / (J + 1)  # 13 * fl(1/13) > 1 exactly: a float overshoot
    plan = plan_for(w, vartheta=(third,) * J, vartheta_w=third)
    total = Fraction(third) * (J + 1)
    assert 1 < total <= 1 + DUDLEY_OVERSHOOT
    cert, num = both(w, plan)
    assert [r.vartheta for r in cert.matrices] == [Fraction(third) / total] * J
    assert cert.vartheta_w == Fraction(third) / total
    assert sum(r.vartheta for r in cert.matrices) + cert.vartheta_w == 1
    assert [r.vartheta for r in num.matrices] == [float(Fraction(third) / total)] * J
    _recorded_weights_are_evaluated(cert, num, arb_theorem(SETTINGS, "gelu"), compiled_theorem(SETTINGS, "gelu"))


def test_dudley_weights_within_one_are_evaluated_as_given():
    w = network_of()
    cert, num = both(w, plan_for(w))
    assert [r.vartheta for r in cert.matrices] == [Fraction(0.5 / 12)] * 12 and cert.vartheta_w == Fraction(1, 4)
    assert [r.vartheta for r in num.matrices] == [0.5 / 12] * 12
    _recorded_weights_are_evaluated(cert, num, arb_theorem(SETTINGS, "gelu"), compiled_theorem(SETTINGS, "gelu"))


def test_dudley_weights_summing_past_one_are_refused_in_both_contexts():
    w = network_of()
    J = len(w.matrices)
    assert_refused_in_both(w, plan_for(w, vartheta=(0.5,) * J), "sum to more than 1")
    # just beyond the rounding allowance
    over = float(1 + 2 * DUDLEY_OVERSHOOT)
    assert_refused_in_both(w, plan_for(w, vartheta=(over / (J + 1),) * J, vartheta_w=over / (J + 1)),
                           "sum to more than 1")


def test_a_fixed_readouts_weight_and_loss_scale_are_ignored_in_both_contexts():
    w = network_of()
    st = replace(SETTINGS, readout="fixed")
    plain = both(w, plan_for(w, vartheta_w=0.0, u_w=1.0), st)
    odd = both(w, plan_for(w, vartheta_w=7.0, u_w=-1.0), st)  # would be refused for a trained read-out
    assert str(plain[0].bound) == str(odd[0].bound) and plain[1].bound == odd[1].bound
    assert odd[0].vartheta_w is None and odd[0].u_w is None


@pytest.mark.parametrize("change, what", [
    ({"u": (0.0,) + (0.02,) * 11}, "u must be"),
    ({"u_w": 0.0}, "u_w must be"),
    ({"vartheta_w": 0.0}, "vartheta_w must be"),
    ({"vartheta": (-0.01,) + (0.01,) * 11}, "vartheta must be"),
    ({"alpha_D": float("nan")}, "alpha_D must be"),
    ({"alpha_D": 0.0}, "alpha_D must be"),
])
def test_nonpositive_or_nan_choices_are_refused_in_both_contexts(change, what):
    w = network_of()
    assert_refused_in_both(w, plan_for(w, **change), what)


# -- the grid, the network, the read-out ----------------------------------------------------------

@pytest.mark.parametrize("change, what", [
    (lambda p: {"m": p.m + 1}, "plan uses the grid m"),
    (lambda p: {"p_index": (2 * p.m + 1,) + p.p_index[1:]}, "is not on P_m"),
    (lambda p: {"p_index": p.p_index[1:], "u": p.u[1:], "vartheta": p.vartheta[1:]}, "plan covers 11 matrices"),
])
def test_a_plan_for_another_grid_or_network_is_refused_in_both_contexts(change, what):
    w = network_of()
    plan = plan_for(w)
    assert_refused_in_both(w, replace(plan, **change(plan)), what)


def test_a_zero_fixed_readout_is_refused_in_both_contexts():
    w = network_of(readout="zero")
    assert_refused_in_both(w, plan_for(w), "read-out is zero", replace(SETTINGS, readout="fixed"))


def test_a_missing_readout_is_a_fixed_unit_vector_in_both_contexts():
    w = network_of(readout="none")
    cert, num = both(w, plan_for(w))
    assert cert.readout == num.readout == "fixed" and cert.B_w == 1 and num.B_w == 1.0
    report = crosscheck(num, cert)
    assert report.ok, report.summary()


def test_a_zero_matrix_at_p0_adds_exactly_nothing_to_entropy_piece_and_U_in_both_contexts():
    w = network_of(zero_head=True)
    cert, num = both(w, plan_for(w, p="zeros"))
    j = [m.name for m in w.matrices].index("L1.H1.QK")
    assert cert.matrices[j].proven_rank == 0 and num.matrices[j].rank_used == 0
    assert cert.matrices[j].ss_entropy == 0 and cert.matrices[j].dd_piece == 0
    assert num.matrices[j].ss_entropy == 0.0 and num.matrices[j].dd_piece == 0.0
    # U = sum of the other matrices' u plus u_w: the zero matrix's u_j is not counted
    u = [Fraction(x) for i, x in enumerate(plan_for(w).u) if i != j] + [Fraction(0.03)]
    ct = arb_theorem(SETTINGS, "gelu")
    H = sum((r.ss_entropy for r in cert.matrices), arb(0))
    with precision(WORK_PREC):
        H += ct("ss_readout_entropy", B_w=cert.B_w, N=4, rho=cert.rho, u_w=q(0.03))
        assert cert.ss_exact.overlaps(ct("ss_objective", H_total=H, U_total=q(sum(u)), n=500))


def test_a_zero_matrix_asked_at_p_above_zero_is_rounded_to_p0_when_certified_and_refused_in_float():
    # the one fact-level difference (docs/design.md section 2): the certified rounding applies the
    # rule of proofs_notes/theory.md section 6 (a proven zero matrix is at p = 0); the float rounding
    # refuses a plan its planner never makes
    w = network_of(zero_head=True)
    m = grid_m(SETTINGS, w)
    cert, num = both(w, plan_for(w, p_index=(m,) * 12))
    j = [mt.name for mt in w.matrices].index("L1.H1.QK")
    assert cert.matrices[j].p == 0 and cert.matrices[j].ss_entropy == 0
    assert isinstance(num, SpecboundError) and "zero matrix L1.H1.QK" in str(num)


# -- one driver -----------------------------------------------------------------------------------

def _kappa_total(ctx, facts, net, plan):
    """A toy route: what a second theorem route looks like (one function against the context)."""
    return ctx.sum(net.kappa)


def test_a_further_route_is_one_function_run_by_the_same_driver_in_both_contexts():
    w = network_of()
    plan = plan_for(w)
    ctx, facts, _ = certified_facts(w, SETTINGS, [enclose(x) for x in w.matrices], arb(0))
    with precision(WORK_PREC):
        ball = evaluate(ctx, facts, plan, route=_kappa_total).terms
        shared = network(ctx, facts, plan)
    fctx = NumpyContext(compiled_theorem(SETTINGS, "gelu"))
    value = evaluate(fctx, FloatFacts(network_facts(w), SETTINGS), plan, route=_kappa_total).terms
    assert ball.overlaps(sum(shared.kappa, arb(0)))
    lo, hi = ball.lower(), ball.upper()
    assert float(lo) * (1 - 1e-12) <= value <= float(hi) * (1 + 1e-12)
