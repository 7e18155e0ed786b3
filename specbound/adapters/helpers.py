"""What every adapter shares: its declaration, config reading, recorded tensor reads, head slicing,
score-scale folding and the assembly of covered matrices (one home for each, issue 10 item 5).

Orientation (docs/design.md section 6, :mod:`specbound.matrices`): a token is a row ``x`` and a
linear map is ``x -> x @ W``.  ``torch.nn.Linear`` stores ``weight`` as (out, in) and applies
``x @ weight.T``, so its row-vector matrix is ``weight.T``; GPT-2's ``Conv1D`` stores (in, out) and
applies ``x @ weight``, so its row-vector matrix is ``weight`` itself (no transpose).

Per layer an adapter hands :func:`assemble` a :class:`LayerParts`: per query head h the query map
``q[h]`` (N x d_h) and output block ``o[h]`` (d_h x N); per key/value group g the key and value maps
``k[g]``, ``v[g]`` (N x d_h); query head h uses group ``h // (H / H_kv)`` (grouped-query attention as
``transformers``' ``repeat_kv`` does it); the feed-forward maps; and the score scale squared ``c^2``
(e.g. 1/d_h), exact.  :func:`assemble` builds the covered matrices of the requested *view*
(:data:`specbound.vocabulary.VIEWS`):

* ``analysis`` -- the adapter's analysis model: plain kinds (QK, V_tilde, M_in, M_out) or, for
  Llama-style models, :data:`~specbound.vocabulary.LS_MATRIX_KINDS`; the score scale ``c`` is on the
  query side (``QK = c W_Q W_K^T``, ``Q = c W_Q``);
* ``scores`` -- plain kinds with the score scale: per query head the score matrix
  ``c W_Q^(h) W_K^(g(h))^T`` and value-output matrix ``W_V^(g(h)) W_O^(h)`` (for every family);
* ``proxy`` -- the plain kinds *without* the score scale: the companion code's convention, so the
  paper proxies of a BERT checkpoint are exactly what they always were.  A gated feed-forward enters
  the proxies as ``M_in = [W_gate | W_up]`` (N x 2 d_ff) and ``M_out = W_down``.

Score scale exactly: ``c = 2^k sqrt(r)`` with ``r`` free of factors 4; ``2^k`` is folded into the
query factor (exact in binary64 unless it would lose subnormal bits, which is checked) and ``r`` is
kept as :attr:`NamedMatrix.scale_sq` (1 for d_h = 4, 16, 64, 256, ...).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ..errors import LayoutError
from ..matrices import AnalysisWeights, NamedMatrix, ordered
from ..scope import ModelScope
from ..vocabulary import ACTIVATIONS, LS_VARIANTS, PLAIN_ACTIVATIONS, VIEW_ANALYSIS, VIEW_PROXY, VIEWS

HIDDEN_ACT: dict[str, str] = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
"""Hugging Face activation names we can name exactly, mapped to :data:`vocabulary.ACTIVATIONS`
(``gelu_new``, ``gelu_pytorch_tanh`` and ``gelu_fast`` are all the tanh form of GELU)."""


@dataclass(frozen=True)
class AdapterSpec:
    """An adapter's declaration (the registry's row).

    ``layout``: id recorded in :attr:`AnalysisWeights.layout`; ``families``: model families it reads
    (``model_type`` values where there is one); ``expected``: one line naming the tensors it
    recognises; ``capabilities``: what it can give (:data:`vocabulary.CAPABILITIES`);
    ``outside_theorem``: when ``certify`` is not among them, the first component of the model
    outside the theorem (the one-line refusal names it); ``config_keys``: every config key it may
    read; ``variant``: the analysis model of its ``analysis`` view.
    """

    layout: str
    families: tuple[str, ...]
    expected: str
    capabilities: frozenset[str]
    outside_theorem: str | None = None
    config_keys: tuple[str, ...] = ()
    variant: str = "plain"


# --------------------------------------------------------------------------- checks


def agree(ckpt, what: str, stated, given, stated_where: str):
    """The value of ``what``: ``stated`` (from the checkpoint) unless absent, else ``given``.

    Both present and different is an error: an argument may fill a gap, never override the file.
    """
    if stated is not None and given is not None and stated != given:
        raise LayoutError(
            f"{ckpt.path}: {what}={given!r} was given but {stated_where} says {stated!r}"
        )
    return stated if stated is not None else given


def positive_int(ckpt, what: str, text, where: str) -> int | None:
    """``text`` as a positive int (None stays None); LayoutError naming ``where`` otherwise."""
    if text is None:
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        raise LayoutError(f"{ckpt.path}: {where} {what}={text!r} is not an integer") from None
    if value <= 0:
        raise LayoutError(f"{ckpt.path}: {where} {what}={value} must be positive")
    return value


def finite_number(ckpt, what: str, value, where: str, minimum: float = 0) -> Fraction | None:
    """``value`` as the exact rational of a finite real number >= ``minimum`` (None stays None);
    a string, an array, a bool, NaN, an infinity or a smaller number is a one-line LayoutError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < minimum:
        raise LayoutError(f"{ckpt.path}: {where} {what}={_short(value)} is not a finite number >= {minimum}")
    return Fraction(value)


