"""The adjoint refinement (certified/interval_adjoint.py, proofs_notes/interval_adjoint.md) against
independent references.

- every refined enclosure contains the 50-digit mpmath value and meets the Arb ball (every variant and
  activation, random and adversarial inputs: near-tie and duplicated keys, huge and tiny scores, rows on
  the unit sphere, deep models with large norm products, k read-out rows);
- each lemma holds where it is tight: a stage's remainder bound contains the exact remainder
  ``Phi(m + Delta) - Phi(m) - J_hat Delta`` for Deltas filling balls large enough that the remainder is
  first order, the backward program is the adjoint of J_hat within its rounding bound, the tightened ball
  contains the exact stage output, the softmax second-order lemma, the derivative routines;
  J_hat, the stages and the exact outputs come from ``tests.certified.mp_stage`` / ``mp_network``.
"""

from __future__ import annotations

import zlib

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbound.certified.forward_ls import certified_forward
from specbound.certified.interval_adjoint import _att_bounds, _ff_bounds, _pi_backward, refined_pass
from specbound.certified.interval_forward import input_rows, interval_outputs, output_enclosures, prepare
from tests.certified.mp_network import DPS, mp_mat, mp_outputs, random_weights
from tests.certified.mp_stage import Layer, att_jhat, attention_stage, ff_jhat, ff_stage, vec
from tests.certified.test_interval_forward import ACTIVATIONS, CASES, VARIANTS, _inputs


def _check(w, X, lo, hi, arb_too=True) -> None:
    assert np.isfinite(lo).all() and np.isfinite(hi).all()
    for i in range(X.shape[0]):
        with mpmath.workdps(DPS):
            for c, e in enumerate(mp_outputs(w, mp_mat(X[i]))):
                assert mpmath.mpf(lo[i, c]) <= e <= mpmath.mpf(hi[i, c]), (i, c, lo[i, c], hi[i, c], e)
        if arb_too and np.ndim(w.readout) == 1:
            ball = certified_forward(w, X[i])
            assert float(ball.lower()) <= hi[i, 0] and lo[i, 0] <= float(ball.upper())


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_refined_enclosure_contains_mpmath_and_meets_arb(variant, case):
    kind, qk = CASES[case]
    activation = ACTIVATIONS[case % len(ACTIVATIONS)]
    rng = np.random.default_rng(2000 + 17 * case + VARIANTS.index(variant))
    w = random_weights(rng, variant=variant, activation=activation, qk=qk, T=3, kv=1 if variant == "ls" else 0)
    X = _inputs(rng, kind, 2, 3, w.width)
    f0, r0, ok0 = prepare(w).rows(X)
    f, r, ok = refined_pass(w, 0.0).rows(X)
    assert np.array_equal(f, f0) and np.array_equal(ok, ok0) and (r <= r0).all()
    _check(w, X, *output_enclosures(f, r, ok))


@pytest.mark.parametrize("variant", ["residual", "ls_residual", "plain"])
def test_deep_models_with_large_norm_products_are_enclosed(variant):
    # six layers, weights scaled up: the per-layer radii grow by orders of magnitude per layer, so the
    # refinement's cuts, remainders and tightened ball all carry weight
    rng = np.random.default_rng(11)
    w = random_weights(rng, variant=variant, activation="gelu" if variant != "ls_residual" else "silu",
                       L=6, H=2, N=4, d=2, F=4, T=3, qk=2.5)
    X = rng.standard_normal((3, 3, 4)) * 3
    f0, r0, _ = prepare(w).rows(X)
    f, r, ok = refined_pass(w, 0.0).rows(X)
    assert (r <= r0).all() and (r < r0).any()
    _check(w, X, *output_enclosures(f, r, ok), arb_too=False)


def test_k_readout_rows_are_refined_each():
    rng = np.random.default_rng(12)
    w = random_weights(rng, variant="causal", activation="relu", L=3, k=3, T=3)
    X = rng.standard_normal((2, 3, w.width))
    f0, r0, _ = prepare(w).rows(X)
    f, r, ok = refined_pass(w, 0.0).rows(X)
    assert r.shape == (2, 3) and (r < r0).all()
    _check(w, X, *output_enclosures(f, r, ok), arb_too=False)


