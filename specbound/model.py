"""Where the analysis-family Transformer used to live: kept so that earlier imports keep working.

The one implementation is :mod:`specbound.nn` (the public torch module); its own checkpoint format
on disk is :mod:`specbound.analysis_format` and its input maps :mod:`specbound.input_map`.  Every
name this module exported before is re-exported here unchanged.
"""

from __future__ import annotations

from specbound.analysis_format import FORMAT, architecture_from, read_checkpoint  # noqa: F401
from specbound.analysis_format import write_atomic as _write_safetensors_atomic  # noqa: F401
from specbound.input_map import fixed_embedding  # noqa: F401
from specbound.nn import (  # noqa: F401
    MODEL_VARIANTS_TRAINABLE, ROPE_BASE, AnalysisTransformer, Architecture, activation_fn, apply_rope, causal_mask,
    project_rows, rope_tables,
)

__all__ = ["AnalysisTransformer", "Architecture", "FORMAT", "MODEL_VARIANTS_TRAINABLE", "ROPE_BASE",
           "activation_fn", "apply_rope", "architecture_from", "causal_mask", "fixed_embedding", "project_rows",
           "read_checkpoint", "rope_tables"]
