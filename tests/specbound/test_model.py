"""The analysis model computes exactly proofs_notes/theory.md section 1, and its checkpoints round-trip exactly.

The reference below is written independently of specbound.model: plain Python loops over rows in
mpmath at 40 digits, forming A = W_Q W_K^T and V = W_V W_O explicitly (the module never forms them
in its forward pass), with erf-GELU / tanh-GELU / ReLU written from their definitions.
"""

from __future__ import annotations

import hashlib

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from specbound.errors import CheckpointError, LayoutError, NonFiniteError
from specbound.input_map import fixed_embedding
from specbound.pretrained import pretrained_map
from specbound.model import AnalysisTransformer, Architecture



# ------------------------------------------------------------------ independent reference
def _phi(name: str, t):
    if name == "relu":
        return max(t, 0)
    if name == "gelu":
        return t * (1 + mpmath.erf(t / mpmath.sqrt(2))) / 2
    c = mpmath.sqrt(2 / mpmath.pi)
    return t * (1 + mpmath.tanh(c * (t + mpmath.mpf("0.044715") * t ** 3))) / 2


def _proj(row):
    norm = mpmath.sqrt(sum(v * v for v in row))
    return [v / max(1, norm) for v in row]


def _matmul(A, B):
    return [[mpmath.fsum(A[i][k] * B[k][j] for k in range(len(B))) for j in range(len(B[0]))] for i in range(len(A))]


def _vecmat(x, M):
    return [mpmath.fsum(x[k] * M[k][j] for k in range(len(x))) for j in range(len(M[0]))]


def reference_forward(t: dict[str, np.ndarray], meta: dict, tokens: list[int]):
    """f(X) and every intermediate for ONE sequence, row by row, at 40 digits."""
    with mpmath.workdps(40):
        m = lambda a: [[mpmath.mpf(float(v)) for v in r] for r in np.atleast_2d(a)]  # noqa: E731
        L, H = int(meta["num_layers"]), int(meta["num_heads"])
        E = m(t["embedding.E"])
        P = m(t["embedding.P"]) if "embedding.P" in t else None
        X = [_proj([E[tok][j] + (P[i][j] if P else 0) for j in range(len(E[0]))]) for i, tok in enumerate(tokens)]
        inter = [X]
        for l in range(L):
            att = [[mpmath.mpf(0)] * len(X[0]) for _ in X]
            for h in range(H):
                Wk_T = [list(c) for c in zip(*m(t[f"layers.{l}.attn.W_K"][h]))]
                A = _matmul(m(t[f"layers.{l}.attn.W_Q"][h]), Wk_T)
                V = _matmul(m(t[f"layers.{l}.attn.W_V"][h]), m(t[f"layers.{l}.attn.W_O"][h]))
                for i, xi in enumerate(X):
                    xa = _vecmat(xi, A)
                    scores = [mpmath.fsum(a * b for a, b in zip(xa, xs)) for xs in X]
                    top = max(scores)
                    ex = [mpmath.exp(s - top) for s in scores]
                    z = mpmath.fsum(ex)
                    mix = [mpmath.fsum(ex[s] / z * X[s][j] for s in range(len(X))) for j in range(len(X[0]))]
                    out = _vecmat(mix, V)
                    att[i] = [a + b for a, b in zip(att[i], out)]
            Y = [_proj(r) for r in att]
            hidden = [[_phi(meta["activation"], v) for v in _vecmat(y, m(t[f"layers.{l}.ff.M_in"]))] for y in Y]
            X = [_proj(_vecmat(hrow, m(t[f"layers.{l}.ff.M_out"]))) for hrow in hidden]
            inter += [Y, X]
        w = [mpmath.mpf(float(v)) for v in t["readout.w"]]
        f = mpmath.fsum(a * b for a, b in zip(w, X[0]))
        return f, inter


