"""Batched singular values and norm summaries agree with per-matrix numpy on the same matrices."""

import numpy as np
import pytest
import torch

from specbound.matrices import AnalysisWeights, NamedMatrix
from specbound.numeric import spectra as sp
from specbound.numeric.spectra import (
    FLOAT32_SVD_REL_TOL,
    compute_spectra,
    norm_summaries,
    numerical_rank,
    schatten_powers,
)


def mixed_matrices(seed=0):
    """Dense and factored matrices of several shapes (three shape groups), some rank-deficient."""
    rng = np.random.default_rng(seed)
    mats = []
    for h in range(3):
        mats.append(NamedMatrix(0, h, "QK", rng.normal(size=(12, 3)), rng.normal(size=(3, 12))))
        mats.append(NamedMatrix(0, h, "V_tilde", rng.normal(size=(12, 3)), rng.normal(size=(3, 12))))
    mats.append(NamedMatrix(0, -1, "M_in", rng.normal(size=(12, 20))))
    mats.append(NamedMatrix(0, -1, "M_out", rng.normal(size=(20, 12)) * 1e3))
    mats.append(NamedMatrix(1, -1, "M_out", np.zeros((20, 12))))
    return mats


def test_singular_values_match_numpy_per_matrix():
    mats = mixed_matrices()
    s = compute_spectra(mats)
    assert s.values.dtype == torch.float64
    for j, m in enumerate(mats):
        dense = m.left @ m.right if m.is_factored else m.left
        ref = np.linalg.svd(dense, compute_uv=False)
        got = s.sigma(j)
        assert len(got) == min(dense.shape) == int(s.counts[j])
        assert np.allclose(got, ref, rtol=0, atol=1e-12 * max(ref[0], 1e-300))
        assert np.all(s.values[j, len(got):].numpy() == 0)  # padding is exact zero
        assert s.frobenius[j].item() == pytest.approx(np.linalg.norm(dense), rel=1e-12, abs=0)
        assert s.norm_21[j].item() == pytest.approx(np.linalg.norm(dense, axis=0).sum(), rel=1e-12, abs=0)
        assert s.norm_11[j].item() == pytest.approx(np.abs(dense).sum(), rel=1e-12, abs=0)


def test_one_svdvals_call_per_shape_group(monkeypatch):
    calls = []
    real = torch.linalg.svdvals

    def counting(x, *a, **k):
        calls.append(tuple(x.shape))
        return real(x, *a, **k)

    monkeypatch.setattr(torch.linalg, "svdvals", counting)
    compute_spectra(mixed_matrices())
    # groups: 12x12 rank-3 factored (QK and V_tilde together), 12x20 dense, 20x12 dense.
    assert sorted(calls) == sorted([(6, 12, 12), (1, 12, 20), (2, 20, 12)])


def test_memory_budget_splits_groups_without_changing_values():
    mats = mixed_matrices()
    whole = compute_spectra(mats)
    split = compute_spectra(mats, max_batch_bytes=1)  # one matrix per call
    assert torch.equal(whole.values, split.values) or torch.allclose(whole.values, split.values, rtol=1e-14, atol=0)


def test_float32_within_stated_tolerance():
    mats = mixed_matrices(seed=3)
    s64 = compute_spectra(mats)
    s32 = compute_spectra(mats, dtype=torch.float32)
    assert s32.values.dtype == torch.float64
    err = (s32.values - s64.values).abs().max(dim=1).values
    assert bool((err <= FLOAT32_SVD_REL_TOL * s64.spectral).all())


def test_product_of_factors_has_numerical_rank_of_inner_dimension():
    s = compute_spectra(mixed_matrices())
    ranks = numerical_rank(s.values, s.counts).tolist()
    assert ranks[:6] == [3] * 6  # the trailing 9 values of each product are rounding noise
    assert ranks[6:] == [12, 12, 0]


def test_numerical_rank_threshold_is_strict_and_scaled():
    # k = 4, sigma_1 = 2: threshold 1e-10 * 4 * 2 = 8e-10.  sigma_1 < 1: threshold uses 1.
    values = torch.tensor([[2.0, 8.0001e-10, 8e-10, 0.0], [0.5, 4.0001e-10, 3.9e-10, 0.0]], dtype=torch.float64)
    counts = torch.tensor([4, 4])
    assert numerical_rank(values, counts).tolist() == [2, 2]


