"""The project's vocabulary: every list of kinds and every layout id, defined once.

Importable by every layer (derivation, certified, numeric, application); imports nothing from the
project, so it can never take part in an import cycle.
"""

from __future__ import annotations

MATRIX_KINDS: tuple[str, ...] = ("QK", "V_tilde", "M_in", "M_out")
"""Kinds of covered matrix, in the canonical order within a layer (proofs_notes/theory.md section 1)."""

LS_MATRIX_KINDS: tuple[str, ...] = ("Q", "K", "V_tilde", "G", "U", "D")
"""Kinds of covered matrix of the Llama-style (LS) analysis model, in canonical order within a layer
(proofs_notes/theory.md section 11): per query head h ``Q`` = W_Q^(h) (N x d_h, score scale folded
in), per key/value group g ``K`` = W_K^(g) (N x d_h; ``head`` is the group index), per query head
``V_tilde`` = W_V^(g(h)) W_O^(h) (N x N, factored), and per layer the gated feed-forward ``G`` (gate,
N x d_ff), ``U`` (up, N x d_ff) and ``D`` (down, d_ff x N)."""

ALL_MATRIX_KINDS: tuple[str, ...] = MATRIX_KINDS + tuple(k for k in LS_MATRIX_KINDS if k not in MATRIX_KINDS)
"""Every matrix kind any analysis model covers (the union, plain kinds first)."""

ACTIVATIONS: tuple[str, ...] = ("gelu", "gelu_tanh", "relu", "silu")
"""Feed-forward activations whose Lipschitz constants are derived (proofs_notes/gelu_constants.md,
proofs_notes/silu_constants.md)."""

PLAIN_ACTIVATIONS: tuple[str, ...] = ("gelu", "gelu_tanh", "relu")
"""Activations of a plain (ungated) feed-forward block the plain analysis model is evaluated for
(proofs_notes/gelu_constants.md); SiLU enters only through the gated block of the Llama-style model."""

MODEL_VARIANTS: tuple[str, ...] = ("plain", "residual", "causal", "ls", "ls_residual")
"""Analysis models the theorem is assembled for: the plain analysis model, its residual variant,
the causal (GPT-2-style) model and the Llama-style model with and without residuals
(proofs_notes/theory.md sections 1, 10 and 11)."""

LS_VARIANTS: tuple[str, ...] = ("ls", "ls_residual")
"""The Llama-style variants (rotary embeddings, grouped keys and values, gated feed-forward;
proofs_notes/theory.md section 11): they cover :data:`LS_MATRIX_KINDS`, the others
:data:`MATRIX_KINDS`."""

RESIDUAL_VARIANTS: tuple[str, ...] = ("residual", "ls_residual")
"""The variants with residual connections inside the projection (proofs_notes/residual_variant.md)."""

PLAIN_KIND_VARIANTS: tuple[str, ...] = tuple(v for v in MODEL_VARIANTS if v not in LS_VARIANTS)
"""The variants with the plain matrix kinds (one QK and V_tilde per head, an ungated feed-forward):
plain, residual and causal."""

BIDIRECTIONAL_VARIANTS: tuple[str, ...] = ("plain", "residual")
"""The variants without a causal mask, read out at the first (CLS) token; every other variant is
causal and reads out at the last token."""

READOUT_TRAINED = "trained"
"""The read-out w was fitted on the sample: it is covered and paid for."""
READOUT_FIXED = "fixed"
"""The read-out w was chosen independently of the sample: B_w = ||w|| and no cover term."""
READOUTS: tuple[str, ...] = (READOUT_TRAINED, READOUT_FIXED)

ROUTE_RADEMACHER = "rademacher"
"""The main theorem's route: ramp loss + 2 min(SS, DD) + confidence (proofs_notes/main_theorem.md)."""
ROUTE_OCCAM = "occam"
"""The Occam route: a union over the cover's centres, margin count K^ and the binomial tail
(proofs_notes/occam_route.md); needs certified margin enclosures of the sample."""
ROUTES: tuple[str, ...] = (ROUTE_RADEMACHER, ROUTE_OCCAM)
"""The theorem's routes; when several are evaluated on one sample each runs at delta / (their number)
and the smallest bound is the reported one (occam_route.md step 5)."""

EMPIRICAL_DATA = "data"
"""The empirical term is the certified ramp loss on a data file."""
EMPIRICAL_TASK = "task"
"""The empirical term is the certified ramp loss on fresh samples of the model's recorded task."""
EMPIRICAL_TRAIN = "train"
"""The empirical term is the certified ramp loss on the model's own training sample S, regenerated
from the recorded task, data seed and size (S = the training sample, n = the number of training
examples)."""
EMPIRICAL_USER = "user"
"""The empirical term is a number the user supplied: NOT certified."""
EMPIRICAL_NONE = "none"
"""No empirical term: only complexity + confidence are certified."""
EMPIRICAL_SOURCES: tuple[str, ...] = (EMPIRICAL_DATA, EMPIRICAL_TASK, EMPIRICAL_TRAIN, EMPIRICAL_USER, EMPIRICAL_NONE)
CERTIFIED_SOURCES: tuple[str, ...] = (EMPIRICAL_DATA, EMPIRICAL_TASK, EMPIRICAL_TRAIN)
"""The empirical sources whose term is an Arb enclosure (a certified forward pass)."""