def random_model(L, H, N, d, F, V, T, act, seed, scale) -> AnalysisTransformer:
    """A net whose weights are blown up by ``scale``, so Pi and sharp softmaxes are exercised."""
    # rows of norm > 1 before the input projection: the seed's token table doubled, given as a fixed
    # table of the test's own (a "pretrained" input map; changing E after construction is refused)
    E, P = fixed_embedding(V, T, N, seed)
    imap = pretrained_map({"E": 2.0 * E, **({"P": P} if T else {})}, tokens="E", positions="P" if T else None,
                          name="test tables")
    model = AnalysisTransformer(Architecture(L, H, N, d, F, V, T, act), input_map=imap, init_seed=seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model


nets = st.fixed_dictionaries({
    "L": st.integers(1, 2), "H": st.integers(1, 2), "N": st.integers(2, 6), "d": st.integers(1, 3),
    "F": st.integers(1, 5), "V": st.integers(1, 4), "T": st.integers(1, 5),
    "act": st.sampled_from(["gelu", "gelu_tanh", "relu"]), "seed": st.integers(0, 10_000),
    "scale": st.sampled_from([0.3, 1.0, 3.0, 10.0]), "positional": st.booleans(),
})


@given(net=nets, data=st.data())
def test_forward_matches_row_by_row_reference(net, data):
    seq_len = net["T"] if net["positional"] else 0
    model = random_model(net["L"], net["H"], net["N"], net["d"], net["F"], net["V"], seq_len,
                         net["act"], net["seed"], net["scale"])
    B = 2
    tokens = np.array(data.draw(st.lists(st.lists(st.integers(0, net["V"] - 1), min_size=net["T"], max_size=net["T"]),
                                         min_size=B, max_size=B)), dtype=np.int64)
    with torch.no_grad():
        f = model(torch.from_numpy(tokens)).numpy()
        layers = model.layers(torch.from_numpy(tokens))
    tensors, meta = model.tensors(), model.metadata()
    for b in range(B):
        f_ref, inter_ref = reference_forward(tensors, meta, list(tokens[b]))
        assert abs(f[b] - float(f_ref)) <= 1e-11 * (1 + float(np.linalg.norm(tensors["readout.w"])))
        for (name, got), ref in zip(layers, inter_ref):
            ref_np = np.array([[float(v) for v in row] for row in ref])
            np.testing.assert_allclose(got[b].numpy(), ref_np, rtol=0, atol=1e-11, err_msg=name)


@given(net=nets)
def test_every_row_of_every_intermediate_lies_in_the_unit_ball(net):
    model = random_model(net["L"], net["H"], net["N"], net["d"], net["F"], net["V"], net["T"],
                         net["act"], net["seed"], net["scale"] * 10)
    rng = np.random.default_rng(net["seed"])
    tokens = torch.from_numpy(rng.integers(0, net["V"], size=(8, net["T"])))
    with torch.no_grad():
        for name, Z in model.layers(tokens):
            assert torch.linalg.vector_norm(Z, dim=-1).max().item() <= 1 + 1e-12, name
        assert model(tokens).abs().max().item() <= model.w.norm().item() * (1 + 1e-12)


def test_shorter_sequences_use_a_prefix_of_the_positional_embedding():
    model = random_model(1, 2, 4, 2, 3, 3, 5, "gelu", 7, 2.0)
    tokens = np.array([[0, 1, 2]], dtype=np.int64)
    f_ref, _ = reference_forward(model.tensors(), model.metadata(), [0, 1, 2])
    with torch.no_grad():
        assert model(torch.from_numpy(tokens)).item() == pytest.approx(float(f_ref), abs=1e-12)


def test_embedding_is_fixed_not_trained():
    model = random_model(1, 1, 3, 1, 2, 3, 4, "relu", 0, 1.0)
    names = {n for n, _ in model.named_parameters()}
    assert not any(n.startswith(("E", "P")) for n in names)
    assert {n for n, _ in model.named_buffers()} == {"E", "P"}
    fresh = AnalysisTransformer(model.arch, embed_seed=0, init_seed=99)
    assert torch.equal(fresh.E * 2.0, model.E) and torch.equal(fresh.P, model.P)  # embedding: seed only


def test_covered_matrices_have_the_structural_rank_cap():
    model = random_model(2, 3, 6, 2, 4, 3, 4, "gelu", 3, 1.0)
    mats = model.covered_matrices()
    assert len(mats) == 2 * (2 * 3 + 2)
    for W in mats[:6]:  # QK and V of layer 0
        assert W.shape == (6, 6) and np.linalg.matrix_rank(W.detach().numpy()) <= 2
    Wq, Wk = model.W_Q[1][2].detach().numpy(), model.W_K[1][2].detach().numpy()
    np.testing.assert_allclose(model.score_matrix(1, 2).detach().numpy(), Wq @ Wk.T, rtol=0, atol=1e-15)


def test_bad_tokens_are_rejected_with_one_line():
    model = random_model(1, 1, 3, 1, 2, 3, 4, "relu", 0, 1.0)
    for bad in ([[0, 3]], [[-1, 0]], [[0, 1, 2, 0, 1]], [[]]):
        with pytest.raises(LayoutError) as exc:
            model(torch.tensor(bad, dtype=torch.int64).reshape(len(bad), -1))
        assert "\n" not in str(exc.value)


# ---------------------------------------------------------------------------- checkpoints
def test_save_load_round_trip_is_exact(tmp_path):
    model = random_model(2, 2, 5, 3, 4, 4, 6, "gelu_tanh", 11, 1.7)
    model.task = "toy"
    path = tmp_path / "m.safetensors"
    model.save(path)
    back = AnalysisTransformer.load(path)
    assert back.arch == model.arch and back.task == "toy"
    for (k, a), (k2, b) in zip(model.state_dict().items(), back.state_dict().items()):
        assert k == k2 and torch.equal(a, b), k
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, 4, size=(5, 6)))
    with torch.no_grad():
        assert torch.equal(model(tokens), back(tokens))


