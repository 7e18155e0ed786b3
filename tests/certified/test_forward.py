"""Certified forward pass and empirical ramp loss (certified/forward.py).

Specification: every ball contains the exact real value.  The reference is an independent
brute-force forward pass in mpmath at 40 digits written here (dense products of the factors,
softmax, Pi, erf/tanh GELU, ReLU), never the code under test.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from flint import arb, arb_mat, fmpq
from hypothesis import given
from hypothesis import strategies as st

from specbound.certified.forward import (
    ArbNetwork,
    activation,
    certified_forward,
    embedded_input_ball,
    project_rows,
    softmax_rows,
)
from specbound.certified.ramp_loss import certified_ramp_loss, ramp_lower, ramp_upper
from specbound.data_file import dataset_from_arrays
from specbound.errors import CertificationError, LayoutError, SpecboundError
from specbound.matrices import AnalysisWeights, NamedMatrix, ordered

DPS = 40
SLACK = mpmath.mpf(10) ** -(DPS - 5)  # the reference's own error is far below this


# --------------------------------------------------------------------------- hand-built networks


def make_weights(rng, *, L, H, N, d, F, activation, scale=1.0, readout=True) -> AnalysisWeights:
    """Random analysis weights with the checkpoint's factor conventions (docs/checkpoint_format.md)."""
    mats = []
    for l in range(L):
        for h in range(H):
            W_Q, W_K, W_V = (rng.standard_normal((N, d)) * scale for _ in range(3))
            W_O = rng.standard_normal((d, N)) * scale
            mats.append(NamedMatrix(l, h, "QK", W_Q, np.ascontiguousarray(W_K.T)))
            mats.append(NamedMatrix(l, h, "V_tilde", W_V, W_O))
        mats.append(NamedMatrix(l, -1, "M_in", rng.standard_normal((N, F)) * scale))
        mats.append(NamedMatrix(l, -1, "M_out", rng.standard_normal((F, N)) * scale))
    return AnalysisWeights(
        matrices=ordered(mats),
        num_layers=L,
        num_heads=H,
        width=N,
        head_dim=d,
        ff_dim=F,
        activation=activation,
        readout=rng.standard_normal(N) if readout else None,
    )


# --------------------------------------------------------------------------- mpmath reference


def mp_mat(a):
    return mpmath.matrix([[mpmath.mpf(float(v)) for v in row] for row in np.atleast_2d(a)])


def mp_phi(name, t):
    if name == "gelu":
        return t * (1 + mpmath.erf(t / mpmath.sqrt(2))) / 2
    if name == "gelu_tanh":
        k = mpmath.sqrt(2 / mpmath.pi)
        return t * (1 + mpmath.tanh(k * (t + mpmath.mpf("0.044715") * t**3))) / 2
    return max(t, mpmath.mpf(0))


def mp_project(X):
    out = X.copy()
    for i in range(X.rows):
        s = mpmath.sqrt(sum(X[i, j] ** 2 for j in range(X.cols)))
        m = max(mpmath.mpf(1), s)
        for j in range(X.cols):
            out[i, j] = X[i, j] / m
    return out


def mp_softmax_rows(S, causal: bool = False):
    """Row softmax; ``causal``: row i over columns j <= i only (the others get weight 0)."""
    out = S.copy()
    for i in range(S.rows):
        keep = range(i + 1) if causal else range(S.cols)
        e = {j: mpmath.exp(S[i, j]) for j in keep}
        tot = sum(e.values())
        for j in range(S.cols):
            out[i, j] = e[j] / tot if j in e else mpmath.mpf(0)
    return out


def mp_matrix(m: NamedMatrix):
    """The exact real matrix ``sqrt(scale_sq) * left [@ right]`` of a covered matrix, to the working
    digits (the product of the factors and the square root of the rational scale in mpmath)."""
    W = mp_mat(m.left) if m.right is None else mp_mat(m.left) * mp_mat(m.right)
    s = Fraction(m.scale_sq)
    return W if s == 1 else W * mpmath.sqrt(mpmath.mpf(s.numerator) / s.denominator)


