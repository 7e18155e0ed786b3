"""DistilBERT (``transformer.layer.{l}.attention.{q,k,v,out}_lin``, ``ffn.lin1/lin2``; any prefix).

Config keys ``n_layers``, ``n_heads``, ``dim``, ``hidden_dim``, ``activation``.  Orientation and the
per-head slices are those of :mod:`specbound.adapters.bert` (``nn.Linear`` (out, in) weights);
``MultiHeadSelfAttention`` divides the query by ``sqrt(dim / n_heads)``, so ``c^2 = 1/d_h``.
"""

from __future__ import annotations

from fractions import Fraction

from ..matrices import AnalysisWeights
from ..vocabulary import CAPABILITY_CERTIFY, CAPABILITY_MATRICES, DISTILBERT_LAYOUT, VIEW_ANALYSIS
from . import helpers
from .helpers import AdapterSpec, Config, NameTable, Reads

TABLE = NameTable(
    q="transformer.layer.{l}.attention.q_lin.weight",
    k="transformer.layer.{l}.attention.k_lin.weight",
    v="transformer.layer.{l}.attention.v_lin.weight",
    o="transformer.layer.{l}.attention.out_lin.weight",
    ff_in="transformer.layer.{l}.ffn.lin1.weight",
    ff_out="transformer.layer.{l}.ffn.lin2.weight",
)
SPEC = AdapterSpec(
    layout=DISTILBERT_LAYOUT,
    families=("distilbert",),
    expected="transformer.layer.{l}.attention.q_lin.weight etc.",
    capabilities=frozenset({CAPABILITY_MATRICES, CAPABILITY_CERTIFY}),
    config_keys=("model_type", "n_layers", "n_heads", "dim", "hidden_dim", "activation"),
)


def matches(ckpt) -> bool:
    return bool(helpers.scan(ckpt, TABLE))


def adapt(ckpt, *, num_heads: int | None = None, activation: str | None = None,
          view: str = VIEW_ANALYSIS) -> AnalysisWeights:
    """Covered matrices of a DistilBERT encoder (module contract)."""
    helpers.check_view(view)
    config, reads = Config(ckpt, SPEC), Reads(ckpt)
    prefix, layers = helpers.one_prefix(ckpt, helpers.scan(ckpt, TABLE), "DistilBERT")
    facts = helpers.resolve_facts(
        ckpt, config, TABLE, prefix, layers, num_heads=num_heads, layers_keys=("n_layers",),
        heads_keys=("n_heads",), width_keys=("dim",), ff_keys=("hidden_dim",))
    act, source = config.activation(("activation",), activation, "gelu")
    scale = Fraction(1, facts.head_dim)
    parts = [helpers.read_layer(reads, TABLE, prefix, l, facts, scale) for l in range(facts.num_layers)]
    scope = helpers.scope(
        "DistilBERT encoder", norm="LayerNorm",
        kept=("per-head query-key products c W_Q W_K^T, c = 1/sqrt(d_h)",
              "per-head value-output products W_V W_O", "feed-forward lin1 and lin2"),
        dropped=("biases", "residual connections", "embeddings and their LayerNorm", "task head"),
        activation_source=source, config=config, view=view,
        readout="none in the checkpoint: the analysis model reads out the first token (CLS, position 0) with a fixed unit vector w",
    )
    return helpers.finish(ckpt, SPEC, facts, parts, view=view, ls=False, activation=act,
                          scope=scope, reads=reads, config=config, extra={"prefix": prefix})