def test_file_is_standard_safetensors_with_documented_names_and_metadata(tmp_path):
    from safetensors import safe_open

    model = random_model(2, 3, 4, 2, 5, 3, 4, "relu", 5, 1.0)
    path = tmp_path / "m.safetensors"
    model.save(path)
    with safe_open(str(path), framework="numpy") as fh:
        meta, keys = fh.metadata(), set(fh.keys())
        shapes = {k: fh.get_tensor(k).shape for k in keys}
        dtypes = {fh.get_tensor(k).dtype for k in keys}
    assert meta["format"] == "specbound-analysis-v1" and meta["activation"] == "relu"
    assert (meta["num_layers"], meta["num_heads"], meta["width"], meta["head_dim"], meta["ff_dim"]) == ("2", "3", "4", "2", "5")
    assert dtypes == {np.dtype("float64")}
    assert shapes["layers.1.attn.W_Q"] == (3, 4, 2) and shapes["layers.1.attn.W_O"] == (3, 2, 4)
    assert shapes["layers.0.ff.M_in"] == (4, 5) and shapes["layers.0.ff.M_out"] == (5, 4)
    assert shapes["readout.w"] == (4,) and shapes["embedding.E"] == (3, 4) and shapes["embedding.P"] == (4, 4)
    assert len(keys) == 2 * 6 + 3


def test_saving_is_byte_reproducible(tmp_path):
    model = random_model(1, 2, 4, 2, 3, 3, 4, "gelu", 1, 1.0)
    model.save(tmp_path / "a.safetensors")
    AnalysisTransformer.load(tmp_path / "a.safetensors").save(tmp_path / "b.safetensors")
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()


def _drop(name):
    def edit(tensors, meta):
        tensors.pop(name)
    return edit


def _meta(key, value):
    def edit(tensors, meta):
        meta[key] = value
    return edit


def _nan(tensors, meta):
    tensors["readout.w"][1] = np.nan


@pytest.mark.parametrize("edit, error, word", [
    (_drop("layers.0.ff.M_out"), LayoutError, "layers.0.ff.M_out"),
    (_meta("format", "other"), CheckpointError, "format"),
    (_meta("width", "5"), LayoutError, "shape"),
    (_meta("num_layers", "two"), LayoutError, "decimal"),
    (_nan, NonFiniteError, "readout.w"),
])
def test_bad_checkpoints_raise_one_clear_line(tmp_path, edit, error, word):
    model = random_model(1, 1, 3, 2, 2, 3, 3, "gelu", 0, 1.0)
    good = tmp_path / "good.safetensors"
    model.save(good)
    # Re-serialised with the safetensors library itself, so only the edit differs from a good file.
    from safetensors import safe_open
    from safetensors.numpy import save_file

    with safe_open(str(good), framework="numpy") as fh:
        meta, tensors = dict(fh.metadata()), {k: fh.get_tensor(k) for k in fh.keys()}
    edit(tensors, meta)
    bad = tmp_path / "bad.safetensors"
    save_file(tensors, str(bad), metadata=meta)
    with pytest.raises(error) as exc:
        AnalysisTransformer.load(bad)
    assert word in str(exc.value) and "\n" not in str(exc.value)


def test_missing_and_truncated_files_raise_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError):
        AnalysisTransformer.load(tmp_path / "absent.safetensors")
    model = random_model(1, 1, 3, 2, 2, 3, 3, "gelu", 0, 1.0)
    model.save(tmp_path / "m.safetensors")
    raw = (tmp_path / "m.safetensors").read_bytes()
    (tmp_path / "t.safetensors").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(CheckpointError) as exc:
        AnalysisTransformer.load(tmp_path / "t.safetensors")
    assert "\n" not in str(exc.value)


def test_a_failed_save_leaves_the_old_file_untouched(tmp_path, monkeypatch):
    model = random_model(1, 1, 3, 2, 2, 3, 3, "gelu", 0, 1.0)
    path = tmp_path / "m.safetensors"
    model.save(path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("specbound.analysis_format.os.replace", boom)
    with pytest.raises(OSError):
        random_model(1, 1, 3, 2, 2, 3, 3, "gelu", 5, 1.0).save(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]
