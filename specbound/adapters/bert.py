"""BERT encoders with Hugging Face tensor names (``encoder.layer.{l}...``, any name prefix).

Hugging Face ``nn.Linear`` stores ``weight`` as (out, in) and applies ``x -> x @ weight.T`` to a row
``x``.  With hidden size ``N``, ``H`` heads, head dimension ``d = N / H`` and the head slice
``hs = h*d:(h+1)*d`` of the *output* rows of the query/key/value weights (docs/design.md section 6):

* ``QK_lh      = W_q[hs].T @ W_k[hs]``            factored as (left=W_q[hs].T, right=W_k[hs]);
* ``V_tilde_lh = W_v[hs].T @ W_o.T[hs, :]``       factored as (left=W_v[hs].T, right=W_o.T[hs, :]),
  with ``W_o = attention.output.dense.weight`` (its *input* columns ``hs`` belong to head h);
* ``M_in = intermediate.dense.weight.T`` (N x d_ff), ``M_out = output.dense.weight.T`` (d_ff x N).

Biases, LayerNorm and embeddings are not covered matrices and are not read.  ``H`` comes from
``config.json`` (``num_attention_heads``) when present, else from the ``num_heads`` argument; it
must divide ``N``.  The activation comes from ``hidden_act`` (``gelu`` -> gelu; ``gelu_new``,
``gelu_pytorch_tanh`` -> gelu_tanh; ``relu``); without a config it is the ``activation`` argument,
else BertConfig's documented default ``gelu`` (recorded in ``extra['activation_assumed']``).
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import LayoutError
from ..scope import ModelScope
from ..matrices import AnalysisWeights, NamedMatrix, ordered
from . import _checks

LAYOUT = "bert"
EXPECTED = "encoder.layer.{l}.attention.self.query.weight etc., optionally prefixed like bert."

_QUERY = re.compile(r"^(?P<prefix>.*?)encoder\.layer\.(?P<layer>\d+)\.attention\.self\.query\.weight$")

HIDDEN_ACT: dict[str, str] = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
}
"""Hugging Face ``hidden_act`` values we can name exactly, mapped to :data:`matrices.ACTIVATIONS`."""


def _scan(ckpt) -> dict[str, set[int]]:
    """Layer indices found, per name prefix."""
    found: dict[str, set[int]] = {}
    for name in ckpt.names():
        m = _QUERY.match(name)
        if m:
            found.setdefault(m.group("prefix"), set()).add(int(m.group("layer")))
    return found


def matches(ckpt) -> bool:
    return bool(_scan(ckpt))


def _tensor_names(prefix: str, l: int) -> dict[str, str]:
    p = f"{prefix}encoder.layer.{l}."
    return {
        "q": p + "attention.self.query.weight",
        "k": p + "attention.self.key.weight",
        "v": p + "attention.self.value.weight",
        "o": p + "attention.output.dense.weight",
        "i": p + "intermediate.dense.weight",
        "out": p + "output.dense.weight",
    }


def _config_int(ckpt, key: str) -> int | None:
    if ckpt.config is None or key not in ckpt.config:
        return None
    return _checks.positive_int(ckpt, key, ckpt.config[key], f"{ckpt.config_path}:")


def adapt(ckpt, *, num_heads: int | None = None, activation: str | None = None) -> AnalysisWeights:
    """Covered matrices of a BERT encoder (see the module contract)."""
    found = _scan(ckpt)
    if len(found) > 1:
        raise LayoutError(
            f"{ckpt.path}: ambiguous BERT layout: encoders under prefixes "
            f"{', '.join(repr(p) for p in sorted(found))}"
        )
    (prefix, layers), = found.items()
    L = _config_int(ckpt, "num_hidden_layers") or 1 + max(layers)
    if L < 1 + max(layers):
        raise LayoutError(
            f"{ckpt.path}: config.json num_hidden_layers={L} but the file has layer {max(layers)}"
        )
    H = _checks.agree(ckpt, "num_heads", _config_int(ckpt, "num_attention_heads"), num_heads,
                      "config.json num_attention_heads")
    if H is None:
        raise LayoutError(
            f"{ckpt.path}: number of attention heads unknown (no config.json with "
            f"num_attention_heads beside it); pass num_heads"
        )
    if not isinstance(H, int) or H <= 0:
        raise LayoutError(f"{ckpt.path}: num_heads={H!r} must be a positive integer")

    names0 = _tensor_names(prefix, 0)
    q_shape = ckpt.shape(names0["q"])
    if len(q_shape) != 2:
        raise LayoutError(
            f"{ckpt.path}: tensor '{names0['q']}' has shape {tuple(q_shape)} "
            f"({len(q_shape)}-D), expected a 2-D (N, N) weight"
        )
    N = _config_int(ckpt, "hidden_size") or int(q_shape[1])
    i_shape = ckpt.shape(names0["i"])
    d_ff = _config_int(ckpt, "intermediate_size") or int(i_shape[0])
    if N % H != 0:
        raise LayoutError(
            f"{ckpt.path}: hidden size {N} is not divisible by num_heads {H}"
        )
    d = N // H

    act, assumed = _activation(ckpt, activation)

    matrices: list[NamedMatrix] = []
    for l in range(L):
        n = _tensor_names(prefix, l)
        W_q = ckpt.tensor(n["q"], (N, N))
        W_k = ckpt.tensor(n["k"], (N, N))
        W_v = ckpt.tensor(n["v"], (N, N))
        W_oT = ckpt.tensor(n["o"], (N, N)).T  # row-vector map of the output projection
        for h in range(H):
            hs = slice(h * d, (h + 1) * d)
            matrices.append(NamedMatrix(
                l, h, "QK", np.ascontiguousarray(W_q[hs].T), np.ascontiguousarray(W_k[hs])))
            matrices.append(NamedMatrix(
                l, h, "V_tilde", np.ascontiguousarray(W_v[hs].T), np.ascontiguousarray(W_oT[hs, :])))
        matrices.append(NamedMatrix(
            l, -1, "M_in", np.ascontiguousarray(ckpt.tensor(n["i"], (d_ff, N)).T)))
        matrices.append(NamedMatrix(
            l, -1, "M_out", np.ascontiguousarray(ckpt.tensor(n["out"], (N, d_ff)).T)))

    extra: dict = {"container": ckpt.container, "weights_file": str(ckpt.path), "prefix": prefix}
    if assumed:
        extra["activation_assumed"] = True
    return AnalysisWeights(
        matrices=ordered(matrices),
        num_layers=L,
        num_heads=H,
        width=N,
        head_dim=d,
        ff_dim=d_ff,
        activation=act,
        readout=None,
        source=str(ckpt.source),
        sha256=ckpt.sha256(),
        layout=LAYOUT,
        extra=extra,
        scope=ModelScope(
            family="BERT-style encoder",
            kept=("per-head query-key products W_Q W_K^T", "per-head value-output products W_V W_O",
                  "feed-forward input and output matrices"),
            replaced=("LayerNorm -> identity",),
            dropped=("biases", "residual connections", "embeddings' LayerNorm", "pooler and task head"),
            activation_source=("assumed gelu (no hidden_act in config)" if assumed
                               else f"config.json hidden_act -> {act}"),
            readout=("none in the checkpoint: the analysis model reads out the CLS token (position 0) "
                     "with a fixed unit vector w"),
        ),
    )


def _activation(ckpt, given: str | None) -> tuple[str, bool]:
    """(activation, whether it was assumed) from config ``hidden_act`` and the argument."""
    stated = None
    if ckpt.config is not None and "hidden_act" in ckpt.config:
        raw = ckpt.config["hidden_act"]
        if not isinstance(raw, str) or raw not in HIDDEN_ACT:
            raise LayoutError(
                f"{ckpt.config_path}: unsupported hidden_act {raw!r} "
                f"(supported: {', '.join(HIDDEN_ACT)})"
            )
        stated = HIDDEN_ACT[raw]
    act = _checks.agree(ckpt, "activation", stated, given, "config.json hidden_act")
    if act is None:
        return "gelu", True
    return _checks.activation(ckpt, act), False