def test_refinement_changes_nothing_without_layers_or_for_unusable_models():
    rng = np.random.default_rng(13)
    w0 = random_weights(rng, L=0, T=3)
    X = rng.standard_normal((2, 3, w0.width))
    assert np.array_equal(prepare(w0).rows(X)[1], refined_pass(w0, 0.0).rows(X)[1])
    net = prepare(random_weights(rng, L=2, T=3)).net
    lay = net.layers[0]
    from dataclasses import replace

    off = replace(net, layers=(replace(lay, back=replace(lay.back, usable=False)),) + net.layers[1:])
    X = rng.standard_normal((2, 3, net.width))
    assert np.array_equal(prepare(off).rows(X)[1], refined_pass(off, 0.0).rows(X)[1])
    with pytest.raises(ValueError):
        refined_pass(net, -1.0)
    # a feed-forward matrix of norm 1e200: the refinement is off (step 9's range), the pass still runs
    big = random_weights(rng, activation="silu", L=1, T=3)
    big = replace(big, matrices=tuple(replace(m, left=m.left * 1e200) if m.kind == "M_in" else m for m in big.matrices))
    assert not prepare(big).net.layers[0].back.usable
    X = np.zeros((1, 3, big.width))
    assert np.array_equal(prepare(big).rows(X)[1], refined_pass(big, 0.0).rows(X)[1])


def test_the_target_stops_the_backward_early_and_is_met():
    rng = np.random.default_rng(14)
    w = random_weights(rng, variant="residual", L=4, T=3)
    X = rng.standard_normal((4, 3, w.width))
    f, r_all, _ = refined_pass(w, 0.0).rows(X)
    _, r_goal, _ = refined_pass(w, 1e-6).rows(X)
    assert (r_goal <= 1e-6 * (1 + np.abs(f))).all() and (r_goal >= r_all).all()


def test_only_the_samples_missing_the_goal_are_refined_the_few_on_their_own(monkeypatch):
    # a goal between the samples' per-layer widths splits the batch: the samples meeting it keep their
    # per-layer radius bit for bit; the others are refined on their own rows of the tape (3 of 10: the
    # subset path) to the radii a batch of just them gets, and every enclosure still holds
    import specbound.certified.interval_adjoint as ia

    rng = np.random.default_rng(15)
    w = random_weights(rng, variant="residual", activation="gelu", L=3, T=3, qk=2.5)
    X = rng.standard_normal((10, 3, w.width)) * 2
    f0, r0, ok = prepare(w).rows(X)
    rel = (r0 / (1 + np.abs(f0))).max(axis=1)
    goal = float(np.sort(rel)[6]) * 0.999  # four samples miss it
    miss = rel > goal
    assert miss.sum() == 4
    taken = []
    monkeypatch.setattr(ia, "rows_of", lambda obj, idx, B, _t=ia.rows_of: taken.append(idx.size) or _t(obj, idx, B))
    f, r, _ = refined_pass(w, goal).rows(X)
    assert taken and set(taken) == {4}
    assert np.array_equal(f, f0) and np.array_equal(r[~miss], r0[~miss])
    assert (r[miss] <= r0[miss]).all() and (r[miss] < r0[miss]).all()
    _, r_alone, _ = refined_pass(w, goal).rows(X[miss])
    np.testing.assert_allclose(r[miss], r_alone, rtol=1e-12)
    _check(w, X, *output_enclosures(f, r, ok), arb_too=False)
    # half or more missing: the whole batch is refined, no copy
    taken.clear()
    refined_pass(w, float(np.sort(rel)[2]) * 0.999).rows(X)
    assert not taken


