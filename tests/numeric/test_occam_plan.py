"""The Occam route's planner (numeric/occam_plan.py): floats only choose.

The margin is a grid point (a float margin rounded down, the count taken at gamma_k itself), the
allocation is the rule (never a function of the measured norms or of S), the choice is deterministic and
locally optimal on the margin grid, and the planner's float estimate (the driver's Occam route in the
numpy context) agrees with the certified evaluation (the same function in Arb) at the same plan.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

from specbound.certified.bound import certify_bound
from specbound.certified.evaluation import evaluate, occam
from specbound.certified.factored import enclose
from specbound.certified.margins import from_center_radius
from specbound.matrices import AnalysisWeights, NamedMatrix, ordered
from specbound.numeric.context import NumpyContext
from specbound.numeric.evaluation import FloatFacts
from specbound.numeric.planner import choose_plan
from specbound.numeric.terms import compiled_theorem, network_facts
from specbound.plan import BoundSettings, OccamPlan

from .test_bound import tiny_weights

ROUTES = ("rademacher", "occam")
N = 20000


def _margins(seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(4.0, 1.5, N)


def _estimate(w, st, plan, margins):
    ct = compiled_theorem(st, w.activation, w.variant)
    return evaluate(NumpyContext(ct), FloatFacts(network_facts(w), st, margins), plan, route=occam).terms


def test_the_occam_margin_is_a_grid_point_and_the_count_is_taken_there():
    w, st, marg = tiny_weights(3), BoundSettings(n=N, routes=ROUTES), _margins()
    plan = choose_plan(w, st, margins=marg).occam
    gamma = Fraction(17, 16) ** plan.k_gamma
    assert plan.notes["gamma"] == float(gamma) and plan.margin(st) == gamma
    assert plan.notes["count"] == int(np.count_nonzero(marg <= float(gamma)))


def test_the_choice_is_deterministic_and_best_among_its_grid_neighbours():
    w, st, marg = tiny_weights(3), BoundSettings(n=N, routes=ROUTES), _margins()
    a, b = choose_plan(w, st, margins=marg).occam, choose_plan(w, st, margins=marg).occam
    assert a == b
    best = _estimate(w, st, a, marg).bound
    for dk in (-2, -1, 1, 2):
        assert best <= _estimate(w, st, replace(a, k_gamma=a.k_gamma + dk), marg).bound * (1 + 1e-12)


def test_the_shares_are_the_rule_not_the_measured_norms():
    """Scaling every matrix (other norms, other radii) leaves the rule's weights and shares unchanged."""
    w, st, marg = tiny_weights(3), BoundSettings(n=N, routes=ROUTES), _margins()
    plan = choose_plan(w, st, margins=marg).occam
    scaled = AnalysisWeights(
        matrices=ordered([NamedMatrix(m.layer, m.head, m.kind, m.left * 1.7, m.right) for m in w.matrices]),
        num_layers=w.num_layers, num_heads=w.num_heads, width=w.width, head_dim=w.head_dim, ff_dim=w.ff_dim,
        activation=w.activation, readout=w.readout)
    t1, t2 = _estimate(w, st, plan, marg), _estimate(scaled, st, plan, marg)
    assert np.array_equal(t1.weight, t2.weight) and np.array_equal(t1.share, t2.share)
    assert not np.allclose(t1.entropy, t2.entropy)  # the radii did change
    rows = [m.shape for m in w.matrices]
    assert t1.weight.tolist() == [float(min(min(m.rank_cap, r) * (a + b), a * b))
                                  for m, (a, b), r in zip(w.matrices, rows, network_facts(w).proven_rank)]


def test_the_planners_estimate_is_the_certified_value_at_the_same_plan():
    w, st, marg = tiny_weights(3), BoundSettings(n=N, routes=ROUTES), _margins()
    plan = choose_plan(w, st, margins=marg)
    encs = [enclose(m) for m in w.matrices]
    cb = certify_bound(w, st, plan, encs, None, margins=from_center_radius(marg, 1e-9))
    est = plan.occam.notes
    assert cb.occam.count == est["count"]
    assert float(cb.occam.H.mid()) == pytest.approx(est["H"], rel=1e-9)
    assert float(cb.occam.bound.mid()) == pytest.approx(est["estimate"], rel=1e-3)
    # the estimate is the kl form; the certified value is the smaller of the kl and the exact tail forms
    assert float(cb.occam.bound.mid()) <= est["estimate"] * (1 + 1e-9)


def test_without_margins_the_occam_route_is_not_planned():
    w, st = tiny_weights(3), BoundSettings(n=N, routes=ROUTES, margin=1.0)
    assert choose_plan(w, st).occam is None
    assert isinstance(choose_plan(w, st, margins=_margins()).occam, OccamPlan)
