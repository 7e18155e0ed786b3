"""The shape facts of an analysis-family Transformer (:class:`Architecture`): everything but the weights.

A value type shared by the torch module (:mod:`specbound.nn`) and its checkpoint format
(:mod:`specbound.analysis_format`); imports nothing of either.
"""

from __future__ import annotations

from dataclasses import dataclass

from specbound.errors import LayoutError
from specbound.vocabulary import ACTIVATIONS, BIDIRECTIONAL_VARIANTS, LS_VARIANTS, MODEL_VARIANTS, RESIDUAL_VARIANTS

MODEL_VARIANTS_TRAINABLE: tuple[str, ...] = MODEL_VARIANTS
"""The variants of vocabulary.MODEL_VARIANTS this module implements (all of them)."""
ROPE_BASE = 10000.0
"""Default rotary base theta of the LS variant (the angle of pair i at position t is t theta^(-2i/d))."""


@dataclass(frozen=True)
class Architecture:
    """Shape facts of an :class:`AnalysisTransformer` (everything but the weights).

    ``vocab_size`` counts every token id including CLS (id 0 by the tasks' convention; 0 when the user
    embeds the inputs); ``seq_len`` is the longest sequence the positional table covers (0 = no
    positional table, then any length is accepted; the LS variants: the rotary table's length);
    ``num_outputs`` the read-out rows k (1: one vector w, labels +-1).
    """

    num_layers: int
    num_heads: int
    width: int
    head_dim: int
    ff_dim: int
    vocab_size: int
    seq_len: int
    activation: str = "gelu"
    variant: str = "plain"
    num_kv_heads: int = 0
    """LS variant: key/value groups (0 means one per head); must divide ``num_heads``."""
    rope_base: float = ROPE_BASE
    num_outputs: int = 1

    @property
    def kv_heads(self) -> int:
        """Number of key/value groups actually used (``num_heads`` for the plain kinds)."""
        return self.num_kv_heads if (self.is_ls and self.num_kv_heads > 0) else self.num_heads

    @property
    def is_ls(self) -> bool:
        """Llama-style blocks (RoPE, grouped keys, gated feed-forward)."""
        return self.variant in LS_VARIANTS

    @property
    def is_residual(self) -> bool:
        """Residual connections inside Pi: Y = Pi(X + Att(X)), X' = Pi(Y + F(Y)) (variant R)."""
        return self.variant in RESIDUAL_VARIANTS

    @property
    def is_causal(self) -> bool:
        """Causal mask and read-out at the last token (every variant but plain and residual)."""
        return self.variant not in BIDIRECTIONAL_VARIANTS

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_heads", "width", "head_dim", "ff_dim", "num_outputs"):
            if int(getattr(self, name)) < 1:
                raise LayoutError(f"architecture: {name} must be >= 1, got {getattr(self, name)}")
        for name in ("vocab_size", "seq_len"):
            if int(getattr(self, name)) < 0:
                raise LayoutError(f"architecture: {name} must be >= 0, got {getattr(self, name)}")
        if self.activation not in ACTIVATIONS:
            raise LayoutError(f"architecture: unknown activation {self.activation!r} (use one of {ACTIVATIONS})")
        if self.variant not in MODEL_VARIANTS_TRAINABLE:
            raise LayoutError(f"architecture: variant {self.variant!r} is outside the analysis family "
                              f"(use one of {MODEL_VARIANTS_TRAINABLE})")
        if self.is_ls:
            if self.num_heads % self.kv_heads:
                raise LayoutError(f"architecture: {self.num_heads} heads do not split into "
                                  f"{self.kv_heads} key/value groups")
            if self.head_dim % 2:
                raise LayoutError("architecture: rotary embeddings need an even head_dim")
            if self.seq_len < 1:
                raise LayoutError("architecture: the LS variant needs seq_len >= 1 (rotary table length)")
            if not (self.rope_base > 1.0):
                raise LayoutError("architecture: rope_base must be > 1")


__all__ = ["Architecture", "MODEL_VARIANTS_TRAINABLE", "ROPE_BASE"]