def mp_forward(weights: AnalysisWeights, X0) -> mpmath.mpf:
    """f(Pi(X0)) in 40-digit arithmetic; X0 is an mpmath matrix of the exact input rows.  The
    residual variant (``weights.variant == "residual"``): Y = Pi(X + Att(X)), X' = Pi(Y + F(Y)); the
    causal variant: token t attends to s <= t and the read-out is at the last token."""
    residual = getattr(weights, "variant", "plain") == "residual"
    causal = getattr(weights, "variant", "plain") == "causal"
    X = mp_project(X0)
    for l in range(weights.num_layers):
        att = mpmath.zeros(X.rows, X.cols)
        for h in range(weights.num_heads):
            A = mp_matrix(weights.get(l, "QK", h))  # exact product of the factors (to 40 digits)
            V = mp_matrix(weights.get(l, "V_tilde", h))
            att += mp_softmax_rows(X * A * X.T, causal) * X * V
        Y = mp_project(X + att if residual else att)
        U = Y * mp_matrix(weights.get(l, "M_in"))
        U = U.apply(lambda t: mp_phi(weights.activation, t))
        Z = U * mp_matrix(weights.get(l, "M_out"))
        X = mp_project(Y + Z if residual else Z)
    w = weights.readout
    row = X.rows - 1 if causal else 0
    return sum(X[row, j] * mpmath.mpf(float(w[j])) for j in range(X.cols))


def np_forward(weights: AnalysisWeights, X0: np.ndarray) -> float:
    """The plain float64 forward pass (what fast code computes)."""
    from math import erf, sqrt, tanh, pi

    def proj(X):
        return X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))

    def phi(t):
        if weights.activation == "gelu":
            return np.vectorize(lambda v: v * (1 + erf(v / sqrt(2))) / 2)(t)
        if weights.activation == "gelu_tanh":
            return np.vectorize(lambda v: v * (1 + tanh(sqrt(2 / pi) * (v + 0.044715 * v**3))) / 2)(t)
        return np.maximum(t, 0)

    X = proj(X0)
    for l in range(weights.num_layers):
        att = 0
        for h in range(weights.num_heads):
            qk, vt = weights.get(l, "QK", h), weights.get(l, "V_tilde", h)
            S = (X @ qk.left) @ (X @ qk.right.T).T
            P = np.exp(S - S.max(axis=1, keepdims=True))
            P /= P.sum(axis=1, keepdims=True)
            att = att + P @ (X @ vt.left) @ vt.right
        X = proj(phi(proj(att) @ weights.get(l, "M_in").left) @ weights.get(l, "M_out").left)
    return float(X[0] @ weights.readout)


def contains(ball: arb, ref: mpmath.mpf) -> bool:
    """``ref`` (error << SLACK) lies in the ball, compared with exact endpoints."""
    lo = mpmath.mpf(ball.lower().str(60, radius=False))
    hi = mpmath.mpf(ball.upper().str(60, radius=False))
    # str(60) of an exact 53-bit point is exact up to ~1e-60 relative; SLACK dominates that.
    return lo - SLACK * (1 + abs(lo)) <= ref <= hi + SLACK * (1 + abs(hi))


nets = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 2**32 - 1),
        "L": st.integers(1, 2),
        "H": st.integers(1, 2),
        "N": st.integers(2, 5),
        "d": st.integers(1, 3),
        "F": st.integers(1, 6),
        "T": st.integers(1, 4),
        "activation": st.sampled_from(["gelu", "gelu_tanh", "relu"]),
        "scale": st.sampled_from([0.3, 1.0, 3.0]),
    }
)


def build(spec):
    rng = np.random.default_rng(spec["seed"])
    w = make_weights(
        rng, L=spec["L"], H=spec["H"], N=spec["N"], d=spec["d"], F=spec["F"],
        activation=spec["activation"], scale=spec["scale"],
    )
    X0 = rng.standard_normal((spec["T"], spec["N"])) * rng.choice([0.2, 1.0, 5.0])
    return w, X0


