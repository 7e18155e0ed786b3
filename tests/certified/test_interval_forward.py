"""The per-sample certified pass (certified/interval_forward.py) against independent references.

Every enclosure must contain the 50-digit mpmath value of the same network on the same exact input
(``tests.certified.mp_network``, written from the model definitions) and meet the Arb pass's ball, for
every variant and activation, on random and adversarial inputs: near-tie and duplicated keys, huge and
tiny scores, score gaps beyond exp's clamp, tiny and huge rows, rows on the unit sphere, deep models with
large norm products, margins exactly at 0, rho and gamma, k read-out rows with ties.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from flint import arb
from hypothesis import given, settings
from hypothesis import strategies as st

from specbound.certified.fast_forward import NotApplicable, prepare_rows
from specbound.certified.forward_ls import certified_forward
from specbound.certified.interval_adjoint import refined_pass
from specbound.certified.interval_forward import output_enclosures, prepare
from specbound.certified.margins import count_upper, from_output_enclosures, undecided
from specbound.certified.ramp_loss import certified_ramp_loss, fast_pass
from specbound.data_file import dataset_from_arrays
from tests.certified.mp_network import DPS, mp_mat, mp_outputs, random_weights

VARIANTS = ("plain", "residual", "causal", "ls", "ls_residual")
ACTIVATIONS = ("gelu", "relu", "silu", "gelu_tanh")


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


def _check(w, X, lo, hi, ok, arb_too=True) -> None:
    """``[lo, hi]`` contains the 50-digit outputs and meets the Arb ball (binary read-outs)."""
    assert ok.all()
    for i in range(X.shape[0]):
        with mpmath.workdps(DPS):
            exact = mp_outputs(w, mp_mat(X[i]))
            for c, e in enumerate(exact):
                assert mpmath.mpf(lo[i, c]) <= e <= mpmath.mpf(hi[i, c]), (i, c, lo[i, c], hi[i, c], e)
        if arb_too and np.ndim(w.readout) == 1:
            ball = certified_forward(w, X[i])
            assert float(ball.lower()) <= hi[i, 0] and lo[i, 0] <= float(ball.upper())


CASES = [
    ("random", 1.0), ("near_tie", 1.0), ("duplicate", 1.0), ("unit_norm", 1.0), ("tiny_rows", 1.0),
    ("huge_rows", 1.0), ("random", 6.0), ("random", 1e-160), ("random", 40.0),
]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_enclosure_contains_mpmath_and_meets_arb(variant, case):
    kind, qk = CASES[case]
    activation = ACTIVATIONS[case % len(ACTIVATIONS)]
    rng = np.random.default_rng(1000 + 17 * case + VARIANTS.index(variant))
    T = 3
    w = random_weights(rng, variant=variant, activation=activation, qk=qk, T=T, kv=1 if variant == "ls" else 0)
    X = _inputs(rng, kind, 2, T, w.width)
    lo, hi = output_enclosures(*prepare(w).rows(X))
    _check(w, X, lo, hi, np.isfinite(lo).all(1) & np.isfinite(hi).all(1))


def test_the_adversarial_cases_reach_the_clamp_and_subnormal_scores():
    # the score gaps of qk = 40 exceed exp's clamp at -708 and those of qk = 1e-160 are subnormal
    rng = np.random.default_rng(5)
    w = random_weights(rng, qk=40.0)
    X = _inputs(rng, "random", 3, 3, 4)
    Xp = X / np.maximum(1, np.linalg.norm(X, axis=2, keepdims=True))
    qk = w.get(0, "QK", 0)
    S = Xp @ qk.left @ qk.right @ Xp.transpose(0, 2, 1)
    assert (S.max(axis=2) - S.min(axis=2)).max() > 708
    w2 = random_weights(np.random.default_rng(6), qk=1e-160)
    qk2 = w2.get(0, "QK", 0)
    S2 = Xp @ qk2.left @ qk2.right @ Xp.transpose(0, 2, 1)
    assert 0 < np.abs(S2).max() < 2.0**-1000


@pytest.mark.parametrize("variant", ["residual", "ls_residual"])
def test_a_deep_model_with_large_norm_products_stays_narrow_where_the_a_priori_bound_explodes(variant):
    rng = np.random.default_rng(41)
    act = "relu" if variant == "residual" else "silu"  # relu: the a-priori pass covers it at any depth
    w = random_weights(rng, variant=variant, activation=act, L=6, H=2, N=6, d=2, F=4, qk=2.5, T=4)
    X = rng.standard_normal((3, 4, 6))
    f, rad, ok = prepare(w).rows(X)
    lo, hi = output_enclosures(f, rad, ok)
    _check(w, X, lo, hi, ok, arb_too=False)
    if variant == "residual":
        eps = float(prepare_rows(w, 4).epsilon.upper())
        assert rad.max() < 1e-6 * eps  # the a-priori product of norms is far wider


def test_k_read_out_rows_enclose_the_margin_and_count_ties_as_errors():
    rng = np.random.default_rng(8)
    W = rng.standard_normal((3, 4))
    W[2] = W[1]  # classes 1 and 2 always tie exactly
    w = random_weights(rng, variant="causal", activation="gelu", readout=W)
    X = rng.standard_normal((6, 3, 4))
    f, rad, ok = prepare(w).rows(X)
    lo, hi = output_enclosures(f, rad, ok)
    _check(w, X, lo, hi, ok)
    labels = np.array([0, 1, 2, 0, 1, 2])
    m = from_output_enclosures(lo, hi, labels)
    with mpmath.workdps(DPS):
        for i, y in enumerate(labels):
            out = mp_outputs(w, mp_mat(X[i]))
            margin = out[y] - max(out[c] for c in range(3) if c != y)
            assert mpmath.mpf(m.lower[i]) <= margin <= mpmath.mpf(m.upper[i])
    # a tied class has margin min(0, f_y - f_0) <= 0: never certified positive, always counted as an error
    assert all(m.lower[i] <= 0 for i in (1, 2, 4, 5))
    assert count_upper(m, arb(0)) >= 4


def test_one_read_out_row_gives_exactly_the_binary_margin():
    rng = np.random.default_rng(9)
    w = random_weights(rng)
    X = rng.standard_normal((4, 3, 4))
    lo, hi = output_enclosures(*prepare(w).rows(X))
    y = np.array([1, -1, -1, 1])
    m = from_output_enclosures(lo, hi, y)
    assert np.array_equal(m.lower, np.where(y < 0, -hi[:, 0], lo[:, 0]))
    assert np.array_equal(m.upper, np.where(y < 0, -lo[:, 0], hi[:, 0]))


@pytest.mark.parametrize("variant", ["causal", "ls", "plain"])
def test_zero_layers_read_the_read_out_token(variant):
    rng = np.random.default_rng(10)
    w = random_weights(rng, variant=variant, L=0, T=3, activation="silu")
    X = rng.standard_normal((3, 3, 4))
    lo, hi = output_enclosures(*prepare(w).rows(X))
    _check(w, X, lo, hi, np.ones(3, dtype=bool))


@pytest.mark.parametrize("variant", VARIANTS)
def test_programs_in_chunks_with_the_radii_on_the_whole_batch_give_each_sample_its_own_enclosure(variant):
    # chunks of 2 of 7 samples (one huge, not certified): the radius formulas run once on the joined small
    # records; every sample gets the values and radius it gets alone, and its enclosure holds
    from specbound.certified.interval_forward import input_rows, interval_outputs

    rng = np.random.default_rng(40 + VARIANTS.index(variant))
    w = random_weights(rng, variant=variant, activation=ACTIVATIONS[VARIANTS.index(variant) % 4], L=2, T=3,
                       kv=1 if variant == "ls" else 0)
    X = _inputs(rng, "random", 7, 3, w.width)
    X[3] *= 1e300
    net = prepare(w).net
    x0, d0, ok0 = input_rows(X, net)
    with np.errstate(over="ignore", invalid="ignore"):
        f, r, ok = interval_outputs(net, x0, d0, ok0, chunk=2)
        alone = [interval_outputs(net, x0[i:i + 1], d0[i:i + 1], ok0[i:i + 1]) for i in range(7)]
    assert np.array_equal(ok, np.concatenate([a[2] for a in alone])) and not ok[3] and ok.sum() == 6
    # (one sample alone takes BLAS's vector path: its values may differ in the last bits)
    np.testing.assert_allclose(f[ok], np.concatenate([a[0] for a in alone])[ok], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(r[ok], np.concatenate([a[1] for a in alone])[ok], rtol=1e-12)
    keep = np.flatnonzero(ok)
    _check(w, X[keep], *output_enclosures(f[keep], r[keep], ok[keep]), ok[keep], arb_too=False)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("target", [0.0, 1e-9])
def test_refined_chunks_with_the_radii_on_the_whole_group_equal_one_tape_per_chunk(variant, target):
    # the refined pass on a group of 11 samples in chunks of 4 (one huge, not certified) runs the programs per
    # chunk, the radius formulas once on the group and the refiner per chunk: every value and radius is the
    # one a pass with one tape per chunk gives, bit for bit, and the enclosures hold
    from specbound.certified.interval_forward import _batch, input_rows

    rng = np.random.default_rng(60 + VARIANTS.index(variant))
    w = random_weights(rng, variant=variant, activation=ACTIVATIONS[VARIANTS.index(variant) % 4], L=2, T=3,
                       kv=1 if variant == "ls" else 0, k=2)
    X = _inputs(rng, "random", 11, 3, w.width)
    X[5] *= 1e300
    ip = refined_pass(w, target)
    x0, d0, ok0 = input_rows(X, ip.net)
    f, r, ok = _batch(ip, x0, d0, ok0.copy(), {}, 4)
    rows = [slice(a, min(a + 4, 11)) for a in range(0, 11, 4)]
    per_chunk = [_batch(ip, x0[s], d0[s], ok0[s].copy(), {}, 4) for s in rows]
    for got, want in zip((f, r, ok), zip(*per_chunk)):
        assert np.array_equal(got, np.concatenate(want))
    assert not ok[5] and ok.sum() == 10
    keep = np.flatnonzero(ok)
    _check(w, X[keep], *output_enclosures(f[keep], r[keep], ok[keep]), ok[keep], arb_too=False)


def test_non_finite_and_huge_inputs_are_not_certified_and_go_to_arb():
    rng = np.random.default_rng(11)
    w = random_weights(rng, L=1)
    X = rng.standard_normal((3, 3, 4))
    X[1, 0, 0] = 1e300
    f, rad, ok = prepare(w).rows(X)
    assert ok.tolist() == [True, False, True]
    lo, hi = output_enclosures(f, rad, ok)
    assert lo[1, 0] == -np.inf and hi[1, 0] == np.inf
    cert = certified_ramp_loss(w, dataset_from_arrays(np.array([1, -1, 1]), inputs=X), 1.0, forward="interval")
    assert cert.redone >= 1 and cert.interval == 3


def test_a_left_over_score_scale_is_refused_unless_binary64_carries_it_exactly():
    rng = np.random.default_rng(12)
    w = random_weights(rng, L=1)
    m0 = w.matrices[0]
    scaled = replace(w, matrices=(replace(m0, scale_sq=Fraction(1, 3)),) + w.matrices[1:])
    with pytest.raises(NotApplicable):
        prepare(scaled)
    # sqrt(1/4) = 1/2 folds into the factor exactly (certified.factors): the pass computes that network
    quarter = replace(w, matrices=(replace(m0, scale_sq=Fraction(1, 4)),) + w.matrices[1:])
    X = rng.standard_normal((2, 3, 4))
    lo, hi = output_enclosures(*prepare(quarter).rows(X))
    _check(quarter, X, lo, hi, np.ones(2, dtype=bool), arb_too=False)
    lo1, hi1 = output_enclosures(*prepare(w).rows(X))
    assert not np.array_equal(lo, lo1)  # the scale is not ignored


# ------------------------------------------------------------------------------- the ramp-loss route


def _exact_loss(w, X, y, rho):
    from tests.certified.test_forward import exact_ramp

    with mpmath.workdps(DPS):
        return sum(exact_ramp(int(y[i]) * mp_outputs(w, mp_mat(X[i]))[0], mpmath.mpf(rho)) for i in range(len(y))) / len(y)


def _encloses(cert, exact) -> bool:
    with mpmath.workdps(DPS + 10):
        return mpmath.mpf(cert.lower.str(70, radius=False)) <= exact <= mpmath.mpf(cert.upper.str(70, radius=False))


@pytest.mark.parametrize("variant", ["ls", "residual"])
def test_the_interval_route_encloses_the_exact_ramp_loss_at_margins_on_rho_and_zero(variant):
    rng = np.random.default_rng(13)
    w = random_weights(rng, variant=variant, activation="silu" if variant == "ls" else "gelu", T=3)
    X, y = rng.standard_normal((8, 3, 4)), np.array([1, -1, 1, 1, -1, 1, -1, -1])
    data = dataset_from_arrays(y, inputs=X)
    g = fast_pass(w, data, method="interval").margins(data)
    rho = float(g.max())  # the largest margin sits exactly on rho
    assert rho > 0
    cert = certified_ramp_loss(w, data, rho, forward="interval")
    assert cert.interval == 8 and cert.redone >= 1
    assert _encloses(cert, _exact_loss(w, X, y, rho))
    zero = replace(w, readout=np.zeros(4))  # f = 0 exactly: every margin on the breakpoint 0
    cert0 = certified_ramp_loss(zero, data, 1.0, forward="interval")
    assert cert0.redone == 8 and cert0.lower <= 1 <= cert0.upper and cert0.undecided == 8


def test_the_fast_route_uses_the_per_sample_pass_where_the_a_priori_epsilon_is_too_large():
    rng = np.random.default_rng(14)
    w = random_weights(rng, variant="residual", activation="relu", L=5, H=2, N=6, d=2, F=4, qk=3.0, T=4)
    X, y = rng.standard_normal((6, 4, 6)), np.array([1, -1, 1, -1, 1, 1])
    data = dataset_from_arrays(y, inputs=X)
    eps = float(prepare_rows(w, 4).epsilon.upper())
    assert eps > 1e-3 * np.linalg.norm(w.readout)
    fp = fast_pass(w, data)
    assert fp.method == "interval"
    rho = float(np.median(np.abs(fp.margins(data)))) + 1e-3
    cert = certified_ramp_loss(w, data, rho, fast=fp)
    # only the samples whose own enclosure (refined by the adjoint pass) contains 0 or rho go to Arb
    assert cert.forward == "fast" and cert.interval == 6
    assert cert.redone <= len(fp.enclosures(data).straddling([0.0, rho]))
    assert cert.epsilon < 1e-6 * eps
    assert _encloses(cert, _exact_loss(w, X, y, rho))


def test_the_route_decides_per_layer_straddlers_by_the_adjoint_refinement_before_arb():
    rng = np.random.default_rng(14)
    w = random_weights(rng, variant="residual", activation="relu", L=5, H=2, N=6, d=2, F=4, qk=3.0, T=4)
    X, y = rng.standard_normal((6, 4, 6)), np.array([1, -1, 1, -1, 1, 1])
    data = dataset_from_arrays(y, inputs=X)
    fp = fast_pass(w, data)
    assert fp.method == "interval" and fp.refine is not None
    g = fp.margins(data)
    radius = (fp.upper - fp.lower) / 2
    _, refined, _ = refined_pass(w, 0.0).rows(X)
    i = int(np.argmax(np.where(g > 0, radius, -1)))
    assert g[i] > 0 and refined[i, 0] < radius[i] / 4  # the refinement decides what the per-layer radius cannot
    rho = float(g[i] + radius[i] / 2)
    assert i in fp.enclosures(data).straddling([0.0, rho])
    cert = certified_ramp_loss(w, data, rho, fast=fp)
    assert cert.redone < len(fp.enclosures(data).straddling([0.0, rho]))
    assert _encloses(cert, _exact_loss(w, X, y, rho))


def test_the_fast_route_refines_a_priori_straddlers_with_the_per_sample_pass():
    rng = np.random.default_rng(15)
    w = random_weights(rng, T=3)
    X, y = rng.standard_normal((8, 3, 4)), np.ones(8, dtype=int)
    data = dataset_from_arrays(y, inputs=X)
    fp = fast_pass(w, data)
    assert fp.method == "fast"
    g = fp.margins(data)
    eps = float(fp.epsilon.upper())
    rho = float(g[0]) + eps / 2  # sample 0 within the a-priori epsilon of rho, not within its own radius
    cert = certified_ramp_loss(w, data, rho, fast=fp)
    assert cert.interval >= 1 and cert.redone == 0
    assert _encloses(cert, _exact_loss(w, X, y, rho))


def test_the_default_model_meets_arb_and_the_width_target_on_its_task():
    from specbound.certified.forward import embedded_input_ball
    from specbound.checkpoint import load_weights
    from specbound.data import toy_checkpoint_path
    from specbound.tasks import sparse_majority

    w = load_weights(str(toy_checkpoint_path()))  # the toy model: these figures are stated on it
    E, P = w.extra["embedding.E"], w.extra["embedding.P"]
    tokens, labels = sparse_majority().sample(64, np.random.default_rng(16))
    f, rad, ok = prepare(w).tokens(E, P, tokens)
    assert ok.all() and (rad[:, 0] <= 1e-9 * (1 + np.abs(f[:, 0]))).all()
    lo, hi = output_enclosures(f, rad, ok)
    for i in range(3):
        ball = certified_forward(w, embedded_input_ball(tokens[i], E, P))
        assert float(ball.lower()) <= hi[i, 0] and lo[i, 0] <= float(ball.upper())
    m = from_output_enclosures(lo, hi, labels)
    assert undecided(m) == 0


# ------------------------------------------------------------------------------- properties


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), variant=st.sampled_from(VARIANTS), activation=st.sampled_from(ACTIVATIONS),
       kind=st.sampled_from(["random", "near_tie", "duplicate", "unit_norm", "tiny_rows"]),
       qk=st.sampled_from([1e-160, 1e-3, 1.0, 5.0, 30.0]), T=st.integers(2, 4), L=st.integers(0, 2))
def test_property_enclosures_meet_the_arb_ball(seed, variant, activation, kind, qk, T, L):
    rng = np.random.default_rng(seed)
    w = random_weights(rng, variant=variant, activation=activation, qk=qk, L=L, T=T, kv=1 if variant == "ls" else 0)
    X = _inputs(rng, kind, 2, T, w.width)
    f, rad, ok = prepare(w).rows(X)
    lo, hi = output_enclosures(f, rad, ok)
    for i in range(2):
        ball = certified_forward(w, X[i])
        assert float(ball.lower()) <= hi[i, 0] and lo[i, 0] <= float(ball.upper())


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), variant=st.sampled_from(VARIANTS), activation=st.sampled_from(ACTIVATIONS),
       kind=st.sampled_from(["random", "near_tie", "duplicate", "unit_norm", "tiny_rows", "huge_rows"]),
       qk=st.sampled_from([1e-160, 1.0, 5.0, 30.0]), T=st.integers(1, 4), L=st.integers(0, 3),
       k=st.integers(1, 3))
def test_property_enclosures_contain_the_mpmath_value(seed, variant, activation, kind, qk, T, L, k):
    rng = np.random.default_rng(seed)
    w = random_weights(rng, variant=variant, activation=activation, qk=qk, L=L, T=max(T, 2), k=k,
                       kv=1 if variant == "ls" else 0)
    X = _inputs(rng, kind, 2, max(T, 2) if kind in ("near_tie", "duplicate") else T, w.width)
    lo, hi = output_enclosures(*prepare(w).rows(X))
    _check(w, X, lo, hi, np.isfinite(lo).all(1) & np.isfinite(hi).all(1), arb_too=False)
