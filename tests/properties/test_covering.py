"""Covering lemmas and the spectral facts behind them (proofs_notes/theory.md section 3, register 10-14).

Spectra are exact float vectors handled in mpmath (40-50 digits), so equality cases (repeated
singular values) are decided with a relative tolerance of 1e-12, not float noise.  Singular values
of matrices come from mpmath's SVD of the exact binary64 entries.
"""

from __future__ import annotations

import mpmath
import numpy as np
import sympy as sp
from hypothesis import assume, given, target
from hypothesis import strategies as st

from . import reference as ref
from . import strategies as S
from .constants import DERIVED, REGISTRY
from specbound.derivation import symbols as sym

TOL = mpmath.mpf("1e-12")


def mp_schatten(sv, p) -> mpmath.mpf:
    """S_p = sum_i sigma_i^p over the nonzero singular values, in mpmath."""
    return mpmath.fsum(mpmath.mpf(float(x)) ** mpmath.mpf(p) for x in sv if x > 0)


# ---------------------------------------------------------------- stechkin_tail


@st.composite
def stechkin_cases(draw):
    sv = draw(S.spectra(k_max=10, scales=(1e-3, 1e3)))
    p = draw(S.schatten_indices(p_max=4.0))
    r = draw(st.integers(0, len(sv) - 1))
    return sv, p, r


def stechkin_sides(case, K):
    sv, p, r = case
    with mpmath.workdps(ref.MP_DPS):
        rhs = K.statement_rhs("stechkin_tail", S_p=mp_schatten(sv, p), r=r, p=p)
        return mpmath.mpf(float(sv[r])), rhs


@given(stechkin_cases())
def test_stechkin_tail(case):
    lhs, rhs = stechkin_sides(case, DERIVED)
    assert lhs <= rhs * (1 + TOL)
    target(float(lhs / rhs) if rhs > 0 else 0.0)


@given(st.integers(1, 9), S.schatten_indices(p_max=4.0), st.floats(1e-3, 1e3))
def test_stechkin_equality_case(k, p, sigma):
    # r + 1 = k equal singular values and nothing else: equality (up to the tolerance).
    lhs, rhs = stechkin_sides((np.full(k, sigma), p, k - 1), DERIVED)
    assert abs(lhs - rhs) <= rhs * TOL


# ---------------------------------------------------------------- Schatten monotonicity / Hoelder


@given(S.spectra(), S.schatten_indices(p_max=4.0), S.schatten_indices(p_max=4.0))
def test_schatten_norms_decrease_in_p_and_dominate_the_spectral_norm(sv, p, q):
    assume(sv[0] > 0)
    p, q = min(p, q), max(p, q)
    with mpmath.workdps(ref.MP_DPS):
        sp_, sq_ = mp_schatten(sv, p), mp_schatten(sv, q)
        top = mpmath.mpf(float(sv[0]))
        assert sq_ ** (1 / mpmath.mpf(q)) <= sp_ ** (1 / mpmath.mpf(p)) * (1 + TOL)
        assert top <= sq_ ** (1 / mpmath.mpf(q)) * (1 + TOL)
        assert sq_ <= top ** (mpmath.mpf(q) - mpmath.mpf(p)) * sp_ * (1 + TOL)


# ---------------------------------------------------------------- lowrank_cover


def lowrank_K(covering: sp.Expr = REGISTRY["lowrank_cover"].covering) -> sp.Expr:
    """K of the lemma's entropy r (m+n) log(1 + K c/eps), read off the covering expression itself
    (so a change of the entropy formula changes the radii the property below checks)."""
    K = sp.simplify((sp.exp(covering / (sym.r * sym.d)) - 1) * sym.eps / sym.c)
    assert not K.free_symbols, K
    return K


K_LOWRANK = lowrank_K()


def lowrank_radii(c: float, eps: float, K) -> tuple[float, float]:
    """The factor-cover radii behind (1 + K c/eps)^{r(m+n)}: volumetric covers with 1 + K c/eps
    points per dimension are delta_P = 2 eps / K for the c-ball of P and delta_Q = 2 eps / (K c) for
    the unit ball of Q (lowrank_cover.md step 2; K = 4 gives eps/2 and eps/(2c))."""
    K = float(K)
    return 2 * eps / K, 2 * eps / (K * c)