# --------------------------------------------------------------------------- forward pass


@given(nets)
def test_ball_contains_the_40_digit_forward_value(spec):
    w, X0 = build(spec)
    with mpmath.workdps(DPS):
        ref = mp_forward(w, mp_mat(X0))
        assert contains(certified_forward(w, X0), ref)


@given(nets)
def test_ball_contains_the_exact_value_even_at_low_precision(spec):
    # With 20 bits every rounding is ~1e-6: a ball that tracked midpoints only would miss.
    w, X0 = build(spec)
    with mpmath.workdps(DPS):
        ref = mp_forward(w, mp_mat(X0))
        ball = certified_forward(w, X0, prec=20)
        assert contains(ball, ref)


@given(nets)
def test_ball_contains_the_float64_forward_value_and_is_narrow(spec):
    w, X0 = build(spec)
    ball = certified_forward(w, X0)
    value = np_forward(w, X0)
    # float64 rounding is of the order of the certified radius; allow a few ulps of the scale.
    assert abs(float(ball.mid()) - value) <= float(ball.rad()) + 1e-14 * (1 + abs(value))
    assert float(ball.rad()) <= 1e-10 * max(1.0, abs(value))


def test_benign_default_sized_net_is_narrow():
    rng = np.random.default_rng(7)
    w = make_weights(rng, L=2, H=2, N=32, d=8, F=64, activation="gelu", scale=32**-0.5)
    ball = certified_forward(w, rng.standard_normal((16, 32)))
    assert float(ball.rad()) < 1e-10 * max(1.0, abs(float(ball.mid())))


def test_large_scores_do_not_overflow_and_stay_contained():
    # Scores of order 1e3 overflow a naive float exp; Arb exponents are unbounded.
    rng = np.random.default_rng(3)
    w = make_weights(rng, L=1, H=1, N=3, d=2, F=3, activation="gelu", scale=25.0)
    X0 = rng.standard_normal((3, 3))
    with mpmath.workdps(DPS):
        ref = mp_forward(w, mp_mat(X0))
        ball = certified_forward(w, X0)
        assert ball.is_finite() and contains(ball, ref)


def test_network_may_be_prepared_once():
    rng = np.random.default_rng(11)
    w = make_weights(rng, L=2, H=1, N=3, d=2, F=4, activation="relu")
    X0 = rng.standard_normal((2, 3))
    net = ArbNetwork.from_weights(w)
    assert certified_forward(net, X0).overlaps(certified_forward(w, X0))


# --------------------------------------------------------------------------- steps


@pytest.mark.parametrize(
    "row",
    [
        [0.6, 0.8],  # ||x|| = 1 in exact decimals, but the binary64 entries make ||x||^2 straddle 1
        [0.0, 0.0],
        [3.0, -4.0],
        [2**-30, 1.0],
        [1e-300, -1e-300],
        [1e300, 1e300],
    ],
)
def test_projection_contains_the_exact_projection(row):
    ball = project_rows(arb_mat(1, len(row), row))
    with mpmath.workdps(DPS):
        ref = mp_project(mp_mat(row))
        for j in range(len(row)):
            assert contains(ball[0, j], ref[0, j])
            assert float(ball[0, j].rad()) <= 1e-14 * max(1e-300, abs(float(ref[0, j])))


def test_projection_of_a_ball_straddling_the_unit_sphere():
    # A row whose norm ball is [0.9, 1.1]: the enclosure must cover x and x/||x|| alike.
    x = arb(1, 0.1)
    ball = project_rows(arb_mat([[x]]))[0, 0]
    for v in (0.9, 0.95, 1.0, 1.05, 1.1):
        assert ball.contains(arb(v) / max(1.0, abs(v)))


@pytest.mark.parametrize("name", ["gelu", "gelu_tanh", "relu"])
@pytest.mark.parametrize("mid, rad", [(0.5, 0.1), (-0.05, 0.1), (-3.0, 0.5), (0.0, 0.0), (7.5, 1.0)])
def test_activation_ball_contains_phi_of_every_point(name, mid, rad):
    ball = activation(name)(arb(mid, rad))
    with mpmath.workdps(DPS):
        for k in range(-10, 11):
            v = mpmath.mpf(mid) + mpmath.mpf(rad) * k / 10
            assert contains(ball, mp_phi(name, v))


