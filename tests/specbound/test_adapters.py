"""Adapters: the covered matrices are exactly the model's matrices, in the documented orientation.

References are built by the test from the arrays it wrote, following docs/design.md section 6 (BERT) and
docs/checkpoint_format.md (specbound-analysis-v1) literally.  Products are checked with weights that are
small dyadic rationals, so every float64 product and sum is exact and ``==`` is the specification
regardless of the summation order a BLAS chooses.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from safetensors import safe_open

from specbound.checkpoint import load_weights
from specbound.data import default_checkpoint_path
from specbound.vocabulary import MATRIX_KINDS
from .test_checkpoint import CONTAINERS, write_checkpoint

L, H, N, D_FF = 2, 3, 12, 20
D = N // H


def dyadic(rng, shape, dtype=np.float32) -> np.ndarray:
    """Entries k/8 with |k| <= 16: exact in float16/32/64, and so are their short dot products."""
    return (rng.integers(-16, 17, size=shape) / 8.0).astype(dtype)


def bert_tensors(seed: int, prefix: str = "", gaussian: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def draw(shape):
        if gaussian:
            return rng.standard_normal(shape).astype(np.float32)
        return dyadic(rng, shape)

    t: dict[str, np.ndarray] = {f"{prefix}embeddings.word_embeddings.weight": draw((30, N))}
    for l in range(L):
        p = f"{prefix}encoder.layer.{l}."
        for name in ("query", "key", "value"):
            t[p + f"attention.self.{name}.weight"] = draw((N, N))
            t[p + f"attention.self.{name}.bias"] = draw((N,))
        t[p + "attention.output.dense.weight"] = draw((N, N))
        t[p + "attention.output.LayerNorm.weight"] = draw((N,))
        t[p + "intermediate.dense.weight"] = draw((D_FF, N))
        t[p + "output.dense.weight"] = draw((N, D_FF))
    return t


def bert_config(hidden_act: str = "gelu") -> dict:
    return {"model_type": "bert", "hidden_size": N, "num_attention_heads": H,
            "num_hidden_layers": L, "intermediate_size": D_FF, "hidden_act": hidden_act}


def analysis_tensors(seed: int, dtype=np.float64) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    h, n, d, d_ff = 2, 6, 4, 10
    t: dict[str, np.ndarray] = {}
    for l in range(L):
        p = f"layers.{l}."
        for name in ("W_Q", "W_K", "W_V"):
            t[p + f"attn.{name}"] = dyadic(rng, (h, n, d), dtype)
        t[p + "attn.W_O"] = dyadic(rng, (h, d, n), dtype)
        t[p + "ff.M_in"] = dyadic(rng, (n, d_ff), dtype)
        t[p + "ff.M_out"] = dyadic(rng, (d_ff, n), dtype)
    t["readout.w"] = dyadic(rng, (n,), dtype)
    t["embedding.E"] = dyadic(rng, (11, n), dtype)
    t["embedding.P"] = dyadic(rng, (5, n), dtype)
    return t


ANALYSIS_META = {"format": "specbound-analysis-v1", "activation": "relu", "num_layers": str(L),
                 "num_heads": "2", "width": "6", "head_dim": "4", "ff_dim": "10", "task": "parity"}


def f64(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64)


def assert_canonical_order(w) -> None:
    keys = [(m.layer, MATRIX_KINDS.index(m.kind), m.head) for m in w.matrices]
    assert keys == sorted(keys)
    assert w.num_matrices == w.num_layers * (2 * w.num_heads + 2)


class TestBert:
    @pytest.mark.parametrize("container", CONTAINERS)
    @pytest.mark.parametrize("prefix", ["", "bert."])
    def test_round_trip_in_every_container(self, tmp_path, container, prefix):
        src = bert_tensors(0, prefix)
        with_config = container.startswith("hf-")
        path = write_checkpoint(tmp_path / "ck", src, container,
                                config=bert_config() if with_config else None)
        w = load_weights(path, num_heads=None if with_config else H)
        assert (w.num_layers, w.num_heads, w.width, w.head_dim, w.ff_dim) == (L, H, N, D, D_FF)
        assert w.layout == "bert" and w.activation == "gelu" and w.readout is None
        assert_canonical_order(w)
        for l in range(L):
            p = f"{prefix}encoder.layer.{l}."
            Wq, Wk, Wv, Wo = (f64(src[p + n]) for n in (
                "attention.self.query.weight", "attention.self.key.weight",
                "attention.self.value.weight", "attention.output.dense.weight"))
            for h in range(H):
                hs = slice(h * D, (h + 1) * D)
                qk, vt = w.get(l, "QK", h), w.get(l, "V_tilde", h)
                assert qk.is_factored and vt.is_factored and qk.rank_cap == vt.rank_cap == D
                # score scale c = 1/sqrt(D) = 1/2 folded exactly into the query factor
                assert qk.scale_sq == 1
                np.testing.assert_array_equal(qk.left, Wq[hs].T / 2)
                np.testing.assert_array_equal(qk.right, Wk[hs])
                np.testing.assert_array_equal(vt.left, Wv[hs].T)
                np.testing.assert_array_equal(vt.right, Wo.T[hs, :])
                # Orientation: the products the paper's proxies use (dyadic data: exact).
                np.testing.assert_array_equal(qk.left @ qk.right, Wq[hs].T @ Wk[hs] / 2)
                np.testing.assert_array_equal(vt.left @ vt.right, Wv[hs].T @ Wo.T[hs, :])
            m_in, m_out = w.get(l, "M_in"), w.get(l, "M_out")
            assert not m_in.is_factored and m_in.shape == (N, D_FF) and m_out.shape == (D_FF, N)
            np.testing.assert_array_equal(m_in.left, f64(src[p + "intermediate.dense.weight"]).T)
            np.testing.assert_array_equal(m_out.left, f64(src[p + "output.dense.weight"]).T)

    def test_value_output_product_is_the_head_block_of_the_attention_map(self, tmp_path):
        # Independent of the slicing formula: sum over heads of V_tilde_h must equal the whole
        # value-then-output map x -> x W_v^T W_o^T, and sum_h QK_h = W_q^T W_k.
        src = bert_tensors(1)
        w = load_weights(write_checkpoint(tmp_path / "ck", src, "safetensors"), num_heads=H)
        p = "encoder.layer.1."
        Wq, Wk, Wv, Wo = (f64(src[p + n]) for n in (
            "attention.self.query.weight", "attention.self.key.weight",
            "attention.self.value.weight", "attention.output.dense.weight"))
        np.testing.assert_array_equal(sum(m.dense() for m in w.of_layer(1) if m.kind == "QK"),
                                      Wq.T @ Wk / 2)
        np.testing.assert_array_equal(sum(m.dense() for m in w.of_layer(1) if m.kind == "V_tilde"),
                                      Wv.T @ Wo.T)

    def test_gaussian_weights_factors_are_exact_copies(self, tmp_path):
        src = bert_tensors(2, gaussian=True)
        w = load_weights(write_checkpoint(tmp_path / "ck", src, "pt"), num_heads=H)
        Wq = f64(src["encoder.layer.0.attention.self.query.weight"])
        np.testing.assert_array_equal(w.get(0, "QK", 2).left, Wq[2 * D:3 * D].T / 2)

    def test_proxy_view_has_no_score_scale(self, tmp_path):
        # The paper proxies' convention: QK = W_q[hs].T @ W_k[hs] as stored, nothing else changes.
        src = bert_tensors(2, gaussian=True)
        path = write_checkpoint(tmp_path / "ck", src, "safetensors")
        proxy = load_weights(path, num_heads=H, view="proxy")
        scaled = load_weights(path, num_heads=H)
        Wq = f64(src["encoder.layer.1.attention.self.query.weight"])
        np.testing.assert_array_equal(proxy.get(1, "QK", 0).left, Wq[:D].T)
        for a, b in zip(proxy.matrices, scaled.matrices):
            assert a.name == b.name
            if a.kind != "QK":
                np.testing.assert_array_equal(a.left, b.left)

    @pytest.mark.parametrize("hidden_act, expected", [
        ("gelu", "gelu"), ("gelu_new", "gelu_tanh"), ("gelu_pytorch_tanh", "gelu_tanh"),
        ("relu", "relu")])
    def test_activation_comes_from_config(self, tmp_path, hidden_act, expected):
        path = write_checkpoint(tmp_path / "ck", bert_tensors(3), "hf-safetensors",
                                config=bert_config(hidden_act))
        assert load_weights(path).activation == expected

    def test_without_config_activation_is_the_argument_or_the_bert_default(self, tmp_path):
        path = write_checkpoint(tmp_path / "ck", bert_tensors(4), "npz")
        assert load_weights(path, num_heads=H, activation="relu").activation == "relu"
        w = load_weights(path, num_heads=H)
        assert w.activation == "gelu" and w.extra["activation_assumed"] is True

    def test_provenance(self, tmp_path):
        path = write_checkpoint(tmp_path / "ck", bert_tensors(5), "hf-bin", config=bert_config())
        w = load_weights(path)
        assert w.source == str(path)
        assert w.sha256 == hashlib.sha256((path / "pytorch_model.bin").read_bytes()).hexdigest()


class TestAnalysisFormat:
    @pytest.mark.parametrize("container", CONTAINERS)
    @pytest.mark.parametrize("dtype", [np.float64, np.float32])
    def test_round_trip_in_every_container(self, tmp_path, container, dtype):
        src = analysis_tensors(0, dtype)
        path = write_checkpoint(tmp_path / "ck", src, container, metadata=ANALYSIS_META)
        w = load_weights(path)
        assert (w.num_layers, w.num_heads, w.width, w.head_dim, w.ff_dim) == (L, 2, 6, 4, 10)
        assert w.layout == "specbound-analysis-v1" and w.activation == "relu"
        assert w.extra["task"] == "parity"
        assert_canonical_order(w)
        for l in range(L):
            p = f"layers.{l}."
            Q, K, V, O = (f64(src[p + f"attn.{n}"]) for n in ("W_Q", "W_K", "W_V", "W_O"))
            for h in range(2):
                qk, vt = w.get(l, "QK", h), w.get(l, "V_tilde", h)
                np.testing.assert_array_equal(qk.left, Q[h])
                np.testing.assert_array_equal(qk.right, K[h].T)
                np.testing.assert_array_equal(vt.left, V[h])
                np.testing.assert_array_equal(vt.right, O[h])
                # proofs_notes/theory.md section 1: A = W_Q W_K^T and V = W_V W_O (dyadic data: exact).
                np.testing.assert_array_equal(qk.dense(), Q[h] @ K[h].T)
                np.testing.assert_array_equal(vt.dense(), V[h] @ O[h])
                assert qk.rank_cap == vt.rank_cap == 4
            np.testing.assert_array_equal(w.get(l, "M_in").left, f64(src[p + "ff.M_in"]))
            np.testing.assert_array_equal(w.get(l, "M_out").left, f64(src[p + "ff.M_out"]))
        np.testing.assert_array_equal(w.readout, f64(src["readout.w"]))
        np.testing.assert_array_equal(w.extra["embedding.E"], f64(src["embedding.E"]))
        np.testing.assert_array_equal(w.extra["embedding.P"], f64(src["embedding.P"]))

    def test_without_metadata_dimensions_come_from_shapes(self, tmp_path):
        src = analysis_tensors(1)
        del src["embedding.P"]  # optional
        path = write_checkpoint(tmp_path / "ck", src, "npz")
        w = load_weights(path, activation="gelu")
        assert (w.num_layers, w.num_heads, w.width, w.head_dim, w.ff_dim) == (L, 2, 6, 4, 10)
        assert w.activation == "gelu" and "embedding.P" not in w.extra


@pytest.mark.minilm
class TestMiniLM:
    def test_structure(self, minilm_path):
        w = load_weights(minilm_path)
        assert (w.num_layers, w.num_heads, w.width, w.head_dim, w.ff_dim) == (6, 12, 384, 32, 1536)
        assert w.num_matrices == 6 * (12 + 12 + 2) == 156
        assert w.layout == "bert" and w.activation == "gelu"
        assert_canonical_order(w)

    def test_matrices_match_an_independent_read(self, minilm_path):
        w = load_weights(minilm_path)
        with safe_open(f"{minilm_path}/model.safetensors", framework="numpy") as fh:
            Wv = f64(fh.get_tensor("encoder.layer.5.attention.self.value.weight"))
            Wo = f64(fh.get_tensor("encoder.layer.5.attention.output.dense.weight"))
            Wi = f64(fh.get_tensor("encoder.layer.3.intermediate.dense.weight"))
        vt = w.get(5, "V_tilde", 7)
        np.testing.assert_array_equal(vt.left, Wv[7 * 32:8 * 32].T)
        np.testing.assert_array_equal(vt.right, Wo[:, 7 * 32:8 * 32].T)
        np.testing.assert_array_equal(w.get(3, "M_in").left, Wi.T)

    def test_sha256(self, minilm_path):
        w = load_weights(minilm_path)
        digest = hashlib.sha256(open(f"{minilm_path}/model.safetensors", "rb").read()).hexdigest()
        assert w.sha256 == digest


class TestDefault:
    def test_default_path_is_the_embedded_package_file(self):
        import specbound

        path = default_checkpoint_path()
        assert path.name == "default.safetensors"
        assert path.parent.parent == type(path)(specbound.__file__).resolve().parent

    def test_default_loads_as_the_project_format(self):
        if not default_checkpoint_path().exists():
            pytest.skip("embedded default checkpoint not built yet")
        w = load_weights(None)
        assert w.layout == "specbound-analysis-v1" and w.readout is not None
        assert_canonical_order(w)