def activation(ckpt, name: str) -> str:
    """``name`` if it is one of :data:`ACTIVATIONS`, else a one-line LayoutError."""
    if name not in ACTIVATIONS:
        raise LayoutError(
            f"{ckpt.path}: unsupported activation {name!r} (supported: {', '.join(ACTIVATIONS)})"
        )
    return name


def check_view(view: str) -> str:
    if view not in VIEWS:
        raise LayoutError(f"unknown view {view!r} (known: {', '.join(VIEWS)})")
    return view


# --------------------------------------------------------------------------- config and tensors


def _absent(value: Any) -> bool:
    return value is None


def _one(value: Any) -> bool:
    return value is None or (not isinstance(value, bool) and value == 1)


COMPUTATION_KEYS: dict[str, tuple[str, Any]] = {
    # Hugging Face config keys (Granite, Gemma 2, OLMo, BERT-style relative positions)
    "attention_multiplier": ("multiplies the attention scores in place of 1/sqrt(d_h)", _absent),
    "residual_multiplier": ("scales every residual branch", _one),
    "embedding_multiplier": ("scales the token embeddings", _one),
    "logits_scaling": ("divides the output logits", _one),
    "attn_logit_softcapping": ("caps the attention scores with tanh", _absent),
    "final_logit_softcapping": ("caps the output logits with tanh", _absent),
    "clip_qkv": ("clips queries, keys and values", _absent),
    "position_embedding_type": ("adds relative-position terms to the attention scores",
                                lambda v: v is None or v == "absolute"),
    # GGUF metadata, after the architecture's prefix ("gemma2.attn_logit_softcapping")
    "{arch}.attn_logit_softcapping": ("caps the attention scores with tanh", lambda v: v is None or v == 0),
    "{arch}.final_logit_softcapping": ("caps the output logits with tanh", lambda v: v is None or v == 0),
    "{arch}.residual_scale": ("scales every residual branch", _one),
    "{arch}.embedding_scale": ("scales the token embeddings", _one),
    "{arch}.logit_scale": ("scales the output logits", _one),
    "{arch}.attention.scale": ("sets the attention score scale", _absent),
}
"""Config keys that change what a model computes, each with what it changes and the values that
leave the computation as if it were absent.  An adapter that does not list such a key among its
``config_keys`` (i.e. does not model it) refuses a config where it has another value
(:meth:`Config.check`): reading the checkpoint as if the key were absent would analyse another
network (a Granite model as Llama-style with c^2 = 1/d_h, Gemma 2 without its soft-capping)."""