def test_softmax_ball_contains_softmax_of_every_point():
    # Scores are balls of radius 0.05: sample corners of the box, each must be inside.
    ball = softmax_rows(arb_mat([[arb(0.3, 0.05), arb(-1.0, 0.05), arb(2.0, 0.05)]]))
    rng = np.random.default_rng(1)
    with mpmath.workdps(DPS):
        for _ in range(20):
            z = np.array([0.3, -1.0, 2.0]) + rng.choice([-0.05, 0.05, 0.0], size=3)
            ref = mp_softmax_rows(mp_mat(z))
            assert all(contains(ball[0, j], ref[0, j]) for j in range(3))


def test_softmax_rows_contain_exact_softmax():
    S = np.array([[0.1, -2.0, 3.0], [700.0, 710.0, -1e4]])
    ball = softmax_rows(arb_mat(2, 3, S.ravel().tolist()))
    with mpmath.workdps(DPS):
        ref = mp_softmax_rows(mp_mat(S))
        for i in range(2):
            for j in range(3):
                assert contains(ball[i, j], ref[i, j])


def test_token_rows_are_the_exact_sum_not_the_rounded_float_sum():
    E = np.array([[1.0, 0.0], [0.5, 0.25]])
    P = np.array([[2.0**-60, 0.0], [0.0, 3.0]])
    assert E[0, 0] + P[0, 0] == 1.0  # the float sum loses 2^-60
    ball = embedded_input_ball(np.array([0, 1]), E, P)
    with mpmath.workdps(DPS):
        assert contains(ball[0, 0], mpmath.mpf(1) + mpmath.mpf(2) ** -60)


def test_token_path_contains_the_reference_with_exact_sums():
    rng = np.random.default_rng(5)
    w = make_weights(rng, L=1, H=2, N=4, d=2, F=3, activation="gelu")
    E = rng.standard_normal((5, 4))
    P = rng.standard_normal((3, 4)) * 1e-9  # float sums with P are inexact
    tokens = np.array([0, 4, 2])
    with mpmath.workdps(DPS):
        X0 = mp_mat(E[tokens]) + mp_mat(P)
        assert contains(certified_forward(w, embedded_input_ball(tokens, E, P)), mp_forward(w, X0))


@pytest.mark.parametrize(
    "tokens, P, match",
    [
        (np.array([0, 9]), None, r"token ids must lie in \[0, 3\)"),
        (np.array([0, 1, 2]), np.zeros((2, 2)), "exceeds the positional embedding"),
        (np.array([], dtype=np.int64), None, "T >= 1"),
    ],
)
def test_bad_tokens_are_one_line_errors(tokens, P, match):
    with pytest.raises(LayoutError, match=match) as info:
        embedded_input_ball(tokens, np.zeros((3, 2)), P)
    assert "\n" not in str(info.value)


def test_width_mismatch_and_missing_readout_are_errors():
    rng = np.random.default_rng(0)
    w = make_weights(rng, L=1, H=1, N=3, d=1, F=2, activation="relu")
    with pytest.raises(LayoutError, match="network width is 3"):
        certified_forward(w, np.zeros((2, 4)))
    bare = make_weights(rng, L=1, H=1, N=3, d=1, F=2, activation="relu", readout=False)
    with pytest.raises(CertificationError, match="no read-out vector"):
        certified_forward(bare, np.zeros((2, 3)))


# --------------------------------------------------------------------------- ramp loss


def exact_ramp(u: Fraction | mpmath.mpf, rho) -> Fraction | mpmath.mpf:
    return min(1, max(0, 1 - u / rho))


