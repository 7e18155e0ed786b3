"""Partial builds (the engine's tasks): a checkpoint of which only some tensors are read.

Contract.  :class:`PartialCheckpoint` is a :class:`~specbound.checkpoint_value.Checkpoint` that reads
a tensor's values only when the tensor belongs to no layer, to a layer in ``keep``, or is named in
``also``; every other tensor reads as a zero-memory placeholder
(:func:`specbound.adapters.helpers.placeholder`), after the same existence, shape and dtype checks
against the header as a real read.  Tensors that are read are read exactly as by the full
checkpoint.  A tensor's layer is :func:`layer_of_name`.  :func:`specbound.checkpoint.load_layers`
builds the analysis weights from such a view.

Tracing.  With ``traced`` (a dict), each placeholder handed out is recorded under its
:func:`placeholder_id` with the tensor's name.  Every placeholder owns one float64 of its own and
has zero strides, so slicing, transposing and taking a contiguous copy of it
(:func:`specbound.adapters.helpers.contiguous`) all keep that id: a covered matrix built from
placeholders names, through its factors' ids, the tensors its values come from
(:func:`specbound.checkpoint.matrix_tensors`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .checkpoint_value import Checkpoint

_LAYER_OF_NAME = re.compile(r"(?:^|\.)(\d+)\.")
"""The layer index in a tensor name: the first dotted integer (``h.3.``, ``model.layers.3.``,
``encoder.layer.3.``, ``encoder.block.3.``, ``blk.3.``); names without one belong to no layer."""


def layer_of_name(name: str) -> int | None:
    """The layer a tensor name belongs to (:data:`_LAYER_OF_NAME`), None for no layer."""
    m = _LAYER_OF_NAME.search(name)
    return None if m is None else int(m.group(1))


def placeholder_id(a: np.ndarray) -> int:
    """The address of the one float64 a placeholder (or any slice or transpose of it) views: with
    zero strides every element, whatever the offset, is that float64."""
    return int(a.__array_interface__["data"][0])


@dataclass(frozen=True, eq=False)
class PartialCheckpoint(Checkpoint):
    """A checkpoint whose tensors outside ``keep`` (layers) and ``also`` (tensor names) read as
    zero-memory placeholders (shape and dtype still checked against the header); tensors of no
    layer are read.  ``digest`` replaces the file hash; ``traced`` (module docstring) records
    ``{placeholder_id: (name, placeholder)}`` (the placeholder kept alive, so no id is reused)."""

    keep: frozenset = frozenset()
    digest: str = ""
    also: frozenset = frozenset()
    traced: dict | None = None

    def reads(self, name: str) -> bool:
        """Whether :meth:`tensor` reads the values of ``name`` (else it gives a placeholder)."""
        layer = layer_of_name(name)
        return layer is None or layer in self.keep or name in self.also

    def tensor(self, name: str, shape: tuple[int, ...] | None = None, *, transposed: bool = False) -> np.ndarray:
        if self.reads(name):
            return super().tensor(name, shape, transposed=transposed)
        got = self.checked_shape(name, shape, transposed=transposed)
        from .adapters.helpers import placeholder

        stub = placeholder(got)
        if self.traced is not None:
            self.traced[placeholder_id(stub)] = (name, stub)
        return stub.T if transposed else stub

    def sha256(self) -> str:
        return self.digest or super().sha256()