class Config:
    """The checkpoint's config (``config.json`` or GGUF metadata), recording every key read.

    With the adapter's ``spec`` the config is checked first (:meth:`check`): its family must be
    one the adapter reads, and no key of :data:`COMPUTATION_KEYS` the adapter does not model may
    change the computation."""

    def __init__(self, ckpt, spec: AdapterSpec | None = None) -> None:
        self.ckpt = ckpt
        self.data: dict[str, Any] = dict(ckpt.config or {})
        self.used: dict[str, Any] = {}
        if spec is not None:
            self.check(spec)

    def check(self, spec: AdapterSpec) -> None:
        """One-line LayoutError when the config's ``model_type`` (GGUF: ``general.architecture``) is
        not one of ``spec.families``, or when it sets keys that change the computation and that the
        adapter does not model (all of them named)."""
        family_key = "general.architecture" if "general.architecture" in self.data else "model_type"
        family = self.data.get(family_key)
        if family is not None and family not in spec.families:
            raise LayoutError(
                f"{self.where} {family_key} {family!r} is not a family the {spec.layout} adapter reads "
                f"({', '.join(spec.families)}); its computation may differ in ways this adapter does not model")
        arch = self.data.get("general.architecture")
        unmodeled = []
        for key, value in self.data.items():
            generic = f"{{arch}}.{key[len(arch) + 1:]}" if isinstance(arch, str) and key.startswith(arch + ".") else key
            known = COMPUTATION_KEYS.get(generic)
            if known is None or generic in spec.config_keys:
                continue
            what, neutral = known
            try:
                harmless = bool(neutral(value))
            except Exception:  # noqa: BLE001 - a value that cannot even be compared is not harmless
                harmless = False
            if not harmless:
                unmodeled.append(f"{key}={_short(value)} ({what})")
        if unmodeled:
            raise LayoutError(
                f"{self.where} sets {'; '.join(unmodeled)}: not modeled by the {spec.layout} adapter, "
                "so the analysis model would not be this network; refused")

    @property
    def where(self) -> str:
        return f"{self.ckpt.config_path}:" if self.ckpt.config_path else "config"

    def value(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` (recorded as used when present), else ``default``."""
        if key in self.data and self.data[key] is not None:
            self.used[key] = self.data[key]
            return self.data[key]
        return default

    def int(self, key: str) -> int | None:
        """A positive int under ``key``, or None when absent."""
        return positive_int(self.ckpt, key, self.value(key), self.where)

    def first_int(self, *keys: str) -> int | None:
        for key in keys:
            v = self.int(key)
            if v is not None:
                return v
        return None

    def activation(self, keys: tuple[str, ...], given: str | None, default: str | None,
                   allowed: tuple[str, ...] = PLAIN_ACTIVATIONS) -> tuple[str, str]:
        """(activation, where it came from) from the first of ``keys`` present, else ``given``,
        else ``default`` (stated as assumed); a value outside ``allowed`` is a one-line LayoutError."""
        stated, key = None, None
        names = [n for n, a in HIDDEN_ACT.items() if a in allowed]
        for k in keys:
            raw = self.value(k)
            if raw is not None:
                if raw not in names:
                    raise LayoutError(f"{self.where} unsupported {k} {raw!r} "
                                      f"(supported: {', '.join(names)})")
                stated, key = HIDDEN_ACT[raw], k
                break
        act = agree(self.ckpt, "activation", stated, given, f"config {key}")
        if act is None:
            if default is None:
                raise LayoutError(f"{self.ckpt.path}: activation unknown (no {'/'.join(keys)} in "
                                  f"the config); pass activation")
            return default, f"assumed {default} (no {'/'.join(keys)} in the config)"
        act = activation(self.ckpt, act)
        return act, (f"config {key} -> {act}" if stated is not None else f"argument -> {act}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class Reads:
    """Tensor reads of one adaptation, each recorded with what it was read as."""

    def __init__(self, ckpt) -> None:
        self.ckpt = ckpt
        self.used: dict[str, str] = {}

    def tensor(self, name: str, shape: tuple[int, ...] | None, as_what: str, *,
               transposed: bool = False) -> np.ndarray:
        """Exact float64 copy of ``name`` (or of its transpose; see :meth:`Checkpoint.tensor`),
        recorded as ``as_what``."""
        array = self.ckpt.tensor(name, shape, transposed=transposed)
        self.used[name] = as_what
        return array


def placeholder(shape: tuple[int, ...], value: float = 0.0) -> np.ndarray:
    """A read-only constant array of ``shape`` that takes no memory (every stride 0): it stands for a
    tensor that a partial build (:func:`specbound.checkpoint.load_layers`) does not read.  Its
    entries are not the tensor's; ``value`` only records, where known, whether the tensor is
    exactly zero (0) or not (1), the one fact float planning reads from values."""
    return np.broadcast_to(np.full((), value, dtype=np.float64), tuple(int(s) for s in shape))


def is_placeholder(a) -> bool:
    """Whether ``a`` is a :func:`placeholder` (or a slice or transpose of one)."""
    return isinstance(a, np.ndarray) and a.ndim > 0 and all(st == 0 for st in a.strides)


def contiguous(a: np.ndarray) -> np.ndarray:
    """``np.ascontiguousarray(a)``, except that a placeholder stays a placeholder (no copy)."""
    return a if is_placeholder(a) else np.ascontiguousarray(a)


def copied(a: np.ndarray) -> np.ndarray:
    """``a.copy()``, except that a placeholder stays a placeholder (no copy)."""
    return a if is_placeholder(a) else a.copy()


def side_by_side(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[a | b]`` as a contiguous array (a placeholder when either part is one)."""
    if is_placeholder(a) or is_placeholder(b):
        return placeholder((a.shape[0], a.shape[1] + b.shape[1]))
    return np.ascontiguousarray(np.hstack([a, b]))


def linear(reads: Reads, name: str, out_dim: int, in_dim: int, as_what: str) -> np.ndarray:
    """Row-vector matrix (in x out) of a ``torch.nn.Linear`` weight stored (out, in)."""
    return reads.tensor(name, (out_dim, in_dim), as_what, transposed=True)


def conv1d(reads: Reads, name: str, in_dim: int, out_dim: int, as_what: str) -> np.ndarray:
    """Row-vector matrix (in x out) of a GPT-2 ``Conv1D`` weight, stored (in, out): as stored."""
    return reads.tensor(name, (in_dim, out_dim), as_what)


def head_columns(m: np.ndarray, heads: int, d: int) -> list[np.ndarray]:
    """Columns ``h*d:(h+1)*d`` of a row-vector map (N x heads*d): per-head query/key/value maps."""
    return [contiguous(m[:, h * d:(h + 1) * d]) for h in range(heads)]


def head_rows(m: np.ndarray, heads: int, d: int) -> list[np.ndarray]:
    """Rows ``h*d:(h+1)*d`` of a row-vector output map (heads*d x N): per-head output blocks."""
    return [contiguous(m[h * d:(h + 1) * d, :]) for h in range(heads)]


# --------------------------------------------------------------------------- score scale


def split_scale(scale_sq: Fraction) -> tuple[int, Fraction]:
    """(k, r) with ``scale_sq = 4^k r`` and neither numerator nor denominator of r divisible by 4,
    so ``sqrt(scale_sq) = 2^k sqrt(r)``."""
    if scale_sq <= 0:
        raise ValueError(f"score scale squared must be positive, got {scale_sq}")
    r, k = Fraction(scale_sq), 0
    while r.numerator % 4 == 0:
        r, k = r / 4, k + 1
    while r.denominator % 4 == 0:
        r, k = r * 4, k - 1
    return k, r


def fold_scale(left: np.ndarray, scale_sq: Fraction) -> tuple[np.ndarray, Fraction]:
    """(left', rest) with ``sqrt(scale_sq) * left == sqrt(rest) * left'`` exactly: the power of two
    ``2^k`` of the scale multiplied into ``left`` (exact; kept out if it would lose bits)."""
    k, r = split_scale(scale_sq)
    if k == 0 or is_placeholder(left):  # a placeholder stands for a matrix that is not built
        return left, r
    scaled = np.ldexp(left, k)
    if not np.array_equal(np.ldexp(scaled, -k), left):  # subnormal underflow: keep it exact
        return left, Fraction(scale_sq)
    return scaled, r


# --------------------------------------------------------------------------- assembly


@dataclass
class LayerParts:
    """One layer's maps in row-vector orientation (module docstring)."""

    q: list[np.ndarray]
    k: list[np.ndarray]
    v: list[np.ndarray]
    o: list[np.ndarray]
    score_scale_sq: Fraction
    ff_in: np.ndarray | None = None
    ff_out: np.ndarray | None = None
    gate: np.ndarray | None = None
    up: np.ndarray | None = None
    down: np.ndarray | None = None

    @property
    def group_size(self) -> int:
        return len(self.q) // len(self.k)

    def group(self, h: int) -> int:
        return h // self.group_size


def assemble(layer: int, parts: LayerParts, view: str, ls: bool) -> list[NamedMatrix]:
    """The covered matrices of one layer for ``view`` (module docstring); ``ls``: the adapter's
    analysis model is the Llama-style one (:data:`vocabulary.LS_MATRIX_KINDS`)."""
    scale = Fraction(1) if view == VIEW_PROXY else parts.score_scale_sq
    H = len(parts.q)
    out: list[NamedMatrix] = []
    if ls and view == VIEW_ANALYSIS:
        for h in range(H):
            left, rest = fold_scale(parts.q[h], scale)
            out.append(NamedMatrix(layer, h, "Q", left, scale_sq=rest))
        for g in range(len(parts.k)):
            out.append(NamedMatrix(layer, g, "K", parts.k[g]))
        for h in range(H):
            out.append(NamedMatrix(layer, h, "V_tilde", parts.v[parts.group(h)], parts.o[h]))
        out += [NamedMatrix(layer, -1, "G", parts.gate), NamedMatrix(layer, -1, "U", parts.up),
                NamedMatrix(layer, -1, "D", parts.down)]
        return out
    for h in range(H):
        g = parts.group(h)
        left, rest = fold_scale(parts.q[h], scale)
        out.append(NamedMatrix(layer, h, "QK", left, contiguous(parts.k[g].T), scale_sq=rest))
        out.append(NamedMatrix(layer, h, "V_tilde", parts.v[g], parts.o[h]))
    if parts.gate is not None:
        out.append(NamedMatrix(layer, -1, "M_in", side_by_side(parts.gate, parts.up)))
        out.append(NamedMatrix(layer, -1, "M_out", parts.down))
    else:
        out.append(NamedMatrix(layer, -1, "M_in", parts.ff_in))
        out.append(NamedMatrix(layer, -1, "M_out", parts.ff_out))
    return out


@dataclass
class Facts:
    """Architecture facts an adapter found (L, H, H_kv, N, d_h, d_ff) and where."""

    num_layers: int
    num_heads: int
    width: int
    head_dim: int
    ff_dim: int
    num_kv_heads: int = 0
    notes: dict = field(default_factory=dict)


def scope(family: str, *, norm: str, kept: tuple[str, ...], dropped: tuple[str, ...],
          activation_source: str, readout: str, config: Config, view: str,
          extra_replaced: tuple[str, ...] = ()) -> ModelScope:
    """The :class:`ModelScope` of one adaptation; the view is said when it is not the analysis one."""
    replaced = (f"{norm} -> projection onto the unit ball",) + extra_replaced
    if view == VIEW_PROXY:
        replaced += ("score scale -> left out (the proxies' convention)",)
    return ModelScope(family=family, kept=kept, replaced=replaced, dropped=dropped,
                      activation_source=activation_source, readout=readout,
                      config_keys=tuple(config.used))


def names_seen(ckpt, limit: int = 8) -> str:
    """A short list of the checkpoint's tensor names, for one-line errors."""
    names = ckpt.names()
    shown = ", ".join(names[:limit]) + (f", ... ({len(names)} in all)" if len(names) > limit else "")
    return shown or "none"


# --------------------------------------------------------------------------- name tables


@dataclass(frozen=True)
class NameTable:
    """Tensor-name templates of one layout (``{l}``: the layer index), found after any name prefix
    (``bert.``, ``model.``, ``vit.``...) that the query tensor's name shows.  ``ff_in``/``ff_out``
    for a plain feed-forward block, ``gate``/``up``/``down`` for a gated one."""

    q: str
    k: str
    v: str
    o: str
    ff_in: str | None = None
    ff_out: str | None = None
    gate: str | None = None
    up: str | None = None
    down: str | None = None

    def anchor(self) -> re.Pattern:
        before, after = self.q.split("{l}")
        return re.compile(r"^(?P<prefix>.*?)" + re.escape(before) + r"(?P<layer>\d+)"
                          + re.escape(after) + "$")

    def names(self, prefix: str, layer: int) -> dict[str, str]:
        return {role: prefix + t.format(l=layer) for role, t in vars(self).items() if t is not None}

    @property
    def gated(self) -> bool:
        return self.gate is not None


def scan(ckpt, table: NameTable) -> dict[str, set[int]]:
    """Layer indices whose query tensor is present, per name prefix."""
    anchor = table.anchor()
    found: dict[str, set[int]] = {}
    for name in ckpt.names():
        m = anchor.match(name)
        if m:
            found.setdefault(m.group("prefix"), set()).add(int(m.group("layer")))
    return found


def one_prefix(ckpt, found: dict[str, set[int]], family: str) -> tuple[str, set[int]]:
    if len(found) > 1:
        raise LayoutError(
            f"{ckpt.path}: ambiguous {family} layout: tensors under prefixes "
            f"{', '.join(repr(p) for p in sorted(found))}"
        )
    (prefix, layers), = found.items()
    return prefix, layers


def two_d(ckpt, name: str) -> tuple[int, int]:
    """The shape of a 2-D weight; one line when it is not 2-D or has an empty axis (an empty
    weight would make the model's dimensions, and the score scale 1/d_h, zero)."""
    shape = ckpt.shape(name)
    if len(shape) != 2:
        raise LayoutError(f"{ckpt.path}: tensor '{name}' has shape {tuple(shape)} ({len(shape)}-D), "
                          f"expected a 2-D weight")
    if min(int(d) for d in shape) < 1:
        raise LayoutError(f"{ckpt.path}: tensor '{name}' has shape {tuple(int(d) for d in shape)}: an empty "
                          "weight (every covered matrix needs both dimensions >= 1)")
    return int(shape[0]), int(shape[1])


def resolve_facts(ckpt, config: Config, table: NameTable, prefix: str, layers: set[int], *,
                  num_heads: int | None, layers_keys: tuple[str, ...], heads_keys: tuple[str, ...],
                  width_keys: tuple[str, ...], ff_keys: tuple[str, ...],
                  kv_heads_keys: tuple[str, ...] = (), head_dim_keys: tuple[str, ...] = (),
                  transposed: bool = True) -> Facts:
    """L, H, H_kv, N, d_h, d_ff from the config where it says them, else from the tensor shapes of
    layer 0 (``transposed``: weights stored (out, in) as ``nn.Linear`` does); every tensor read later
    is checked against them."""
    L = config.first_int(*layers_keys) or 1 + max(layers)
    if L < 1 + max(layers):
        raise LayoutError(f"{ckpt.path}: config {layers_keys[0]}={L} but the file has layer {max(layers)}")
    H = agree(ckpt, "num_heads", config.first_int(*heads_keys), num_heads,
              f"config {heads_keys[0]}")
    if H is None:
        raise LayoutError(f"{ckpt.path}: number of attention heads unknown (no config with "
                          f"{heads_keys[0]}); pass --num-heads H (in Python: num_heads=H)")
    if not isinstance(H, int) or H <= 0:
        raise LayoutError(f"{ckpt.path}: num_heads={H!r} must be a positive integer")
    n0 = table.names(prefix, 0)
    q_out, q_in = two_d(ckpt, n0["q"])
    if not transposed:
        q_out, q_in = q_in, q_out
    N = config.first_int(*width_keys) or q_in
    d = config.first_int(*head_dim_keys) if head_dim_keys else None
    if d is None:
        if q_out % H != 0:
            raise LayoutError(f"{ckpt.path}: hidden size {q_out} is not divisible by num_heads {H}")
        d = q_out // H
    H_kv = config.first_int(*kv_heads_keys) if kv_heads_keys else None
    H_kv = H_kv or H
    if H % H_kv != 0:
        raise LayoutError(f"{ckpt.path}: num_heads {H} is not a multiple of the key/value heads {H_kv}")
    ff_name = n0["gate"] if table.gated else n0["ff_in"]
    ff_out, ff_in = two_d(ckpt, ff_name)
    d_ff = config.first_int(*ff_keys) or (ff_out if transposed else ff_in)
    if min(N, d, d_ff) < 1:
        raise LayoutError(f"{ckpt.path}: width {N}, head dimension {d} and feed-forward width {d_ff} must all be "
                          f">= 1 (from layer 0's shapes and the config)")
    return Facts(num_layers=L, num_heads=H, width=N, head_dim=d, ff_dim=d_ff,
                 num_kv_heads=H_kv if H_kv != H else 0)


def score_role(facts: Facts) -> str:
    return f"W_Q, {facts.num_heads} query heads of dim {facts.head_dim}"


def read_layer(reads: Reads, table: NameTable, prefix: str, layer: int, facts: Facts,
               score_scale_sq: Fraction) -> LayerParts:
    """One layer's maps from separate ``nn.Linear`` q/k/v/o and feed-forward weights."""
    n = table.names(prefix, layer)
    N, H, d, d_ff = facts.width, facts.num_heads, facts.head_dim, facts.ff_dim
    H_kv = facts.num_kv_heads or H
    kv = f"{H_kv} key/value group{'s' if H_kv > 1 else ''}" if H_kv != H else f"{H} heads"
    q = linear(reads, n["q"], H * d, N, f"W_Q ({H} query heads of dim {d}; score scale "
                                         f"sqrt({score_scale_sq}) on this side)")
    k = linear(reads, n["k"], H_kv * d, N, f"W_K ({kv})")
    v = linear(reads, n["v"], H_kv * d, N, f"W_V ({kv})")
    o = linear(reads, n["o"], N, H * d, f"W_O (output; input columns per head)")
    parts = LayerParts(q=head_columns(q, H, d), k=head_columns(k, H_kv, d),
                       v=head_columns(v, H_kv, d), o=head_rows(o, H, d),
                       score_scale_sq=score_scale_sq)
    if table.gated:
        parts.gate = linear(reads, n["gate"], d_ff, N, "gate W_G")
        parts.up = linear(reads, n["up"], d_ff, N, "up W_U")
        parts.down = linear(reads, n["down"], N, d_ff, "down W_D")
    else:
        parts.ff_in = linear(reads, n["ff_in"], d_ff, N, "feed-forward input M_in")
        parts.ff_out = linear(reads, n["ff_out"], N, d_ff, "feed-forward output M_out")
    return parts


def finish(ckpt, spec: AdapterSpec, facts: Facts, layers: list[LayerParts], *, view: str,
           ls: bool, activation: str, scope: ModelScope, reads: Reads, config: Config,
           extra: dict | None = None) -> AnalysisWeights:
    """The :class:`AnalysisWeights` of one adaptation (matrices of ``view``, provenance, scope).
    The scope's read-out says what head the checkpoint has besides what the analysis model uses
    (:func:`specbound.adapters.heads.readout_statement`)."""
    from dataclasses import replace

    from .heads import head_architecture, head_tensors, readout_statement

    heads = head_tensors(ckpt.names(), reads.used, ckpt.shape)
    scope = replace(scope, readout=readout_statement(scope.readout, heads, head_architecture(config.data)))
    matrices: list[NamedMatrix] = []
    for l, parts in enumerate(layers):
        matrices += assemble(l, parts, view, ls)
    variant = spec.variant if view == VIEW_ANALYSIS else "plain"
    info = {"container": ckpt.container, "weights_file": str(ckpt.path), "view": view,
            "tensors_read": dict(reads.used), "config_used": dict(config.used),
            **(extra or {})}
    if ckpt.quantization:
        info["quantization"] = {n: ckpt.quantization[n] for n in reads.used if n in ckpt.quantization}
    return AnalysisWeights(
        matrices=ordered(matrices), num_layers=facts.num_layers, num_heads=facts.num_heads,
        width=facts.width, head_dim=facts.head_dim,
        ff_dim=facts.ff_dim * (2 if (layers and layers[0].gate is not None and not
                                     (ls and view == VIEW_ANALYSIS)) else 1),
        activation=activation, readout=None, source=str(ckpt.source), sha256=ckpt.sha256(),
        layout=spec.layout, extra=info, scope=scope, variant=variant,
        num_kv_heads=facts.num_kv_heads if variant in LS_VARIANTS else 0,
    )