def test_after_a_batch_with_few_samples_missing_the_goal_the_next_runs_without_a_tape():
    # batches of 5: the first is refined from its tape; when few of its samples missed the goal the next
    # batches run without one and redo just their missing samples with a tape; every enclosure holds and
    # every sample that missed the goal is refined as in a tape run
    import specbound.certified.interval_forward as iv

    rng = np.random.default_rng(17)
    w = random_weights(rng, variant="residual", activation="gelu", L=3, T=3, qk=2.5)
    X = rng.standard_normal((20, 3, w.width)) * 2
    f0, r0, ok = prepare(w).rows(X, batch=5)
    rel = (r0 / (1 + np.abs(f0))).max(axis=1)
    goal = float(np.sort(rel)[-2]) * 0.999  # two samples miss it
    miss = rel > goal
    calls = []
    real = iv.interval_outputs

    def spy(net, x0, delta0, ok=None, trace=None, tape=None, chunk=None):
        calls.append((x0.shape[0], tape is not None))
        return real(net, x0, delta0, ok, trace, tape, chunk)

    iv.interval_outputs, group = spy, iv.GROUP
    iv.GROUP = 1  # one batch per group: the state passes from batch to batch
    try:
        f, r, ok1 = refined_pass(w, goal).rows(X, batch=5)
    finally:
        iv.interval_outputs, iv.GROUP = real, group
    assert calls[0] == (5, True) and (5, False) in calls and any(t and b < 5 for b, t in calls)
    assert np.array_equal(ok1, ok) and np.array_equal(r[~miss], r0[~miss]) and (r[miss] < r0[miss]).all()
    # the fraction is that of the per-layer radii (before refining): when most missed, no tapeless run
    calls.clear()
    iv.interval_outputs, iv.GROUP = spy, 1
    try:
        refined_pass(w, float(np.sort(rel)[0]) * 0.5).rows(X, batch=5)
    finally:
        iv.interval_outputs, iv.GROUP = real, group
    assert calls == [(5, True)] * 4
    _, r_tape, _ = refined_pass(w, goal).rows(X, batch=20)  # one batch: refined from its tape
    np.testing.assert_allclose(r[miss], r_tape[miss], rtol=1e-12)
    _check(w, X, *output_enclosures(f, r, ok1), arb_too=False)


def test_the_batch_size_keeps_the_widest_array_within_its_budget():
    from specbound.certified.interval_forward import BATCH, BATCH_BYTES, batch_size

    rng = np.random.default_rng(16)
    for T, F in ((3, 4), (17, 128), (200, 64), (4000, 8)):
        net = prepare(random_weights(rng, L=1, T=3, F=F)).net
        b = batch_size(net, T)
        widest = max(net.width, F, net.layers[0].num_heads * max(T, net.layers[0].dv))
        assert 32 <= b <= BATCH and b & (b - 1) == 0
        assert b * T * widest * 8 <= BATCH_BYTES or b == 32
        assert b == BATCH or 2 * b * T * widest * 8 > BATCH_BYTES


# --------------------------------------------------------------------------- lemmas where they are tight


def _tape(w, X, delta0):
    net = prepare(w).net
    x0, _, ok = input_rows(X, net)
    tape: list = []
    interval_outputs(net, x0, np.full(x0.shape[:2], delta0), ok, tape=tape)
    return net, tape


def _deltas(rng, radii: np.ndarray, N: int, count: int):
    """Perturbations of the rows with ``|Delta_t| <= radii_t``: random directions at full radius, one row at
    a time, and all rows aligned."""
    out = []
    for j in range(count):
        D = rng.standard_normal((radii.shape[0], N))
        if j % 3 == 1:
            D[:] = D[0]
        if j % 3 == 2:
            keep = rng.integers(radii.shape[0])
            D[np.arange(radii.shape[0]) != keep] = 0.0
        nrm = np.linalg.norm(D, axis=1, keepdims=True)
        out.append(np.where(nrm > 0, D / np.where(nrm > 0, nrm, 1) * radii[:, None] * (1 - 1e-9), 0.0))
    return out


def _attention_values(st, b):
    ap, T = st.ap, st.x.shape[1]
    return {"q": [[ap.q[b, t, h] for h in range(ap.q.shape[2])] for t in range(ap.Tq)],
            "k": [[ap.k[b, s, g] for g in range(ap.k.shape[2])] for s in range(T)],
            "v": [[ap.v[b, s, g] for g in range(ap.v.shape[2])] for s in range(T)],
            "p": [[[ap.p[b, h, t, s] for s in range(T)] for t in range(ap.Tq)] for h in range(ap.p.shape[1])],
            "y": [st.pp1.y[b, t] for t in range(ap.Tq)], "nu": [st.pp1.nu[b, t] for t in range(ap.Tq)]}


