"""The 7B-shaped benchmark checkpoint (benchmarks/llama7b.py) and its runner, at small shapes: the Q4_K
encoder against the independent exact decoder of the GGUF tests, the orthogonal mixing, the stated
spectrum, and both files read back by specbound as the Llama-style model they claim to be."""

from __future__ import annotations

import importlib
import json
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
llama7b = importlib.import_module("llama7b")  # a script of benchmarks/, not an installed package

from specbound.checkpoint import load_weights, open_checkpoint  # noqa: E402
from tests.specbound.test_formats_gguf import ref_q4_k  # noqa: E402

SMALL = llama7b.Shapes(layers=2, width=256, heads=2, kv_heads=2, ff=512, vocab=300)


def test_q4_k_blocks_decode_by_the_exact_reference_to_gguf_values_near_the_input():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 512)) * np.array([[1e-3], [0.02], [5.0]])).astype(np.float32)
    x[1, :256] = np.abs(x[1, :256])  # a block with no negative entry (minimum clamped at 0)
    x[2, 256:] = 0.0  # an all-zero block
    blocks = llama7b.q4_k_blocks(x)
    assert blocks.dtype == np.uint8 and blocks.shape == (3, 2 * llama7b.Q4_K_BYTES)
    got = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q4_K)
    for row in range(3):
        for b in range(2):
            raw = bytes(blocks[row, b * 144:(b + 1) * 144])
            assert [Fraction(float(v)) for v in got[row, b * 256:(b + 1) * 256]] == ref_q4_k(raw)
        # one quantization step per sub-block of 32: (max - min) / 15, up to the 6-bit scale rounding
        sub = x[row].reshape(-1, 32).astype(np.float64)
        step = (sub.max(axis=1) - np.minimum(sub.min(axis=1), 0)) / 15
        err = np.abs(got[row].reshape(-1, 32) - sub).max(axis=1)
        assert np.all(err <= 1.5 * step + 1e-3 * np.abs(sub).max())
    assert np.all(got[2, 256:] == 0)


def test_hartley_transform_is_orthonormal_and_its_own_inverse():
    for n in (1, 2, 7, 8, 12):
        x = np.random.default_rng(n).standard_normal((3, n))
        f = np.fft.fft(x, axis=-1)
        np.testing.assert_allclose(llama7b._hartley(x), (f.real - f.imag) / np.sqrt(n), atol=1e-14)
        np.testing.assert_allclose(llama7b._hartley(llama7b._hartley(x)), x, atol=1e-14)


def test_projections_have_the_stated_spectrum_and_are_deterministic():
    for name in ("q", "down"):
        w = llama7b.projection(SMALL, 1, name)
        rows, cols = llama7b.projection_shape(SMALL, name)
        assert w.shape == (rows, cols) and w.dtype == np.float32
        s = np.linalg.svd(w.astype(np.float64), compute_uv=False)
        want = llama7b.spectrum(min(rows, cols), llama7b.ALPHA[name], rows, cols)
        np.testing.assert_allclose(s, want, rtol=0, atol=1e-5 * want[0])
        assert np.sqrt(np.mean(w.astype(np.float64) ** 2)) == pytest.approx(llama7b.ENTRY_RMS, rel=1e-5)
        assert np.array_equal(w, llama7b.projection(SMALL, 1, name))
    assert not np.array_equal(llama7b.projection(SMALL, 0, "q"), llama7b.projection(SMALL, 1, "q"))


def test_both_files_are_read_as_the_llama_style_model_with_the_same_weights(tmp_path):
    paths = llama7b.write(tmp_path, SMALL, ("safetensors", "gguf"), shard_bytes=600_000, verbose=False)
    folder = paths["safetensors"]
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1  # sharded, every tensor mapped
    assert json.loads((folder / "config.json").read_text())["torch_dtype"] == "float16"
    for path in paths.values():
        w = load_weights(path)
        assert (w.layout, w.variant, w.num_layers, w.num_heads, w.width, w.head_dim, w.ff_dim) == \
            ("llama", "ls", 2, 2, 256, 128, 512)
    st, gg = open_checkpoint(folder), open_checkpoint(paths["gguf"])
    assert gg.quantization["blk.1.ffn_down.weight"] == "Q4_K"
    exact = llama7b.projection(SMALL, 1, "down").astype(np.float64)
    half = st.tensor("model.layers.1.mlp.down_proj.weight")
    np.testing.assert_array_equal(half, exact.astype(np.float16).astype(np.float64))
    q4 = gg.tensor("blk.1.ffn_down.weight")
    assert np.linalg.norm(q4 - exact) < 0.15 * np.linalg.norm(exact)


def test_runner_measures_plain_and_certify_on_a_small_checkpoint(tmp_path):
    import bench_llama7b

    llama7b.write(tmp_path, SMALL, ("safetensors",), verbose=False)
    out = tmp_path / "report.json"
    assert bench_llama7b.main(["--checkpoint-dir", str(tmp_path), "--layers", "2", "--formats", "safetensors",
                               "--what", "plain", "certify", "--json", str(out)]) == 0
    runs = json.loads(out.read_text())["runs"]["safetensors"]
    assert runs["plain"]["svd_count"]["V_tilde"] == 2 * 2 and runs["plain"]["svd_count"]["D"] == 2
    assert runs["certify"]["methods"] == ["gram-eig"] and runs["certify"]["cpu_ratio"] > 0


def test_plain_run_on_some_layers_extrapolates_to_all_of_them(tmp_path):
    import bench_llama7b

    llama7b.write(tmp_path, SMALL, ("safetensors",), verbose=False)
    out = tmp_path / "report.json"
    assert bench_llama7b.main(["--checkpoint-dir", str(tmp_path), "--layers", "2", "--formats", "safetensors",
                               "--what", "plain", "--plain-layers", "1", "--json", str(out)]) == 0
    p = json.loads(out.read_text())["runs"]["safetensors"]["plain"]
    assert p["svd_count"]["D"] == 1 and p["layers_done"] == 1 and p["layer_scale"] == 2.0
    start_up = p["cpu_s"] - p["work_cpu_s"]
    assert p["extrapolated_cpu_s"] == start_up + 2 * p["work_cpu_s"]
