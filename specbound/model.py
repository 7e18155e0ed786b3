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

Variants (``Architecture.variant``, proofs_notes/theory.md sections 1 and 11):

* ``plain``: the model above;
* ``causal`` (GPT-2 style): the same weights, a causal mask (token t attends to s <= t) and the
  read-out at the *last* token, ``f(X) = <w, x_T^(L)>``;
* ``residual``: the plain model with residual connections inside the projections,
  ``Y = Pi(X + Att(X))``, ``X' = Pi(Y + F(Y))`` (proofs_notes/residual_variant.md); ``ls_residual`` the same
  for LS;
* ``ls`` (Llama style): no positional embedding; per layer query matrices ``W_Q[h]`` (H, N, d),
  key/value matrices ``W_K[g], W_V[g]`` shared by the heads of key/value group g (grouped-query
  attention, ``num_kv_heads`` groups), ``W_O[h]``; rotary embeddings applied to ``x_t W_Q[h]`` and
  ``x_s W_K[g]`` from fixed tables (:func:`rope_tables`), the causal mask, and the gated
  feed-forward ``F(Y) = (silu(Y G) * (Y U)) D``; read-out at the last token.

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
from specbound.derivation.assembly import kv_group
from specbound.errors import CheckpointError, LayoutError, NonFiniteError
from specbound.vocabulary import (
    ACTIVATIONS,
    ANALYSIS_LAYOUT,
    BIDIRECTIONAL_VARIANTS,
    LS_VARIANTS,
    MODEL_VARIANTS,
    RESIDUAL_VARIANTS,
)

MODEL_VARIANTS_TRAINABLE: tuple[str, ...] = MODEL_VARIANTS
"""The variants of vocabulary.MODEL_VARIANTS this reference model implements (all of them)."""
ROPE_BASE = 10000.0
"""Default rotary base theta of the LS variant (the angle of pair i at position t is t theta^(-2i/d))."""

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
    variant: str = "plain"
    num_kv_heads: int = 0
    """LS variant: key/value groups (0 means one per head); must divide ``num_heads``."""
    rope_base: float = ROPE_BASE

    @property
    def kv_heads(self) -> int:
        """Number of key/value groups actually used (``num_heads`` for the plain kinds)."""
        return self.num_kv_heads if (self.is_ls and self.num_kv_heads > 0) else self.num_heads

    @property
    def is_ls(self) -> bool:
        """Llama-style blocks (RoPE, grouped keys, gated feed-forward)."""
        return self.variant in LS_VARIANTS

    @property
    def is_residual(self) -> bool:
        """Residual connections inside Pi: Y = Pi(X + Att(X)), X' = Pi(Y + F(Y)) (variant R)."""
        return self.variant in RESIDUAL_VARIANTS

    @property
    def is_causal(self) -> bool:
        """Causal mask and read-out at the last token (every variant but plain and residual)."""
        return self.variant not in BIDIRECTIONAL_VARIANTS

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_heads", "width", "head_dim", "ff_dim", "vocab_size"):
            if int(getattr(self, name)) < 1:
                raise LayoutError(f"architecture: {name} must be >= 1, got {getattr(self, name)}")
        if int(self.seq_len) < 0:
            raise LayoutError(f"architecture: seq_len must be >= 0, got {self.seq_len}")
        if self.activation not in ACTIVATIONS:
            raise LayoutError(f"architecture: unknown activation {self.activation!r} (use one of {ACTIVATIONS})")
        if self.variant not in MODEL_VARIANTS_TRAINABLE:
            raise LayoutError(f"architecture: variant {self.variant!r} is not implemented by the reference "
                              f"model (use one of {MODEL_VARIANTS_TRAINABLE})")
        if self.is_ls:
            if self.num_heads % self.kv_heads:
                raise LayoutError(f"architecture: {self.num_heads} heads do not split into "
                                  f"{self.kv_heads} key/value groups")
            if self.head_dim % 2:
                raise LayoutError("architecture: rotary embeddings need an even head_dim")
            if self.seq_len < 1:
                raise LayoutError("architecture: the LS variant needs seq_len >= 1 (rotary table length)")
            if not (self.rope_base > 1.0):
                raise LayoutError("architecture: rope_base must be > 1")


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
    if name == "silu":
        return torch.nn.functional.silu
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


