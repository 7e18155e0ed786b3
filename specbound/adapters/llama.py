"""Llama-style decoders: Llama, Mistral, Qwen, Gemma -- Hugging Face names
(``layers.{l}.self_attn.{q,k,v,o}_proj``, ``mlp.{gate,up,down}_proj``; prefix ``model.``) and the
GGUF names of llama.cpp (``blk.{l}.attn_q``, ``attn_k``, ``attn_v``, ``attn_output``, ``ffn_gate``,
``ffn_up``, ``ffn_down``).

Weights are ``nn.Linear`` (out, in) (GGUF shapes are exposed in that orientation by
:mod:`specbound.formats.gguf_file`).  Grouped-query attention: ``H`` query heads share ``H_kv``
key/value groups, query head h using group ``h // (H / H_kv)``.  Score scale ``c^2 = 1/d_h``, or
Gemma's ``1/query_pre_attn_scalar``; in GGUF ``1/key_length`` (llama.cpp's default ``kq_scale``)
unless the file states ``{arch}.attention.scale``.  The ``analysis`` view is the Llama-style
analysis model (variant ``ls``, kinds :data:`~specbound.vocabulary.LS_MATRIX_KINDS`): ``Q`` per
query head (N x d_h, c folded in), ``K`` per group, ``V_tilde = W_V^(g(h)) W_O^(h)`` per query head
(factored), gate ``G``, up ``U``, down ``D``.  Rotary embeddings, RMSNorm and Gemma's q/k norms are
not matrices and are not read (llama.cpp's row permutation of Q/K for RoPE changes no singular
value).  The ``scores`` and ``proxy`` views give per-head score matrices ``c W_Q^(h) W_K^(g)^T``.
"""

from __future__ import annotations

from fractions import Fraction

from ..matrices import AnalysisWeights
from ..vocabulary import ACTIVATIONS, CAPABILITY_CERTIFY, CAPABILITY_MATRICES, LLAMA_LAYOUT, VIEW_ANALYSIS
from . import helpers
from .helpers import AdapterSpec, Config, NameTable, Reads

HF = NameTable(
    q="layers.{l}.self_attn.q_proj.weight",
    k="layers.{l}.self_attn.k_proj.weight",
    v="layers.{l}.self_attn.v_proj.weight",
    o="layers.{l}.self_attn.o_proj.weight",
    gate="layers.{l}.mlp.gate_proj.weight",
    up="layers.{l}.mlp.up_proj.weight",
    down="layers.{l}.mlp.down_proj.weight",
)
GGUF = NameTable(
    q="blk.{l}.attn_q.weight",
    k="blk.{l}.attn_k.weight",
    v="blk.{l}.attn_v.weight",
    o="blk.{l}.attn_output.weight",
    gate="blk.{l}.ffn_gate.weight",
    up="blk.{l}.ffn_up.weight",
    down="blk.{l}.ffn_down.weight",
)
SPEC = AdapterSpec(
    layout=LLAMA_LAYOUT,
    families=("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma3_text"),
    expected="layers.{l}.self_attn.q_proj.weight with mlp.gate_proj (prefix model.), or GGUF "
             "blk.{l}.attn_q.weight with ffn_gate",
    # certify through the Llama-style (LS) analysis model of proofs_notes/theory.md section 11:
    # complexity + confidence (no float forward and no recorded task: the empirical term comes from
    # the user, flagged NOT certified)
    capabilities=frozenset({CAPABILITY_MATRICES, CAPABILITY_CERTIFY}),
    config_keys=("model_type", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                 "hidden_size", "head_dim", "intermediate_size", "hidden_act", "hidden_activation",
                 "query_pre_attn_scalar", "sliding_window", "use_sliding_window", "general.architecture",
                 "{arch}.block_count", "{arch}.attention.sliding_window",
                 "{arch}.attention.head_count", "{arch}.attention.head_count_kv",
                 "{arch}.embedding_length", "{arch}.attention.key_length",
                 "{arch}.feed_forward_length", "{arch}.attention.scale"),
    variant="ls",
)
_GELU_ARCHS = ("gemma", "gemma2", "gemma3", "gemma3_text")
"""GGUF architectures whose gated feed-forward uses the tanh GELU (the others use SiLU)."""


def _table(ckpt):
    for table in (HF, GGUF):
        found = helpers.scan(ckpt, table)
        if found and any(n.endswith(table.gate.format(l=0)) for n in ckpt.names()):
            return table, found
    return None


def matches(ckpt) -> bool:
    return _table(ckpt) is not None


