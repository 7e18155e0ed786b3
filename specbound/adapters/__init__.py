"""Adapters: from a checkpoint's named tensors to the covered matrices of the analysis model.

An adapter is a module with

* ``LAYOUT: str`` -- the layout name recorded in :attr:`AnalysisWeights.layout`;
* ``EXPECTED: str`` -- a one-line description of the tensor names it recognises;
* ``matches(ckpt) -> bool`` -- whether the checkpoint's names/metadata are of this layout;
* ``adapt(ckpt, *, num_heads, activation) -> AnalysisWeights``.

Contract of ``adapt``: every covered matrix ``W_j`` it returns equals, as an exact real matrix, the
matrix the model applies (for a factored matrix, the exact product of its float64 factors); the
architecture facts (L, H, N, d_h, d_ff, activation) are checked against every tensor shape used.
"""

from __future__ import annotations

from types import ModuleType

from ..errors import LayoutError
from . import analysis, bert

ADAPTERS: tuple[ModuleType, ...] = (analysis, bert)
"""Tried in order; the project's own format first because its metadata names it explicitly."""


def detect(ckpt) -> ModuleType:
    """The adapter whose layout the checkpoint has; LayoutError listing what was expected if none."""
    for adapter in ADAPTERS:
        if adapter.matches(ckpt):
            return adapter
    names = ckpt.names()
    sample = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    expected = "; ".join(f"{a.LAYOUT} ({a.EXPECTED})" for a in ADAPTERS)
    raise LayoutError(
        f"{ckpt.path}: unknown layout ({len(names)} tensors: {sample or 'none'}); "
        f"expected {expected}"
    )


# --- MINIMAL STUB (structure_app branch): the adapter-registry work replaces this function with a
# --- registry lookup providing the same signature and meaning.
def capabilities(layout: str) -> frozenset[str]:
    """What an adapter of ``layout`` can give, from ``specbound.vocabulary.CAPABILITIES``:
    "matrices" (always), "float_forward" (float margins for choosing rho), "recorded_task" (a task
    record to draw fresh samples from)."""
    if layout == analysis.LAYOUT:
        return frozenset({"matrices", "float_forward", "recorded_task"})
    return frozenset({"matrices"})


__all__ = ["ADAPTERS", "capabilities", "detect", "analysis", "bert"]