def rope_tables(seq_len: int, head_dim: int, base: float = ROPE_BASE) -> tuple[np.ndarray, np.ndarray]:
    """binary64 cos/sin tables (seq_len, head_dim/2) of the angles ``t base^(-2i/head_dim)``,
    adjusted so that every pair satisfies ``c^2 + s^2 <= 1`` *exactly* (checked in rationals).

    The rotation of pair i at position t is the 2x2 block ``[[c, s], [-s, c]]`` of norm
    ``sqrt(c^2 + s^2)``; with this adjustment every block has norm <= 1, so the theorem's rotation
    bound rho_R = 1 holds for the tables actually used (proofs_notes/rope_attention.md).  Where the
    rounded values overshoot, the larger magnitude is moved one ulp toward 0 until they do not.
    """
    half = head_dim // 2
    inv = base ** (-2.0 * np.arange(half, dtype=np.float64) / head_dim)
    angles = np.arange(seq_len, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    from fractions import Fraction

    for idx in zip(*np.nonzero(cos * cos + sin * sin >= 1.0 - 1e-15)):
        c, s_ = float(cos[idx]), float(sin[idx])
        while Fraction(c) ** 2 + Fraction(s_) ** 2 > 1:
            if abs(c) >= abs(s_):
                c = float(np.nextafter(c, 0.0))
            else:
                s_ = float(np.nextafter(s_, 0.0))
        cos[idx], sin[idx] = c, s_
    return cos, sin


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each row ``x[..., t, :]`` by position t's blocks: pair i is (x_i, x_{i + d/2}) and
    maps to ``(x_i c - x_{i+d/2} s, x_i s + x_{i+d/2} c)`` (the half-split convention)."""
    T, half = x.shape[-2], x.shape[-1] // 2
    c, s = cos[:T], sin[:T]
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * c - b * s, a * s + b * c], dim=-1)


def causal_mask(T: int, device=None) -> torch.Tensor:
    """(T, T) boolean: True where token t may attend to token s (s <= t)."""
    return torch.tril(torch.ones((T, T), dtype=torch.bool, device=device))


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

        G = arch.kv_heads
        self.W_Q = nn.ParameterList([param((H, N, d), N) for _ in range(arch.num_layers)])
        self.W_K = nn.ParameterList([param((G, N, d), N) for _ in range(arch.num_layers)])
        self.W_V = nn.ParameterList([param((G, N, d), N) for _ in range(arch.num_layers)])
        self.W_O = nn.ParameterList([param((H, d, N), d) for _ in range(arch.num_layers)])
        if arch.is_ls:
            self.ff_G = nn.ParameterList([param((N, F), N) for _ in range(arch.num_layers)])
            self.ff_U = nn.ParameterList([param((N, F), N) for _ in range(arch.num_layers)])
            self.ff_D = nn.ParameterList([param((F, N), F) for _ in range(arch.num_layers)])
            cos, sin = rope_tables(arch.seq_len, d, arch.rope_base)
            self.register_buffer("rope_cos", torch.tensor(cos, dtype=dtype))
            self.register_buffer("rope_sin", torch.tensor(sin, dtype=dtype))
        else:
            self.M_in = nn.ParameterList([param((N, F), N) for _ in range(arch.num_layers)])
            self.M_out = nn.ParameterList([param((F, N), F) for _ in range(arch.num_layers)])
        self.w = param((N,), N)

    @property
    def readout_token(self) -> int:
        """Index of the read-out token: 0 (CLS) for the plain model, -1 (last) otherwise."""
        return -1 if self.arch.is_causal else 0

    def ff_names(self) -> tuple[str, ...]:
        return ("G", "U", "D") if self.arch.is_ls else ("M_in", "M_out")

    def ff_params(self, name: str) -> nn.ParameterList:
        return getattr(self, "ff_" + name) if self.arch.is_ls else getattr(self, name)

    # ----------------------------------------------------------------- forward pass
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """``X^(0) = Pi(E[tokens] + P[:T])`` for int64 ids of shape (B, T); returns (B, T, N)
        (LS: ``Pi(E[tokens])``, positions enter through the rotary tables)."""
        tokens = torch.as_tensor(tokens)
        if tokens.dim() != 2:
            raise LayoutError(f"tokens must have shape (batch, length), got {tuple(tokens.shape)}")
        T = tokens.shape[1]
        if T < 1:
            raise LayoutError("tokens: sequence length must be >= 1 (token 1 is CLS)")
        if int(tokens.min()) < 0 or int(tokens.max()) >= self.arch.vocab_size:
            raise LayoutError(f"tokens: ids must lie in [0, {self.arch.vocab_size})")
        x = self.E[tokens]
        if self.arch.seq_len > 0 and T > self.arch.seq_len:
            raise LayoutError(f"tokens: length {T} exceeds the model's {self.arch.seq_len} positions")
        if self.arch.seq_len > 0 and not self.arch.is_ls:
            x = x + self.P[:T]
        return project_rows(x)

    def attention(self, layer: int, X: torch.Tensor) -> torch.Tensor:
        """``Att_l(X) = sum_h softmax(X A_h X^T) X V_h`` for X of shape (B, T, N) (before ``Pi``);
        masked causally for the causal and LS variants, with rotary embeddings for LS."""
        # X W_Q (X W_K)^T = X A X^T and (softmax X W_V) W_O = softmax X V: the factored forms are the
        # same real maps, evaluated in fewer flops.
        group = torch.tensor([self.group_of(h) for h in range(self.arch.num_heads)], device=X.device)
        Q = torch.einsum("btn,hnd->bhtd", X, self.W_Q[layer])
        K = torch.einsum("btn,gnd->bgtd", X, self.W_K[layer])[:, group]
        Vx = torch.einsum("btn,gnd->bgtd", X, self.W_V[layer])[:, group]
        if self.arch.is_ls:
            Q, K = apply_rope(Q, self.rope_cos, self.rope_sin), apply_rope(K, self.rope_cos, self.rope_sin)
        scores = Q @ K.transpose(-1, -2)
        if self.arch.is_causal:
            scores = scores.masked_fill(~causal_mask(X.shape[1], X.device), float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        heads = weights @ Vx
        return torch.einsum("bhtd,hdn->btn", heads, self.W_O[layer])

    def feed_forward(self, layer: int, Y: torch.Tensor) -> torch.Tensor:
        """``phi(Y M_in) M_out``, or for LS the gated ``(phi(Y G) * (Y U)) D`` (before ``Pi``)."""
        if self.arch.is_ls:
            return (self.phi(Y @ self.ff_G[layer]) * (Y @ self.ff_U[layer])) @ self.ff_D[layer]
        return self.phi(Y @ self.M_in[layer]) @ self.M_out[layer]

    def layers(self, tokens: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """Every intermediate, in order: ``X0``, then ``Y{l}`` and ``X{l}`` for l = 1..L (1-based)."""
        X = self.embed(tokens)
        out = [("X0", X)]
        for l in range(self.arch.num_layers):
            Y = project_rows(self.attention(l, X) + (X if self.arch.is_residual else 0))
            X = project_rows(self.feed_forward(l, Y) + (Y if self.arch.is_residual else 0))
            out += [(f"Y{l + 1}", Y), (f"X{l + 1}", X)]
        return out

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``f(X) = <w, x_tau^(L)>`` at the read-out token tau; returns shape (B,)."""
        X = self.layers(tokens)[-1][1]
        return X[:, self.readout_token, :] @ self.w

    def group_of(self, head: int) -> int:
        """Key/value group of a query head (consecutive blocks of heads share a group)."""
        return kv_group(head, self.arch.num_heads, self.arch.kv_heads)

    # ------------------------------------------------------------- covered matrices
    def score_matrix(self, layer: int, head: int) -> torch.Tensor:
        """float value of ``A_lh = W_Q[h] W_K[h]^T`` (N x N; plain kinds only)."""
        return self.W_Q[layer][head] @ self.W_K[layer][head].T

    def value_matrix(self, layer: int, head: int) -> torch.Tensor:
        """float value of ``V_lh = W_V[g(h)] W_O[h]`` (N x N)."""
        return self.W_V[layer][self.group_of(head)] @ self.W_O[layer][head]

    def covered_matrices(self) -> list[torch.Tensor]:
        """The covered matrices (float products) in canonical order: per layer QK of every head,
        V of every head, M_in, M_out (proofs_notes/theory.md section 4 telescoping order); for LS
        Q of every head, K of every group, V_tilde of every head, G, U, D (section 11)."""
        mats: list[torch.Tensor] = []
        H = self.arch.num_heads
        for l in range(self.arch.num_layers):
            if self.arch.is_ls:
                mats += [self.W_Q[l][h] for h in range(H)]
                mats += [self.W_K[l][g] for g in range(self.arch.kv_heads)]
            else:
                mats += [self.score_matrix(l, h) for h in range(H)]
            mats += [self.value_matrix(l, h) for h in range(H)]
            mats += [self.ff_params(name)[l] for name in self.ff_names()]
        return mats

    # ---------------------------------------------------------------- checkpoints
    def tensors(self) -> dict[str, np.ndarray]:
        """The checkpoint tensors under their ``specbound-analysis-v1`` names (float64 copies)."""
        out: dict[str, np.ndarray] = {}
        for l in range(self.arch.num_layers):
            for name, plist in (("W_Q", self.W_Q), ("W_K", self.W_K), ("W_V", self.W_V), ("W_O", self.W_O)):
                out[f"layers.{l}.attn.{name}"] = _np64(plist[l])
            for name in self.ff_names():
                out[f"layers.{l}.ff.{name}"] = _np64(self.ff_params(name)[l])
        out["readout.w"] = _np64(self.w)
        out["embedding.E"] = _np64(self.E)
        if self.arch.is_ls:  # the exact tables used: the certified pass reads them back
            out["rope.cos"] = _np64(self.rope_cos)
            out["rope.sin"] = _np64(self.rope_sin)
        elif self.arch.seq_len > 0:
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
        if a.variant != "plain":  # plain checkpoints stay byte-identical to earlier versions
            meta["variant"] = a.variant
        if a.is_ls:
            meta["num_kv_heads"] = str(a.kv_heads)
            meta["rope_base"] = repr(float(a.rope_base))
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
                for name in model.ff_names():
                    model.ff_params(name)[l].copy_(torch.from_numpy(tensors[f"layers.{l}.ff.{name}"]))
            model.w.copy_(torch.from_numpy(tensors["readout.w"]))
            model.E.copy_(torch.from_numpy(tensors["embedding.E"]))
            if arch.is_ls:  # the stored tables are the ones used (bit for bit)
                model.rope_cos.copy_(torch.from_numpy(tensors["rope.cos"]))
                model.rope_sin.copy_(torch.from_numpy(tensors["rope.sin"]))
            elif arch.seq_len > 0:
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
    variant = meta.get("variant", "plain")
    V = tensors["embedding.E"].shape[0]
    is_ls = variant in LS_VARIANTS
    table = "rope.cos" if is_ls else "embedding.P"
    T = tensors[table].shape[0] if table in tensors else 0
    try:
        G = int(meta.get("num_kv_heads", "0") or 0)
        base = float(meta.get("rope_base", repr(ROPE_BASE)))
    except ValueError as exc:
        raise LayoutError(f"{path}: metadata num_kv_heads/rope_base is not a number ({exc})") from None
    arch = Architecture(L, H, N, d, F, V, T, meta.get("activation", "gelu"), variant, G, base)
    G = arch.kv_heads
    expected = {"readout.w": (N,), "embedding.E": (V, N)}
    if is_ls:
        expected["rope.cos"] = expected["rope.sin"] = (T, d // 2)
    elif T:
        expected["embedding.P"] = (T, N)
    for l in range(L):
        expected.update({
            f"layers.{l}.attn.W_Q": (H, N, d), f"layers.{l}.attn.W_K": (G, N, d),
            f"layers.{l}.attn.W_V": (G, N, d), f"layers.{l}.attn.W_O": (H, d, N),
        })
        if is_ls:
            expected.update({f"layers.{l}.ff.G": (N, F), f"layers.{l}.ff.U": (N, F),
                             f"layers.{l}.ff.D": (F, N)})
        else:
            expected.update({f"layers.{l}.ff.M_in": (N, F), f"layers.{l}.ff.M_out": (F, N)})
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
