"""Every certified use of a weight matrix reads its exact factors (certified/factors.py).

A covered matrix is ``sqrt(scale_sq) * left [@ right]``.  The references here (mpmath at 50 digits,
exact rationals) apply the square root of the rational scale themselves; nothing is imported from the
code under test for them.  Regressions: with ``scale_sq = 1/100`` the fast pass used to certify the
unscaled network, and the Llama-style Arb pass the float-rounded ``left * fl(sqrt(scale_sq))``.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest
from flint import arb, ctx, fmpq

from specbound.certified.factors import InexactScale, arb_factors, float_factors, scale_ball
from specbound.certified.fast_forward import NotApplicable, margins_of_rows, prepare_rows
from specbound.certified.forward import certified_forward
from specbound.certified.forward_ls import ROPE_COS, ROPE_SIN
from specbound.certified.forward_ls import certified_forward as ls_forward
from specbound.certified.ramp_loss import certified_ramp_loss
from specbound.data_file import dataset_from_arrays
from specbound.matrices import AnalysisWeights, NamedMatrix, ordered
from tests.certified.test_forward import exact_ramp, mp_forward, mp_mat

DPS = 50


def _contains(ball: arb, value: mpmath.mpf) -> bool:
    """``value`` lies in the ball (endpoints taken at 300 bits: at 53 they would round outward by an ulp)."""
    with mpmath.workdps(DPS + 20), ctx.workprec(300):
        return (mpmath.mpf(ball.lower().str(70, radius=False)) <= value
                <= mpmath.mpf(ball.upper().str(70, radius=False)))


# --------------------------------------------------------------------------- the accessor


def test_the_arb_factor_contains_every_exactly_scaled_entry():
    rng = np.random.default_rng(1)
    left, right = rng.standard_normal((3, 2)), rng.standard_normal((2, 3))
    m = NamedMatrix(0, 0, "QK", left, right, scale_sq=Fraction(1, 100))
    L, R = arb_factors(m)
    assert R.entries() == [arb(x) for x in right.ravel().tolist()]  # the other factor is exact
    with ctx.workprec(300):  # the rational as a ball far narrower than the factor's
        for i in range(3):
            for j in range(2):
                exact = arb(fmpq(*Fraction(float(left[i, j])).as_integer_ratio()) / 10)  # sqrt(1/100) = 1/10
                assert L[i, j].contains(exact) and L[i, j].rad() < 1e-30
    assert not L[0, 0].contains(arb(float(left[0, 0]) * 0.1))  # not the float product


def test_the_scale_may_go_into_the_right_factor():
    rng = np.random.default_rng(2)
    m = NamedMatrix(0, 0, "V_tilde", rng.standard_normal((3, 2)), rng.standard_normal((2, 3)), scale_sq=Fraction(2))
    L, R = arb_factors(m, scale_on="right")
    assert L.entries() == [arb(x) for x in m.left.ravel().tolist()]
    with mpmath.workdps(DPS):
        assert _contains(R[1, 2], mpmath.mpf(float(m.right[1, 2])) * mpmath.sqrt(2))


def test_without_a_scale_the_factors_are_the_stored_floats():
    rng = np.random.default_rng(3)
    m = NamedMatrix(0, -1, "M_in", rng.standard_normal((3, 4)))
    L, R = arb_factors(m)
    assert R is None and L.entries() == [arb(x) for x in m.left.ravel().tolist()]
    f, g = float_factors(m)
    assert g is None and np.array_equal(f, m.left)
    assert scale_ball(Fraction(1)) == 1 and scale_ball(Fraction(1)).rad() == 0


def test_float_factors_fold_a_power_of_two_exactly():
    rng = np.random.default_rng(4)
    left = rng.standard_normal((3, 2))
    f, g = float_factors(NamedMatrix(0, 0, "QK", left, left.T.copy(), scale_sq=Fraction(1, 16)))
    assert np.array_equal(f, left / 4) and np.array_equal(g, left.T)


@pytest.mark.parametrize("scale_sq", [Fraction(1, 100), Fraction(1, 2), Fraction(9), Fraction(1, 8)])
def test_float_factors_refuse_a_scale_they_cannot_carry_exactly(scale_sq):
    # 1/10 and 3 are not powers of two; sqrt(1/2) and sqrt(1/8) are irrational
    with pytest.raises(InexactScale):
        float_factors(NamedMatrix(0, 0, "QK", np.ones((2, 2)), np.ones((2, 2)), scale_sq=scale_sq))


def test_float_factors_refuse_a_fold_that_loses_bits():
    left = np.array([[5e-324, 1.0], [1.0, 1.0]])  # 5e-324 / 2 is not a binary64 number
    with pytest.raises(InexactScale):
        float_factors(NamedMatrix(0, 0, "QK", left, np.eye(2), scale_sq=Fraction(1, 4)))


# --------------------------------------------------------------------------- the plain passes


def _scaled_one_layer(rng, scale_sq: Fraction, N: int = 4, d: int = 2, F: int = 3) -> AnalysisWeights:
    W_Q, W_K = rng.standard_normal((N, d)) * 3, rng.standard_normal((N, d)) * 3
    mats = [NamedMatrix(0, 0, "QK", W_Q, np.ascontiguousarray(W_K.T), scale_sq=scale_sq),
            NamedMatrix(0, 0, "V_tilde", rng.standard_normal((N, d)), rng.standard_normal((d, N))),
            NamedMatrix(0, -1, "M_in", rng.standard_normal((N, F)) / 2),
            NamedMatrix(0, -1, "M_out", rng.standard_normal((F, N)))]
    return AnalysisWeights(matrices=ordered(mats), num_layers=1, num_heads=1, width=N, head_dim=d, ff_dim=F,
                           activation="gelu", readout=rng.standard_normal(N))


def test_the_arb_pass_applies_a_left_over_score_scale_exactly():
    rng = np.random.default_rng(5)
    w = _scaled_one_layer(rng, Fraction(1, 100))
    X = rng.standard_normal((3, 4))
    with mpmath.workdps(DPS):
        exact = mp_forward(w, mp_mat(X))
        unscaled = mp_forward(AnalysisWeights(**{**w.__dict__, "matrices": tuple(
            NamedMatrix(m.layer, m.head, m.kind, m.left, m.right) for m in w.matrices)}), mp_mat(X))
        assert abs(exact - unscaled) > 1e-3  # the scale matters for this network
        assert _contains(certified_forward(w, X), exact)


def test_the_fast_pass_never_certifies_the_unscaled_network():
    # regression: one layer, N = 4, QK with scale_sq = 1/100 -- the fast pass multiplied by the
    # unscaled factors and certified a ramp loss far from the exact one
    rng = np.random.default_rng(6)
    w = _scaled_one_layer(rng, Fraction(1, 100))
    X, y = rng.standard_normal((10, 3, 4)), rng.choice([-1, 1], size=10)
    with pytest.raises(NotApplicable):
        prepare_rows(w, 3)  # 1/10 cannot be folded into binary64 factors exactly
    with mpmath.workdps(DPS):
        margins = [int(y[i]) * mp_forward(w, mp_mat(X[i])) for i in range(10)]
        exact = sum(exact_ramp(m, mpmath.mpf(1)) for m in margins) / 10
    cert = certified_ramp_loss(w, dataset_from_arrays(y, inputs=X), 1.0)
    assert cert.forward == "arb"
    with mpmath.workdps(DPS):
        assert mpmath.mpf(cert.lower.str(60, radius=False)) <= exact <= mpmath.mpf(cert.upper.str(60, radius=False))


def test_the_fast_pass_folds_a_power_of_two_scale_and_stays_within_epsilon():
    rng = np.random.default_rng(7)
    w = _scaled_one_layer(rng, Fraction(1, 4))
    X = rng.standard_normal((3, 3, 4))
    fast = prepare_rows(w, 3)
    f = margins_of_rows(fast, X)
    with mpmath.workdps(DPS):
        eps = mpmath.mpf(fast.epsilon.str(60, radius=False))
        for i in range(3):
            assert abs(mpmath.mpf(float(f[i])) - mp_forward(w, mp_mat(X[i]))) <= eps


# --------------------------------------------------------------------------- the Llama-style pass


def _mp_silu(t):
    return t / (1 + mpmath.exp(-t))


def _mp_ls_forward(w: AnalysisWeights, X0: np.ndarray) -> mpmath.mpf:
    """f of the one-group LS model at 50 digits: rotary queries/keys, causal softmax, Pi, gated
    SiLU block, Pi, read-out at the last token; every matrix is sqrt(scale_sq) left [@ right]."""
    def mat(m):
        W = mp_mat(m.left) if m.right is None else mp_mat(m.left) * mp_mat(m.right)
        s = Fraction(m.scale_sq)
        return W * mpmath.sqrt(mpmath.mpf(s.numerator) / s.denominator)

    def proj(X):
        out = X.copy()
        for i in range(X.rows):
            n = max(mpmath.mpf(1), mpmath.sqrt(sum(X[i, j] ** 2 for j in range(X.cols))))
            for j in range(X.cols):
                out[i, j] = X[i, j] / n
        return out

    def rot(Y):
        out, half = Y.copy(), Y.cols // 2
        for t in range(Y.rows):
            for i in range(half):
                c, s = mpmath.mpf(float(cos[t, i])), mpmath.mpf(float(sin[t, i]))
                a, b = Y[t, i], Y[t, i + half]
                out[t, i], out[t, i + half] = a * c - b * s, a * s + b * c
        return out

    cos, sin = w.extra[ROPE_COS], w.extra[ROPE_SIN]
    X = proj(mp_mat(X0))
    T = X.rows
    for l in range(w.num_layers):
        K = rot(X * mat(w.get(l, "K", 0)))
        att = mpmath.zeros(T, X.cols)
        for h in range(w.num_heads):
            Q = rot(X * mat(w.get(l, "Q", h)))
            Z = Q * K.T
            P = mpmath.zeros(T, T)
            for t in range(T):
                e = [mpmath.exp(Z[t, s]) for s in range(t + 1)]
                for s in range(t + 1):
                    P[t, s] = e[s] / sum(e)
            att += P * X * mat(w.get(l, "V_tilde", h))
        Y = proj(att)
        G, U = Y * mat(w.get(l, "G")), Y * mat(w.get(l, "U"))
        hidden = mpmath.matrix([[_mp_silu(G[i, j]) * U[i, j] for j in range(G.cols)] for i in range(G.rows)])
        X = proj(hidden * mat(w.get(l, "D")))
    return sum(X[T - 1, j] * mpmath.mpf(float(w.readout[j])) for j in range(X.cols))


def _ls_weights(rng, scale_sq: Fraction, N=4, H=2, d=2, F=3, T=3) -> AnalysisWeights:
    W_V = rng.standard_normal((N, d))
    mats = [NamedMatrix(0, h, "Q", rng.standard_normal((N, d)) * 2, scale_sq=scale_sq) for h in range(H)]
    mats.append(NamedMatrix(0, 0, "K", rng.standard_normal((N, d)) * 2))
    mats += [NamedMatrix(0, h, "V_tilde", W_V, rng.standard_normal((d, N))) for h in range(H)]
    mats += [NamedMatrix(0, -1, "G", rng.standard_normal((N, F))), NamedMatrix(0, -1, "U", rng.standard_normal((N, F))),
             NamedMatrix(0, -1, "D", rng.standard_normal((F, N)))]
    angles = np.arange(T)[:, None] * np.array([1.0, 0.1])[None, : d // 2]
    extra = {ROPE_COS: np.cos(angles), ROPE_SIN: np.sin(angles)}
    return AnalysisWeights(matrices=ordered(mats), num_layers=1, num_heads=H, width=N, head_dim=d, ff_dim=F,
                           activation="silu", readout=rng.standard_normal(N), variant="ls", num_kv_heads=1,
                           extra=extra)


@pytest.mark.parametrize("scale_sq", [Fraction(1, 2), Fraction(1, 100), Fraction(1)])
def test_the_llama_style_pass_contains_the_exactly_scaled_network(scale_sq):
    # regression: the query used to be built from .dense(), the float product left * fl(sqrt(1/2)),
    # whose narrow ball missed the exact value
    rng = np.random.default_rng(8)
    w = _ls_weights(rng, scale_sq)
    X = rng.standard_normal((3, 4))
    ball = ls_forward(w, X)
    assert ball.rad() < 1e-18
    with mpmath.workdps(DPS):
        assert _contains(ball, _mp_ls_forward(w, X))