@pytest.mark.parametrize(
    "ball, rho",
    [
        (arb(-1, 0.1), 1.0),
        (arb(0.5, 0.01), 1.0),
        (arb(0.5, 10.0), 1.0),
        (arb(3, 0.5), 2.0),
        (arb(2, 1e-20), 2.0),
        (arb(0.25, 0.25), 0.5),
    ],
)
def test_ramp_endpoints_bound_the_ramp_over_the_ball(ball, rho):
    hi, lo = ramp_upper(ball, arb(rho)), ramp_lower(ball, arb(rho))
    assert hi.rad() == 0 and lo.rad() == 0
    for k in range(-20, 21):  # sample points of the ball, exactly
        v = Fraction(float(ball.mid())) + Fraction(k, 20) * Fraction(float(ball.rad()))
        true = exact_ramp(v, Fraction(rho))
        assert Fraction(float(lo)) <= true <= Fraction(float(hi))


@pytest.mark.parametrize("u", ["-3", "0", "1/3", "1/2", "3/4", "1", "5"])
@pytest.mark.parametrize("rho", ["1/2", "1", "4"])
def test_ramp_at_exact_points_is_the_derivations_ramp(u, rho):
    # One source of truth: the SymPy ramp of derivation/rademacher.py, evaluated exactly.
    import sympy as sp

    from specbound.derivation.rademacher import RAMP
    from specbound.derivation.symbols import rho as rho_sym

    (a,) = RAMP.free_symbols - {rho_sym}
    exact = Fraction(str(RAMP.subs({a: sp.Rational(u), rho_sym: sp.Rational(rho)})))
    ub = arb(fmpq(Fraction(u).numerator, Fraction(u).denominator))
    r = arb(fmpq(Fraction(rho).numerator, Fraction(rho).denominator))
    hi, lo = Fraction(float(ramp_upper(ub, r))), Fraction(float(ramp_lower(ub, r)))
    assert lo <= exact <= hi and hi - lo < Fraction(1, 10**12)


def test_float_endpoints_round_outward():
    from specbound.certified.ramp_loss import RampLossCertificate

    third = arb(fmpq(1, 3))
    tiny = arb(fmpq(1, 2**1100))  # below the binary64 range
    for point in (third.upper(), third.lower(), tiny):
        cert = RampLossCertificate(point, point, 1, arb(1), 0, 0, 0.0, 53, 0.0)
        exact = Fraction(int(point.mid().man_exp()[0])) * Fraction(2) ** int(point.mid().man_exp()[1])
        assert Fraction(cert.lower_float) <= exact <= Fraction(cert.upper_float)
    assert RampLossCertificate(tiny, tiny, 1, arb(1), 0, 0, 0.0, 53, 0.0).upper_float > 0


def test_ramp_of_a_non_finite_margin_is_between_0_and_1():
    u = arb("nan")
    assert ramp_upper(u, arb(1)) == 1 and ramp_lower(u, arb(1)) == 0


def _labelled_inputs(rng, w, n, T):
    X = rng.standard_normal((n, T, w.width))
    y = rng.choice([-1, 1], size=n)
    return X, y