def adapt(ckpt, *, num_heads: int | None = None, activation: str | None = None,
          view: str = VIEW_ANALYSIS) -> AnalysisWeights:
    """Covered matrices of a Llama-style decoder (module contract)."""
    helpers.check_view(view)
    table, found = _table(ckpt)
    config, reads = Config(ckpt, SPEC), Reads(ckpt)
    prefix, layers = helpers.one_prefix(ckpt, found, "Llama-style")
    if table is GGUF:
        arch = str(config.value("general.architecture", "llama"))
        keys = {k: (f"{arch}.{k}",) for k in ("block_count", "attention.head_count",
                                               "attention.head_count_kv", "embedding_length",
                                               "attention.key_length", "feed_forward_length")}
        facts = helpers.resolve_facts(
            ckpt, config, table, prefix, layers, num_heads=num_heads,
            layers_keys=keys["block_count"], heads_keys=keys["attention.head_count"],
            width_keys=keys["embedding_length"], ff_keys=keys["feed_forward_length"],
            kv_heads_keys=keys["attention.head_count_kv"], head_dim_keys=keys["attention.key_length"])
        family = arch
        default_act = "gelu_tanh" if arch in _GELU_ARCHS else "silu"
        act = helpers.agree(ckpt, "activation", default_act, activation,
                            f"GGUF architecture {arch!r}")
        source = f"GGUF general.architecture {arch!r} -> {act}"
        stated = helpers.finite_number(ckpt, f"{arch}.attention.scale", config.value(f"{arch}.attention.scale"),
                                       "GGUF metadata", minimum=0)
        # llama.cpp: kq_scale = attention.scale, or 1/sqrt(key_length) when it is 0 or absent
        scale_sq = Fraction(stated) ** 2 if stated else Fraction(1, facts.head_dim)
    else:
        family = str(config.value("model_type", "llama"))
        facts = helpers.resolve_facts(
            ckpt, config, table, prefix, layers, num_heads=num_heads,
            layers_keys=("num_hidden_layers",), heads_keys=("num_attention_heads",),
            width_keys=("hidden_size",), ff_keys=("intermediate_size",),
            kv_heads_keys=("num_key_value_heads",), head_dim_keys=("head_dim",))
        act, source = config.activation(("hidden_activation", "hidden_act"), activation, "silu",
                                         allowed=ACTIVATIONS)
        scalar = config.int("query_pre_attn_scalar")
        scale_sq = Fraction(1, scalar) if scalar else Fraction(1, facts.head_dim)
    parts = [helpers.read_layer(reads, table, prefix, l, facts, scale_sq) for l in range(facts.num_layers)]
    qk_norm = any(n.endswith(("q_norm.weight", "attn_q_norm.weight")) for n in ckpt.names())
    biases = any(n.endswith(("_proj.bias", "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias"))
                 for n in ckpt.names())
    window = _sliding_window(config, family if table is GGUF else None)
    scope = helpers.scope(
        f"{family} decoder (Llama-style)", norm="RMSNorm" + (" (and the q/k norms)" if qk_norm else ""),
        kept=(f"per query head c W_Q, c^2 = {scale_sq}", "per key/value group W_K",
              "per query head value-output products W_V W_O", "gated feed-forward gate, up, down",
              "rotary position embeddings as exact rotations (rho_R = 1; the model's float tables are not read)"),
        extra_replaced=(() if window is None else
                        (f"sliding-window attention (window {window}) -> the full causal mask",)),
        dropped=(("attention biases",) if biases else ()) + ("residual connections", "token embeddings",
                                                             "final norm and language-model head"),
        activation_source=source, config=config, view=view,
        readout="causal mask; none in the checkpoint: the analysis model reads out the last token with a fixed unit vector w",
    )
    extra = {"prefix": prefix, "names": "gguf" if table is GGUF else "hugging face",
             "readout_token": "last", "score_scale_sq": str(scale_sq)}
    return helpers.finish(ckpt, SPEC, facts, parts, view=view, ls=True, activation=act, scope=scope,
                          reads=reads, config=config, extra=extra)


def _sliding_window(config: Config, arch: str | None):
    """The sliding-window size the model's attention uses (None: full attention), from the GGUF
    ``{arch}.attention.sliding_window`` or the config's ``sliding_window`` (unless
    ``use_sliding_window`` is false, as in Qwen2 configs that carry an unused size)."""
    if arch is not None:
        return config.value(f"{arch}.attention.sliding_window")
    if config.value("use_sliding_window", True) is False:
        return None
    return config.value("sliding_window")