def test_schatten_powers_in_blocks_of_rows_equal_the_whole_table(monkeypatch):
    # the numpy path forms the table of powers a few rows at a time; every sum must be the one the
    # whole (J, K, P) table gives, bit for bit (the proxies' values must not move)
    s = sp.compute_spectra_numpy(mixed_matrices(seed=3))
    ps = np.array([0.0, 0.1, 0.5, 1.0, 1.7, 2.0])
    with np.errstate(divide="ignore", invalid="ignore"):
        table = np.where((s.values > 0)[:, :, None], s.values[:, :, None] ** ps[None, None, :], 0.0)
    whole = np.where((ps == 0)[None, :], numerical_rank(s.values, s.counts)[:, None], table.sum(axis=1))
    for block in (1, 7, 10**9):
        monkeypatch.setattr(sp, "SCHATTEN_BLOCK_ELEMENTS", block)
        assert np.array_equal(schatten_powers(s.values, s.counts, ps), whole)


def test_schatten_powers_match_a_loop_and_mask_zeros():
    s = compute_spectra(mixed_matrices())
    ps = torch.tensor([0.0, 0.1, 0.5, 1.0, 1.7, 2.0], dtype=torch.float64)
    got = schatten_powers(s.values, s.counts, ps).numpy()
    ranks = numerical_rank(s.values, s.counts).numpy()
    for j in range(len(s)):
        sigma = s.sigma(j)
        for i, p in enumerate(ps.tolist()):
            expected = ranks[j] if p == 0 else sum(x**p for x in sigma if x > 0)
            assert got[j, i] == pytest.approx(expected, rel=1e-13, abs=0)
    assert got[-1].tolist() == [0.0] * len(ps)  # the zero matrix: rank 0 and 0^p = 0


def test_norm_summaries_of_known_matrix():
    # diag(3, 4) padded: spectral 4, Frobenius 5, nuclear 7, stable rank 25/16.
    w = np.zeros((2, 3))
    w[0, 0], w[1, 1] = 3.0, -4.0
    zero = NamedMatrix(0, -1, "M_out", np.zeros((3, 2)))
    (a, z) = norm_summaries(compute_spectra([NamedMatrix(0, -1, "M_in", w), zero]))
    assert (a.spectral, a.frobenius, a.nuclear, a.norm_21, a.norm_11) == pytest.approx((4, 5, 7, 7, 7), rel=1e-14)
    assert a.numerical_rank == 2 and a.stable_rank == pytest.approx(25 / 16, rel=1e-14)
    assert (a.name, a.rows, a.cols, a.kind) == ("L0.M_in", 2, 3, "M_in")
    assert z.spectral == 0 and z.stable_rank == 0 and z.numerical_rank == 0


def test_accepts_analysis_weights():
    mats = tuple(mixed_matrices()[:8])
    w = AnalysisWeights(mats, num_layers=1, num_heads=3, width=12, head_dim=3, ff_dim=20)
    assert torch.equal(compute_spectra(w).values, compute_spectra(list(mats)).values)


def test_rejects_other_dtypes():
    with pytest.raises(ValueError):
        compute_spectra(mixed_matrices(), dtype=torch.float16)