STAGE_CASES = [(v, a) for v in VARIANTS for a in ACTIVATIONS]


@pytest.mark.parametrize("variant, activation", STAGE_CASES, ids=[f"{v}-{a}" for v, a in STAGE_CASES])
def test_stage_remainders_contain_the_exact_remainder_on_large_balls(variant, activation):
    rng = np.random.default_rng(zlib.crc32(f"{variant}-{activation}".encode()))
    w = random_weights(rng, variant=variant, activation=activation, L=2, H=2, N=4, d=2, F=3, T=3,
                       kv=1 if variant == "ls" else 0, qk=1.5)
    X = rng.standard_normal((1, 3, 4))
    net, tape = _tape(w, X, 3e-3)  # balls of 1e-3 .. 1e-1: the remainders are of the first order
    worst = 0.0
    for l, st in enumerate(tape[:-1]):
        L_ = Layer(w, l)
        last = l == net.num_layers - 1
        T = st.x.shape[1]
        tau = T - 1 if net.causal else 0
        qrows = [tau] if last else list(range(T))
        lay = net.layers[l]
        att = _att_bounds(net, lay, st, None)
        ff = _ff_bounds(net, lay, st, st.att.out, None)
        cv = _attention_values(st, 0)
        with mpmath.workdps(DPS):
            m = [vec(r) for r in st.x[0]]
            base = attention_stage(L_, m, qrows)
            for D in _deltas(rng, st.delta[0], net.width, 6):
                Dm = [vec(r) for r in D]
                moved = attention_stage(L_, [[a + b for a, b in zip(r, d)] for r, d in zip(m, Dm)], qrows)
                for i, t in enumerate(qrows):
                    lin = att_jhat(L_, cv, Dm, i, t)
                    R = mpmath.sqrt(sum((a - b - c) ** 2 for a, b, c in zip(moved[i], base[i], lin)))
                    assert R <= mpmath.mpf(att.rho[0, i]), ("attention", l, i, R, att.rho[0, i])
                    worst = max(worst, float(R / mpmath.mpf(att.rho[0, i])))
                    # the tightened ball (step 10) holds the exact output around the computed one
                    dist = mpmath.sqrt(sum((a - mpmath.mpf(float(b))) ** 2 for a, b in zip(moved[i], st.pp1.y[0, i])))
                    assert dist <= mpmath.mpf(att.lin[0, i]), ("ball", l, i, dist, att.lin[0, i])
            y = [vec(r) for r in st.pp1.y[0]]
            fbase = ff_stage(L_, y)
            rows = [{"y": st.pp2.y[0, t], "nu": st.pp2.nu[0, t], "d": ff.d[0, t], "b": getattr(st.fp, "b", None)
                     if not lay.gated else st.fp.b[0, t], "g": st.fp.act.g[0, t]} for t in range(len(y))]
            for D in _deltas(rng, st.att.out[0], net.width, 6):
                Dm = [vec(r) for r in D]
                moved = ff_stage(L_, [[a + b for a, b in zip(r, d)] for r, d in zip(y, Dm)])
                for t in range(len(y)):
                    lin = ff_jhat(L_, rows[t], Dm[t])
                    R = mpmath.sqrt(sum((a - b - c) ** 2 for a, b, c in zip(moved[t], fbase[t], lin)))
                    assert R <= mpmath.mpf(ff.rho[0, t]), ("ff", l, t, R, ff.rho[0, t])
                    worst = max(worst, float(R / mpmath.mpf(ff.rho[0, t])))
    assert worst > 1e-2  # the exact remainders are not negligible next to their bounds: a real test


@pytest.mark.parametrize("variant, activation", [("residual", "gelu"), ("ls", "silu"), ("causal", "gelu_tanh"),
                                                 ("ls_residual", "relu"), ("plain", "silu")])
