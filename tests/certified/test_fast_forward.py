"""The fast certified forward pass against independent references.

Every fast enclosure ``f_hat +- eps`` must contain the 50-digit mpmath value of the same network on the
same exact input (``tests.certified.test_forward.mp_forward``, written without the code under test) and
intersect the Arb pass's ball, on random and adversarial inputs: near-tie and duplicated rows, huge and
tiny scores, tiny and huge input rows.  The ramp loss is checked at margins exactly 0 and rho.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest
from flint import arb
from hypothesis import given
from hypothesis import strategies as st

from specbound.certified.fast_forward import (
    NotApplicable, check_float_environment, margins_of_rows, margins_of_tokens, prepare_rows, prepare_tokens,
)
from specbound.certified.forward import certified_forward, embedded_input_ball
from specbound.certified.ramp_loss import certified_ramp_loss, exact_float_sum
from specbound.data_file import dataset_from_arrays
from specbound.matrices import AnalysisWeights, NamedMatrix, ordered
from tests.certified.test_forward import exact_ramp, mp_forward, mp_mat

DPS = 50


def _weights(rng, *, L=2, H=2, N=4, d=2, F=5, activation="gelu", qk_scale=1.0, readout=None,
             variant="plain") -> AnalysisWeights:
    mats = []
    for l in range(L):
        for h in range(H):
            W_Q, W_K = (rng.standard_normal((N, d)) * qk_scale for _ in range(2))
            W_V, W_O = rng.standard_normal((N, d)), rng.standard_normal((d, N)) / np.sqrt(d)
            mats.append(NamedMatrix(l, h, "QK", W_Q, np.ascontiguousarray(W_K.T)))
            mats.append(NamedMatrix(l, h, "V_tilde", W_V, W_O))
        mats.append(NamedMatrix(l, -1, "M_in", rng.standard_normal((N, F)) / np.sqrt(N)))
        mats.append(NamedMatrix(l, -1, "M_out", rng.standard_normal((F, N))))
    w = rng.standard_normal(N) if readout is None else readout
    return AnalysisWeights(matrices=ordered(mats), num_layers=L, num_heads=H, width=N, head_dim=d,
                           ff_dim=F, activation=activation, readout=w, variant=variant)


def _inputs(rng, kind: str, n: int, T: int, N: int) -> np.ndarray:
    X = rng.standard_normal((n, T, N))
    if kind == "near_tie":  # keys differing in the last bits: near-tie softmax rows
        X[:, 1:] = X[:, :1] + 1e-13 * rng.standard_normal((n, T - 1, N))
    elif kind == "duplicate":  # exact ties
        X[:, 1:] = X[:, :1]
    elif kind == "tiny_rows":
        X *= 1e-150
    elif kind == "huge_rows":
        X *= 1e150
    elif kind == "unit_norm":  # rows within ulps of the unit sphere: Pi switches on or off
        X /= np.linalg.norm(X, axis=2, keepdims=True)
    return X


def _check_sample(weights, x: np.ndarray, f_hat: float, eps: arb) -> None:
    """``f_hat +- eps`` contains the 50-digit value and meets the Arb ball."""
    with mpmath.workdps(DPS):
        e = mpmath.mpf(eps.str(60, radius=False))
        exact = mp_forward(weights, mp_mat(x))
        assert abs(mpmath.mpf(f_hat) - exact) <= e, (f_hat, exact, e)
    ball = certified_forward(weights, x)
    assert ball.lower() <= arb(f_hat) + eps and arb(f_hat) - eps <= ball.upper()


CASES = [
    ("gelu", "random", 1.0),
    ("relu", "random", 1.0),
    ("gelu", "near_tie", 1.0),
    ("gelu", "duplicate", 1.0),
    ("gelu", "unit_norm", 1.0),
    ("gelu", "tiny_rows", 1.0),
    ("gelu", "huge_rows", 1.0),
    ("gelu", "random", 6.0),  # huge scores (hundreds): far-negative exp arguments, clamped
    ("relu", "near_tie", 6.0),
    ("gelu", "random", 1e-160),  # tiny scores: products underflow into subnormals
    ("gelu", "random", 40.0),  # score gaps beyond 708: exp arguments below the clamp
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_fast_enclosure_contains_mpmath_and_meets_arb(case):
    activation, kind, qk_scale = CASES[case]
    rng = np.random.default_rng(100 + case)
    w = _weights(rng, activation=activation, qk_scale=qk_scale)
    X = _inputs(rng, kind, 4, 3, w.width)
    fast = prepare_rows(w, 3)
    f = margins_of_rows(fast, X)
    assert np.isfinite(f).all()
    for i in range(len(f)):
        _check_sample(w, X[i], float(f[i]), fast.epsilon)


@pytest.mark.parametrize("variant", ["residual", "causal"])
@pytest.mark.parametrize("case", [0, 1, 2, 3, 4, 7, 10])
def test_variant_fast_enclosure_contains_mpmath_and_meets_arb(case, variant):
    # step 9 of the note: the identity paths carry the input error, the two sums round once more;
    # step 10: masked keys get weight exactly 0, the read-out row is the last token
    activation, kind, qk_scale = CASES[case]
    rng = np.random.default_rng(300 + case)
    w = _weights(rng, activation=activation, qk_scale=qk_scale, variant=variant)
    X = _inputs(rng, kind, 4, 3, w.width)
    fast = prepare_rows(w, 3)
    assert fast.net.residual == (variant == "residual") and fast.net.causal == (variant == "causal")
    f = margins_of_rows(fast, X)
    assert np.isfinite(f).all()
    for i in range(len(f)):
        _check_sample(w, X[i], float(f[i]), fast.epsilon)


def test_a_missing_causal_mask_would_be_caught():
    # the containment check above can fail: the unmasked program on the same weights and inputs
    # lands outside the causal model's 50-digit value +- eps
    rng = np.random.default_rng(11)
    causal = _weights(rng, variant="causal")
    plain = AnalysisWeights(matrices=causal.matrices, num_layers=2, num_heads=2, width=causal.width,
                            head_dim=2, ff_dim=5, activation="gelu", readout=causal.readout)
    X = _inputs(rng, "random", 2, 3, causal.width)
    wrong = prepare_rows(plain, 3)
    f = margins_of_rows(wrong, X)
    eps = prepare_rows(causal, 3).epsilon
    with mpmath.workdps(DPS):
        e = mpmath.mpf(eps.str(60, radius=False))
        assert any(abs(mpmath.mpf(float(f[i])) - mp_forward(causal, mp_mat(X[i]))) > e for i in range(2))


def test_residual_epsilon_exceeds_the_plain_one_on_the_same_weights():
    # the identity path adds error terms: a residual budget at most the plain one would be suspect
    rng = np.random.default_rng(7)
    plain = _weights(rng, variant="plain")
    res = AnalysisWeights(matrices=plain.matrices, num_layers=2, num_heads=2, width=plain.width, head_dim=2,
                          ff_dim=5, activation="gelu", readout=plain.readout, variant="residual")
    assert prepare_rows(res, 3).epsilon > prepare_rows(plain, 3).epsilon


@given(seed=st.integers(0, 2**32 - 1), activation=st.sampled_from(["gelu", "relu"]),
       kind=st.sampled_from(["random", "near_tie", "duplicate", "unit_norm", "tiny_rows"]),
       qk_scale=st.sampled_from([1e-160, 1e-3, 1.0, 5.0, 30.0]), T=st.integers(1, 4), L=st.integers(1, 2),
       variant=st.sampled_from(["plain", "residual", "causal"]))
def test_property_fast_enclosure_meets_the_arb_ball(seed, activation, kind, qk_scale, T, L, variant):
    rng = np.random.default_rng(seed)
    w = _weights(rng, L=L, activation=activation, qk_scale=qk_scale, variant=variant)
    X = _inputs(rng, kind, 2, max(T, 2) if kind in ("near_tie", "duplicate") else T, w.width)
    fast = prepare_rows(w, X.shape[1])
    f = margins_of_rows(fast, X)
    for i in range(len(f)):
        ball = certified_forward(w, X[i])
        assert ball.lower() <= arb(float(f[i])) + fast.epsilon and arb(float(f[i])) - fast.epsilon <= ball.upper()


def test_the_adversarial_cases_reach_the_clamp_and_subnormal_scores():
    gaps = {}
    for case in (CASES.index(("gelu", "random", 40.0)), CASES.index(("gelu", "random", 1e-160))):
        activation, kind, qk_scale = CASES[case]
        rng = np.random.default_rng(100 + case)
        w = _weights(rng, activation=activation, qk_scale=qk_scale)
        X = _inputs(rng, kind, 4, 3, w.width)
        Xp = X / np.maximum(1, np.linalg.norm(X, axis=2, keepdims=True))
        qk = w.get(0, "QK", 0)
        S = Xp @ qk.left @ qk.right @ Xp.transpose(0, 2, 1)
        gaps[qk_scale] = (S.max(axis=2) - S.min(axis=2)).max(), np.abs(S).max()
    assert gaps[40.0][0] > 708
    assert 0 < gaps[1e-160][1] < 2.0**-1000


def test_token_path_of_the_default_model_meets_arb():
    from specbound.checkpoint import load_weights
    from specbound.data import toy_checkpoint_path
    from specbound.tasks import sparse_majority

    w = load_weights(str(toy_checkpoint_path()))  # the toy model: these figures are stated on it
    E, P = w.extra["embedding.E"], w.extra["embedding.P"]
    tokens, _ = sparse_majority().sample(6, np.random.default_rng(11))
    fast, table = prepare_tokens(w, E, P, tokens)
    f = margins_of_tokens(fast, table, tokens)
    assert float(fast.epsilon.upper()) < 1e-6
    for i in range(len(f)):
        ball = certified_forward(w, embedded_input_ball(tokens[i], E, P))
        assert abs(ball - f[i]).lower() <= fast.epsilon
        assert ball.lower() <= arb(float(f[i])) + fast.epsilon and arb(float(f[i])) - fast.epsilon <= ball.upper()


@pytest.mark.slow
def test_token_path_of_the_default_model_contains_mpmath():
    from specbound.checkpoint import load_weights
    from specbound.data import toy_checkpoint_path
    from specbound.tasks import sparse_majority

    w = load_weights(str(toy_checkpoint_path()))  # the toy model: these figures are stated on it
    E, P = w.extra["embedding.E"], w.extra["embedding.P"]
    tokens, _ = sparse_majority().sample(2, np.random.default_rng(12))
    fast, table = prepare_tokens(w, E, P, tokens)
    f = margins_of_tokens(fast, table, tokens)
    with mpmath.workdps(DPS):
        e = mpmath.mpf(fast.epsilon.str(60, radius=False))
        for i in range(len(f)):
            rows = mpmath.matrix([[mpmath.mpf(float(E[a, j])) + mpmath.mpf(float(P[t, j])) for j in range(w.width)]
                                  for t, a in enumerate(tokens[i].tolist())])
            assert abs(mpmath.mpf(float(f[i])) - mp_forward(w, rows)) <= e


def test_mutation_an_epsilon_below_the_actual_error_is_caught():
    # the containment check is not vacuous: f_hat differs from the exact value, so a small enough
    # epsilon fails it
    rng = np.random.default_rng(3)
    w = _weights(rng)
    X = _inputs(rng, "random", 6, 3, w.width)
    fast = prepare_rows(w, 3)
    f = margins_of_rows(fast, X)
    with mpmath.workdps(DPS):
        errors = [abs(mpmath.mpf(float(f[i])) - mp_forward(w, mp_mat(X[i]))) for i in range(len(f))]
    worst = max(errors)
    assert worst > 0
    shrunk = arb(mpmath.nstr(worst / 2, 30))
    with pytest.raises(AssertionError):
        for i in range(len(f)):
            _check_sample(w, X[i], float(f[i]), shrunk)


def test_rows_whose_squared_norms_would_overflow_fall_back_to_arb():
    rng = np.random.default_rng(5)
    w = _weights(rng, L=1)
    X, y = rng.standard_normal((2, 3, 4)) * 1e200, np.array([1, -1])
    with pytest.raises(NotApplicable):
        margins_of_rows(prepare_rows(w, 3), X)
    cert = certified_ramp_loss(w, dataset_from_arrays(y, inputs=X), 1.0)
    assert cert.forward == "arb"
    exact = _exact_loss(w, X, y, 1.0)
    assert _encloses(cert, exact)


def test_models_outside_the_fast_pass_are_refused():
    rng = np.random.default_rng(2)
    w = _weights(rng, activation="gelu_tanh")
    with pytest.raises(NotApplicable):
        prepare_rows(w, 3)


def _encloses(cert, exact) -> bool:
    with mpmath.workdps(DPS + 10):
        return mpmath.mpf(cert.lower.str(70, radius=False)) <= exact <= mpmath.mpf(cert.upper.str(70, radius=False))


def _exact_loss(w, X, y, rho):
    with mpmath.workdps(DPS):
        return sum(exact_ramp(int(y[i]) * mp_forward(w, mp_mat(X[i])), mpmath.mpf(rho)) for i in range(len(y))) / len(y)


def test_ramp_loss_at_margins_exactly_zero_redoes_them_in_arb():
    rng = np.random.default_rng(4)
    w = _weights(rng, readout=np.zeros(4))  # f = 0 exactly: every margin sits on the breakpoint 0
    X, y = _inputs(rng, "random", 5, 3, 4), np.array([1, -1, 1, 1, -1])
    cert = certified_ramp_loss(w, dataset_from_arrays(y, inputs=X), 2.0)
    assert cert.forward == "fast" and cert.redone == 5
    assert cert.lower <= 1 <= cert.upper and cert.undecided == 5


def test_ramp_loss_at_a_margin_exactly_rho_encloses_the_exact_loss():
    rng = np.random.default_rng(6)
    w = _weights(rng)
    X, y = _inputs(rng, "random", 8, 3, 4), np.array([1, -1, 1, 1, -1, 1, -1, -1])
    fast = prepare_rows(w, 3)
    g = y * margins_of_rows(fast, X)
    rho = float(np.abs(g).max())  # the largest margin (in absolute value) sits exactly on rho
    cert = certified_ramp_loss(w, dataset_from_arrays(y, inputs=X), rho)
    assert cert.redone >= 1
    exact = _exact_loss(w, X, y, rho)
    assert _encloses(cert, exact)
    ref = certified_ramp_loss(w, dataset_from_arrays(y, inputs=X), rho, forward="arb")
    assert ref.forward == "arb" and cert.lower <= ref.upper and ref.lower <= cert.upper


def test_fast_and_arb_ramp_losses_agree_on_the_default_task():
    from specbound.checkpoint import load_weights
    from specbound.data import toy_checkpoint_path
    from specbound.tasks import sparse_majority

    w = load_weights(str(toy_checkpoint_path()))  # the toy model: these figures are stated on it
    tokens, labels = sparse_majority().sample(8, np.random.default_rng(13))
    data = dataset_from_arrays(labels, tokens=tokens)
    fast = certified_ramp_loss(w, data, 4.9)
    ref = certified_ramp_loss(w, data, 4.9, forward="arb")
    assert fast.forward == "fast" and fast.lower <= ref.upper and ref.lower <= fast.upper
    assert float(fast.upper.upper()) - float(ref.upper.upper()) < 1e-6


def test_unknown_forward_method_is_an_error():
    from specbound.errors import SpecboundError

    rng = np.random.default_rng(0)
    w = _weights(rng)
    with pytest.raises(SpecboundError, match="forward pass"):
        certified_ramp_loss(w, dataset_from_arrays(np.array([1]), inputs=np.zeros((1, 3, 4))), 1.0, forward="gpu")


@pytest.mark.parametrize("values", [
    [],
    [0.0, -0.0],
    [1.0, 2.0**-60, -1.0],
    [5e-324, -5e-324, 1e-310, 2.0**1000, -(2.0**1000), 3.0],
    list(np.random.default_rng(9).standard_normal(5000) * 10.0 ** np.random.default_rng(10).integers(-300, 300, 5000)),
])
def test_exact_float_sum_matches_fractions(values):
    assert exact_float_sum(np.array(values, dtype=np.float64)) == sum((Fraction(v) for v in values), Fraction(0))


# --------------------------------------------------------------------------- odd but legal inputs (issue 24)


def test_a_causal_model_without_layers_reads_the_last_token():
    # regression: with L = 0 the fast pass read token 0 instead of the last token
    rng = np.random.default_rng(20)
    N = 4
    w = AnalysisWeights(matrices=(), num_layers=0, num_heads=1, width=N, head_dim=2, ff_dim=3,
                        activation="gelu", readout=rng.standard_normal(N), variant="causal")
    X, y = rng.standard_normal((6, 3, N)), rng.choice([-1, 1], size=6)
    fast = prepare_rows(w, 3)
    f = margins_of_rows(fast, X)
    for i in range(len(f)):
        _check_sample(w, X[i], float(f[i]), fast.epsilon)
    cert = certified_ramp_loss(w, dataset_from_arrays(y, inputs=X), 0.5)
    assert _encloses(cert, _exact_loss(w, X, y, 0.5))


def _token_model(rng):
    from dataclasses import replace

    w = _weights(rng, L=1)
    return replace(w, extra={"embedding.E": rng.standard_normal((5, 4)), "embedding.P": rng.standard_normal((3, 4))})


@pytest.mark.parametrize("forward", ["fast", "arb"])
def test_negative_token_ids_in_a_directly_built_dataset_are_refused(forward):
    # regression: only tokens.max() was checked, so the fast pass used id -1 as row V - 1
    from specbound.dataset import DataSet
    from specbound.errors import LayoutError

    rng = np.random.default_rng(21)
    w = _token_model(rng)
    data = DataSet(labels=np.array([1, -1], dtype=np.int8), tokens=np.array([[0, 1, 2], [-1, 0, 1]], dtype=np.int64))
    with pytest.raises(LayoutError, match="token ids"):
        certified_ramp_loss(w, data, 1.0, forward=forward)
    with pytest.raises(LayoutError, match="token ids"):
        prepare_tokens(w, w.extra["embedding.E"], w.extra["embedding.P"], data.tokens)


def _overflow_model(c: float, rng) -> AnalysisWeights:
    """Two layers, width 3, one head with W_V = W_O = I.  Layer 1 has M_in = 3.5 e_3 and M_out = c e_1^T:
    a sample whose rows have last coordinate 0 gets u = 0 exactly and never overflows; one whose rows
    are e_3 gets u = 3.5 and z_1 = 3.5 c (inf for c = 1e308; finite with an overflowing squared norm
    for c = 1e200).  Layer 2's attention maps are ~1e-300, so the huge a-priori error after layer 1
    does not reach epsilon."""
    N = 3
    mats = [NamedMatrix(0, 0, "QK", rng.standard_normal((N, N)) * 0.1, rng.standard_normal((N, N)) * 0.1),
            NamedMatrix(0, 0, "V_tilde", np.eye(N), np.eye(N)),
            NamedMatrix(0, -1, "M_in", np.array([[0.0], [0.0], [3.5]])),
            NamedMatrix(0, -1, "M_out", np.array([[c, 0.0, 0.0]])),
            NamedMatrix(1, 0, "QK", rng.standard_normal((N, N)) * 1e-151, rng.standard_normal((N, N)) * 1e-151),
            NamedMatrix(1, 0, "V_tilde", rng.standard_normal((N, N)) * 1e-151, rng.standard_normal((N, N)) * 1e-151),
            NamedMatrix(1, -1, "M_in", rng.standard_normal((N, 2)) / 2),
            NamedMatrix(1, -1, "M_out", rng.standard_normal((2, N)))]
    return AnalysisWeights(matrices=ordered(mats), num_layers=2, num_heads=1, width=N, head_dim=N, ff_dim=1,
                           activation="gelu", readout=rng.standard_normal(N))


def _clean_and_overflowing_rows(rng) -> np.ndarray:
    clean = np.concatenate([rng.standard_normal((1, 2, 2)), np.zeros((1, 2, 1))], axis=2)
    hot = np.tile(np.array([0.0, 0.0, 1.0]), (1, 2, 1))
    return np.concatenate([clean, hot])


def test_a_nan_activation_argument_sends_only_its_sample_to_arb():
    # regression: z overflows to inf in layer 1, Pi turns it into NaN, and the NaN GELU argument of
    # layer 2 aborted the whole run with CertificationError
    rng = np.random.default_rng(22)
    w = _overflow_model(1e308, rng)
    X, y = _clean_and_overflowing_rows(rng), np.array([1, -1])
    fast = prepare_rows(w, 2)
    assert fast.epsilon < 1e-3  # the fast pass applies to this model, with a useful bound
    f = margins_of_rows(fast, X)
    assert np.isfinite(f[0]) and np.isnan(f[1])
    _check_sample(w, X[0], float(f[0]), fast.epsilon)
    cert = certified_ramp_loss(w, dataset_from_arrays(y, inputs=X), 1.0)
    assert cert.forward == "fast" and cert.redone >= 1
    assert _encloses(cert, _exact_loss(w, X, y, 1.0))


def test_a_sample_whose_row_norm_overflows_is_never_reported_finite():
    # regression (finiteness, note step 12): the squared norm of z = (3.5e200, 0, 0) overflows, and
    # z / inf = 0 gave a finite value for a row the program did not compute
    rng = np.random.default_rng(23)
    w = _overflow_model(1e200, rng)
    X = _clean_and_overflowing_rows(rng)
    f = margins_of_rows(prepare_rows(w, 2), X)
    assert np.isfinite(f[0]) and np.isnan(f[1])


_FE_MODES = {"upward": 0x800, "downward": 0x400, "toward zero": 0xC00}  # <fenv.h> on x86-64 glibc


@pytest.fixture
def fesetround():
    import ctypes
    import ctypes.util
    import platform
    import sys

    if not (sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")):
        pytest.skip("the rounding-mode constants are those of x86-64 glibc")
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    old = libm.fegetround()
    yield libm.fesetround
    libm.fesetround(old)


@pytest.mark.parametrize("mode", sorted(_FE_MODES))
def test_every_non_nearest_rounding_mode_is_detected(mode, fesetround):
    # regression: the check 1 + 1.5u == 1 + 2u also holds under round-toward-+infinity
    from specbound.certified.float_environment import rounds_to_nearest
    from specbound.certified.gram_enclosure import _check_rounding_mode
    from specbound.errors import CertificationError

    assert fesetround(_FE_MODES[mode]) == 0
    try:
        env_ok = rounds_to_nearest()
        with pytest.raises(NotApplicable, match="rounding"):
            check_float_environment()
        with pytest.raises(CertificationError, match="round-to-nearest"):
            _check_rounding_mode()
    finally:
        fesetround(0)
    assert not env_ok
    check_float_environment()  # round to nearest again


def test_the_norms_live_and_die_with_their_network():
    # regression: an unbounded cache keyed by the network kept every network alive
    import gc
    import weakref

    from specbound.certified.fast_forward import FastNetwork

    net = FastNetwork.from_weights(_weights(np.random.default_rng(24), L=1))
    prepare_rows(net, 3)
    ref = weakref.ref(net)
    del net
    gc.collect()
    assert ref() is None


def test_a_nan_sample_counts_as_margin_zero_when_rho_is_chosen():
    # floats only choose rho; a sample left to the Arb pass must not make the choice's input non-finite
    from specbound.certified.ramp_loss import fast_pass

    rng = np.random.default_rng(22)
    w = _overflow_model(1e308, rng)
    data = dataset_from_arrays(np.array([1, -1]), inputs=_clean_and_overflowing_rows(rng))
    fp = fast_pass(w, data)
    assert np.isnan(fp.f[1])
    m = fp.margins(data)
    assert np.isfinite(m).all() and m[1] == 0 and m[0] == fp.f[0]
