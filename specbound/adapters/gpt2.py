"""GPT-2 (``h.{l}.attn.c_attn``, ``attn.c_proj``, ``mlp.c_fc``, ``mlp.c_proj``; any prefix such as
``transformer.``).

GPT-2's ``Conv1D`` stores its weight as (in, out) and applies ``x -> x @ W``: the stored matrix is
already the row-vector map, no transpose.  ``c_attn`` is fused: columns ``0:N`` are the query,
``N:2N`` the key, ``2N:3N`` the value map, and head h owns columns ``h*d:(h+1)*d`` of each; the output
projection ``c_proj`` (N x N) gives head h its rows ``h*d:(h+1)*d``.  With ``scale_attn_weights``
(default true) the scores are divided by ``sqrt(d_h)``, and by ``layer + 1`` more with
``scale_attn_by_inverse_layer_idx``: ``c^2 = 1/d_h`` (times ``1/(l+1)^2``).

Analysis model: the causal one (variant ``causal``): a fixed causal mask and a read-out at the last
token change no constant of the theorem (proofs_notes/masked_softmax.md).  ``activation_function``
``gelu_new`` is the tanh form of GELU.
"""

from __future__ import annotations

import re
from fractions import Fraction

from ..errors import LayoutError
from ..matrices import AnalysisWeights
from ..vocabulary import CAPABILITY_CERTIFY, CAPABILITY_MATRICES, GPT2_LAYOUT, VIEW_ANALYSIS
from . import helpers
from .helpers import AdapterSpec, Config, Facts, LayerParts, Reads

SPEC = AdapterSpec(
    layout=GPT2_LAYOUT,
    families=("gpt2",),
    expected="h.{l}.attn.c_attn.weight (fused q/k/v Conv1D), h.{l}.mlp.c_fc.weight, optionally "
             "prefixed like transformer.",
    capabilities=frozenset({CAPABILITY_MATRICES, CAPABILITY_CERTIFY}),
    config_keys=("model_type", "n_layer", "n_head", "n_embd", "n_inner", "activation_function",
                 "scale_attn_weights", "scale_attn_by_inverse_layer_idx"),
    variant="causal",
)
_ANCHOR = re.compile(r"^(?P<prefix>(?:.*\.)?)h\.(?P<layer>\d+)\.attn\.c_attn\.weight$")


def _scan(ckpt) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for name in ckpt.names():
        m = _ANCHOR.match(name)
        if m:
            found.setdefault(m.group("prefix"), set()).add(int(m.group("layer")))
    return found


def matches(ckpt) -> bool:
    return bool(_scan(ckpt))


def adapt(ckpt, *, num_heads: int | None = None, activation: str | None = None,
          view: str = VIEW_ANALYSIS) -> AnalysisWeights:
    """Covered matrices of a GPT-2 decoder (module contract)."""
    helpers.check_view(view)
    config, reads = Config(ckpt, SPEC), Reads(ckpt)
    prefix, layers = helpers.one_prefix(ckpt, _scan(ckpt), "GPT-2")
    L = config.int("n_layer") or 1 + max(layers)
    if L < 1 + max(layers):
        raise LayoutError(f"{ckpt.path}: config n_layer={L} but the file has layer {max(layers)}")
    H = helpers.agree(ckpt, "num_heads", config.int("n_head"), num_heads, "config n_head")
    if H is None:
        raise LayoutError(f"{ckpt.path}: number of attention heads unknown (no config with n_head); "
                          f"pass --num-heads H (in Python: num_heads=H)")
    n_in, n_out = helpers.two_d(ckpt, f"{prefix}h.0.attn.c_attn.weight")
    N = config.int("n_embd") or n_in
    if N % H != 0:
        raise LayoutError(f"{ckpt.path}: hidden size {N} is not divisible by num_heads {H}")
    d = N // H
    d_ff = config.int("n_inner") or helpers.two_d(ckpt, f"{prefix}h.0.mlp.c_fc.weight")[1]
    act, source = config.activation(("activation_function",), activation, "gelu_tanh")
    scaled = config.value("scale_attn_weights", True)
    by_layer = config.value("scale_attn_by_inverse_layer_idx", False)

    parts = []
    for l in range(L):
        p = f"{prefix}h.{l}."
        scale = (Fraction(1, d) if scaled else Fraction(1)) * (Fraction(1, (l + 1) ** 2) if by_layer else 1)
        qkv = helpers.conv1d(reads, p + "attn.c_attn.weight", N, 3 * N,
                             f"fused W_Q | W_K | W_V (Conv1D (in, out); {H} heads of dim {d}; "
                             f"score scale sqrt({scale}) on the query)")
        o = helpers.conv1d(reads, p + "attn.c_proj.weight", N, N, "W_O (Conv1D; rows per head)")
        parts.append(LayerParts(
            q=helpers.head_columns(qkv[:, :N], H, d), k=helpers.head_columns(qkv[:, N:2 * N], H, d),
            v=helpers.head_columns(qkv[:, 2 * N:], H, d), o=helpers.head_rows(o, H, d),
            score_scale_sq=scale,
            ff_in=helpers.conv1d(reads, p + "mlp.c_fc.weight", N, d_ff, "feed-forward input M_in (Conv1D)"),
            ff_out=helpers.conv1d(reads, p + "mlp.c_proj.weight", d_ff, N, "feed-forward output M_out (Conv1D)"),
        ))
    facts = Facts(num_layers=L, num_heads=H, width=N, head_dim=d, ff_dim=d_ff)
    scope = helpers.scope(
        "GPT-2 decoder", norm="LayerNorm",
        kept=("per-head query-key products c W_Q W_K^T, c = 1/sqrt(d_h)",
              "per-head value-output products W_V W_O", "MLP c_fc and c_proj"),
        dropped=("biases", "residual connections", "token and position embeddings",
                 "final LayerNorm and language-model head"),
        activation_source=source, config=config, view=view,
        readout="causal mask; none in the checkpoint: the analysis model reads out the last token with a fixed unit vector w",
    )
    return helpers.finish(ckpt, SPEC, facts, parts, view=view, ls=False, activation=act, scope=scope,
                          reads=reads, config=config, extra={"prefix": prefix, "readout_token": "last"})
