"""BERT-named encoders: BERT, RoBERTa, XLM-R, ELECTRA, MiniLM... (``encoder.layer.{l}...``, any prefix).

Hugging Face ``nn.Linear`` stores ``weight`` as (out, in) and applies ``x -> x @ weight.T`` to a row
``x``.  With hidden size ``N``, ``H`` heads, head dimension ``d = N / H``, the head slice
``hs = h*d:(h+1)*d`` of the *output* rows of the query/key/value weights and the score scale
``c = 1/sqrt(d)`` of ``BertSelfAttention`` (docs/design.md section 6):

* ``QK_lh      = c W_q[hs].T @ W_k[hs]``          factored as (left=c W_q[hs].T, right=W_k[hs]);
* ``V_tilde_lh = W_v[hs].T @ W_o.T[hs, :]``       factored as (left=W_v[hs].T, right=W_o.T[hs, :]),
  with ``W_o = attention.output.dense.weight`` (its *input* columns ``hs`` belong to head h);
* ``M_in = intermediate.dense.weight.T`` (N x d_ff), ``M_out = output.dense.weight.T`` (d_ff x N).

The ``proxy`` view leaves ``c`` out (the paper proxies' convention).  Biases, LayerNorm and
embeddings are not covered matrices and are not read.  ``H`` comes from ``num_attention_heads``
when there is a config, else from the ``num_heads`` argument; it must divide ``N``.  The activation
comes from ``hidden_act``; without a config it is the ``activation`` argument, else BertConfig's
documented default ``gelu`` (recorded in ``extra['activation_assumed']``).
"""

from __future__ import annotations

from fractions import Fraction

from ..matrices import AnalysisWeights
from ..vocabulary import BERT_LAYOUT, CAPABILITY_CERTIFY, CAPABILITY_MATRICES, VIEW_ANALYSIS
from . import helpers
from .helpers import AdapterSpec, Config, NameTable, Reads

TABLE = NameTable(
    q="encoder.layer.{l}.attention.self.query.weight",
    k="encoder.layer.{l}.attention.self.key.weight",
    v="encoder.layer.{l}.attention.self.value.weight",
    o="encoder.layer.{l}.attention.output.dense.weight",
    ff_in="encoder.layer.{l}.intermediate.dense.weight",
    ff_out="encoder.layer.{l}.output.dense.weight",
)
LAYOUT = BERT_LAYOUT
EXPECTED = "encoder.layer.{l}.attention.self.query.weight etc., optionally prefixed like bert."
SPEC = AdapterSpec(
    layout=LAYOUT,
    families=("bert", "roberta", "xlm-roberta", "electra", "camembert", "minilm"),
    expected=EXPECTED,
    capabilities=frozenset({CAPABILITY_MATRICES, CAPABILITY_CERTIFY}),
    config_keys=("model_type", "num_hidden_layers", "num_attention_heads", "hidden_size",
                 "intermediate_size", "hidden_act"),
)


def matches(ckpt) -> bool:
    return bool(helpers.scan(ckpt, TABLE))


def adapt(ckpt, *, num_heads: int | None = None, activation: str | None = None,
          view: str = VIEW_ANALYSIS) -> AnalysisWeights:
    """Covered matrices of a BERT-named encoder (see the module contract)."""
    helpers.check_view(view)
    config, reads = Config(ckpt, SPEC), Reads(ckpt)
    family = config.value("model_type", "bert")
    prefix, layers = helpers.one_prefix(ckpt, helpers.scan(ckpt, TABLE), "BERT")
    facts = helpers.resolve_facts(
        ckpt, config, TABLE, prefix, layers, num_heads=num_heads,
        layers_keys=("num_hidden_layers",), heads_keys=("num_attention_heads",),
        width_keys=("hidden_size",), ff_keys=("intermediate_size",))
    if facts.width != facts.num_heads * facts.head_dim:
        raise helpers.LayoutError(
            f"{ckpt.path}: hidden size {facts.width} is not divisible by num_heads {facts.num_heads}")
    act, source = config.activation(("hidden_act",), activation, "gelu")
    scale = Fraction(1, facts.head_dim)
    parts = [helpers.read_layer(reads, TABLE, prefix, l, facts, scale) for l in range(facts.num_layers)]
    extra = {"prefix": prefix}
    if source.startswith("assumed"):
        extra["activation_assumed"] = True
    scope = helpers.scope(
        f"{family} encoder (BERT names)", norm="LayerNorm",
        kept=("per-head query-key products c W_Q W_K^T, c = 1/sqrt(d_h)",
              "per-head value-output products W_V W_O", "feed-forward input and output matrices"),
        dropped=("biases", "residual connections", "embeddings and their LayerNorm",
                 "pooler and task head"),
        activation_source=source, config=config, view=view,
        readout=("none in the checkpoint: the analysis model reads out the first token (CLS, position 0) "
                 "with a fixed unit vector w"),
    )
    return helpers.finish(ckpt, SPEC, facts, parts, view=view, ls=False, activation=act,
                          scope=scope, reads=reads, config=config, extra=extra)
