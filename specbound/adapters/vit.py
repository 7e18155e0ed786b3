"""ViT encoders, both tensor namings: the older ``encoder.layer.{l}.attention.attention.query`` /
``intermediate.dense`` / ``output.dense`` (what ``save_pretrained`` writes) and the newer
``layers.{l}.attention.q_proj`` / ``o_proj`` / ``mlp.fc1`` / ``mlp.fc2`` (the in-memory modules of
recent ``transformers``).  Any prefix (``vit.``).

Config keys as BERT (``num_hidden_layers``, ``num_attention_heads``, ``hidden_size``,
``intermediate_size``, ``hidden_act``); ``nn.Linear`` (out, in) weights; score scale ``c^2 = 1/d_h``.
The patch embedding, position embeddings and CLS token are fixed inputs, not covered matrices.
"""

from __future__ import annotations

from fractions import Fraction

from ..errors import LayoutError
from ..matrices import AnalysisWeights
from ..vocabulary import CAPABILITY_CERTIFY, CAPABILITY_MATRICES, VIEW_ANALYSIS, VIT_LAYOUT
from . import helpers
from .helpers import AdapterSpec, Config, NameTable, Reads

OLD = NameTable(
    q="encoder.layer.{l}.attention.attention.query.weight",
    k="encoder.layer.{l}.attention.attention.key.weight",
    v="encoder.layer.{l}.attention.attention.value.weight",
    o="encoder.layer.{l}.attention.output.dense.weight",
    ff_in="encoder.layer.{l}.intermediate.dense.weight",
    ff_out="encoder.layer.{l}.output.dense.weight",
)
NEW = NameTable(
    q="layers.{l}.attention.q_proj.weight",
    k="layers.{l}.attention.k_proj.weight",
    v="layers.{l}.attention.v_proj.weight",
    o="layers.{l}.attention.o_proj.weight",
    ff_in="layers.{l}.mlp.fc1.weight",
    ff_out="layers.{l}.mlp.fc2.weight",
)
SPEC = AdapterSpec(
    layout=VIT_LAYOUT,
    families=("vit",),
    expected="encoder.layer.{l}.attention.attention.query.weight or layers.{l}.attention.q_proj.weight "
             "with mlp.fc1",
    capabilities=frozenset({CAPABILITY_MATRICES, CAPABILITY_CERTIFY}),
    config_keys=("model_type", "num_hidden_layers", "num_attention_heads", "hidden_size",
                 "intermediate_size", "hidden_act"),
)


def _table(ckpt) -> tuple[NameTable, dict[str, set[int]]] | None:
    for table in (OLD, NEW):
        found = helpers.scan(ckpt, table)
        # the newer names share q_proj with decoders: ViT is the one whose block has mlp.fc1
        if found and (table is OLD or any(n.endswith("layers.0.mlp.fc1.weight") for n in ckpt.names())):
            return table, found
    return None


def matches(ckpt) -> bool:
    return _table(ckpt) is not None


def adapt(ckpt, *, num_heads: int | None = None, activation: str | None = None,
          view: str = VIEW_ANALYSIS) -> AnalysisWeights:
    """Covered matrices of a ViT encoder (module contract)."""
    helpers.check_view(view)
    found = _table(ckpt)
    if found is None:
        raise LayoutError(f"{ckpt.path}: not a ViT checkpoint ({SPEC.expected})")
    table, scanned = found
    config, reads = Config(ckpt, SPEC), Reads(ckpt)
    prefix, layers = helpers.one_prefix(ckpt, scanned, "ViT")
    facts = helpers.resolve_facts(
        ckpt, config, table, prefix, layers, num_heads=num_heads,
        layers_keys=("num_hidden_layers",), heads_keys=("num_attention_heads",),
        width_keys=("hidden_size",), ff_keys=("intermediate_size",))
    act, source = config.activation(("hidden_act",), activation, "gelu")
    scale = Fraction(1, facts.head_dim)
    parts = [helpers.read_layer(reads, table, prefix, l, facts, scale) for l in range(facts.num_layers)]
    scope = helpers.scope(
        "ViT encoder", norm="LayerNorm",
        kept=("per-head query-key products c W_Q W_K^T, c = 1/sqrt(d_h)",
              "per-head value-output products W_V W_O", "MLP fc1 and fc2"),
        dropped=("biases", "residual connections", "patch and position embeddings, CLS token",
                 "final LayerNorm, pooler and classifier"),
        activation_source=source, config=config, view=view,
        readout="none in the checkpoint: the analysis model reads out the CLS token (position 0) with a fixed unit vector w",
    )
    return helpers.finish(ckpt, SPEC, facts, parts, view=view, ls=False, activation=act, scope=scope,
                          reads=reads, config=config,
                          extra={"prefix": prefix, "names": "older" if table is OLD else "newer"})