def test_resolve_device():
    assert sp.resolve_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            sp.resolve_device("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():
    mats = mixed_matrices()
    cpu = compute_spectra(mats)
    gpu = compute_spectra(mats, device="cuda")
    assert gpu.values.device.type == "cuda"
    scale = cpu.spectral.clamp(min=1e-300)[:, None]
    assert bool((((gpu.values.cpu() - cpu.values).abs() / scale) <= 1e-12).all())


def test_numpy_backend_equals_torch_backend():
    mats = mixed_matrices(seed=5)
    a, b = sp.compute_spectra_numpy(mats), compute_spectra(mats)
    assert isinstance(a.values, np.ndarray)
    k = np.asarray(a.counts)
    assert np.array_equal(k, b.counts.numpy())
    for j in range(len(mats)):
        ref = b.sigma(j)
        assert np.allclose(a.sigma(j), ref, rtol=0, atol=1e-13 * max(ref[0], 1e-300))
    for name in ("frobenius", "norm_21", "norm_11"):
        assert np.allclose(getattr(a, name), getattr(b, name).numpy(), rtol=1e-13, atol=0)
    assert numerical_rank(a.values, a.counts).tolist() == numerical_rank(b.values, b.counts).tolist()
    # p >= 1 only: the rounding-noise tail of a factored product (~1e-16 sigma_1) differs between the
    # two LAPACKs, and at small p its sigma^p is no longer negligible (module note)
    ps = np.array([0.0, 1.0, 2.0])
    assert np.allclose(schatten_powers(a.values, a.counts, ps), schatten_powers(b.values, b.counts, torch.tensor(ps)).numpy(),
                       rtol=1e-12, atol=0)
    small = sp.compute_spectra_numpy(mats, max_batch_bytes=1)  # one matrix at a time: same values
    assert np.array_equal(small.values, a.values)


@pytest.mark.parametrize("command", ["spectra", "proxies"])
def test_cpu_commands_import_neither_torch_nor_sympy(tmp_path, command):
    import subprocess
    import sys

    from tests.numeric.bert_reference import write_random_bert

    folder = write_random_bert(str(tmp_path), seed=1)
    code = ("import sys; from specbound.cli import main; rc = main([%r, %r, '--json']); "
            "bad = [m for m in ('torch', 'sympy') if m in sys.modules]; "
            "sys.exit(rc or (3 if bad else 0))" % (command, folder))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_numpy_backend_honours_a_left_over_score_scale():
    # sigma(c W) = c sigma(W): a score scale kept aside (scale_sq = 1/2, c = 1/sqrt(2)) must scale
    # the singular values and norms of the numpy path exactly as the torch path and the dense value
    from dataclasses import replace
    from fractions import Fraction

    mats = [replace(m, scale_sq=Fraction(1, 2)) for m in mixed_matrices(seed=7)]
    a, b = sp.compute_spectra_numpy(mats), compute_spectra(mats)
    for j, m in enumerate(mats):
        ref = np.linalg.svd(m.dense(), compute_uv=False)
        assert np.allclose(a.sigma(j), ref, rtol=0, atol=1e-13 * max(ref[0], 1e-300))
        assert np.allclose(a.sigma(j), b.sigma(j), rtol=0, atol=1e-13 * max(ref[0], 1e-300))


def _exact_singular_values(m: NamedMatrix, digits: int = 40) -> list:
    """Singular values of the exact product (factors read as exact rationals) by mpmath, to ``digits``."""
    import mpmath

    with mpmath.workdps(digits):
        left = mpmath.matrix(m.left.tolist())
        dense = left if not m.is_factored else left * mpmath.matrix(m.right.tolist())
        s = mpmath.svd_r(dense, compute_uv=False)
        c = mpmath.sqrt(mpmath.mpf(m.scale_sq.numerator) / m.scale_sq.denominator)
        return sorted((float(c * s[i]) for i in range(len(s))), reverse=True)


@pytest.mark.parametrize("scale_sq", [1, "1/3"])
def test_factored_route_gives_the_exact_values_and_zeros_beyond_the_inner_dimension(scale_sq):
    # the core R_L R_R^T of a rank-r product has its r nonzero singular values: compared with a
    # 40-digit SVD of the exact product (mpmath), and exactly 0 where the exact values are 0 (the dense
    # route leaves rounding noise there); dense matrices and the norms are those of the dense route
    from dataclasses import replace
    from fractions import Fraction

    mats = [replace(m, scale_sq=Fraction(scale_sq)) for m in mixed_matrices(seed=11)]
    dense, core = sp.compute_spectra_numpy(mats), sp.compute_spectra_numpy(mats, products="factored")
    for j, m in enumerate(mats):
        exact = np.array(_exact_singular_values(m))
        top = max(exact[0], 1e-300)
        assert np.allclose(core.sigma(j), exact, rtol=0, atol=1e-13 * top)
        if m.is_factored:
            r = m.left.shape[1]
            assert (core.sigma(j)[r:] == 0).all() and (dense.sigma(j)[r:] > 0).any()
        else:
            assert np.array_equal(core.sigma(j), dense.sigma(j))
    for name in ("frobenius", "norm_21", "norm_11"):
        assert np.array_equal(getattr(core, name), getattr(dense, name))
    assert numerical_rank(core.values, core.counts).tolist() == numerical_rank(dense.values, dense.counts).tolist()


def test_factored_route_is_the_same_in_numpy_and_torch_and_refuses_other_names():
    mats = mixed_matrices(seed=13)
    a, b = sp.compute_spectra_numpy(mats, products="factored"), compute_spectra(mats, products="factored")
    for j in range(len(mats)):
        ref = b.sigma(j)
        assert np.allclose(a.sigma(j), ref, rtol=0, atol=1e-13 * max(ref[0], 1e-300))
    with pytest.raises(ValueError, match="products must be"):
        sp.compute_spectra_numpy(mats, products="cores")
    with pytest.raises(ValueError, match="products must be"):
        compute_spectra(mats, products="cores")


def test_a_factored_matrix_of_full_inner_dimension_takes_the_dense_route():
    # r >= min(m, n): the core is no smaller than the matrix, so the dense SVD is kept (bit for bit)
    rng = np.random.default_rng(2)
    mats = [NamedMatrix(0, 0, "QK", rng.normal(size=(6, 8)), rng.normal(size=(8, 7)))]
    assert np.array_equal(sp.compute_spectra_numpy(mats, products="factored").values,
                          sp.compute_spectra_numpy(mats).values)
