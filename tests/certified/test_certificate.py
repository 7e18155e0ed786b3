"""The certificate schema's one rule for numbers (certified/certificate.py): beside every ball field
``k`` the floats ``k_upper`` / ``k_lower``, directed, checked against the ball they stand beside.

The reference reads the printed ball ``"[mid +/- rad]"`` with :class:`fractions.Fraction` and
:class:`decimal.Decimal` only, so it shares no code with ``certified.arb``."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from fractions import Fraction

import pytest
from flint import arb

from specbound.certified.certificate import (
    BallText, VerificationReport, ball, check_floats, endpoints, is_float_field, with_floats,
)


def printed_ends(text: str) -> tuple[Fraction, Fraction]:
    """(lower, upper) of a printed ball, read by hand: ``[m +/- r]`` or a bare exact decimal ``m``."""
    body = text.strip("[]")
    mid, _, rad = body.partition("+/-")
    m, r = Fraction(Decimal(mid.strip())), Fraction(Decimal(rad.strip() or "0"))
    return m - r, m + r


BALLS = [arb(1) / 3, -arb(2) / 7, arb(2), arb(0), arb("1e-300") / 3, arb("1.5e200") * 7,
         arb(10) ** 400, -(arb(10) ** 400), arb("[0.25 +/- 1e-5]")]


@pytest.mark.parametrize("x", BALLS, ids=str)
def test_the_floats_lie_on_the_safe_side_of_the_printed_ball(x):
    text = ball(x)
    lo, hi = printed_ends(text)
    up, down = endpoints(text)
    big = Fraction(1.7976931348623157e308)
    assert up is None if hi > big else Fraction(up) >= hi  # None: beyond binary64 (JSON has no infinity)
    assert down is None if lo < -big else Fraction(down) <= lo


@pytest.mark.parametrize("x", [b for b in BALLS if abs(b.mid()) < 1e300 and b.rad() <= 1e-15 * abs(b.mid())],
                         ids=str)
def test_the_floats_of_a_narrow_ball_are_the_nearest_safe_binary64(x):
    # Arb keeps a radius to 30 bits, so "nearest" holds when the radius is far below an ulp
    lo, hi = printed_ends(ball(x))
    up, down = endpoints(ball(x))
    assert Fraction(math.nextafter(up, -math.inf)) < hi and Fraction(math.nextafter(down, math.inf)) > lo


def test_every_ball_field_gets_its_floats_wherever_it_is_added():
    # a field another route adds later (any name, any depth) follows the same rule untouched
    record = {"result": {"bound": ball(arb(1) / 3), "label": "x", "p": "1/3"},
              "occam": {"routes": [{"tail": ball(arb(2) / 3), "count": 4}]}}
    out = with_floats(record)
    assert list(out["result"]) == ["bound", "bound_upper", "bound_lower", "label", "p"]
    assert set(out["occam"]["routes"][0]) == {"tail", "tail_upper", "tail_lower", "count"}
    assert json.loads(json.dumps(out))["result"]["bound_upper"] == out["result"]["bound_upper"]
    assert is_float_field(out["result"], "bound_upper") and not is_float_field(out["result"], "label")


def test_a_ball_field_cannot_share_a_name_with_its_floats():
    with pytest.raises(ValueError, match="float endpoints"):
        with_floats({"count": BallText("[1 +/- 0.5]"), "count_upper": BallText("2")})


def test_a_forged_float_is_a_mismatch_and_a_true_one_is_not():
    doc = json.loads(json.dumps(with_floats({"a": [{"x": ball(arb(1) / 3)}], "y": ball(arb(5))})))
    rep = VerificationReport()
    check_floats(rep, doc)
    assert rep.valid and rep.checked == 4
    for path, forged in ((("a", 0, "x_upper"), 0.3333), (("a", 0, "x_lower"), 0.34), (("y_upper",), "5"),
                         (("y_lower",), None), (("y_upper",), True)):
        bad = json.loads(json.dumps(doc))
        target = bad
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = forged
        rep = VerificationReport()
        check_floats(rep, bad)
        assert not rep.valid and len(rep.mismatches) == 1, (path, forged)
