"""The verdict: what a certified number is, decided once (specbound/verdict.py).

The expected words are spelled out here by hand; the rules they encode are the contract: "certified"
heads only a proven bound with a certified empirical term (or the certified parts of a partial
result, which is headed NOT a bound), a partial value >= 1 is already vacuous, and a scope block that
does not say "proven" is read as not proven.
"""

from __future__ import annotations

import dataclasses
import itertools
from fractions import Fraction

import pytest

from specbound.scope import ModelScope, scope_block, scope_lines
from specbound.verdict import Verdict, proven_in, verdict_of


def _v(bound=None, partial=Fraction(1, 10), proven=True, certified=True) -> Verdict:
    return verdict_of(bound_upper=None if bound is None else Fraction(bound), partial_upper=Fraction(partial),
                      proven=proven, empirical_certified=certified)


def test_a_proven_certified_bound_below_one_is_a_certified_bound():
    v = _v(bound=Fraction(1, 3), partial=Fraction(1, 4))
    assert (v.is_bound, v.proven, v.vacuous, v.empirical_certified) == (True, True, False, True)
    assert v.label == "certified bound"
    assert v.headline == "certified bound on the 0-1 risk: 0.333334"  # rounded up, 6 digits


def test_a_bound_at_or_above_one_is_vacuous():
    for upper in (Fraction(1), Fraction(49, 10)):
        v = _v(bound=upper)
        assert v.vacuous is True and v.label == "vacuous (>= 1)"
        assert v.headline.startswith("certified bound on the 0-1 risk: ") and v.headline.endswith("  vacuous (>= 1)")


def test_a_partial_value_at_or_above_one_is_already_vacuous():
    # any bound built on complexity + confidence >= 1 is >= 1 (issue 29 item 1)
    v = _v(bound=None, partial=Fraction(27, 10), certified=False)
    assert (v.is_bound, v.vacuous) == (False, True)
    assert v.label == "NOT A BOUND (no empirical term); vacuous (>= 1)"
    assert v.headline == "certified complexity + confidence (NOT a bound: no empirical term): 2.7  vacuous (>= 1)"


def test_a_partial_value_below_one_leaves_vacuous_unknown():
    v = _v(bound=None, partial=Fraction(1, 100), certified=False)
    assert v.vacuous is None and v.label == "NOT A BOUND (no empirical term)"
    assert "NOT a bound" in v.headline and not v.headline.startswith("certified bound")


def test_a_user_supplied_empirical_term_is_never_headed_certified():
    v = _v(bound=Fraction(1, 5), certified=False)
    assert v.empirical_certified is False
    assert v.label == "bound (empirical term user-supplied, NOT certified)"
    assert v.headline == "bound on the 0-1 risk (empirical term user-supplied, NOT certified): 0.2"


def test_an_unproven_constant_comes_first_in_label_and_headline():
    v = _v(bound=Fraction(1, 5), proven=False)
    assert v.label.startswith("NOT A PROVEN BOUND")
    assert v.headline == "bound on the 0-1 risk (NOT A PROVEN BOUND): 0.2"


@pytest.mark.parametrize("has_bound,vacuous,proven,certified", list(itertools.product((True, False), repeat=4)))
def test_certified_is_said_only_of_what_is_proven_and_certified(has_bound, vacuous, proven, certified):
    bound = (Fraction(3, 2) if vacuous else Fraction(1, 2)) if has_bound else None
    v = _v(bound=bound, partial=Fraction(3, 2) if vacuous else Fraction(1, 2), proven=proven, certified=certified)
    assert v.headline.startswith("certified bound") == (has_bound and proven and certified)
    assert (v.label == "certified bound") == (has_bound and proven and certified and not vacuous)
    assert ("NOT A PROVEN BOUND" in v.label) == (not proven) == ("NOT A PROVEN BOUND" in v.headline)
    assert ("vacuous (>= 1)" in v.label) == vacuous == ("vacuous (>= 1)" in v.headline)
    assert v.empirical_certified == (has_bound and certified)


def test_a_verdict_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _v(bound=Fraction(1, 2)).label = "certified bound"  # type: ignore[misc]


@pytest.mark.parametrize("block", [None, {}, {"proven": None}, {"proven": 1}, {"proven": "true"}, ["proven"]])
def test_a_scope_that_does_not_say_proven_is_not_proven(block):
    assert proven_in(block) is False


def test_a_scope_that_says_proven_is_proven():
    assert proven_in({"proven": True}) is True


def _block(verdict, overrides=()):
    return scope_block(checkpoint="m.safetensors", sha256="0" * 64, model=ModelScope(family="test"), variant="plain",
                       activation="gelu", readout="trained", empirical_kind="task", empirical_certified=True,
                       empirical_detail={"task": {"name": "t"}, "seed": 3}, n=10, margin="1",
                       overrides=list(overrides), verdict=verdict)


def test_the_scope_block_records_the_verdict():
    v = _v(bound=None, partial=Fraction(3), certified=False)
    block = _block(v)
    assert (block["proven"], block["is_bound"], block["vacuous"]) == (v.proven, v.is_bound, v.vacuous)


def test_a_proven_verdict_with_an_unproven_override_is_refused():
    low = {"name": "C_sm", "value": "0.5", "proven_value": "1", "proven": False}
    with pytest.raises(ValueError):
        _block(_v(bound=Fraction(1, 2)), [low])
    assert _block(_v(bound=Fraction(1, 2), proven=False), [low])["proven"] is False


def test_scope_lines_of_a_block_without_proven_say_not_proven():
    block = _block(_v(bound=Fraction(1, 2)))
    del block["proven"]
    assert any("NOT A PROVEN BOUND" in line for line in scope_lines(block))