def _into_ball(x: np.ndarray, radius: float) -> np.ndarray:
    """Scale x into the closed spectral ball (a centre of an *internal* cover lies in the class)."""
    nrm = ref.spectral_norm(x)
    return x if nrm <= radius else x * (radius / nrm)


@st.composite
def lowrank_cases(draw):
    """(W, r, c, eps, E_P, E_Q) with ||E_P||, ||E_Q|| <= 1/4: the centres are P + 2 delta_P E_P and
    Q + 2 delta_Q E_Q scaled back into their balls (the scaling moves them by at most as much again),
    so they lie within delta_P, delta_Q of P, Q."""
    m, n = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    r = draw(st.integers(1, min(m, n)))
    gen = S.rng(draw(S.seeds))
    sv = S.profile_values(draw(st.sampled_from(S.PROFILES)), r, draw(st.floats(0.05, 5.0)), gen)
    w = S.compose(gen, m, n, sv)
    c = max(ref.spectral_norm(w), 1e-3) * draw(st.floats(1.0, 2.0))
    eps = c * draw(st.floats(1e-3, 2.0))
    e_p = draw(S.perturbations((m, r), rel_min=1e-3, rel_max=0.25))
    e_q = draw(S.perturbations((n, r), rel_min=1e-3, rel_max=0.25))
    return w, r, c, eps, e_p, e_q


@st.composite
def lowrank_witnesses(draw):
    """The aligned worst case: W = c e1 e1^T, both centres pulled straight in along e1, so the
    error is exactly delta_P + c delta_Q - delta_P delta_Q (eps - eps^2/(4c) at K = 4)."""
    m, n = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    c = draw(st.floats(0.1, 10.0))
    eps = c * draw(st.floats(1e-3, 1.0))
    w = np.zeros((m, n))
    w[0, 0] = c
    e_p, e_q = np.zeros((m, 1)), np.zeros((n, 1))
    e_p[0, 0] = e_q[0, 0] = -0.5
    return w, 1, c, eps, e_p, e_q


def lowrank_sides(case, K_factor=K_LOWRANK) -> tuple[float, float]:
    """(||W - P^ Q^T||, eps) for the centres the lemma's cover radii allow (internal centres)."""
    w, r, c, eps, e_p, e_q = case
    dp, dq = lowrank_radii(c, eps, K_factor)
    _, _, vt = np.linalg.svd(w)
    q = vt[:r].T  # top-r right singular vectors: ||Q|| <= 1 and W = W Q Q^T
    p_ = w @ q
    p_hat = _into_ball(p_ + 2 * dp * e_p, c)  # within delta_P of P after scaling (witness: exactly)
    q_hat = _into_ball(q + 2 * dq * e_q, 1.0)
    assert ref.spectral_norm(p_hat - p_) <= dp * (1 + 1e-9) + 1e-12
    assert ref.spectral_norm(q_hat - q) <= dq * (1 + 1e-9) + 1e-12
    return ref.spectral_norm(w - p_hat @ q_hat.T), eps


@given(st.one_of(lowrank_cases(), lowrank_witnesses()))
def test_lowrank_cover_radii_give_an_eps_cover(case):
    # Not true by construction: the radii come from the lemma's K (a smaller K is caught, see
    # tests/properties/test_mutation_assembly.py); the witness family is tight up to eps^2/(4c).
    err, eps = lowrank_sides(case)
    assert err <= eps * (1 + 1e-9) + 1e-12
    target(err / eps)


def test_lowrank_entropy_is_the_sum_of_two_volumetric_covers():
    # P in the c-ball of R^{m x r} at eps/2 and Q in the unit ball of R^{n x r} at eps/(2c).
    vol = REGISTRY["volumetric_cover"].covering
    D, delta_v = (next(s for s in vol.free_symbols if s.name == nm) for nm in ("D", "delta_v"))
    p_part = vol.subs({D: sym.m_rows * sym.r, delta_v: sym.eps / 2})
    q_part = vol.subs({D: sym.n_cols * sym.r, delta_v: sym.eps / (2 * sym.c)}).subs(sym.c, 1).subs(
        sym.eps, sym.eps / sym.c
    )
    low = REGISTRY["lowrank_cover"].covering.subs(sym.d, sym.m_rows + sym.n_cols)
    assert sp.simplify(sp.expand_log(low - p_part - q_part, force=True)) == 0


