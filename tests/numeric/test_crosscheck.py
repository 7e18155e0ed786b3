"""The float evaluation lies inside the certified one, and the cross-check names every disagreement."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from flint import arb

from specbound.certified.bound import certify_bound
from specbound.certified.enclosure import SingularValueEnclosure
from specbound.certified.factored import enclose
from specbound.checkpoint import load_weights
from specbound.numeric.bound import evaluate
from specbound.numeric.crosscheck import DERIVED_REL_TOL, crosscheck
from specbound.plan import BoundSettings

SETTINGS = {
    "trained": BoundSettings(n=20_000, margin=0.5, empirical=0.05),
    "fixed": BoundSettings(n=10**7, margin=0.25, readout="fixed"),
    "uncentred": BoundSettings(n=10**5, margin=1.0, empirical=0.1, massart="uncentred", dudley="uncentred"),
}


@pytest.fixture(scope="module")
def network():
    w = load_weights(None)  # the embedded default network
    return w, [enclose(m) for m in w.matrices]


def _pair(network, key, plan_change=None, dtype=torch.float64):
    w, encs = network
    st = SETTINGS[key]
    plan = evaluate(w, st).plan
    if plan_change:
        plan = replace(plan, **plan_change(plan))
    num = evaluate(w, st, plan, dtype=dtype)
    emp = None if st.empirical is None else arb(st.empirical)
    return num, certify_bound(w, st, plan, encs, emp), encs


def _mixed_p(plan):
    return {"p_index": tuple((0, 1, plan.m, 2 * plan.m, 5)[j % 5] for j in range(len(plan.p_index)))}


@pytest.mark.parametrize("key", sorted(SETTINGS))
@pytest.mark.parametrize("change", [None, _mixed_p, lambda plan: {**_mixed_p(plan), "alpha_D": 1e-4}])
def test_float64_values_lie_in_the_certified_balls(network, key, change):
    num, cert, encs = _pair(network, key, change)
    report = crosscheck(num, cert, encs)
    assert report.ok, report.summary()
    assert report.checked > 10 * len(num.matrices)
    final = cert.bound if cert.bound is not None else cert.partial
    assert num.bound >= final.lower()  # never below the certified lower endpoint


def test_float32_within_its_stated_tolerance(network):
    num, cert, encs = _pair(network, "trained", _mixed_p, dtype=torch.float32)
    report = crosscheck(num, cert, encs)
    assert report.ok and report.derived_tol == num.tolerance, report.summary()


def test_a_contribution_outside_its_ball_is_reported_with_name_and_values(network):
    num, cert, encs = _pair(network, "trained")
    j = 3
    rec = cert.matrices[j]
    shifted = replace(rec, contribution=rec.contribution * (1 + 1e3 * DERIVED_REL_TOL))
    fake = replace(cert, matrices=cert.matrices[:j] + (shifted,) + cert.matrices[j + 1:])
    report = crosscheck(num, fake, encs)
    assert not report.ok
    (bad,) = report.disagreements
    assert bad.matrix == num.matrices[j].name and bad.quantity == "contribution"
    assert bad.numeric == num.matrices[j].ss_term and str(shifted.contribution) == bad.certified
    assert num.matrices[j].name in report.summary()


def test_singular_values_get_no_widening(network):
    num, cert, encs = _pair(network, "trained")
    enc = encs[0]
    sigma1 = float(num.singular_values[0, 0])
    # an enclosure just above the float value (by one part in 1e14) must reject it
    tight = SingularValueEnclosure(enc.shape, (arb(sigma1 * (1 + 1e-14)),) + enc.lower[1:],
                                   (arb(sigma1 * (1 + 2e-14)),) + enc.upper[1:], enc.zero_count, enc.method,
                                   rank_cap=enc.rank_cap)
    report = crosscheck(num, cert, [tight] + list(encs[1:]))
    assert [d.quantity for d in report.disagreements] == ["sigma_1"]


def test_structural_rank_above_the_proven_rank_is_one_sided(network):
    num, cert, encs = _pair(network, "fixed", lambda plan: {"p_index": (0,) * len(plan.p_index)})
    j = 0
    rec = cert.matrices[j]
    smaller = replace(rec, proven_rank=rec.proven_rank - 1, contribution=rec.contribution * 0.9,
                      ss_entropy=rec.ss_entropy * 0.9, s_radius=rec.s_radius - 1, dd_piece=rec.dd_piece * 0.9)
    fake = replace(cert, matrices=(smaller,) + cert.matrices[1:], ss_closed=cert.ss_closed * 0.99,
                   ss_exact=cert.ss_exact * 0.99, SS=cert.SS * 0.99, complexity=cert.complexity * 0.99,
                   partial=cert.partial * 0.99)
    report = crosscheck(num, fake, encs)
    assert report.ok, report.summary()
    assert report.one_sided and num.matrices[j].name in report.one_sided[0]
    # the other way round (numeric rank below the proven one) is a disagreement
    larger = replace(rec, proven_rank=rec.proven_rank + 1)
    report = crosscheck(num, replace(cert, matrices=(larger,) + cert.matrices[1:]), encs)
    assert any(d.quantity == "rank" for d in report.disagreements)


def test_numeric_bound_below_certified_lower_endpoint_is_reported(network):
    num, cert, encs = _pair(network, "trained")
    # the float path evaluates the Rademacher route: a certified route bound above it must be reported
    assert cert.rademacher is not None
    fake = replace(cert, rademacher=cert.rademacher + 1, bound=cert.bound + 1)
    report = crosscheck(num, fake, encs)
    assert {d.quantity for d in report.disagreements} == {"bound", "bound >= certified lower"}
