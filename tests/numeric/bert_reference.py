"""Shared test helpers: BERT-shaped checkpoints and the by-hand mapping to AnalysisWeights.

The mapping here follows docs/checkpoint_format.md (row-vector orientation) and exists so the numeric layer
can be tested without the checkpoint loader; the independent references in the tests never use it.
"""

from __future__ import annotations

import json
import os

import numpy as np

from specbound.matrices import AnalysisWeights, NamedMatrix, ordered


def bert_tensor(tensors: dict, layer: int, name: str) -> np.ndarray:
    return np.asarray(tensors[f"encoder.layer.{layer}.{name}"], dtype=np.float64)


def weights_from_bert_tensors(tensors: dict, num_layers: int, num_heads: int) -> AnalysisWeights:
    """AnalysisWeights of Hugging Face BERT tensors (weight is (out, in)), built by hand."""
    width = bert_tensor(tensors, 0, "attention.self.query.weight").shape[0]
    d = width // num_heads
    mats = []
    for l in range(num_layers):
        wq = bert_tensor(tensors, l, "attention.self.query.weight")
        wk = bert_tensor(tensors, l, "attention.self.key.weight")
        wv = bert_tensor(tensors, l, "attention.self.value.weight")
        wo = bert_tensor(tensors, l, "attention.output.dense.weight")
        for h in range(num_heads):
            hs = slice(h * d, (h + 1) * d)
            mats.append(NamedMatrix(l, h, "QK", np.ascontiguousarray(wq[hs].T), np.ascontiguousarray(wk[hs])))
            mats.append(NamedMatrix(l, h, "V_tilde", np.ascontiguousarray(wv[hs].T), np.ascontiguousarray(wo.T[hs, :])))
        mats.append(NamedMatrix(l, -1, "M_in", np.ascontiguousarray(bert_tensor(tensors, l, "intermediate.dense.weight").T)))
        mats.append(NamedMatrix(l, -1, "M_out", np.ascontiguousarray(bert_tensor(tensors, l, "output.dense.weight").T)))
    ff = mats[-1].shape[0]
    return AnalysisWeights(ordered(mats), num_layers, num_heads, width, d, ff, activation="gelu")


def write_random_bert(
    folder: str, *, num_layers=2, num_heads=4, width=32, ff=128, seed=0, weight_scale=1.0
) -> str:
    """A small random BERT-shaped Hugging Face folder (config.json + model.safetensors).

    ``weight_scale`` multiplies every weight's standard deviation; 1.0 makes every matrix choose
    p = 0 in the paper proxy and 0.5 gives a mix of p values (seed 1).
    """
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    tensors = {}
    for l in range(num_layers):
        p = f"encoder.layer.{l}."
        for name in ("query", "key", "value"):
            tensors[p + f"attention.self.{name}.weight"] = rng.normal(0, 0.2 * weight_scale, (width, width)).astype(np.float32)
            tensors[p + f"attention.self.{name}.bias"] = np.zeros(width, np.float32)
        tensors[p + "attention.output.dense.weight"] = rng.normal(0, 0.2 * weight_scale, (width, width)).astype(np.float32)
        tensors[p + "attention.output.dense.bias"] = np.zeros(width, np.float32)
        tensors[p + "attention.output.LayerNorm.weight"] = np.ones(width, np.float32)
        tensors[p + "attention.output.LayerNorm.bias"] = np.zeros(width, np.float32)
        tensors[p + "intermediate.dense.weight"] = rng.normal(0, 0.1 * weight_scale, (ff, width)).astype(np.float32)
        tensors[p + "intermediate.dense.bias"] = np.zeros(ff, np.float32)
        tensors[p + "output.dense.weight"] = rng.normal(0, 0.1 * weight_scale, (width, ff)).astype(np.float32)
        tensors[p + "output.dense.bias"] = np.zeros(width, np.float32)
        tensors[p + "output.LayerNorm.weight"] = np.ones(width, np.float32)
        tensors[p + "output.LayerNorm.bias"] = np.zeros(width, np.float32)
    tensors["embeddings.word_embeddings.weight"] = rng.normal(0, 0.1, (50, width)).astype(np.float32)
    tensors["embeddings.position_embeddings.weight"] = rng.normal(0, 0.1, (16, width)).astype(np.float32)
    tensors["embeddings.token_type_embeddings.weight"] = rng.normal(0, 0.1, (2, width)).astype(np.float32)
    tensors["embeddings.LayerNorm.weight"] = np.ones(width, np.float32)
    tensors["embeddings.LayerNorm.bias"] = np.zeros(width, np.float32)
    os.makedirs(folder, exist_ok=True)
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu",
        "hidden_size": width, "intermediate_size": ff, "num_attention_heads": num_heads,
        "num_hidden_layers": num_layers, "vocab_size": 50, "max_position_embeddings": 16,
        "type_vocab_size": 2, "layer_norm_eps": 1e-12,
    }
    with open(os.path.join(folder, "config.json"), "w") as fh:
        json.dump(config, fh)
    return folder