def test_the_backward_program_is_the_adjoint_of_J_hat_within_its_bound(variant, activation):
    from specbound.certified.interval_adjoint import _att_backward, _ff_backward, _one_r2
    from specbound.certified.directed import mul_up, norm_up

    rng = np.random.default_rng(zlib.crc32(f"{variant}-{activation}-1".encode()))
    w = random_weights(rng, variant=variant, activation=activation, L=2, H=2, N=4, d=2, F=3, T=3,
                       kv=1 if variant == "ls" else 0)
    X = rng.standard_normal((1, 3, 4))
    net, tape = _tape(w, X, 1e-15)
    for l, st in enumerate(tape[:-1]):
        L_, lay = Layer(w, l), net.layers[l]
        T, Tq = st.x.shape[1], st.ap.Tq
        tau = T - 1 if net.causal else 0
        qrows = [tau] if Tq == 1 else list(range(T))
        # feed-forward stage: g_out on its output rows
        g = rng.standard_normal((1, Tq, net.width))
        ga, iota = _pi_backward(g, st.pp2)
        ff = _ff_bounds(net, lay, st, st.att.out, None)
        A = mul_up(mul_up(iota, norm_up(g)), _one_r2(net))
        g_in, bound = _ff_backward(net, lay, st, ga, ff.d, A, None)
        rows = [{"y": st.pp2.y[0, t], "nu": st.pp2.nu[0, t], "d": ff.d[0, t],
                 "b": st.fp.b[0, t] if lay.gated else None, "g": st.fp.act.g[0, t]} for t in range(Tq)]
        with mpmath.workdps(DPS):
            beta = 0
            for t in range(Tq):
                exact = [sum(a * b for a, b in zip(vec(g[0, t]), ff_jhat(L_, rows[t], [mpmath.mpf(int(i == j))
                         for i in range(net.width)]))) for j in range(net.width)]
                beta += mpmath.sqrt(sum((e - mpmath.mpf(float(c))) ** 2 for e, c in zip(exact, g_in[0, t])))
            assert beta <= mpmath.mpf(bound[0]), ("ff", l, beta, bound[0])
        # attention stage
        g = rng.standard_normal((1, Tq, net.width))
        ga, iota = _pi_backward(g, st.pp1)
        A = mul_up(mul_up(iota, norm_up(g)), _one_r2(net))
        g_in, bound = _att_backward(net, lay, st, ga, A, None)
        cv = _attention_values(st, 0)
        with mpmath.workdps(DPS):
            beta = 0
            for s in range(T):
                exact = []
                for j in range(net.width):
                    E = [[mpmath.mpf(int(r == s and i == j)) for i in range(net.width)] for r in range(T)]
                    exact.append(sum(sum(a * b for a, b in zip(vec(g[0, i]), att_jhat(L_, cv, E, i, t)))
                                     for i, t in enumerate(qrows)))
                beta += mpmath.sqrt(sum((e - mpmath.mpf(float(c))) ** 2 for e, c in zip(exact, g_in[0, s])))
            assert beta <= mpmath.mpf(bound[0]), ("attention", l, beta, bound[0])


def test_pi_remainder_holds_across_the_sphere():
    from types import SimpleNamespace

    from specbound.certified.directed import norms_both
    from specbound.certified.interval_adjoint import _pi_remainder

    rng = np.random.default_rng(15)
    net = prepare(random_weights(rng, N=4)).net
    a = rng.standard_normal((400, 4))
    a *= (rng.uniform(0.3, 3.0, 400) / np.linalg.norm(a, axis=1))[:, None]
    a[:100] /= np.linalg.norm(a[:100], axis=1)[:, None]  # on the sphere (within ulps)
    hi, lo, s = norms_both(a, with_sum=True)
    nu = np.sqrt(s)
    pp = SimpleNamespace(a=a, y=a / np.maximum(nu, 1)[:, None], nu=nu, nu_hi=hi, nu_lo=lo)
    Dr = 10.0 ** rng.uniform(-6, -1, 400)
    rho = _pi_remainder(net, pp, Dr, Dr, np.zeros(400), None, "t")
    with mpmath.workdps(DPS):
        for i in range(400):
            D = rng.standard_normal(4)
            D *= Dr[i] / np.linalg.norm(D) * (1 - 1e-9)
            x, Dm = vec(a[i]), vec(D)
            from tests.certified.mp_stage import pi, pi_jhat

            R = mpmath.sqrt(sum((p - q - j) ** 2 for p, q, j in zip(pi([u + v for u, v in zip(x, Dm)]), pi(x),
                                                                    pi_jhat(pp.y[i], nu[i], Dm))))
            assert R <= mpmath.mpf(rho[i]), (i, R, rho[i])


