"""The analysis-family Transformer as a public ``torch.nn.Module``: build it, train it in your own
loop, save it with one call, certify it (docs/own_models.md).

    >>> from specbound.nn import AnalysisTransformer
    >>> model = AnalysisTransformer(num_layers=2, num_heads=2, width=32, head_dim=8, ff_dim=64,
    ...                             vocab_size=10, seq_len=16)            # labels +-1, one output
    >>> # ... train with any optimiser on model.parameters() ...
    >>> model.save("model.safetensors")                                 # doctest: +SKIP
    >>> specbound.certify(model, data=(tokens, labels))                 # doctest: +SKIP

This is the one implementation of the model of proofs_notes/theory.md section 1 (``specbound
experiment run`` trains the same class; :mod:`specbound.model` re-exports it).  Row-vector
convention: a token is a row ``x`` of width ``N`` and a linear map is ``x -> x @ W``.  For layers
``l = 1..L`` and heads ``h = 1..H`` (no score scaling)::

    A_lh = W_Q[h] W_K[h]^T,   V_lh = W_V[h] W_O[h]                     (N x N, rank <= d_h)
    Att_l(X) = sum_h softmax(X A_lh X^T) X V_lh                         (softmax over each row)
    Y^(l) = Pi(Att_l(X^(l-1))),   X^(l) = Pi(phi(Y^(l) M_in^l) M_out^l)
    f(X) = W x_tau^(L)                                                  (k outputs; k = 1: <w, x_tau>)

with ``Pi(x) = x / max(1, ||x||_2)`` row by row, tau = 0 (CLS) for the bidirectional variants and
the last token otherwise.  The input ``X^(0)`` comes from a fixed input map
(:mod:`specbound.input_map`): a random table drawn from a seed (default), a frozen pretrained
table (optionally projected), or rows the user embeds; every input map gives ``X^(0) = Pi(rows)``.

**What keeps the model inside the theorem** (and what the constructor refuses, one line each):

* ``variant``: ``plain``, ``residual`` (``Y = Pi(X + Att(X))``, ``X' = Pi(Y + F(Y))``), ``causal``
  (causal mask, read-out at the last token), ``ls`` / ``ls_residual`` (Llama style: rotary
  embeddings from fixed tables, grouped keys/values with ``num_kv_heads`` groups, gated
  feed-forward ``(phi(Y G) * (Y U)) D``); anything else is refused;
* ``activation``: ``gelu``, ``gelu_tanh``, ``relu``, ``silu`` (their constants are proven);
* ``Pi`` after every block: built in, not optional (it replaces LayerNorm; ``layer_norm=True`` is
  refused);
* no biases anywhere (``bias=True`` is refused);
* a fixed input map chosen before the sample S (``trainable_embedding=True`` is refused: an
  embedding fitted on S makes the inputs depend on S); the tables are buffers, not parameters,
  and a table changed after construction is refused when the model is saved or certified;
* ``num_outputs = k``: one read-out vector ``w`` (labels +-1, the binary bound) or a k-row read-out
  ``W`` (labels 0..k-1; margin ``f_y - max_{y' != y} f_y'``, the k-class bound of proofs_notes/k_class.md:
  ties are errors, the read-out is covered over ``W`` at its largest row norm).

A subclass that overrides the computation, an extra parameter or buffer (a LayerNorm, a bias added
later) or a forward hook puts the network outside the family: :meth:`AnalysisTransformer.check_family`
refuses it before anything is saved or certified.

Checkpoints use the own format ``specbound-analysis-v1`` (docs/checkpoint_format.md,
:mod:`specbound.analysis_format`).
"""

from __future__ import annotations

import os
from dataclasses import replace
from fractions import Fraction

import numpy as np
import torch
from torch import nn

from specbound.analysis_format import FORMAT, architecture_from, read_checkpoint, write_atomic
from specbound.architecture import MODEL_VARIANTS_TRAINABLE, ROPE_BASE, Architecture  # noqa: F401  (re-exported)
from specbound.errors import LayoutError, SpecboundError
from specbound.input_map import (  # noqa: F401  (the input maps: re-exported, the public names of this module)
    InputMap, embedded_map, fixed_embedding, from_metadata, random_map, tables_sha256,
)
from specbound.pretrained import pretrained_map  # noqa: F401  (re-exported)
from specbound.vocabulary import ACTIVATIONS, INPUT_MAP_EMBEDDED, INPUT_MAP_RANDOM, LS_VARIANTS, kv_group