@pytest.mark.parametrize("forward", ["arb", "fast"])
@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_ramp_loss_encloses_the_exact_empirical_loss(activation, forward):
    rng = np.random.default_rng(21)
    w = make_weights(rng, L=2, H=2, N=4, d=2, F=5, activation=activation)
    X, y = _labelled_inputs(rng, w, 12, 3)
    with mpmath.workdps(DPS):
        margins = [int(y[i]) * mp_forward(w, mp_mat(X[i])) for i in range(len(y))]
        # rho in the middle of the margins so that several samples sit on the ramp's slope
        rho = float(sorted(abs(m) for m in margins)[len(margins) // 2])
        exact = sum(exact_ramp(m, mpmath.mpf(rho)) for m in margins) / len(y)
        cert = certified_ramp_loss(w, dataset_from_arrays(y, inputs=X), rho, forward=forward)
        lo = mpmath.mpf(cert.lower.str(60, radius=False))
        hi = mpmath.mpf(cert.upper.str(60, radius=False))
        assert lo <= exact <= hi
        # the fast pass widens each sample's margin by its a-priori bound epsilon (slope 1/rho)
        width = 1e-9 + 2 * cert.epsilon / rho
        assert hi - exact < width and exact - lo < width
    assert cert.forward == forward
    assert cert.upper.rad() == 0 and cert.lower.rad() == 0
    assert cert.lower_float <= exact <= cert.upper_float
    assert cert.n == 12 and cert.undecided == 0
    assert cert.errors01 == sum(1 for m in margins if m < 0)


def test_ramp_loss_on_token_data_uses_the_models_fixed_embedding():
    rng = np.random.default_rng(2)
    w0 = make_weights(rng, L=1, H=1, N=3, d=2, F=2, activation="gelu")
    E, P = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    w = dataclasses.replace(w0, extra={"embedding.E": E, "embedding.P": P})
    tokens = rng.integers(0, 4, size=(6, 5))
    y = rng.choice([-1, 1], size=6)
    with mpmath.workdps(DPS):
        margins = [int(y[i]) * mp_forward(w, mp_mat(E[tokens[i]]) + mp_mat(P)) for i in range(6)]
        exact = sum(exact_ramp(m, mpmath.mpf(4)) for m in margins) / 6
        cert = certified_ramp_loss(w, dataset_from_arrays(y, tokens=tokens), 4.0)
        assert mpmath.mpf(cert.lower.str(60, radius=False)) <= exact
        assert exact <= mpmath.mpf(cert.upper.str(60, radius=False))


def test_a_hopelessly_wide_ball_contributes_at_most_one():
    rng = np.random.default_rng(4)
    w = make_weights(rng, L=1, H=1, N=2, d=1, F=2, activation="gelu", scale=1e3)
    X, y = _labelled_inputs(rng, w, 4, 2)
    cert = certified_ramp_loss(w, dataset_from_arrays(y, inputs=X), 1.0, prec=8)
    assert 0 <= cert.lower <= cert.upper <= 1


@pytest.mark.parametrize("forward", ["arb", "fast"])
def test_blocks_run_elsewhere_give_the_identical_certificate(forward):
    # an engine's map_blocks may split the samples and run the blocks in any order: the partial sums
    # are exact, so the certificate is the one of the single block run here
    from specbound.certified.ramp_loss import _block_of

    rng = np.random.default_rng(8)
    w = make_weights(rng, L=1, H=2, N=3, d=2, F=3, activation="gelu")
    X, y = _labelled_inputs(rng, w, 9, 3)
    data = dataset_from_arrays(y, inputs=X)
    calls = []

    def map_blocks(chunks, rho, prec):
        calls.append([list(c) for c in chunks])
        done = {i: _block_of(w, data, rho, None, prec, c) for i, c in reversed(list(enumerate(chunks)))}
        return [done[i] for i in range(len(chunks))]

    one = certified_ramp_loss(w, data, 0.5, forward=forward)
    two = certified_ramp_loss(w, data, 0.5, forward=forward, map_blocks=map_blocks)
    assert one.upper == two.upper and one.lower == two.lower
    assert (one.undecided, one.errors01, one.redone) == (two.undecided, two.errors01, two.redone)
    if forward == "arb":
        assert calls and sorted(i for c in calls[0] for i in c) == list(range(9))


@pytest.mark.parametrize("rho", [0.0, -1.0, "0 +/- 1", float("nan")])
def test_margin_must_be_certainly_positive(rho):
    rng = np.random.default_rng(0)
    w = make_weights(rng, L=1, H=1, N=2, d=1, F=1, activation="relu")
    data = dataset_from_arrays(np.array([1]), inputs=np.zeros((1, 1, 2)))
    with pytest.raises(SpecboundError, match="margin rho"):
        certified_ramp_loss(w, data, rho)


def test_token_data_against_a_model_without_embedding_is_an_error():
    rng = np.random.default_rng(0)
    w = make_weights(rng, L=1, H=1, N=2, d=1, F=1, activation="relu")
    data = dataset_from_arrays(np.array([1, -1]), tokens=np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(LayoutError, match="no fixed embedding"):
        certified_ramp_loss(w, data, 1.0)
