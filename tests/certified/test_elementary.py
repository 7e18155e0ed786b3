"""The proven elementwise routines against 50-digit mpmath on adversarial arguments.

The references (mpmath ``exp``, ``ncdf``) import nothing from the code under test; the mutation tests
show the checks can fail (a bound made too small, or a dropped remainder term, is caught).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbound.certified.elementary import (
    EXP_CLAMP, EXP_UNDERFLOW_ERROR, _phi_error_bound, exp_error_bound, exp_nonpositive, phi,
    phi_coefficients, phi_degree, phi_error_bound,
)

DPS = 50
LN2 = math.log(2.0)


def _exp_arguments() -> np.ndarray:
    rng = np.random.default_rng(5)
    k = np.arange(0, 1022)
    half_steps = -(k + 0.5) * LN2  # where rint(z / ln2) switches: the reduction's boundaries
    near = np.concatenate([np.nextafter(half_steps, 0), np.nextafter(half_steps, -np.inf), half_steps])
    special = np.array([0.0, -0.0, -5e-324, -1e-300, -1e-17, -2.0**-53, -LN2, -LN2 / 2, -1.0,
                        EXP_CLAMP, np.nextafter(EXP_CLAMP, 0), np.nextafter(EXP_CLAMP, -np.inf),
                        -745.0, -1e5, -1e300])
    return np.concatenate([special, near[near >= -760], -rng.random(2000) * 708, -rng.random(500) * 2.0])


def _exp_violations(z: np.ndarray, rel_bound: float) -> list[float]:
    """Arguments where the routine misses ``exp`` by more than ``rel_bound`` (relative, on the
    proven range) or by more than the underflow allowance (below the clamp)."""
    got = exp_nonpositive(z)
    bad = []
    with mpmath.workdps(DPS):
        for x, y in zip(z.tolist(), got.tolist()):
            ref = mpmath.exp(mpmath.mpf(x))
            err = abs(mpmath.mpf(y) - ref)
            if x >= EXP_CLAMP:
                if err > rel_bound * ref:
                    bad.append(x)
            elif err > EXP_UNDERFLOW_ERROR:
                bad.append(x)
    return bad


def test_exp_is_within_its_proven_bound_on_adversarial_arguments():
    eta = float(exp_error_bound().upper())
    assert 0 < eta < 1e-13
    assert _exp_violations(_exp_arguments(), eta) == []


def test_exp_of_zero_is_exactly_one_and_results_are_normal():
    assert exp_nonpositive(np.array([0.0, -0.0])).tolist() == [1.0, 1.0]
    got = exp_nonpositive(np.array([EXP_CLAMP, -1e300]))
    assert (got >= 2.0**-1022).all()


def test_mutation_a_tenfold_smaller_exp_bound_is_caught():
    eta = float(exp_error_bound().upper())
    assert _exp_violations(_exp_arguments(), eta / 100)


def _phi_arguments(t_max: float) -> np.ndarray:
    rng = np.random.default_rng(7)
    edge = np.array([t_max, -t_max, np.nextafter(t_max, 0), 0.0, -0.0, 5e-324, -1e-300, 1e-8, t_max / 2])
    return np.concatenate([edge, (2 * rng.random(600) - 1) * t_max])


def _phi_violations(t: np.ndarray, degree: int, bound: float) -> list[float]:
    got = phi(t, phi_coefficients(degree))
    bad = []
    with mpmath.workdps(DPS):
        for x, y in zip(t.tolist(), got.tolist()):
            if abs(mpmath.mpf(y) - mpmath.ncdf(mpmath.mpf(x))) > bound:
                bad.append(x)
    return bad


@pytest.mark.parametrize("t_max", [0.25, 0.9, 2.0, 3.99])
def test_phi_is_within_its_proven_bound(t_max):
    degree = phi_degree(t_max)
    bound = float(phi_error_bound(t_max, degree).upper())
    assert bound < 1e-11
    assert _phi_violations(_phi_arguments(t_max), degree, bound) == []


@pytest.mark.parametrize("degree", [3, 6])
def test_phi_with_a_short_series_is_still_within_its_bound(degree):
    # a low degree makes the remainder term dominate: the bound must carry it
    bound = float(phi_error_bound(1.5, degree).upper())
    assert _phi_violations(_phi_arguments(1.5), degree, bound) == []


def test_mutation_dropping_the_phi_remainder_is_caught():
    bound = float(_phi_error_bound(1.5, 6, tail=False).upper())
    assert _phi_violations(_phi_arguments(1.5), 6, bound)


def test_phi_degree_reaches_its_target():
    for t_max in (0.1, 1.0, 3.0):
        n = phi_degree(t_max)
        assert float(phi_error_bound(t_max, n).upper()) < 1e-11


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-800, 800, allow_nan=False), min_size=1, max_size=40),
       st.lists(st.floats(-10, 10, allow_nan=False), min_size=1, max_size=14))
def test_horner_is_the_analysed_loop_bit_for_bit(xs, coeffs):
    # the error bounds of exp and Phi analyse p = c_n; p = fl(fl(p x) + c_j); the code forms fl(c_n x) first
    from specbound.certified.elementary import _horner

    x = np.array(xs)
    p = np.full_like(x, coeffs[-1])
    with np.errstate(all="ignore"):
        for c in coeffs[-2::-1]:
            p = np.add(np.multiply(p, x), c)
        got = _horner(x.copy(), tuple(coeffs))
    assert ((p.view(np.int64) == got.view(np.int64)) | (np.isnan(p) & np.isnan(got))).all()