REFUSED: dict[str, str] = {
    "bias": "biases are outside the theorem: the analysis model has none (linear maps, softmax, phi and Pi only)",
    "layer_norm": ("LayerNorm is outside the theorem: the projection Pi onto the unit ball after every block "
                   "takes its place (built in)"),
    "trainable_embedding": ("a trainable embedding is fitted on S, but the theorem needs the input map fixed "
                            "before S: use a random, a frozen pretrained or a user-embedded input map"),
}
"""Constructor options outside the theorem, each with the one line that refuses it."""


class OutsideTheoremError(SpecboundError):
    """A model choice (or a change made after construction) that puts the network outside the theorem."""


def project_rows(x: torch.Tensor) -> torch.Tensor:
    """``Pi`` row-wise: ``x / max(1, ||x||_2)`` over the last axis (metric projection onto the ball)."""
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return x / torch.clamp(norm, min=1.0)


def activation_fn(name: str):
    """The entrywise ``phi``: exact (erf) GELU, tanh-approximate GELU, ReLU or SiLU."""
    if name == "gelu":
        return lambda t: torch.nn.functional.gelu(t, approximate="none")
    if name == "gelu_tanh":
        return lambda t: torch.nn.functional.gelu(t, approximate="tanh")
    if name == "relu":
        return torch.relu
    if name == "silu":
        return torch.nn.functional.silu
    raise LayoutError(f"unknown activation {name!r} (use one of {ACTIVATIONS})")


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


def _np64(t: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach().cpu().to(torch.float64).numpy())


_SHAPE_KEYS = ("num_layers", "num_heads", "width", "head_dim", "ff_dim", "vocab_size", "seq_len", "activation",
               "variant", "num_kv_heads", "rope_base", "num_outputs")


def _architecture(arch: Architecture | None, shape: dict, input_map: InputMap | None, embed_seed: int | None) -> tuple[Architecture, InputMap]:
    """The architecture and the input map of a constructor call (module docstring; one-line errors)."""
    given = {k: v for k, v in shape.items() if v is not None}
    if arch is not None:
        if given:
            raise LayoutError(f"give either an Architecture or the keywords {', '.join(sorted(given))}, not both")
        given = {k: getattr(arch, k) for k in _SHAPE_KEYS}
    for key in ("num_layers", "num_heads", "width", "head_dim", "ff_dim"):
        if key not in given:
            raise LayoutError(f"AnalysisTransformer needs {key}")
    variant = given.get("variant", "plain")
    ls = variant in LS_VARIANTS
    N = int(given["width"])
    if input_map is None:
        for key in ("vocab_size", "seq_len"):
            if key not in given:
                raise LayoutError(f"AnalysisTransformer needs {key} for its random input map (or give input_map=)")
        seed = 0 if embed_seed is None else int(embed_seed)
        input_map = random_map(int(given["vocab_size"]), int(given["seq_len"]), N, seed)
    else:
        if embed_seed is not None and embed_seed != 0:
            raise LayoutError("embed_seed draws the random input map: give it or input_map=, not both")
        if input_map.width != N:
            raise LayoutError(f"the input map has width {input_map.width}, the model {N}")
        if given.get("vocab_size", input_map.vocab_size) != input_map.vocab_size:
            raise LayoutError(f"vocab_size {given['vocab_size']} but the input map has {input_map.vocab_size} tokens")
        if ls:
            if input_map.positions:
                raise LayoutError(f"variant {variant!r} takes positions from its rotary tables: give an input map "
                                  "without a positional table")
            if "seq_len" not in given:
                raise LayoutError(f"variant {variant!r} needs seq_len (the rotary table length)")
        else:
            if given.get("seq_len", input_map.positions) != input_map.positions:
                raise LayoutError(f"seq_len {given['seq_len']} but the input map's positional table has "
                                  f"{input_map.positions} rows (0: none)")
            given["seq_len"] = input_map.positions
        given["vocab_size"] = input_map.vocab_size
    if ls and input_map.P is not None:  # the random map's positional rows: unused by LS (rotary tables)
        input_map = replace(input_map, P=None)
    return Architecture(**{k: given[k] for k in _SHAPE_KEYS if k in given}), input_map


