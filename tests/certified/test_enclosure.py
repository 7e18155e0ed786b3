"""Specification of certified.enclosure: every enclosure contains the singular values of the exact
matrix as computed independently by mpmath (svd_r at 50 digits)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from flint import arb
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from specbound.certified import enclosure as enc_mod
from specbound.certified.enclosure import enclose_singular_values
from specbound.errors import NonFiniteError

DPS = 50


def reference_singular_values(w: np.ndarray) -> list:
    """sigma_1 >= ... >= sigma_k of the exact matrix (float entries are exact mpf), mpmath at 50 digits."""
    with mpmath.workdps(DPS):
        m, n = w.shape
        if min(m, n) == 0:
            return []
        a = mpmath.matrix([[mpmath.mpf(float(x)) for x in row] for row in w])
        return sorted((abs(x) for x in mpmath.svd_r(a, compute_uv=False)), reverse=True)


def assert_contains(enc, ref) -> None:
    """Each reference value, as a ball of radius 1e-40 * sigma_1 (mpmath's own accuracy), meets the
    enclosure [lower_i, upper_i]."""
    assert enc.k == len(ref)
    tol = mpmath.mpf(10) ** -40 * (ref[0] if ref else 0)
    for i, v in enumerate(ref):
        with mpmath.workdps(DPS):
            lo_v = arb(mpmath.nstr(v - tol, 45, min_fixed=1, max_fixed=0))
            hi_v = arb(mpmath.nstr(v + tol, 45, min_fixed=1, max_fixed=0))
        assert enc.lower[i].lower() <= hi_v.upper(), (i, enc.lower[i], v)
        assert lo_v.lower() <= enc.upper[i].upper(), (i, enc.upper[i], v)
        lo_f, hi_f = enc.lower_floats()[i], enc.upper_floats()[i]
        assert lo_f <= float(v) * (1 + 1e-15) + 1e-323 or lo_f <= 0
        assert hi_f >= float(v) * (1 - 1e-15) - 1e-323


def check(w: np.ndarray, method: str = "eft"):
    enc = enclose_singular_values(w, method=method)
    assert_contains(enc, reference_singular_values(np.asarray(w, dtype=np.float64)))
    return enc


def _orthogonal(n: int, rng) -> np.ndarray:
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return q


def _with_spectrum(sv, rng) -> np.ndarray:
    n = len(sv)
    return _orthogonal(n, rng) @ np.diag(sv) @ _orthogonal(n, rng)


def _hadamard(n: int) -> np.ndarray:
    h = np.array([[1.0]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


RNG = np.random.default_rng(20260512)

ADVERSARIAL = {
    "random 8x5": RNG.standard_normal((8, 5)),
    "random 5x8": RNG.standard_normal((5, 8)),
    "hadamard 8 (sigma = sqrt 8, eightfold)": _hadamard(8),
    "identity 6": np.eye(6),
    "clustered 3,3,3,3,1": _with_spectrum([3, 3, 3, 3, 1], RNG),
    "near-repeated 1, 1+1e-12": _with_spectrum([1 + 1e-12, 1, 1, 0.5], RNG),
    "integer rank 1": np.outer(np.arange(1, 8), np.arange(-2, 3)).astype(float),
    "rank 2 float product": RNG.standard_normal((7, 2)) @ RNG.standard_normal((2, 6)),
    "zero rows and columns": np.pad(RNG.standard_normal((3, 3)), 2),
    "cond 1e15": _with_spectrum(np.logspace(0, -15, 10), RNG),
    "cond 1e20": _with_spectrum(np.logspace(0, -20, 8), RNG),
    "scale 1e-300": RNG.standard_normal((6, 5)) * 1e-300,
    "scale 1e+300": RNG.standard_normal((6, 5)) * 1e300,
    "near DBL_MAX (sigma_1 > DBL_MAX)": np.full((3, 3), 1.7e308) * np.array([[1, -1, 1], [1, 1, -1], [-1, 1, 1]]),
    "subnormal only": RNG.integers(-9, 10, (5, 4)).astype(float) * 5e-324,
    "diag(1e300, 1, 1e-300)": np.diag([1e300, 1.0, 1e-300]),
    "half entries 1e-310": np.where(RNG.random((6, 6)) < 0.5, 1e-310, 1.0) * RNG.standard_normal((6, 6)),
    "graded rows 1e-150..1e150": np.logspace(-150, 150, 6)[:, None] * RNG.standard_normal((6, 6)),
    "1 x 9": RNG.standard_normal((1, 9)),
    "9 x 1": RNG.standard_normal((9, 1)),
    "1 x 1 negative": np.array([[-2.5]]),
    "1 x 1 subnormal": np.array([[4e-320]]),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_contains_mpmath_on_adversarial_matrices(name):
    check(ADVERSARIAL[name])


@pytest.mark.parametrize("name", ["random 8x5", "hadamard 8 (sigma = sqrt 8, eightfold)", "cond 1e15", "scale 1e-300"])
def test_all_arb_reference_method_also_contains(name):
    enc = check(ADVERSARIAL[name], method="arb")
    assert enc.method == "arb"


def test_zero_matrix_is_exactly_zero_with_all_values_proven_zero():
    enc = check(np.zeros((5, 4)))
    assert enc.zero_count == 4 and enc.rank_upper == 0
    assert all(x == 0 for x in enc.upper)


def test_enclosures_are_tight_for_a_well_conditioned_matrix():
    w = RNG.standard_normal((12, 10))
    enc = check(w)
    assert enc.method == "eft"
    rel = [(float(h.upper()) - float(l.lower())) / float(h.upper()) for l, h in zip(enc.lower, enc.upper)]
    assert max(rel) < 1e-12
    assert enc.rank_lower == 10


def test_methods_eft_and_arb_agree_to_within_their_widths():
    w = RNG.standard_normal((9, 7))
    a, b = enclose_singular_values(w, method="eft"), enclose_singular_values(w, method="arb")
    for i in range(7):
        assert a.ball(i).overlaps(b.ball(i))


def test_endpoints_are_non_increasing():
    enc = check(_with_spectrum([5, 4, 4, 1e-14, 0], RNG))
    for seq in (enc.lower, enc.upper):
        assert all(seq[i] >= seq[i + 1] for i in range(len(seq) - 1))


def test_overflowing_sigma_gets_infinite_float_upper_endpoint():
    enc = check(ADVERSARIAL["near DBL_MAX (sigma_1 > DBL_MAX)"])
    assert math.isinf(enc.upper_floats()[0])
    assert enc.upper[0].is_finite()  # the Arb endpoint itself is finite


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_input_raises_one_clear_error(bad):
    w = np.ones((3, 3))
    w[1, 2] = bad
    with pytest.raises(NonFiniteError):
        enclose_singular_values(w)


def test_untrusted_svd_output_gives_wider_but_valid_enclosure(monkeypatch):
    real_svd = np.linalg.svd
    rng = np.random.default_rng(3)

    def sloppy_svd(a, full_matrices=True, **kw):
        u, s, vt = real_svd(a, full_matrices=full_matrices)
        return u + 1e-6 * rng.standard_normal(u.shape), -s[::-1], vt  # noisy, negative, unsorted

    monkeypatch.setattr(enc_mod.np.linalg, "svd", sloppy_svd)
    w = RNG.standard_normal((7, 6))
    enc = enclose_singular_values(w)
    monkeypatch.undo()
    assert_contains(enc, reference_singular_values(w))


@pytest.mark.parametrize("failure", ["raise", "garbage", "nan"])
def test_failed_svd_falls_back_to_frobenius_enclosure(monkeypatch, failure):
    def broken_svd(a, full_matrices=True, **kw):
        if failure == "raise":
            raise np.linalg.LinAlgError("SVD did not converge")
        k = min(a.shape)
        fill = np.nan if failure == "nan" else 3.0
        return np.full((a.shape[0], k), fill), np.ones(k), np.full((k, a.shape[1]), fill)

    monkeypatch.setattr(enc_mod.np.linalg, "svd", broken_svd)
    w = RNG.standard_normal((6, 4))
    enc = enclose_singular_values(w)
    monkeypatch.undo()
    assert enc.method == "fallback"
    assert_contains(enc, reference_singular_values(w))


def test_float_matrices_are_taken_as_exact_not_as_decimals():
    # 0.1 is not 1/10: the enclosure of [[0.1]] must not contain 1/10 exactly, but contains float(0.1).
    enc = enclose_singular_values(np.array([[0.1]]))
    assert enc.contains(0, 0.1)
    assert not (enc.lower[0] <= arb("0.1") <= enc.upper[0] and enc.upper[0] - enc.lower[0] == 0)


shapes = st.tuples(st.integers(1, 12), st.integers(1, 12))
elements = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, allow_subnormal=True)


@given(hnp.arrays(np.float64, shapes, elements=elements), st.sampled_from([1e-200, 1.0, 1e200]))
def test_property_random_shapes_contain_mpmath(w, scale):
    check(w * scale)


@given(st.integers(1, 10), st.integers(1, 10), st.integers(0, 4), st.integers(0, 2**32 - 1))
def test_property_low_rank_and_repeated(m, n, rank, seed):
    rng = np.random.default_rng(seed)
    w = np.rint(rng.standard_normal((m, rank)) * 3) @ np.rint(rng.standard_normal((rank, n)) * 3)
    check(np.vstack([w, w]) if m * 2 <= 12 else w)
