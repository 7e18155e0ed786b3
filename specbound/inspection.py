"""What specbound reads from a checkpoint: ``specbound inspect`` and :func:`specbound.inspect`.

An :class:`Inspection` says which adapter (family, layout) the registry detected, the config values
it used, every tensor it read and as what, every tensor it left out and why, what it can do with
the checkpoint (capabilities; for ``certify`` the first component outside the theorem when it
cannot) and the scope statement: what a certified number would be about.  It runs the adapter
itself (reading the tensors it reads), so what it reports is what ``spectra`` and ``certify`` use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .adapters import detect
from .adapters.heads import head_kind
from .checkpoint import CheckpointSource, open_checkpoint
from .vocabulary import CAPABILITY_CERTIFY, VIEW_ANALYSIS

_IGNORED: tuple[tuple[tuple[str, ...], str], ...] = (
    (("relative_attention_bias",), "relative position bias (outside the theorem)"),
    (("rotary", "inv_freq"), "rotary frequencies (not a matrix)"),
    (("norm", "ln_", "layernorm", "layer_norm"), "normalisation (replaced by projection onto the unit ball)"),
    (("embed", "wte.", "wpe.", "token_embd", "shared.", "cls_token", "position_embeddings"),
     "embedding (a fixed input, not covered)"),
)
_AFTER: tuple[tuple[tuple[str, ...], str], ...] = ((("decoder.",), "decoder stack (not read)"),)
HEAD_REASON = "pooler or task head (not used by the analysis model: see the scope's read-out)"


def ignored_reason(name: str) -> str:
    """Why a tensor the adapter did not read is not part of the analysis model (by its name)."""
    low = name.lower()
    if low.endswith(".bias") and "attention_bias" not in low:
        return "bias (dropped by the analysis model)"
    for needles, reason in _IGNORED:
        if any(n in low for n in needles):
            return reason
    if head_kind(name) is not None:  # one name test with the scope's read-out (adapters.heads)
        return HEAD_REASON
    for needles, reason in _AFTER:
        if any(n in low for n in needles):
            return reason
    return "not a covered matrix of this layout"


@dataclass(frozen=True)
class Inspection:
    """The adapter's account of one checkpoint (module docstring); ``to_dict()`` is the ``--json``."""

    source: str
    container: str
    layout: str
    families: tuple[str, ...]
    family: str
    variant: str
    capabilities: tuple[str, ...]
    certify: str
    architecture: dict
    config_used: dict
    tensors_read: dict
    tensors_ignored: dict
    scope: dict
    statement: str
    quantization: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def inspect_checkpoint(source: CheckpointSource, *, num_heads: int | None = None) -> Inspection:
    """Detect, adapt (analysis view) and report what was read, ignored and assumed."""
    ckpt = open_checkpoint(source)
    adapter = detect(ckpt)
    weights = adapter.adapt(ckpt, num_heads=num_heads, view=VIEW_ANALYSIS)
    spec = adapter.SPEC
    read = weights.extra.get("tensors_read", {})
    tensors_read = {n: {"as": what, "shape": list(ckpt.shape(n)), "dtype": ckpt.dtypes[n],
                        **({"quantization": ckpt.quantization[n]} if n in ckpt.quantization else {})}
                    for n, what in read.items()}
    ignored = {n: {"reason": ignored_reason(n), "shape": list(ckpt.shape(n))}
               for n in ckpt.names() if n not in read}
    scope = weights.scope
    certify = ("available" if CAPABILITY_CERTIFY in spec.capabilities
               else f"refused: {spec.outside_theorem}")
    arch = {"num_layers": weights.num_layers, "num_heads": weights.num_heads,
            "num_kv_heads": weights.num_kv_heads or weights.num_heads, "width": weights.width,
            "head_dim": weights.head_dim, "ff_dim": weights.ff_dim, "activation": weights.activation,
            "matrices": len(weights.matrices)}
    return Inspection(
        source=str(weights.source), container=ckpt.container, layout=spec.layout,
        families=spec.families, family=scope.family if scope else spec.layout,
        variant=weights.variant, capabilities=tuple(sorted(spec.capabilities)), certify=certify,
        architecture=arch, config_used=dict(weights.extra.get("config_used", {})),
        tensors_read=tensors_read, tensors_ignored=ignored,
        scope=scope.to_dict() if scope else {}, statement=scope.statement() if scope else "",
        quantization=dict(weights.extra.get("quantization", {})),
    )