def test_the_softmax_second_order_lemma():
    rng = np.random.default_rng(16)
    with mpmath.workdps(DPS):
        for trial in range(200):
            n = int(rng.integers(2, 7))
            s = vec(rng.standard_normal(n) * rng.choice([0.1, 3.0, 30.0]))
            ds = vec(rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 0))

            def sm(z):
                m = max(z)
                e = [mpmath.exp(x - m) for x in z]
                return [x / sum(e) for x in e]

            p, p2 = sm(s), sm([a + b for a, b in zip(s, ds)])
            pd = sum(a * b for a, b in zip(p, ds))
            lin = [pi_ * (d - pd) for pi_, d in zip(p, ds)]
            R1 = sum(abs(a - b - c) for a, b, c in zip(p2, p, lin))
            assert R1 <= (max(ds) - min(ds)) ** 2 / 4


@pytest.mark.parametrize("name", ["gelu", "silu", "gelu_tanh", "relu"])
def test_derivative_routines_are_within_e_d_and_L2_bounds_phi2(name):
    from specbound.certified.sigmoid import (
        activation_bounds, derivative, derivative_error_bound, gelu_tanh_parts, second_derivative_bound, silu_parts,
    )
    from specbound.certified.elementary import phi as Phi

    t_max = 6.0
    rng = np.random.default_rng(17)
    t = np.concatenate([np.linspace(-t_max, t_max, 601), rng.uniform(-t_max, t_max, 400), [0.0, 1e-300, -1e-300]])
    if name == "gelu":
        kept = Phi(t, activation_bounds("gelu", t_max).coeffs)
    elif name == "silu":
        kept = silu_parts(t)[1]
    elif name == "gelu_tanh":
        kept = gelu_tanh_parts(t)[2]
    else:
        kept = None
    d = derivative(name, t, kept)
    e_d = derivative_error_bound(name, t_max)
    with mpmath.workdps(DPS):
        C1, C2 = 2 * mpmath.sqrt(2 / mpmath.pi), mpmath.mpf(44715) / 10**6

        def phi1(x):
            if name == "gelu":
                return (1 + mpmath.erf(x / mpmath.sqrt(2))) / 2 + x * mpmath.exp(-x * x / 2) / mpmath.sqrt(2 * mpmath.pi)
            if name == "silu":
                s = 1 / (1 + mpmath.exp(-x))
                return s + x * s * (1 - s)
            if name == "gelu_tanh":
                s = 1 / (1 + mpmath.exp(-C1 * (x + C2 * x**3)))
                return s + x * s * (1 - s) * C1 * (1 + 3 * C2 * x * x)
            return mpmath.mpf(1 if x > 0 else 0)

        worst = max(abs(phi1(mpmath.mpf(float(x))) - mpmath.mpf(float(y))) for x, y in zip(t, d))
        assert worst <= e_d
        if name == "relu":
            return
        L2 = second_derivative_bound(name)
        phi2 = lambda x: mpmath.diff(phi1, x)  # noqa: E731
        grid = max(abs(phi2(mpmath.mpf(x))) for x in np.linspace(0, 8, 401))
        assert grid <= L2 <= grid * 1.01
    if name == "gelu":
        assert 2 / np.sqrt(2 * np.pi) <= L2 <= 2 / np.sqrt(2 * np.pi) * (1 + 1e-4)
    if name == "silu":
        assert 0.5 <= L2 <= 0.5 * 1.003


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(VARIANTS), st.sampled_from(ACTIVATIONS), st.integers(0, 2**31 - 1),
       st.floats(0.2, 4.0), st.integers(1, 3))
def test_property_refined_enclosures_contain_the_exact_output(variant, activation, seed, qk, L):
    rng = np.random.default_rng(seed)
    w = random_weights(rng, variant=variant, activation=activation, L=L, T=3, qk=qk,
                       kv=1 if variant == "ls" else 0)
    X = rng.standard_normal((1, 3, w.width)) * rng.choice([0.3, 1.0, 5.0])
    f, r, ok = refined_pass(w, 0.0).rows(X)
    _check(w, X, *output_enclosures(f, r, ok), arb_too=False)