def test_rank_cover_is_the_lowrank_cover_at_the_proven_rank():
    # rank_cover is lowrank_cover with r = min(s, r_max) (s a proven rank); its closed-form K_rank
    # is the same K (the entropy's K is pinned against volumetric_cover just above).
    rank = REGISTRY["rank_cover"]
    low = REGISTRY["lowrank_cover"].covering
    assert sp.simplify(rank.covering - low.subs(sym.r, sp.Min(sym.s, sym.r_max))) == 0
    assert sp.Integer(rank.constants["K_rank"]) == lowrank_K(low)


def test_schatten_entropy_is_the_lowrank_cover_of_the_truncation_at_half_eps():
    # schatten_cover: truncate at r_p (tail <= eps/2, tested below), cover the truncation at eps/2
    # with lowrank_cover: the factor 8 is lowrank's 4 at eps/2; the closed form's K_schatten too.
    sch = REGISTRY["schatten_cover"]
    r_p = sch.constants["r_p"]
    low = REGISTRY["lowrank_cover"].covering
    half = low.subs({sym.r: sp.Min(r_p, sym.r_max), sym.eps: sym.eps / 2})
    assert sp.simplify(sch.covering - half) == 0
    K = sch.constants["K_schatten"]
    closed = sp.Min(r_p, sym.r_max) * sym.d * sp.log(1 + K * sym.c / sym.eps)
    assert sp.simplify(sch.covering - closed) == 0


# ---------------------------------------------------------------- schatten_cover


@st.composite
def schatten_cover_cases(draw):
    sv = draw(S.spectra(k_max=10, profiles=("flat", "power", "clustered", "deficient", "random")))
    assume(sv[0] > 0)
    p = draw(S.schatten_indices(p_max=2.0))
    slack = draw(st.sampled_from((1.0, 1.0, 1.5, 10.0)))
    if draw(st.booleans()):  # eps just below twice a singular value: the r_p boundary
        j = draw(st.integers(0, len(sv) - 1))
        assume(sv[j] > 0)
        eps = 2 * float(sv[j]) * (1 - 10.0 ** draw(st.floats(-12, -1)))
    else:
        eps = float(sv[0]) * 10.0 ** draw(st.floats(-3, 0.7))
    return sv, p, slack, eps


def schatten_truncation_sides(case, K):
    """sigma_{r_p+1}(W) <= eps/2 for S_p(W) <= s, with r_p from the derivation."""
    sv, p, slack, eps = case
    with mpmath.workdps(ref.MP_DPS):
        s = mp_schatten(sv, p) * slack
        r_p = max(int(K("schatten_cover", "r_p", s=s, epsilon=eps, p=p)), 0)
        sigma = mpmath.mpf(float(sv[r_p])) if r_p < len(sv) else mpmath.mpf(0)
        return sigma, mpmath.mpf(eps) / 2


@given(schatten_cover_cases())
def test_schatten_truncation_rank_leaves_tail_at_most_half_eps(case):
    lhs, rhs = schatten_truncation_sides(case, DERIVED)
    assert lhs <= rhs * (1 + TOL)


@given(
    st.floats(1e-3, 1e3), st.floats(1e-3, 1e3), S.schatten_indices(p_max=2.0), st.integers(0, 20),
    st.integers(2, 40), st.floats(1e-4, 10), st.floats(1e-4, 10), st.floats(1.0, 3.0),
)
def test_schatten_entropy_monotone(s, c, p, r_max, d, e1, e2, factor):
    e1, e2 = min(e1, e2), max(e1, e2)

    def H(**kw):
        args = dict(s=s, c=c, p=p, r_max=r_max, d=d, epsilon=e1)
        args.update(kw)
        return DERIVED.covering("schatten_cover", **args)

    assert H(epsilon=e2) <= H(epsilon=e1)
    assert H(s=s * factor) >= H()
    assert H(c=c * factor) >= H()


# ---------------------------------------------------------------- volumetric_cover


