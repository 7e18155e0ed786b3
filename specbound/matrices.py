"""Named weight matrices of the analysis model (proofs_notes/theory.md section 1), in row-vector orientation.

A token is a row ``x`` and a linear map is ``x -> x @ W``.  Per layer ``l`` and head ``h`` the covered
matrices are

=========  ==========  =========================================  =====================
type       shape       meaning                                    structural rank cap
=========  ==========  =========================================  =====================
QK         N x N       ``A_lh = W_Q,h W_K,h^T`` (score matrix)    head dim ``d_h``
V_tilde    N x N       ``V_lh = W_V,h W_O,h`` (value-output)      head dim ``d_h``
M_in       N x d_ff    feed-forward input                         ``min(N, d_ff)``
M_out      d_ff x N    feed-forward output                        ``min(N, d_ff)``
=========  ==========  =========================================  =====================

QK and V_tilde are kept **factored**: ``W = left @ right`` with ``left`` of shape (m, r) and
``right`` of shape (r, n).  The matrix the theorem is about is the *exact real* product of the
float64 factors, whose rank is at most ``r``; :meth:`NamedMatrix.dense` only returns its float64
rounding, which is what fast (uncertified) code may use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property

import numpy as np

from specbound.scope import ModelScope
from specbound.vocabulary import ACTIVATIONS, ALL_MATRIX_KINDS, LS_MATRIX_KINDS, MATRIX_KINDS  # noqa: F401  (re-exported for adapters)


@dataclass(frozen=True, eq=False)
class NamedMatrix:
    """One covered matrix ``W`` (exact real value) with its place in the network.

    Contract: ``left`` (and ``right`` if given) are finite float64 arrays; if ``right`` is None the
    matrix is dense and equal to ``sqrt(scale_sq) * left``; otherwise it equals the exact product
    ``sqrt(scale_sq) * left @ right``.  ``scale_sq`` is an exact positive rational: the part of a
    model's attention score scale (e.g. ``1/sqrt(d_h)``) that is not a power of two and so cannot be
    folded into ``left`` exactly (adapters fold every power-of-two part; ``scale_sq == 1`` means
    nothing is left over).  ``head`` is -1 for layer-wise matrices (M_in, M_out).
    """

    layer: int
    head: int
    kind: str
    left: np.ndarray
    right: np.ndarray | None = None
    scale_sq: Fraction = Fraction(1)

    @property
    def scale(self) -> float:
        """float64 value of ``sqrt(scale_sq)`` (for float paths only; not exact in general)."""
        return 1.0 if self.scale_sq == 1 else float(np.sqrt(float(self.scale_sq)))

    @property
    def is_factored(self) -> bool:
        return self.right is not None

    @property
    def shape(self) -> tuple[int, int]:
        if self.right is None:
            return (int(self.left.shape[0]), int(self.left.shape[1]))
        return (int(self.left.shape[0]), int(self.right.shape[1]))

    @property
    def rank_cap(self) -> int:
        """A *proven* upper bound on rank(W) from structure alone (inner dimension of factors)."""
        m, n = self.shape
        if self.right is None:
            return min(m, n)
        return min(m, n, int(self.left.shape[1]))

    @property
    def name(self) -> str:
        """Stable human-readable id, e.g. ``L0.H3.QK`` or ``L2.M_in``."""
        if self.head < 0:
            return f"L{self.layer}.{self.kind}"
        return f"L{self.layer}.H{self.head}.{self.kind}"

    def dense(self) -> np.ndarray:
        """float64 value of W (the rounded product for factored matrices, times the rounded scale; not
        exact).  For uncertified float code only: certified code reads W through
        :mod:`specbound.certified.factors`."""
        value = self.left if self.right is None else self.left @ self.right
        return value if self.scale_sq == 1 else value * self.scale


@dataclass(frozen=True, eq=False)
class AnalysisWeights:
    """All covered matrices of one network plus the architecture facts the theorem needs.

    ``matrices`` is ordered layer by layer; within a layer: QK of every head, V_tilde of every head,
    M_in, M_out (the telescoping order of proofs_notes/theory.md section 4).  ``readout`` is the read-out
    when the checkpoint has one (the project's own model), else None: one vector ``w`` (shape (N,),
    labels +-1) or ``k >= 2`` rows ``W`` (shape (k, N), labels 0..k-1; proofs_notes/k_class.md).
    """

    matrices: tuple[NamedMatrix, ...]
    num_layers: int
    num_heads: int
    width: int
    head_dim: int
    ff_dim: int
    activation: str = "gelu"
    readout: np.ndarray | None = None
    source: str = ""
    sha256: str = ""
    layout: str = ""
    extra: dict = field(default_factory=dict)
    scope: ModelScope | None = None
    """The adapter's account of what was kept, replaced and dropped (:mod:`specbound.scope`)."""
    variant: str = "plain"
    """The analysis model these matrices belong to (one of vocabulary.MODEL_VARIANTS); those of
    vocabulary.LS_VARIANTS use vocabulary.LS_MATRIX_KINDS, the others vocabulary.MATRIX_KINDS."""
    num_kv_heads: int = 0
    """Key/value groups of grouped-query attention (LS variants); 0 means one per head."""

    def architecture(self) -> dict:
        """The architecture facts as a certificate and a training record state them (JSON-able):
        layers, heads, width, head and feed-forward dimensions, activation, number of covered
        matrices, variant and key/value groups; ``num_outputs`` = k for a k-row read-out (the k-class theorem,
        proofs_notes/k_class.md; absent for one vector w, so binary records are unchanged).  Two networks with
        different facts are different hypothesis classes, so a record or certificate naming other facts
        belongs to another network."""
        return {"num_layers": self.num_layers, "num_heads": self.num_heads, "width": self.width,
                "head_dim": self.head_dim, "ff_dim": self.ff_dim, "activation": self.activation,
                "num_matrices": len(self.matrices), "variant": self.variant, "num_kv_heads": self.num_kv_heads,
                **({"num_outputs": self.num_outputs} if self.num_outputs > 1 else {})}

    def of_layer(self, layer: int) -> tuple[NamedMatrix, ...]:
        return tuple(m for m in self.matrices if m.layer == layer)

    def of_kind(self, kind: str) -> tuple[NamedMatrix, ...]:
        return tuple(m for m in self.matrices if m.kind == kind)

    def get(self, layer: int, kind: str, head: int = -1) -> NamedMatrix:
        for m in self.matrices:
            if m.layer == layer and m.kind == kind and m.head == head:
                return m
        raise KeyError(f"no matrix L{layer} H{head} {kind}")

    @cached_property
    def num_matrices(self) -> int:
        return len(self.matrices)

    @property
    def num_outputs(self) -> int:
        """The read-out rows k: 1 for one vector ``w`` (or none), k for a (k, N) read-out ``W``."""
        return 1 if self.readout is None or np.ndim(self.readout) == 1 else int(np.shape(self.readout)[0])


def ordered(matrices: list[NamedMatrix]) -> tuple[NamedMatrix, ...]:
    """Sort into the canonical telescoping order (layer, kind, head)."""
    is_ls = any(m.kind in LS_MATRIX_KINDS and m.kind not in MATRIX_KINDS for m in matrices)
    rank = {k: i for i, k in enumerate(LS_MATRIX_KINDS if is_ls else MATRIX_KINDS)}
    return tuple(sorted(matrices, key=lambda m: (m.layer, rank[m.kind], m.head)))
