"""The analysis-model Transformer of proofs_notes/theory.md section 1, as a torch module.

Row-vector convention: a token is a row ``x`` of width ``N`` and a linear map is ``x -> x @ W``.
For layers ``l = 1..L`` and heads ``h = 1..H`` (no residual, no score scaling)::

    A_lh = W_Q[h] W_K[h]^T                   (N x N, rank <= d_h)
    V_lh = W_V[h] W_O[h]                     (N x N, rank <= d_h)
    Att_l(X) = sum_h softmax(X A_lh X^T) X V_lh      (softmax over each row)
    Y^(l) = Pi(Att_l(X^(l-1)))
    X^(l) = Pi(phi(Y^(l) M_in^l) M_out^l)
    f(X)  = <w, x_1^(L)>                     (token 1 = index 0 = CLS)

with ``Pi(x) = x / max(1, ||x||_2)`` row by row.  The input is ``X^(0) = Pi(E[tokens] + P[:T])``;
``E`` and ``P`` are *fixed* (drawn from a seed, registered as buffers, never trained), because the
theorem needs the inputs ``X_i`` to be a function of the data alone, chosen before the sample.

Checkpoints use the project's own format ``specbound-analysis-v1`` (docs/checkpoint_format.md): one
safetensors file, float64 tensors, architecture in the string metadata.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from specbound.checkpoint import open_checkpoint
from specbound.errors import CheckpointError, LayoutError, NonFiniteError
from specbound.vocabulary import ACTIVATIONS, ANALYSIS_LAYOUT

FORMAT = ANALYSIS_LAYOUT


@dataclass(frozen=True)
class Architecture:
    """Shape facts of an :class:`AnalysisTransformer` (everything but the weights).

    ``vocab_size`` counts every token id including CLS (id 0 by the tasks' convention);
    ``seq_len`` is the longest sequence the positional embedding covers (0 = no positional
    embedding, then any length is accepted).
    """

    num_layers: int
    num_heads: int
    width: int
    head_dim: int
    ff_dim: int
    vocab_size: int
    seq_len: int
    activation: str = "gelu"

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_heads", "width", "head_dim", "ff_dim", "vocab_size"):
            if int(getattr(self, name)) < 1:
                raise LayoutError(f"architecture: {name} must be >= 1, got {getattr(self, name)}")
        if int(self.seq_len) < 0:
            raise LayoutError(f"architecture: seq_len must be >= 0, got {self.seq_len}")
        if self.activation not in ACTIVATIONS:
            raise LayoutError(f"architecture: unknown activation {self.activation!r} (use one of {ACTIVATIONS})")


def project_rows(x: torch.Tensor) -> torch.Tensor:
    """``Pi`` row-wise: ``x / max(1, ||x||_2)`` over the last axis (metric projection onto the ball)."""
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return x / torch.clamp(norm, min=1.0)


def activation_fn(name: str):
    """The entrywise ``phi``: exact (erf) GELU, tanh-approximate GELU, or ReLU."""
    if name == "gelu":
        return lambda t: torch.nn.functional.gelu(t, approximate="none")
    if name == "gelu_tanh":
        return lambda t: torch.nn.functional.gelu(t, approximate="tanh")
    if name == "relu":
        return torch.relu
    raise LayoutError(f"unknown activation {name!r} (use one of {ACTIVATIONS})")


def fixed_embedding(vocab_size: int, seq_len: int, width: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Token and positional embeddings drawn once from ``seed`` (entries N(0, 1/width)).

    They are part of the *input map*, not of the learned weights: they are fixed before any data
    is seen, so the inputs ``X_i = Pi(E[tokens_i] + P)`` are i.i.d. whenever the token sequences are.
    """
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0xE3B]))
    scale = 1.0 / np.sqrt(width)
    E = rng.standard_normal((vocab_size, width)) * scale
    P = rng.standard_normal((seq_len, width)) * scale
    return E, P


