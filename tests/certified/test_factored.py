"""Specification of certified.factored: the singular values of the *exact* product F G (computed
independently in mpmath at 50 digits) are enclosed, and those beyond the inner dimension are exactly 0."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from flint import arb
from hypothesis import given, strategies as st

from specbound.certified.factored import enclose, enclose_factored
from specbound.errors import CertificationError, NonFiniteError
from specbound.matrices import NamedMatrix

DPS = 50


def reference_product_singular_values(f: np.ndarray, g: np.ndarray) -> list:
    """Singular values of the exact product, product and SVD both in mpmath at 50 digits."""
    with mpmath.workdps(DPS):
        a = mpmath.matrix([[mpmath.mpf(float(x)) for x in row] for row in f])
        b = mpmath.matrix([[mpmath.mpf(float(x)) for x in row] for row in g])
        return sorted((abs(x) for x in mpmath.svd_r(a * b, compute_uv=False)), reverse=True)


def assert_contains(enc, ref) -> None:
    """Reference values as balls of radius 1e-40 sigma_1 (mpmath noise: exact zeros come out ~1e-50)."""
    tol = mpmath.mpf(10) ** -40 * max(ref[0], mpmath.mpf(10) ** -300)
    for i, v in enumerate(ref):
        with mpmath.workdps(DPS):
            lo_v = arb(mpmath.nstr(v - tol, 45, min_fixed=1, max_fixed=0))
            hi_v = arb(mpmath.nstr(v + tol, 45, min_fixed=1, max_fixed=0))
        assert enc.lower[i].lower() <= hi_v.upper(), (i, enc.lower[i], v)
        assert lo_v.lower() <= enc.upper[i].upper(), (i, enc.upper[i], v)


def check(f, g):
    enc = enclose_factored(f, g)
    ref = reference_product_singular_values(f, g)
    assert enc.k == len(ref)
    assert_contains(enc, ref)
    return enc


RNG = np.random.default_rng(7)


@pytest.mark.parametrize("m,r,n", [(20, 3, 15), (12, 5, 30), (25, 1, 25), (9, 9, 9), (6, 10, 8), (1, 4, 7), (7, 2, 1)])
def test_exact_product_is_enclosed_and_tail_is_exactly_zero(m, r, n):
    enc = check(RNG.standard_normal((m, r)), RNG.standard_normal((r, n)))
    q = min(m, n, r)
    assert enc.zero_count == min(m, n) - q
    assert enc.rank_upper == q
    assert all(x == 0 for x in enc.upper[q:])
    assert enc.method == "gram"


def test_top_values_are_tight():
    enc = check(RNG.standard_normal((16, 4)), RNG.standard_normal((4, 14)))
    for lo, hi in zip(enc.lower[:4], enc.upper[:4]):
        assert float(hi.upper() - lo.lower()) < 1e-12 * float(hi.upper())


def test_rank_deficient_factors_and_graded_scales():
    f = RNG.standard_normal((10, 4)) * np.logspace(-100, 100, 4)  # column-graded
    f[:, 3] = f[:, 2] * 0.5  # rank(F) = 3 < r = 4
    check(f, RNG.standard_normal((4, 12)))


def test_extreme_scales():
    check(RNG.standard_normal((8, 3)) * 1e-300, RNG.standard_normal((3, 9)) * 1e-20)
    check(RNG.standard_normal((8, 3)) * 1e300, RNG.standard_normal((3, 9)) * 1e-300)


def test_zero_factor_gives_all_zero():
    enc = check(np.zeros((6, 2)), RNG.standard_normal((2, 5)))
    assert enc.rank_upper == 0 and all(x == 0 for x in enc.upper)


def test_product_differs_from_its_float_rounding():
    # fl(F G) has tiny nonzero tail singular values; the exact product's tail is exactly 0.
    f, g = RNG.standard_normal((8, 2)), RNG.standard_normal((2, 8))
    assert np.linalg.svd(f @ g, compute_uv=False)[2] > 0
    assert enclose_factored(f, g).upper[2] == 0


def test_bad_shapes_and_non_finite_factors():
    with pytest.raises(CertificationError):
        enclose_factored(np.ones((3, 2)), np.ones((3, 2)))
    bad = np.ones((3, 2))
    bad[0, 0] = np.nan
    with pytest.raises(NonFiniteError):
        enclose_factored(bad, np.ones((2, 3)))


def test_enclose_dispatches_on_named_matrix():
    f, g = RNG.standard_normal((6, 2)), RNG.standard_normal((2, 6))
    fac = enclose(NamedMatrix(layer=0, head=1, kind="QK", left=f, right=g))
    assert fac.method == "gram" and fac.zero_count == 4
    w = RNG.standard_normal((6, 9))
    dense = enclose(NamedMatrix(layer=0, head=-1, kind="M_in", left=w))
    assert dense.method == "eft" and dense.zero_count == 0


@given(st.integers(1, 10), st.integers(1, 6), st.integers(1, 10), st.integers(0, 2**32 - 1))
def test_property_random_factored_shapes(m, r, n, seed):
    rng = np.random.default_rng(seed)
    check(rng.standard_normal((m, r)), rng.standard_normal((r, n)))