def _gauge(kind: str):
    if kind == "l2":
        return lambda v: np.linalg.norm(v, axis=-1)
    if kind == "linf":
        return lambda v: np.max(np.abs(v), axis=-1)
    if kind == "l1":
        return lambda v: np.sum(np.abs(v), axis=-1)

    def spectral2x2(v):  # largest singular value of [[a, b], [c, d]], closed form
        a, b, c, d = np.moveaxis(np.atleast_2d(v), -1, 0)
        f = a * a + b * b + c * c + d * d
        det = a * d - b * c
        return np.sqrt((f + np.sqrt(np.maximum(f * f - 4 * det * det, 0))) / 2).reshape(np.shape(v)[:-1])

    return spectral2x2


def _points_in_body(kind: str, dim: int, c: float, gen, count: int) -> np.ndarray:
    if dim == 1:  # a fine grid: greedy on a sorted grid is an optimal packing of [-c, c]
        return np.linspace(-c, c, count).reshape(-1, 1)
    pts = gen.uniform(-c, c, size=(count * 4, dim))
    return pts[_gauge(kind)(pts) <= c][:count]


def greedy_packing(points: np.ndarray, delta: float, gauge) -> int:
    """Size of the greedy delta-separated subset (a packing, hence <= the packing number)."""
    kept = np.empty_like(points)
    size = 0
    for x in points:
        if size == 0 or np.min(gauge(kept[:size] - x)) > delta:
            kept[size] = x
            size += 1
    return size


@st.composite
def volumetric_cases(draw):
    kind = draw(st.sampled_from(("l2", "linf", "l1", "spectral2x2")))
    dim = 4 if kind == "spectral2x2" else draw(st.integers(1, 4))
    c = draw(st.floats(0.1, 10.0))
    ratio = draw(st.floats(0.5, 4.0)) if dim == 1 else draw(st.floats(0.6, 2.0))
    return kind, dim, c, c / ratio, draw(S.seeds)


def volumetric_sides(case, K):
    kind, dim, c, delta, seed = case
    size = greedy_packing(_points_in_body(kind, dim, c, S.rng(seed), 700), delta, _gauge(kind))
    return mpmath.log(size), K.covering("volumetric_cover", D=dim, c=c, delta_v=delta)


@given(volumetric_cases())
def test_greedy_packing_is_within_volumetric_bound(case):
    lhs, rhs = volumetric_sides(case, DERIVED)
    assert lhs <= rhs * (1 + 1e-12)
    target(float(lhs / rhs))


# ---------------------------------------------------------------- Weyl and Ostrowski (certified enclosure)


@st.composite
def matrix_pairs(draw):
    m, n = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    a = draw(S.matrices(m, n, scales=(1e-3, 1e3)))
    b = a + draw(S.perturbations((m, n), rel_min=1e-9, rel_max=1.0)) * max(ref.spectral_norm(a), 1e-300)
    return a, b


@given(matrix_pairs())
def test_weyl_singular_values_move_at_most_the_perturbation_norm(pair):
    a, b = pair
    with mpmath.workdps(ref.MP_DPS):
        sa, sb = ref.mp_singular_values(a), ref.mp_singular_values(b)
        gap = ref.mp_singular_values(ref.to_mp(a) - ref.to_mp(b))[0]
        for x, y in zip(sa, sb):
            assert abs(x - y) <= gap * (1 + mpmath.mpf("1e-30"))


@given(st.data())
def test_ostrowski_multiplicative_enclosure(data):
    n = data.draw(st.integers(1, 4))
    m = data.draw(st.integers(1, 4))
    x = data.draw(S.matrices(n, n, profiles=("flat", "power", "clustered", "random", "huge")))
    cmat = data.draw(S.matrices(n, m, scales=(1e-3, 1e3)))
    with mpmath.workdps(ref.MP_DPS):
        sx = ref.mp_singular_values(x)
        prod = ref.to_mp(x) @ ref.to_mp(cmat)  # the exact product, not its float rounding
        s_prod = mpmath.svd_r(mpmath.matrix(prod.tolist()), compute_uv=False)
        s_prod = sorted((s_prod[i] for i in range(len(s_prod))), reverse=True)
        s_c = ref.mp_singular_values(cmat)
        tol = mpmath.mpf("1e-30")
        for sp_i, sc_i in zip(s_prod, s_c):
            assert sx[-1] * sc_i * (1 - tol) - tol * sx[0] * s_c[0] <= sp_i
            assert sp_i <= sx[0] * sc_i * (1 + tol) + tol * sx[0] * s_c[0]
