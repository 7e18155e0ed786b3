"""The compiled loops of certified/kernels.py return the bits of the numpy programs the proofs analyse.

Every error bound of exp and the sigmoid is proven for a numpy program (elementary.exp_program,
sigmoid.sigmoid_program); a loop may stand in for it only if it performs the same correctly rounded
operations per entry.  Here each loop is compared with its program bit for bit on adversarial inputs: the
clamp at -708 and below it, -inf, signed zeros, subnormals, NaN, arguments whose reduction sits near a
half-integer multiple of ln 2, and Hypothesis floats."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from specbound.certified import kernels
from specbound.certified.elementary import EXP_LOOP_ARGS, exp_nonpositive, exp_program
from specbound.certified.sigmoid import sigmoid, sigmoid_program

pytestmark = pytest.mark.skipif(not kernels.AVAILABLE, reason="numba is not installed (or SPECBOUND_JIT=0)")

LN2 = float(np.log(2.0))


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(((a.view(np.int64) == b.view(np.int64)) | (np.isnan(a) & np.isnan(b))).all())


def adversarial_nonpositive(rng) -> np.ndarray:
    k = np.arange(0, 1022)
    halfway = -(k + 0.5) * LN2  # reductions near +-ln2/2
    near = np.concatenate([np.nextafter(halfway, 0.0), halfway, np.nextafter(halfway, -np.inf)])
    special = np.array([0.0, -0.0, -5e-324, -2.2250738585072014e-308, -1e-300, -708.0, np.nextafter(-708.0, 0),
                        np.nextafter(-708.0, -np.inf), -709.0, -745.2, -1e300, -np.inf, np.nan, -1.0, -0.5])
    wide = -np.abs(rng.standard_normal(5000)) * 10.0 ** rng.uniform(-320, 3, 5000)
    return np.concatenate([near, special, wide])


def test_exp_loop_is_the_numpy_program_bit_for_bit_on_adversarial_arguments():
    z = adversarial_nonpositive(np.random.default_rng(0))
    with np.errstate(all="ignore"):
        assert same_bits(kernels.exp_nonpositive_loop(z, *EXP_LOOP_ARGS), exp_program(z))


def test_exp_nonpositive_takes_the_loop_on_large_arrays_and_keeps_the_shape():
    z = adversarial_nonpositive(np.random.default_rng(1))[:4 * kernels.MIN_SIZE].reshape(4, 2, -1)
    with np.errstate(all="ignore"):
        got = exp_nonpositive(z)
        assert got.shape == z.shape and same_bits(got, exp_program(z))
        small = z.reshape(-1)[:kernels.MIN_SIZE - 1]
        assert same_bits(exp_nonpositive(small), exp_program(small))


@settings(max_examples=300, deadline=None)
@given(arrays(np.float64, st.integers(1, 600), elements=st.floats(max_value=0.0, width=64) | st.just(np.nan)))
def test_property_exp_loop_equals_the_program(z):
    with np.errstate(all="ignore"):
        assert same_bits(kernels.exp_nonpositive_loop(z, *EXP_LOOP_ARGS), exp_program(z))


def test_sigmoid_loop_is_the_numpy_program_bit_for_bit():
    rng = np.random.default_rng(2)
    z = adversarial_nonpositive(rng)
    y = np.concatenate([z, -z, [np.inf, -np.inf, np.nan, 0.0, -0.0, 36.7, -36.7, 1e308, -1e308]])
    with np.errstate(all="ignore"):
        assert same_bits(kernels.sigmoid_loop(y, *EXP_LOOP_ARGS), sigmoid_program(y))
        assert same_bits(sigmoid(y.reshape(1, -1)), sigmoid_program(y).reshape(1, -1))


@settings(max_examples=300, deadline=None)
@given(arrays(np.float64, st.integers(1, 600), elements=st.floats(allow_nan=True, allow_infinity=True, width=64)))
def test_property_sigmoid_loop_equals_the_program(y):
    with np.errstate(all="ignore"):
        assert same_bits(kernels.sigmoid_loop(y, *EXP_LOOP_ARGS), sigmoid_program(y))


def test_a_loop_with_one_operation_changed_is_caught():
    # the comparison can fail: the loop's Horner step with fl(fl(p r) + c) replaced by one rounding of
    # p r + c (what a fused multiply-add would compute) differs from the program on these arguments
    from fractions import Fraction

    z = adversarial_nonpositive(np.random.default_rng(3))[:3000]
    coeffs, clamp, inv_ln2, hi, lo = EXP_LOOP_ARGS

    def fused_exp(x):
        if x < clamp:
            x = clamp
        k = np.rint(x * inv_ln2)
        r = (x - k * hi) - k * lo
        p = r * coeffs[-1] + coeffs[-2]
        for c in coeffs[-3::-1]:
            p = float(Fraction(p) * Fraction(r) + Fraction(c))  # one rounding, as an FMA
        return p * 2.0 ** int(k)

    with np.errstate(all="ignore"):
        fused = np.array([fused_exp(x) for x in z])
        assert not same_bits(fused, exp_program(z))


def test_the_whole_refined_pass_gives_the_same_bits_with_and_without_the_compiled_loops(tmp_path):
    # the same pass in a process without numba's loops (SPECBOUND_JIT=0: every numpy program) and here (the
    # compiled loops and steps wherever they apply): every value and radius identical, on every variant
    import os
    import subprocess
    import sys

    script = tmp_path / "pass.py"
    script.write_text(
        "import sys, numpy as np\n"
        "from tests.certified.mp_network import random_weights\n"
        "from specbound.certified import kernels\n"
        "from specbound.certified.interval_adjoint import refined_pass\n"
        "from specbound.certified.interval_forward import outputs_of_rows\n"
        "out = {}\n"
        "for i, (v, a) in enumerate([('plain', 'gelu'), ('residual', 'gelu_tanh'), ('causal', 'relu'),\n"
        "                            ('ls', 'silu'), ('ls_residual', 'gelu')]):\n"
        "    rng = np.random.default_rng(70 + i)\n"
        "    w = random_weights(rng, variant=v, activation=a, L=2, H=2, N=8, d=4, F=24, k=2, T=12, qk=3.0)\n"
        "    X = rng.standard_normal((40, 12, 8))\n"
        "    with np.errstate(all='ignore'):\n"
        "        f, r, ok = outputs_of_rows(refined_pass(w, 1e-12), X, batch=16)\n"
        "    out[f'{v}.f'], out[f'{v}.r'], out[f'{v}.ok'] = f, r, ok\n"
        "out['jit'] = np.array(kernels.AVAILABLE)\n"
        "np.savez(sys.argv[1], **out)\n")
    root = Path(__file__).resolve().parents[2]
    runs = {}
    for jit in ("1", "0"):
        env = dict(os.environ, SPECBOUND_JIT=jit, PYTHONPATH=str(root), OMP_NUM_THREADS="1")
        target = tmp_path / f"out{jit}.npz"
        subprocess.run([sys.executable, str(script), str(target)], check=True, env=env, cwd=root, timeout=600)
        runs[jit] = dict(np.load(target))
    assert bool(runs["1"]["jit"]) and not bool(runs["0"]["jit"])
    for key, value in runs["0"].items():
        if key != "jit":
            assert same_bits(runs["1"][key].astype(np.float64), value.astype(np.float64)), key


def _scores(rng, B=3, H=2, Tq=5, T=5) -> np.ndarray:
    s = rng.standard_normal((B, H, Tq, T)) * 10.0 ** rng.uniform(-3, 3, (B, H, Tq, 1))
    r = lambda i: i % Tq  # noqa: E731 (a row index within the query rows)
    s[0, 0, r(0)] = 0.0  # ties at the max
    s[0, 0, r(1), :2] = 7.0
    s[0, 1, r(0)] = [1e300, -1e300, 0.0, 5.0, -5.0]
    s[1, 0, r(2), -1] = np.nan  # a NaN (masked in a causal row that is not the last)
    s[1, 1, r(3), 0] = -np.inf
    s[2, 0, r(4), 1] = np.inf
    s[2, 1, r(1)] = -800.0  # below the clamp
    s[2, 1, r(1), 0] = 0.0
    return s


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Tq", [1, 5])
def test_softmax_loop_is_the_numpy_program_bit_for_bit(causal, Tq):
    from specbound.certified.interval_stages import softmax_program

    rng = np.random.default_rng(11)
    for _ in range(20):
        s = _scores(rng, B=40, Tq=Tq, T=5)
        T = s.shape[-1]
        kept = np.arange(T - Tq + 1, T + 1) if causal else np.array(T)
        with np.errstate(all="ignore"):
            assert same_bits(kernels.softmax_loop(s, kept, *EXP_LOOP_ARGS), softmax_program(s.copy(), causal))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.integers(1, 9), st.booleans(), st.data())
def test_property_softmax_loop_equals_the_program(Tq, T, causal, data):
    from specbound.certified.interval_stages import softmax_program

    Tq = min(Tq, T)
    s = data.draw(arrays(np.float64, (2, 2, Tq, T), elements=st.floats(-1e6, 1e6, width=64)
                         | st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan, 700.0, -700.0])))
    kept = np.arange(T - Tq + 1, T + 1) if causal else np.array(T)
    with np.errstate(all="ignore"):
        assert same_bits(kernels.softmax_loop(s, kept, *EXP_LOOP_ARGS), softmax_program(s.copy(), causal))


def test_row_division_is_numpys_broadcast_division_bit_for_bit():
    rng = np.random.default_rng(12)
    a = rng.standard_normal((7, 9, 33)) * 10.0 ** rng.uniform(-300, 300, (7, 9, 33))
    a.flat[::17] = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324][0]
    a.reshape(-1)[1::29] = np.nan
    a.reshape(-1)[2::31] = -np.inf
    d = np.abs(rng.standard_normal((7, 9))) * 10.0 ** rng.uniform(-5, 300, (7, 9)) + 1.0
    d[0, 0], d[1, 1] = np.inf, 1.0
    with np.errstate(all="ignore"):
        assert same_bits(kernels.divide_rows(a, d), a / d[..., None])


def test_the_adjoints_row_steps_are_numpys_broadcast_steps_bit_for_bit():
    rng = np.random.default_rng(13)
    g = rng.standard_normal((6, 5, 40)) * 10.0 ** rng.uniform(-200, 200, (6, 5, 40))
    y = rng.standard_normal((6, 5, 40))
    c = rng.standard_normal((6, 5)) * 10.0 ** rng.uniform(-200, 200, (6, 5))
    w = np.abs(rng.standard_normal((6, 5)))
    g.reshape(-1)[::23], y.reshape(-1)[1::19], c[0, 0], w[1, 1] = np.nan, np.inf, -0.0, 0.0
    p = np.abs(rng.standard_normal((6, 5, 40)))
    with np.errstate(all="ignore"):
        want = np.multiply(y, c[..., None])
        np.subtract(g, want, out=want)
        want *= w[..., None]
        assert same_bits(kernels.project_out_rows(g, y, c, w), want)
        want = g - c[..., None]
        want *= p
        assert same_bits(kernels.centred_times_rows(g, c, p), want)


def test_the_finite_rows_check_gives_numpys_booleans_and_only_narrows():
    rng = np.random.default_rng(14)
    a = rng.standard_normal((50, 3, 7))
    a[3, 1, 2], a[7, 0, 0], a[9, 2, 6], a[11, 0, 3] = np.inf, -np.inf, np.nan, 1.7976931348623157e308
    a[13] = 5e-324
    ok = np.ones(50, dtype=bool)
    ok[20] = False  # a sample already not certified stays so
    want = ok & np.isfinite(a.reshape(50, -1)).all(axis=1)
    kernels.and_finite_rows(ok, a)
    assert np.array_equal(ok, want) and not ok[[3, 7, 9, 20]].any() and ok[[11, 13]].all()


def test_the_linear_stage_radius_is_the_numpy_programs_bits():
    # interval_forward.md step 2: add_up(mul_up(delta, sigma_b), mul_up(N(m), rnd_b), TINY) per block
    from specbound.certified.directed import ETA, UP_FACTOR, add_up, mul_up
    from specbound.certified.interval_stages import TINY

    rng = np.random.default_rng(15)
    delta = np.abs(rng.standard_normal((30, 17))) * 10.0 ** rng.uniform(-320, 300, (30, 17))
    norms = np.abs(rng.standard_normal((30, 17))) * 10.0 ** rng.uniform(-320, 300, (30, 17))
    delta[0, :3], norms[1, :3] = [0.0, np.inf, np.nan], [0.0, 5e-324, 1.7976931348623157e308]
    sig, rnd = np.array([3.5, 1e-300, 0.0]), np.array([2.2e-16, 4.4e-16, 1.0])
    with np.errstate(all="ignore"):
        want = add_up(mul_up(delta[..., None], sig), mul_up(norms[..., None], rnd), TINY)
        assert same_bits(kernels.linear_radius(delta, norms, sig, rnd, TINY, UP_FACTOR, ETA), want)


def test_the_projection_and_residual_radii_are_the_numpy_programs_bits():
    # interval_forward.md steps 9 and 8, evaluated by the numpy programs (a trace forces them) and compiled
    from types import SimpleNamespace

    from specbound.certified.interval_stages import _project_radius, _residual_radius

    rng = np.random.default_rng(16)
    shape = (40, 17)
    eps = np.abs(rng.standard_normal(shape)) * 10.0 ** rng.uniform(-320, 2, shape)
    nu_lo = np.abs(rng.standard_normal(shape)) * 10.0 ** rng.uniform(-3, 3, shape)
    nu_hi = nu_lo * (1 + 1e-15) + 1e-300
    eps[0, :4], nu_lo[1, :4], nu_hi[2, :4] = [0.0, np.inf, np.nan, 1e308], [np.nan, 1.0, 0.0, np.inf], [np.nan, 1.0, 0.0, 1e-320]
    pp = SimpleNamespace(a=np.zeros(shape + (3,)), nu_lo=nu_lo, nu_hi=nu_hi)
    net = SimpleNamespace(e_pi=3.3e-16)
    rp = SimpleNamespace(ns=nu_hi)
    with np.errstate(all="ignore"):
        assert same_bits(_project_radius(pp, eps, net, None, "pi"), _project_radius(pp, eps, net, {}, "pi"))
        assert same_bits(_residual_radius(rp, eps, nu_lo, None, "res"), _residual_radius(rp, eps, nu_lo, {}, "res"))


def test_the_softmax_error_terms_are_the_numpy_programs_bits():
    # interval_forward.md step 5 per row from the score magnitude S: eta_p, lambda and the rows not certified
    from specbound.certified.interval_stages import _softmax_errors

    rng = np.random.default_rng(17)
    S = np.abs(rng.standard_normal((64, 9))) * 10.0 ** rng.uniform(-320, 16, (64, 9))
    S[0, :6] = [0.0, np.inf, np.nan, 2.0**50, 2.0**51, 1e308]
    for T, d in ((17, 1), (5, 64)):
        with np.errstate(all="ignore"):
            got, want = _softmax_errors(S, T, d, None), _softmax_errors(S, T, d, {})
        assert same_bits(got[0], want[0]) and same_bits(got[1], want[1]) and np.array_equal(got[2], want[2])
        assert got[2][0, [1, 2, 4, 5]].all()  # infinite, NaN and huge (2u S >= 1/2) magnitudes: not certified


def test_the_projection_remainder_is_the_numpy_programs_bits_on_every_branch():
    # interval_adjoint.md step 4.3: rows on the sphere, inside the ball (identity), and in between
    from types import SimpleNamespace

    from specbound.certified.interval_adjoint import _pi_remainder

    rng = np.random.default_rng(18)
    shape = (50, 17)
    nu = np.abs(rng.standard_normal(shape)) * 10.0 ** rng.uniform(-2, 2, shape)
    nu[0, :4] = [1.0, np.nextafter(1.0, 2.0), np.nan, np.inf]
    pp = SimpleNamespace(nu=nu, nu_lo=nu * (1 - 1e-15), nu_hi=nu * (1 + 1e-15) + 1e-300)
    D = np.abs(rng.standard_normal(shape)) * 10.0 ** rng.uniform(-300, 0, shape)
    seg = np.abs(rng.standard_normal(shape)) * 10.0 ** rng.uniform(-20, 0, shape)
    pre0 = np.abs(rng.standard_normal(shape)) * 1e-12
    D[1, :3], seg[2, :3] = [np.inf, np.nan, 0.0], [np.inf, np.nan, 0.0]
    net = SimpleNamespace(c_pi=1.7763568394002505e-15)
    with np.errstate(all="ignore"):
        got = _pi_remainder(net, pp, D, seg, pre0, None, "att")
        want = _pi_remainder(net, pp, D, seg, pre0, {}, "att")
    assert same_bits(got, want)
    assert (got == 0).any() and (got > 0).any()  # both the identity and the other branches occur


@pytest.mark.parametrize("prefix", [False, True])
def test_key_maxima_are_numpys(prefix):
    rng = np.random.default_rng(19)
    a = np.abs(rng.standard_normal((20, 17, 2, 3))) * 10.0 ** rng.uniform(-320, 300, (20, 17, 2, 3))
    a[0, 3, 1, 2], a[1, 0, 0, 0], a[2, 16, 1, 1], a[3, 5, 0, 1] = np.nan, np.inf, np.nan, 5e-324
    a[4, :, 0, 0] = 2.5  # ties
    with np.errstate(all="ignore"):
        want = np.maximum.accumulate(a, axis=1) if prefix else a.max(axis=1, keepdims=True)
        assert same_bits(kernels.key_max(a, prefix), want)


def test_outer_products_are_numpys_matrix_products_with_one_inner_entry():
    rng = np.random.default_rng(20)
    a = rng.standard_normal((5, 3, 17, 1)) * 10.0 ** rng.uniform(-200, 200, (5, 3, 17, 1))
    b = rng.standard_normal((5, 3, 1, 11)) * 10.0 ** rng.uniform(-200, 200, (5, 3, 1, 11))
    a[0, 0, :4, 0], b[1, 1, 0, :4] = [0.0, -0.0, np.inf, np.nan], [-0.0, 5e-324, -np.inf, 1e308]
    with np.errstate(all="ignore"):
        assert same_bits(kernels.outer(a, b), a @ b)