ANALYSIS_LAYOUT = "specbound-analysis-v1"
"""The project's own checkpoint format (docs/checkpoint_format.md)."""
BERT_LAYOUT = "bert"
"""Hugging Face BERT-family checkpoints (specbound/adapters/bert.py)."""
DISTILBERT_LAYOUT = "distilbert"
"""Hugging Face DistilBERT checkpoints (specbound/adapters/distilbert.py)."""
VIT_LAYOUT = "vit"
"""Hugging Face ViT checkpoints, older and newer tensor names (specbound/adapters/vit.py)."""
GPT2_LAYOUT = "gpt2"
"""Hugging Face GPT-2 checkpoints (specbound/adapters/gpt2.py)."""
LLAMA_LAYOUT = "llama"
"""Llama / Mistral / Qwen / Gemma-style decoders, Hugging Face or GGUF names (specbound/adapters/llama.py)."""
T5_LAYOUT = "t5"
"""The encoder of Hugging Face T5 checkpoints (specbound/adapters/t5.py)."""

VIEW_ANALYSIS = "analysis"
"""The adapter's analysis model, score scale on the query side (spectra, certify)."""
VIEW_SCORES = "scores"
"""Per-head score and value-output matrices with the score scale, for every family."""
VIEW_PROXY = "proxy"
"""Plain kinds without the score scale: the paper proxies' convention."""
VIEWS: tuple[str, ...] = (VIEW_ANALYSIS, VIEW_SCORES, VIEW_PROXY)
"""Which covered matrices an adapter returns (specbound/adapters/helpers.py)."""

FORWARD_FAST = "fast"
"""Certified forward pass: binary64 program + a-priori Arb error bound (certified/fast_forward.py)."""
FORWARD_ARB = "arb"
"""Certified forward pass in Arb ball arithmetic, sample by sample (certified/forward.py)."""
FORWARD_INTERVAL = "interval"
"""Certified forward pass in binary64 with a per-sample, per-row error bound on every sample
(certified/interval_forward.py); "fast" uses it where the a-priori bound is too wide."""
FORWARD_METHODS: tuple[str, ...] = (FORWARD_FAST, FORWARD_ARB, FORWARD_INTERVAL)
"""Methods of the certified empirical ramp loss (``--forward``); the first is the default."""

CAPABILITY_MATRICES = "matrices"
"""An adapter gives the covered matrices (every adapter does)."""
CAPABILITY_FLOAT_FORWARD = "float_forward"
"""An adapter gives a float forward pass (float margins, used only to choose the margin)."""
CAPABILITY_RECORDED_TASK = "recorded_task"
"""An adapter's checkpoints may carry a recorded task to draw fresh samples from."""
CAPABILITY_CERTIFY = "certify"
"""An adapter's analysis model is inside a theorem the certified path evaluates."""
CAPABILITIES: tuple[str, ...] = (CAPABILITY_MATRICES, CAPABILITY_FLOAT_FORWARD, CAPABILITY_RECORDED_TASK,
                                 CAPABILITY_CERTIFY)

# ------------------------------------------------------------------------ recorded-task limits
# One set of limits for certify (drawing samples of a recorded task) and verify (a certificate's
# claims about one): both re-draw the sample in memory, so both refuse the same sizes up front.
MAX_TASK_SEQ_LEN = 4096
"""Longest sequence of a recorded task."""
MAX_TASK_TOKENS = 200_000_000
"""Most tokens (samples x sequence length) of one drawn sample."""
MAX_TASK_SAMPLES = 10**8
"""Most samples of a recorded task drawn in one run."""


def kv_group(head: int, num_heads: int, num_kv_heads: int) -> int:
    """The key/value group g(h) of query head ``head`` in grouped-query attention: consecutive
    blocks of ``num_heads / num_kv_heads`` heads share one group (0 means one group per head)."""
    if num_kv_heads <= 0:
        return head
    if num_heads % num_kv_heads:
        raise ValueError(f"{num_heads} heads do not split into {num_kv_heads} key/value groups")
    return head // (num_heads // num_kv_heads)

# ------------------------------------------------------------------------ input maps
INPUT_MAP_RANDOM = "random"
"""The input map is a token (and positional) table drawn from a recorded seed (specbound/input_map.py)."""
INPUT_MAP_PRETRAINED = "pretrained"
"""The input map is a frozen table taken from a pretrained checkpoint, optionally projected to a smaller
width by a fixed random matrix drawn from a recorded seed (ASSUMPTION: the table was trained without S)."""
INPUT_MAP_EMBEDDED = "embedded"
"""The user embeds the inputs; the model projects each row with Pi (ASSUMPTION: the embedding is fixed
before S)."""
INPUT_MAPS: tuple[str, ...] = (INPUT_MAP_RANDOM, INPUT_MAP_PRETRAINED, INPUT_MAP_EMBEDDED)
"""The input maps of the analysis-family Transformer: each is fixed before the sample S."""