class AnalysisTransformer(nn.Module):
    """proofs_notes/theory.md section 1 analysis model (no residual), batched over token-id sequences.

    Learned parameters (layer ``l``): ``W_Q, W_K, W_V`` of shape (H, N, d), ``W_O`` (H, d, N),
    ``M_in`` (N, d_ff), ``M_out`` (d_ff, N); and the read-out ``w`` (N,).  Buffers: ``E`` (V, N),
    ``P`` (T, N) (the latter empty when ``seq_len == 0``).
    """

    def __init__(
        self,
        arch: Architecture,
        *,
        embed_seed: int = 0,
        init_seed: int = 0,
        dtype: torch.dtype = torch.float64,
        task: str = "",
    ) -> None:
        super().__init__()
        self.arch = arch
        self.embed_seed = int(embed_seed)
        self.task = task
        self.phi = activation_fn(arch.activation)
        E, P = fixed_embedding(arch.vocab_size, arch.seq_len, arch.width, embed_seed)
        self.register_buffer("E", torch.tensor(E, dtype=dtype))
        self.register_buffer("P", torch.tensor(P, dtype=dtype))
        H, N, d, F = arch.num_heads, arch.width, arch.head_dim, arch.ff_dim
        rng = np.random.default_rng(np.random.SeedSequence([int(init_seed), 0x1A17]))

        def param(shape, fan_in):
            # Scale 1/sqrt(fan_in) keeps every product map of norm O(1) at initialisation.
            return nn.Parameter(torch.tensor(rng.standard_normal(shape) / np.sqrt(fan_in), dtype=dtype))

        self.W_Q = nn.ParameterList([param((H, N, d), N) for _ in range(arch.num_layers)])
        self.W_K = nn.ParameterList([param((H, N, d), N) for _ in range(arch.num_layers)])
        self.W_V = nn.ParameterList([param((H, N, d), N) for _ in range(arch.num_layers)])
        self.W_O = nn.ParameterList([param((H, d, N), d) for _ in range(arch.num_layers)])
        self.M_in = nn.ParameterList([param((N, F), N) for _ in range(arch.num_layers)])
        self.M_out = nn.ParameterList([param((F, N), F) for _ in range(arch.num_layers)])
        self.w = param((N,), N)

    # ----------------------------------------------------------------- forward pass
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """``X^(0) = Pi(E[tokens] + P[:T])`` for int64 ids of shape (B, T); returns (B, T, N)."""
        tokens = torch.as_tensor(tokens)
        if tokens.dim() != 2:
            raise LayoutError(f"tokens must have shape (batch, length), got {tuple(tokens.shape)}")
        T = tokens.shape[1]
        if T < 1:
            raise LayoutError("tokens: sequence length must be >= 1 (token 1 is CLS)")
        if int(tokens.min()) < 0 or int(tokens.max()) >= self.arch.vocab_size:
            raise LayoutError(f"tokens: ids must lie in [0, {self.arch.vocab_size})")
        x = self.E[tokens]
        if self.arch.seq_len > 0:
            if T > self.arch.seq_len:
                raise LayoutError(f"tokens: length {T} exceeds the positional embedding's {self.arch.seq_len}")
            x = x + self.P[:T]
        return project_rows(x)

    def attention(self, layer: int, X: torch.Tensor) -> torch.Tensor:
        """``Att_l(X) = sum_h softmax(X A_h X^T) X V_h`` for X of shape (B, T, N) (before ``Pi``)."""
        # X W_Q (X W_K)^T = X A X^T and (softmax X W_V) W_O = softmax X V: the factored forms are the
        # same real maps, evaluated in fewer flops.
        Q = torch.einsum("btn,hnd->bhtd", X, self.W_Q[layer])
        K = torch.einsum("btn,hnd->bhtd", X, self.W_K[layer])
        Vx = torch.einsum("btn,hnd->bhtd", X, self.W_V[layer])
        weights = torch.softmax(Q @ K.transpose(-1, -2), dim=-1)
        heads = weights @ Vx
        return torch.einsum("bhtd,hdn->btn", heads, self.W_O[layer])

    def layers(self, tokens: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """Every intermediate, in order: ``X0``, then ``Y{l}`` and ``X{l}`` for l = 1..L (1-based)."""
        X = self.embed(tokens)
        out = [("X0", X)]
        for l in range(self.arch.num_layers):
            Y = project_rows(self.attention(l, X))
            X = project_rows(self.phi(Y @ self.M_in[l]) @ self.M_out[l])
            out += [(f"Y{l + 1}", Y), (f"X{l + 1}", X)]
        return out

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``f(X) = <w, x_1^(L)>`` for each sequence; returns shape (B,)."""
        X = self.layers(tokens)[-1][1]
        return X[:, 0, :] @ self.w

    # ------------------------------------------------------------- covered matrices
    def score_matrix(self, layer: int, head: int) -> torch.Tensor:
        """float value of ``A_lh = W_Q[h] W_K[h]^T`` (N x N)."""
        return self.W_Q[layer][head] @ self.W_K[layer][head].T

    def value_matrix(self, layer: int, head: int) -> torch.Tensor:
        """float value of ``V_lh = W_V[h] W_O[h]`` (N x N)."""
        return self.W_V[layer][head] @ self.W_O[layer][head]

    def covered_matrices(self) -> list[torch.Tensor]:
        """The ``J = L(2H + 2)`` covered matrices (float products), order: per layer QK of every
        head, V of every head, M_in, M_out (proofs_notes/theory.md section 4 telescoping order)."""
        mats: list[torch.Tensor] = []
        for l in range(self.arch.num_layers):
            mats += [self.score_matrix(l, h) for h in range(self.arch.num_heads)]
            mats += [self.value_matrix(l, h) for h in range(self.arch.num_heads)]
            mats += [self.M_in[l], self.M_out[l]]
        return mats

    # ---------------------------------------------------------------- checkpoints
    def tensors(self) -> dict[str, np.ndarray]:
        """The checkpoint tensors under their ``specbound-analysis-v1`` names (float64 copies)."""
        out: dict[str, np.ndarray] = {}
        for l in range(self.arch.num_layers):
            for name, plist in (("W_Q", self.W_Q), ("W_K", self.W_K), ("W_V", self.W_V), ("W_O", self.W_O)):
                out[f"layers.{l}.attn.{name}"] = _np64(plist[l])
            out[f"layers.{l}.ff.M_in"] = _np64(self.M_in[l])
            out[f"layers.{l}.ff.M_out"] = _np64(self.M_out[l])
        out["readout.w"] = _np64(self.w)
        out["embedding.E"] = _np64(self.E)
        if self.arch.seq_len > 0:
            out["embedding.P"] = _np64(self.P)
        return out

    def metadata(self) -> dict[str, str]:
        a = self.arch
        meta = {
            "format": FORMAT,
            "activation": a.activation,
            "num_layers": str(a.num_layers),
            "num_heads": str(a.num_heads),
            "width": str(a.width),
            "head_dim": str(a.head_dim),
            "ff_dim": str(a.ff_dim),
            "embedding_seed": str(self.embed_seed),
        }
        if self.task:
            meta["task"] = self.task
        return meta

    def save(self, path: str | os.PathLike) -> None:
        """Write the ``specbound-analysis-v1`` safetensors file atomically (float64 tensors).

        The bytes are a pure function of the weights and metadata (sorted keys, no timestamps), so
        re-running a deterministic training script reproduces the file bit for bit.
        """
        _write_safetensors_atomic(Path(path), self.tensors(), self.metadata())

    @classmethod
    def load(cls, path: str | os.PathLike, dtype: torch.dtype = torch.float64) -> "AnalysisTransformer":
        """Read a ``specbound-analysis-v1`` file written by :meth:`save` (exact round trip).

        Raises CheckpointError (unreadable / not this format), LayoutError (missing tensor, bad
        shape) or NonFiniteError (NaN/Inf), each with a one-line message naming the file/tensor.
        """
        tensors, meta = read_checkpoint(path)
        arch = architecture_from(tensors, meta, path)
        model = cls(arch, embed_seed=int(meta.get("embedding_seed", "0") or 0), dtype=dtype, task=meta.get("task", ""))
        with torch.no_grad():
            for l in range(arch.num_layers):
                for name in ("W_Q", "W_K", "W_V", "W_O"):
                    getattr(model, name)[l].copy_(torch.from_numpy(tensors[f"layers.{l}.attn.{name}"]))
                model.M_in[l].copy_(torch.from_numpy(tensors[f"layers.{l}.ff.M_in"]))
                model.M_out[l].copy_(torch.from_numpy(tensors[f"layers.{l}.ff.M_out"]))
            model.w.copy_(torch.from_numpy(tensors["readout.w"]))
            model.E.copy_(torch.from_numpy(tensors["embedding.E"]))
            if arch.seq_len > 0:
                model.P.copy_(torch.from_numpy(tensors["embedding.P"]))
        return model


def _np64(t: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach().cpu().to(torch.float64).numpy())


def read_checkpoint(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """All tensors (as float64 numpy arrays) and the metadata of a specbound-analysis-v1 file.

    Reading and the per-tensor checks (dtype, NaN/Inf) are the loader's
    (:func:`specbound.checkpoint.open_checkpoint`); this adds only the format check.
    """
    ckpt = open_checkpoint(path)
    meta = dict(ckpt.metadata or {})
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: metadata format is {meta.get('format')!r}, expected {FORMAT!r}")
    return {name: ckpt.tensor(name) for name in ckpt.names()}, meta


def architecture_from(tensors: dict[str, np.ndarray], meta: dict[str, str], path="checkpoint") -> Architecture:
    """Architecture from the metadata, checked against every tensor's shape."""
    try:
        L, H, N, d, F = (int(meta[k]) for k in ("num_layers", "num_heads", "width", "head_dim", "ff_dim"))
    except (KeyError, ValueError) as exc:
        raise LayoutError(f"{path}: metadata lacks a decimal {exc}") from None
    if "embedding.E" not in tensors:
        raise LayoutError(f"{path}: missing tensor embedding.E")
    V = tensors["embedding.E"].shape[0]
    T = tensors["embedding.P"].shape[0] if "embedding.P" in tensors else 0
    arch = Architecture(L, H, N, d, F, V, T, meta.get("activation", "gelu"))
    expected = {"readout.w": (N,), "embedding.E": (V, N)}
    if T:
        expected["embedding.P"] = (T, N)
    for l in range(L):
        expected.update({
            f"layers.{l}.attn.W_Q": (H, N, d), f"layers.{l}.attn.W_K": (H, N, d),
            f"layers.{l}.attn.W_V": (H, N, d), f"layers.{l}.attn.W_O": (H, d, N),
            f"layers.{l}.ff.M_in": (N, F), f"layers.{l}.ff.M_out": (F, N),
        })
    for name, shape in expected.items():
        if name not in tensors:
            raise LayoutError(f"{path}: missing tensor {name}")
        if tuple(tensors[name].shape) != shape:
            raise LayoutError(f"{path}: tensor {name} has shape {tuple(tensors[name].shape)}, expected {shape}")
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise LayoutError(f"{path}: unexpected tensor {extra[0]}")
    return arch


def _chmod_like_open(path: str) -> None:
    # mkstemp creates 0600; a checkpoint (often package data) gets the mode open() would give it.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def _write_safetensors_atomic(path: Path, tensors: dict[str, np.ndarray], meta: dict[str, str]) -> None:
    """Serialise in the safetensors layout ourselves, so the bytes are canonical.

    Layout: 8-byte little-endian header length, a JSON header (sorted keys, ``__metadata__``
    first), then the raw little-endian buffers in name order.  Written to a temporary file in the
    target folder and renamed, so a crash never leaves a half-written checkpoint.
    """
    header: dict[str, object] = {"__metadata__": dict(sorted(meta.items()))}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name], dtype="<f8")
        raw = arr.tobytes()
        header[name] = {"dtype": "F64", "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)  # pad so the data start is 8-byte aligned
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(struct.pack("<Q", len(head)))
            fh.write(head)
            for raw in blobs:
                fh.write(raw)
        _chmod_like_open(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
