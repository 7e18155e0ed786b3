"""numeric/margin_sample.py: a margin sample held as values with multiplicities answers the float
planner and evaluation exactly as the array it stands for."""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

from specbound.errors import SpecboundError
from specbound.numeric.margin_sample import MarginSample, count_at, mean_over
from specbound.plan import BoundSettings
from specbound.vocabulary import ROUTES


def _spread(margins, n):
    """The definition, written out: the i-th smallest of n margins is q[floor(i m / n)]."""
    q = sorted(float(x) for x in margins)
    m = len(q)
    return np.array([q[(i * m) // n] for i in range(n)])


PILOT = np.array([0.7, -0.2, 1.5, 0.7, 2.0, 0.1, -1.0])


@pytest.mark.parametrize("n", [1, 2, 3, 6, 7, 8, 13, 50, 701])
def test_an_expanded_sample_is_the_pilot_spread_over_n_examples(n):
    sample = MarginSample.expanded(PILOT, n)
    values, counts = np.unique(_spread(PILOT, n), return_counts=True)
    assert np.array_equal(sample.values, values) and np.array_equal(sample.counts, counts) and sample.n == n


def test_the_pilot_size_gives_the_pilot_back_and_its_multiples_repeat_it():
    assert np.array_equal(np.repeat(MarginSample.expanded(PILOT, 7).values, MarginSample.expanded(PILOT, 7).counts),
                          np.sort(PILOT))
    thrice = MarginSample.expanded(PILOT, 21)
    assert np.array_equal(np.repeat(thrice.values, thrice.counts), np.repeat(np.sort(PILOT), 3))


@pytest.mark.parametrize("n", [5, 10**6, 3 * 10**18 + 1])
def test_the_count_at_any_margin_is_the_ceiling_of_the_scaled_pilot_count(n):
    # the second and third n take the int64 and the Python-integer paths (m n >= 2^62)
    sample = MarginSample.expanded(PILOT, n)
    for gamma in (-2.0, -1.0, 0.0, 0.7, 1.0, 2.0, 9.0):
        c = int(np.count_nonzero(PILOT <= gamma))
        assert int(sample.count_at(gamma)) == math.ceil(Fraction(n * c, PILOT.size))
    assert sample.n == n


def test_an_expanded_margin_sample_is_expanded_by_its_ranks():
    weighted = MarginSample(np.array([-1.0, 1.0]), np.array([1, 99]))
    assert MarginSample.expanded(weighted, 1000).counts.tolist() == [10, 990]
    assert MarginSample.expanded(weighted, 150).counts.tolist() == [2, 148]  # ceil(150/100) = 2


def test_count_and_mean_agree_with_the_array_they_stand_for():
    n = 37
    sample = MarginSample.expanded(PILOT, n)
    arr = _spread(PILOT, n)
    gammas = np.array([-1.5, -0.2, 0.3, 0.7, 5.0])
    assert np.array_equal(count_at(sample, gammas), count_at(arr, gammas))
    assert int(count_at(arr, 0.7)) == int(np.count_nonzero(arr <= 0.7))
    ramp = lambda a: np.clip(1.0 - a / 0.5, 0.0, 1.0)  # noqa: E731
    assert mean_over(sample, ramp) == pytest.approx(float(ramp(arr).mean()), rel=1e-14)


@pytest.mark.parametrize("values, counts", [
    ([], []), ([1.0, 0.5], [1, 1]), ([1.0, 1.0], [1, 1]), ([1.0], [0]), ([np.nan], [1]), ([1.0], [1.5]),
    ([1.0, 2.0], [1]),
])
def test_a_malformed_margin_sample_is_refused(values, counts):
    with pytest.raises(SpecboundError):
        MarginSample(np.array(values, dtype=np.float64), np.array(counts))


def test_expanding_to_no_examples_or_from_no_margins_is_refused():
    with pytest.raises(SpecboundError):
        MarginSample.expanded(PILOT, 0)
    with pytest.raises(SpecboundError):
        MarginSample.expanded(np.array([]), 5)


def test_the_float_planner_and_evaluation_read_a_margin_sample_as_its_array(tiny_weights):
    # both routes: the same plan (margin, p, gamma) and the same estimates from the sample and the array
    from specbound.numeric.evaluation import evaluate_facts
    from specbound.numeric.planner import plan_for
    from specbound.numeric.terms import compiled_theorem, network_facts

    rng = np.random.default_rng(5)
    pilot = rng.normal(0.8, 0.5, size=40)
    n = 173
    settings = BoundSettings(n=n, routes=ROUTES)
    ct = compiled_theorem(settings, tiny_weights.activation, tiny_weights.variant)
    facts = network_facts(tiny_weights)
    arr = _spread(pilot, n)
    sample = MarginSample.expanded(pilot, n)
    plan_a, plan_s = plan_for(ct, facts, settings, arr), plan_for(ct, facts, settings, sample)
    assert plan_a == plan_s and plan_a.occam.p_index == plan_s.occam.p_index
    assert plan_a.occam.k_gamma == plan_s.occam.k_gamma
    assert plan_a.occam.notes["count"] == plan_s.occam.notes["count"] > 0
    assert plan_a.occam.notes["estimate"] == pytest.approx(plan_s.occam.notes["estimate"], rel=1e-12)
    a = evaluate_facts(ct, facts, settings, plan_a, margins=arr)
    s = evaluate_facts(ct, facts, replace(settings), plan_s, margins=sample)
    assert a.empirical == pytest.approx(s.empirical, rel=1e-12, abs=1e-15) and a.empirical > 0
    assert a.bound == pytest.approx(s.bound, rel=1e-12)


@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory):
    from specbound.checkpoint import load_weights
    from specbound.model import AnalysisTransformer, Architecture

    path = tmp_path_factory.mktemp("tiny") / "tiny.safetensors"
    AnalysisTransformer(Architecture(1, 2, 6, 2, 4, 5, 4), init_seed=3).save(path)
    return load_weights(str(path))