# --------------------------------------------------------------------------- independent reference


def reference_proxies(weights_file: str, num_layers: int, num_heads: int) -> dict:
    """docs/design.md section 6 written out plainly: numpy, per-matrix SVD, a Python loop over p.

    Reads the tensors straight from the safetensors file and forms every matrix itself; shares no
    code with ``specbound``.  Returns ours, edelman, and per-matrix (layer, head, type) -> record.
    """
    import math

    from safetensors.numpy import load_file

    t = {k: v.astype(np.float64) for k, v in load_file(weights_file).items()}
    L, H = num_layers, num_heads
    N = t["encoder.layer.0.attention.self.query.weight"].shape[0]
    d = N // H
    mats = {}  # (layer, head, type) -> dense float64 matrix
    for l in range(L):
        g = lambda name: t[f"encoder.layer.{l}.{name}"]
        Wq, Wk, Wv = g("attention.self.query.weight"), g("attention.self.key.weight"), g("attention.self.value.weight")
        Wo = g("attention.output.dense.weight").T
        for h in range(H):
            r = slice(h * d, (h + 1) * d)
            mats[(l, h, "QK")] = Wq[r, :].T @ Wk[r, :]
            mats[(l, h, "V_tilde")] = Wv[r, :].T @ Wo[r, :]
        mats[(l, -1, "M_in")] = g("intermediate.dense.weight").T
        mats[(l, -1, "M_out")] = g("output.dense.weight").T
    sv = {key: np.linalg.svd(W, compute_uv=False) for key, W in mats.items()}
    spec = {key: float(s[0]) for key, s in sv.items()}
    col21 = {key: float(np.sum(np.sqrt(np.sum(W * W, axis=0)))) for key, W in mats.items()}

    lip = []
    for l in range(L):
        acc = 0.0
        for h in range(H):
            acc += spec[(l, h, "V_tilde")] * (1 + 4 * spec[(l, h, "QK")])
        lip.append(1.13 * spec[(l, -1, "M_in")] * spec[(l, -1, "M_out")] * acc)
    alpha = []
    for l in range(L):
        a = 1.0
        for k in range(l + 1, L):
            a *= lip[k]
        alpha.append(a)

    m = math.ceil(L + math.log(N))
    grid = [i / m for i in range(2 * m + 1)]
    records = {}
    total = 0.0
    for (l, h, typ), s in sv.items():
        mo, mi = spec[(l, -1, "M_out")], spec[(l, -1, "M_in")]
        if typ == "QK":
            gamma = 2 * spec[(l, h, "V_tilde")] * mo * mi
        elif typ == "V_tilde":
            gamma = mo * mi
        elif typ == "M_in":
            gamma = mo
        else:
            gamma = 1.0
        scale = gamma * alpha[l] * L
        k = len(s)
        rank = int(np.sum(s > 1e-10 * max(k, 1) * max(s[0], 1.0)))
        best_p, best_c = None, None
        for p in grid:
            S = float(rank) if p == 0 else float(np.sum(s[s > 0] ** p))
            c = S ** (1 / (p + 2)) * scale ** (p / (p + 2)) * N ** ((p + 1) / (p + 2))
            if best_c is None or c < best_c:
                best_p, best_c = p, c
        total += best_c
        W = mats[(l, h, typ)]
        records[(l, h, typ)] = dict(
            spectral=spec[(l, h, typ)], frobenius=float(np.sqrt(np.sum(W * W))), nuclear=float(np.sum(s)),
            norm_21=col21[(l, h, typ)], norm_11=float(np.sum(np.abs(W))), numerical_rank=rank,
            stable_rank=float(np.sum(W * W)) / spec[(l, h, typ)] ** 2,
            p_opt=best_p, contribution=best_c, gamma=gamma, alpha=alpha[l], scale=scale,
        )
    ours = total + math.sqrt(L)

    xi_sum = 0.0
    for l in range(L):
        mo, mi = spec[(l, -1, "M_out")], spec[(l, -1, "M_in")]
        xi = 0.0
        for h in range(H):
            xi += (mo * mi * spec[(l, h, "V_tilde")] * col21[(l, h, "QK")]) ** (2 / 3)
            xi += (mo * mi * col21[(l, h, "V_tilde")]) ** (2 / 3)
        xi += (mo * col21[(l, -1, "M_in")]) ** (2 / 3) + col21[(l, -1, "M_out")] ** (2 / 3)
        xi_sum += alpha[l] ** (2 / 3) * xi
    edelman = (1 + xi_sum) ** 1.5
    return {"ours": ours, "edelman": edelman, "matrices": records, "m": m}
