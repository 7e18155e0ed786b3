"""What the loaders are handed for a torch module: the module itself, or its own-format file.

``specbound.certify`` and ``specbound.load_weights`` read a ``torch.nn.Module`` from its state dict
(:mod:`specbound.formats.state_dict`); an analysis-family module that gives its own-format tensors and
metadata (``specbound_checkpoint()``) is read in memory.  The reference model of
:mod:`specbound.model` before that hook existed names its tensors differently from the own format and
keeps its architecture (variant, activation) outside its state dict; it can only be read from the file
its ``save(path)`` writes.  :func:`readable` picks the one that works, so the planner and the monitor
take any module that ``certify`` can be given, whichever the model class.  :func:`label_of` and
:func:`source_of` name and wrap any model source as the API does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .formats.state_dict import InMemorySource, describe, is_in_memory


def label_of(model: Any) -> str:
    """How a model source is named in results: its path, or ``<in-memory ...>``, or the embedded default."""
    if model is None:
        return "<embedded default>"
    return describe(model) if is_in_memory(model) else str(model)


def source_of(model: Any) -> Any:
    """What the loaders are handed: in-memory weights wrapped so that they print as their label."""
    if model is not None and is_in_memory(model) and not isinstance(model, InMemorySource):
        return InMemorySource(model)
    return model


def needs_file(model: Any) -> bool:
    """Whether ``model`` is an analysis-family module that must be saved to be read: it writes the own
    format (``save``, ``tensors``, ``metadata``) but has no in-memory hook ``specbound_checkpoint``."""
    return (callable(getattr(model, "state_dict", None)) and not callable(getattr(model, "specbound_checkpoint", None))
            and all(callable(getattr(model, name, None)) for name in ("save", "tensors", "metadata")))


def readable(model: Any, folder: str | os.PathLike, name: str = "model.safetensors") -> Any:
    """``model`` itself when the loaders read it as it is, else the own-format file it writes into
    ``folder`` (the file is rewritten: it holds the module's weights as they are now)."""
    if not needs_file(model):
        return model
    path = Path(folder) / name
    model.save(path)
    return str(path)