class AnalysisTransformer(nn.Module):
    """The analysis-family Transformer (module docstring), batched over sequences.

    Build it from an :class:`Architecture` or from keywords::

        AnalysisTransformer(num_layers=2, num_heads=2, width=32, head_dim=8, ff_dim=64,
                            vocab_size=V, seq_len=T, activation="gelu", variant="plain",
                            num_kv_heads=0, rope_base=10000.0, num_outputs=1,
                            input_map=None, embed_seed=0, init_seed=0, dtype=torch.float64)

    ``input_map``: an :class:`specbound.input_map.InputMap` (None: the random map of ``embed_seed``
    over ``vocab_size`` tokens and ``seq_len`` positions).  ``bias``, ``layer_norm`` and
    ``trainable_embedding`` exist only to be refused (:data:`REFUSED`).

    Learned parameters (layer ``l``): ``W_Q`` (H, N, d), ``W_K``, ``W_V`` (G, N, d), ``W_O`` (H, d, N),
    ``M_in`` (N, d_ff), ``M_out`` (d_ff, N) (LS: ``ff_G``, ``ff_U`` (N, d_ff), ``ff_D`` (d_ff, N)); the
    read-out ``w`` (N,) or (k, N).  Buffers (never trained): ``E`` (V, N), ``P`` (T, N) (empty when
    absent), and for LS ``rope_cos``, ``rope_sin``.  ``forward`` takes int64 token ids (B, T) or float
    rows (B, T, N) and returns (B,) for one output, (B, k) for k.
    """

    def __init__(
        self,
        arch: Architecture | None = None,
        *,
        num_layers: int | None = None,
        num_heads: int | None = None,
        width: int | None = None,
        head_dim: int | None = None,
        ff_dim: int | None = None,
        vocab_size: int | None = None,
        seq_len: int | None = None,
        activation: str | None = None,
        variant: str | None = None,
        num_kv_heads: int | None = None,
        rope_base: float | None = None,
        num_outputs: int | None = None,
        input_map: InputMap | None = None,
        embed_seed: int | None = None,
        init_seed: int = 0,
        dtype: torch.dtype = torch.float64,
        task: str = "",
        bias: bool = False,
        layer_norm: bool = False,
        trainable_embedding: bool = False,
    ) -> None:
        super().__init__()
        for name, value in (("bias", bias), ("layer_norm", layer_norm), ("trainable_embedding", trainable_embedding)):
            if value:
                raise OutsideTheoremError(f"{name}=True: {REFUSED[name]}")
        shape = dict(num_layers=num_layers, num_heads=num_heads, width=width, head_dim=head_dim, ff_dim=ff_dim,
                     vocab_size=vocab_size, seq_len=seq_len, activation=activation, variant=variant,
                     num_kv_heads=num_kv_heads, rope_base=rope_base, num_outputs=num_outputs)
        arch, input_map = _architecture(arch, shape, input_map, embed_seed)
        self.arch = arch
        self.task = task
        self.phi = activation_fn(arch.activation)
        H, N, d, F, k = arch.num_heads, arch.width, arch.head_dim, arch.ff_dim, arch.num_outputs
        empty = np.zeros((0, N))
        self.register_buffer("E", torch.tensor(input_map.E if input_map.E is not None else empty, dtype=dtype))
        self.register_buffer("P", torch.tensor(input_map.P if input_map.P is not None else empty, dtype=dtype))
        # the map as the model holds it (tables rounded to dtype): what is saved and checked later
        self.input_map = replace(input_map, E=None if input_map.E is None else _np64(self.E).copy(),
                                 P=None if input_map.P is None else _np64(self.P).copy())
        self.input_map.sha256  # noqa: B018  (computed now, from copies: a later change of E or P shows)
        self.embed_seed = self.input_map.seed if self.input_map.kind == INPUT_MAP_RANDOM else 0
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
        self.w = param((N,) if k == 1 else (k, N), N)

    @property
    def readout_token(self) -> int:
        """Index of the read-out token: 0 (CLS) for the plain model, -1 (last) otherwise."""
        return -1 if self.arch.is_causal else 0

    def ff_names(self) -> tuple[str, ...]:
        return ("G", "U", "D") if self.arch.is_ls else ("M_in", "M_out")

    def ff_params(self, name: str) -> nn.ParameterList:
        return getattr(self, "ff_" + name) if self.arch.is_ls else getattr(self, name)

    # ----------------------------------------------------------------- forward pass
    def embed(self, inputs: torch.Tensor) -> torch.Tensor:
        """``X^(0)``: for int ids (B, T) ``Pi(E[tokens] + P[:T])`` (LS: ``Pi(E[tokens])``, positions
        enter through the rotary tables); for float rows (B, T, N) ``Pi(rows)``."""
        inputs = torch.as_tensor(inputs)
        if inputs.is_floating_point():
            if inputs.dim() != 3 or inputs.shape[-1] != self.arch.width or inputs.shape[1] < 1:
                raise LayoutError(f"input rows must have shape (batch, length >= 1, {self.arch.width}), "
                                  f"got {tuple(inputs.shape)}")
            if self.arch.is_ls and inputs.shape[1] > self.arch.seq_len:
                raise LayoutError(f"inputs: length {inputs.shape[1]} exceeds the rotary table's {self.arch.seq_len} rows")
            return project_rows(inputs.to(self.W_Q[0].dtype))
        if self.input_map.kind == INPUT_MAP_EMBEDDED:
            raise LayoutError("this model's inputs are embedded by the user: pass float rows (batch, length, width)")
        tokens = inputs
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
        if self.P.shape[0] > 0 and not self.arch.is_ls:
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

    def layers(self, inputs: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """Every intermediate, in order: ``X0``, then ``Y{l}`` and ``X{l}`` for l = 1..L (1-based)."""
        X = self.embed(inputs)
        out = [("X0", X)]
        for l in range(self.arch.num_layers):
            Y = project_rows(self.attention(l, X) + (X if self.arch.is_residual else 0))
            X = project_rows(self.feed_forward(l, Y) + (Y if self.arch.is_residual else 0))
            out += [(f"Y{l + 1}", Y), (f"X{l + 1}", X)]
        return out

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """``f(X)`` at the read-out token tau: ``<w, x_tau>`` of shape (B,), or ``W x_tau`` (B, k)."""
        x = self.layers(inputs)[-1][1][:, self.readout_token, :]
        return x @ self.w if self.w.dim() == 1 else x @ self.w.T

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

    # ------------------------------------------------------------------- the family
    def _expected_names(self) -> tuple[set[str], set[str]]:
        params = {"w"} | {f"{name}.{l}" for name in ("W_Q", "W_K", "W_V", "W_O") for l in range(self.arch.num_layers)}
        ff = [("ff_" + n) if self.arch.is_ls else n for n in self.ff_names()]
        params |= {f"{name}.{l}" for name in ff for l in range(self.arch.num_layers)}
        buffers = {"E", "P"} | ({"rope_cos", "rope_sin"} if self.arch.is_ls else set())
        return params, buffers

    def check_family(self) -> None:
        """Refuse (OutsideTheoremError, one line) a network that is no longer this family's: a subclass
        overriding the computation, a forward hook, a parameter or buffer the family lacks (or lacks
        one it has), a trainable or changed embedding table, NaN/Inf weights."""
        cls = type(self)
        for name in _FAMILY_METHODS:
            if getattr(cls, name) is not getattr(AnalysisTransformer, name):
                raise OutsideTheoremError(f"{cls.__name__} overrides {name}(): certify bounds "
                                          "AnalysisTransformer's own computation, not a changed one")
        for name, module in self.named_modules():
            if module._forward_hooks or module._forward_pre_hooks:
                raise OutsideTheoremError(f"a forward hook on {name or cls.__name__} changes the network "
                                          "certify would bound: remove it")
        params, buffers = self._expected_names()
        found = {n for n, _ in self.named_parameters()}
        for n in sorted(found - params):
            if n in ("E", "P"):
                raise OutsideTheoremError(f"the embedding table {n} is a trainable parameter: {REFUSED['trainable_embedding']}")
            raise OutsideTheoremError(f"extra parameter {n!r}: the analysis family has none such "
                                      "(a bias, a LayerNorm or another module is outside the theorem)")
        found_b = {n for n, _ in self.named_buffers()}
        missing = sorted((params - found) | (buffers - found_b))
        if missing:
            raise OutsideTheoremError(f"missing parameter or buffer {missing[0]!r} of the analysis family")
        if found_b - buffers:
            raise OutsideTheoremError(f"extra buffer {sorted(found_b - buffers)[0]!r}: the analysis family has none "
                                      "such (a normalisation's statistics are outside the theorem)")
        if self.E.requires_grad or self.P.requires_grad:
            raise OutsideTheoremError(f"the embedding requires grad: {REFUSED['trainable_embedding']}")
        E = _np64(self.E) if self.input_map.E is not None else None
        P = _np64(self.P) if self.input_map.P is not None else None
        if tables_sha256(E, P) != self.input_map.sha256 or self.E.shape[0] != self.input_map.vocab_size:
            raise OutsideTheoremError("the embedding tables changed after the model was built: an embedding "
                                      "fitted on S is outside the theorem (the input map must be fixed before S)")

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
        if self.input_map.kind != INPUT_MAP_EMBEDDED:
            out["embedding.E"] = _np64(self.E)
        if self.arch.is_ls:  # the exact tables used: the certified pass reads them back
            out["rope.cos"] = _np64(self.rope_cos)
            out["rope.sin"] = _np64(self.rope_sin)
        elif self.P.shape[0] > 0:
            out["embedding.P"] = _np64(self.P)
        return out

    def metadata(self) -> dict[str, str]:
        """The checkpoint metadata: architecture, variant, read-out rows, input map and its provenance."""
        a = self.arch
        meta = {
            "format": FORMAT,
            "activation": a.activation,
            "num_layers": str(a.num_layers),
            "num_heads": str(a.num_heads),
            "width": str(a.width),
            "head_dim": str(a.head_dim),
            "ff_dim": str(a.ff_dim),
            **self.input_map.metadata(),
        }
        if a.variant != "plain":  # plain checkpoints stay byte-identical to earlier versions
            meta["variant"] = a.variant
        if a.num_outputs != 1:
            meta["num_outputs"] = str(a.num_outputs)
        if a.is_ls:
            meta["num_kv_heads"] = str(a.kv_heads)
            meta["rope_base"] = repr(float(a.rope_base))
        if self.task:
            meta["task"] = self.task
        return meta

    def specbound_checkpoint(self) -> tuple[dict[str, np.ndarray], dict[str, str]]:
        """(tensors, metadata) of the own format, after :meth:`check_family`: what
        ``specbound.certify(model)`` reads in memory (specbound/formats/state_dict.py)."""
        self.check_family()
        return self.tensors(), self.metadata()

    def save(self, path: str | os.PathLike) -> None:
        """Write the ``specbound-analysis-v1`` safetensors file atomically (float64 tensors), after
        :meth:`check_family`.

        The bytes are a pure function of the weights and metadata (sorted keys, no timestamps), so
        re-running a deterministic training script reproduces the file bit for bit.
        """
        from pathlib import Path

        self.check_family()
        write_atomic(Path(path), self.tensors(), self.metadata())

    @classmethod
    def load(cls, path: str | os.PathLike, dtype: torch.dtype = torch.float64) -> "AnalysisTransformer":
        """Read a ``specbound-analysis-v1`` file written by :meth:`save` (exact round trip; every
        earlier checkpoint of ``specbound experiment run`` included).

        Raises CheckpointError (unreadable / not this format), LayoutError (missing tensor, bad
        shape, tables that do not match the recorded input map) or NonFiniteError (NaN/Inf), each
        with a one-line message naming the file/tensor.
        """
        tensors, meta = read_checkpoint(path)
        arch = architecture_from(tensors, meta, path)
        imap = from_metadata(meta, tensors.get("embedding.E"), None if arch.is_ls else tensors.get("embedding.P"),
                             arch.width, str(path))
        model = cls(arch, input_map=imap, dtype=dtype, task=meta.get("task", ""))
        with torch.no_grad():
            for l in range(arch.num_layers):
                for name in ("W_Q", "W_K", "W_V", "W_O"):
                    getattr(model, name)[l].copy_(torch.from_numpy(tensors[f"layers.{l}.attn.{name}"]))
                for name in model.ff_names():
                    model.ff_params(name)[l].copy_(torch.from_numpy(tensors[f"layers.{l}.ff.{name}"]))
            model.w.copy_(torch.from_numpy(tensors["readout.w"]))
            if arch.is_ls:  # the stored tables are the ones used (bit for bit)
                model.rope_cos.copy_(torch.from_numpy(tensors["rope.cos"]))
                model.rope_sin.copy_(torch.from_numpy(tensors["rope.sin"]))
        return model


_FAMILY_METHODS = ("forward", "embed", "layers", "attention", "feed_forward", "tensors", "metadata",
                   "specbound_checkpoint", "covered_matrices", "group_of", "check_family")
"""The methods that define the network and its checkpoint: a subclass may not override them."""


__all__ = ["AnalysisTransformer", "Architecture", "InputMap", "OutsideTheoremError", "REFUSED", "activation_fn",
           "apply_rope", "causal_mask", "embedded_map", "pretrained_map", "project_rows", "random_map", "rope_tables"]
