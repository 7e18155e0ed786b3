"""Partial builds (the engine's tasks): a checkpoint of which only some layers' tensors are read.

Contract.  :class:`PartialCheckpoint` is a :class:`~specbound.checkpoint_value.Checkpoint` whose
tensors of layers outside ``keep`` read as zero-memory placeholders
(:func:`specbound.adapters.helpers.placeholder`), after the same existence, shape and dtype checks
against the header as a real read; tensors of kept layers and of no layer are read exactly as by
the full checkpoint.  A tensor's layer is :func:`layer_of_name`.  :func:`specbound.checkpoint.load_layers`
builds the analysis weights from such a view.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .checkpoint_value import FLOAT_DTYPES, Checkpoint, fmt_shape
from .errors import LayoutError

_LAYER_OF_NAME = re.compile(r"(?:^|\.)(\d+)\.")
"""The layer index in a tensor name: the first dotted integer (``h.3.``, ``model.layers.3.``,
``encoder.layer.3.``, ``encoder.block.3.``, ``blk.3.``); names without one belong to no layer."""


def layer_of_name(name: str) -> int | None:
    """The layer a tensor name belongs to (:data:`_LAYER_OF_NAME`), None for no layer."""
    m = _LAYER_OF_NAME.search(name)
    return None if m is None else int(m.group(1))


@dataclass(frozen=True, eq=False)
class PartialCheckpoint(Checkpoint):
    """A checkpoint whose tensors of layers outside ``keep`` read as zero-memory placeholders
    (shape and dtype still checked against the header); ``digest`` replaces the file hash."""

    keep: frozenset = frozenset()
    digest: str = ""

    def tensor(self, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
        layer = layer_of_name(name)
        if layer is None or layer in self.keep:
            return super().tensor(name, shape)
        got = self.shape(name)
        if shape is not None and tuple(got) != tuple(shape):
            raise LayoutError(f"{self.path}: tensor '{name}' has shape {fmt_shape(got)}, "
                              f"expected {fmt_shape(shape)}")
        if self.dtypes[name] not in FLOAT_DTYPES:
            raise LayoutError(f"{self.path}: tensor '{name}' has dtype {self.dtypes[name]}, expected one of "
                              f"{', '.join(sorted(FLOAT_DTYPES))}")
        from .adapters.helpers import placeholder

        return placeholder(got)

    def sha256(self) -> str:
        return self.digest or super().sha256()
