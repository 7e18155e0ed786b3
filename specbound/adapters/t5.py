"""The encoder of T5 (``encoder.block.{l}.layer.0.SelfAttention.{q,k,v,o}``,
``layer.1.DenseReluDense.wi/wo`` or the gated ``wi_0``/``wi_1``/``wo``; any prefix).

Config keys ``num_layers``, ``num_heads``, ``d_model``, ``d_kv``, ``d_ff``, ``dense_act_fn``.
``nn.Linear`` (out, in) weights; the inner dimension is ``num_heads * d_kv``.  T5 applies no score
scale (``c = 1``; the scaling is folded into its initialisation).  ``certify`` refuses: the trained
relative position bias is outside the theorem.  A gated block enters as ``M_in = [wi_0 | wi_1]``
(spectra and proxies only).  The decoder stack is not read.
"""

from __future__ import annotations

from fractions import Fraction

from ..matrices import AnalysisWeights
from ..vocabulary import CAPABILITY_MATRICES, T5_LAYOUT, VIEW_ANALYSIS
from . import helpers
from .helpers import AdapterSpec, Config, NameTable, Reads

_ATT = "encoder.block.{l}.layer.0.SelfAttention."
_FF = "encoder.block.{l}.layer.1.DenseReluDense."
PLAIN = NameTable(q=_ATT + "q.weight", k=_ATT + "k.weight", v=_ATT + "v.weight", o=_ATT + "o.weight",
                  ff_in=_FF + "wi.weight", ff_out=_FF + "wo.weight")
GATED = NameTable(q=_ATT + "q.weight", k=_ATT + "k.weight", v=_ATT + "v.weight", o=_ATT + "o.weight",
                  gate=_FF + "wi_0.weight", up=_FF + "wi_1.weight", down=_FF + "wo.weight")
SPEC = AdapterSpec(
    layout=T5_LAYOUT,
    families=("t5", "mt5", "umt5"),
    expected="encoder.block.{l}.layer.0.SelfAttention.q.weight etc.",
    capabilities=frozenset({CAPABILITY_MATRICES}),
    outside_theorem="the trained relative position bias in the self-attention of layer 0",
    config_keys=("model_type", "num_layers", "num_heads", "d_model", "d_kv", "d_ff", "dense_act_fn"),
)


def matches(ckpt) -> bool:
    return bool(helpers.scan(ckpt, PLAIN))


def adapt(ckpt, *, num_heads: int | None = None, activation: str | None = None,
          view: str = VIEW_ANALYSIS) -> AnalysisWeights:
    """Covered matrices of a T5 encoder (module contract)."""
    helpers.check_view(view)
    config, reads = Config(ckpt, SPEC), Reads(ckpt)
    prefix, layers = helpers.one_prefix(ckpt, helpers.scan(ckpt, PLAIN), "T5")
    table = GATED if f"{prefix}{_FF.format(l=0)}wi_0.weight" in ckpt else PLAIN
    facts = helpers.resolve_facts(
        ckpt, config, table, prefix, layers, num_heads=num_heads, layers_keys=("num_layers",),
        heads_keys=("num_heads",), width_keys=("d_model",), ff_keys=("d_ff",),
        head_dim_keys=("d_kv",))
    act, source = config.activation(("dense_act_fn",), activation, "relu")
    parts = [helpers.read_layer(reads, table, prefix, l, facts, Fraction(1))
             for l in range(facts.num_layers)]
    scope = helpers.scope(
        "T5 encoder", norm="RMSNorm (T5 layer_norm)",
        kept=("per-head query-key products W_Q W_K^T (no score scale)",
              "per-head value-output products W_V W_O",
              "feed-forward wi and wo" if table is PLAIN else "gated feed-forward [wi_0 | wi_1] and wo"),
        dropped=("relative position bias (outside the theorem: certify refuses)",
                 "residual connections", "shared embeddings", "the decoder stack"),
        activation_source=source, config=config, view=view,
        readout="none in the checkpoint: the analysis model reads out the first token with a fixed unit vector w",
    )
    return helpers.finish(ckpt, SPEC, facts, parts, view=view, ls=False, activation=act, scope=scope,
                          reads=reads, config=config, extra={"prefix": prefix})
