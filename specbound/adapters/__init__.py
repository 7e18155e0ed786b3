"""Adapters: from a checkpoint's named tensors to the covered matrices of an analysis model.

The registry.  An adapter is one module with

* ``SPEC: AdapterSpec`` -- its declaration (:class:`specbound.adapters.helpers.AdapterSpec`): layout
  id, families, expected tensor names, capabilities (:data:`specbound.vocabulary.CAPABILITIES`),
  the first component outside the theorem when it cannot ``certify``, config keys it reads;
* ``matches(ckpt) -> bool`` -- whether the checkpoint's names/metadata are of this layout;
* ``adapt(ckpt, *, num_heads, activation, view) -> AnalysisWeights``.

A new architecture is one new module plus one line in :data:`ADAPTERS`.  Callers ask the registry
(:func:`detect`, :func:`spec_of`, :func:`capabilities`), never compare layout ids.

Contract of ``adapt``: every covered matrix ``W_j`` it returns equals, as an exact real matrix, the
matrix the model applies (for a factored matrix, the exact product of its float64 factors, times
``sqrt(scale_sq)``); the architecture facts (L, H, N, d_h, d_ff, activation) are checked against
every tensor shape used; ``extra['tensors_read']`` says what each tensor read was read as and
``extra['config_used']`` the config values used.
"""

from __future__ import annotations

from types import ModuleType

from ..errors import LayoutError
from . import analysis, bert, distilbert, gpt2, llama, t5, vit
from .helpers import AdapterSpec, names_seen

ADAPTERS: tuple[ModuleType, ...] = (
    analysis,    # the project's own format: its metadata names it explicitly
    bert,        # BERT, RoBERTa, XLM-R, ELECTRA, MiniLM
    distilbert,
    vit,         # older and newer ViT names
    gpt2,
    llama,       # Llama, Mistral, Qwen, Gemma; Hugging Face and GGUF names
    t5,          # the encoder
)
"""Every adapter, one line each; exactly one may match a checkpoint (:func:`detect`)."""


def detect(ckpt) -> ModuleType:
    """The one adapter whose layout the checkpoint has.

    One-line LayoutError naming the tensors seen and the families known if none matches, and naming
    every matching adapter if several do: the registry's order must not decide silently what a
    checkpoint is read as (a file holding two models' tensors is refused, not half-read).
    """
    found = [adapter for adapter in ADAPTERS if adapter.matches(ckpt)]
    if len(found) == 1:
        return found[0]
    if found:
        named = [f"{a.SPEC.layout} ({'/'.join(a.SPEC.families)})" for a in found]
        which = ("both " if len(named) == 2 else "all of ") + ", ".join(named[:-1]) + " and " + named[-1]
        raise LayoutError(
            f"{ckpt.path}: ambiguous layout: its tensors match {which}; a checkpoint must hold one "
            f"model (save that model's weights alone)"
        )
    known = "; ".join(f"{a.SPEC.layout} ({a.SPEC.expected})" for a in ADAPTERS)
    families = ", ".join(f for a in ADAPTERS for f in a.SPEC.families)
    raise LayoutError(
        f"{ckpt.path}: unknown layout ({len(ckpt.names())} tensors: {names_seen(ckpt)}); "
        f"known families: {families}; expected {known}"
    )


def spec_of(layout: str) -> AdapterSpec:
    """The declaration of the adapter of ``layout``; LayoutError if no adapter has it."""
    for adapter in ADAPTERS:
        if adapter.SPEC.layout == layout:
            return adapter.SPEC
    raise LayoutError(f"no adapter for layout {layout!r} (known: "
                      f"{', '.join(a.SPEC.layout for a in ADAPTERS)})")


def capabilities(layout: str) -> frozenset[str]:
    """What an adapter of ``layout`` can give (:data:`specbound.vocabulary.CAPABILITIES`); nothing
    for a layout no adapter declares."""
    try:
        return spec_of(layout).capabilities
    except LayoutError:
        return frozenset()


__all__ = ["ADAPTERS", "AdapterSpec", "capabilities", "detect", "spec_of"]
