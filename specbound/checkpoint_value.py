"""The ``Checkpoint`` value: an opened checkpoint whose values are read on demand, exactly.

Contract.  Names, shapes, dtypes, string metadata and (for a Hugging Face folder or GGUF file) the
config are known from headers alone.  :meth:`Checkpoint.tensor` is the only way values leave the
container: it returns a fresh float64 array whose entries are *exactly* the stored reals (every
binary16/bfloat16/binary32 number is a binary64 number, so the conversion is the identity on
values), after checking that the tensor exists, has a floating dtype (:data:`FLOAT_DTYPES`), has
the expected shape and is finite; each refusal is one line naming the file and the tensor.
Opening (which container, where its config is) is :func:`specbound.checkpoint.open_checkpoint`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import CheckpointError, LayoutError, NonFiniteError
from .formats import file_sha256

FLOAT_DTYPES: frozenset[str] = frozenset({"float16", "bfloat16", "float32", "float64"})
"""Stored dtypes whose every value is exactly a binary64 number (so reading them is lossless)."""


@dataclass(frozen=True, eq=False)
class Checkpoint:
    """An opened checkpoint: names, shapes and dtypes are known; values are read on demand.

    ``path`` is the weights file (inside the folder, for a Hugging Face folder), ``source`` the
    path the user gave.  :meth:`tensor` is the only way values leave the container.
    """

    path: Path
    source: Path
    container: str
    shapes: Mapping[str, tuple[int, ...]]
    dtypes: Mapping[str, str]
    metadata: Mapping[str, str] = field(default_factory=dict)
    config: Mapping[str, Any] | None = None
    config_path: Path | None = None
    _fetch: Callable[[str], np.ndarray] | None = field(default=None, repr=False)
    quantization: Mapping[str, str] = field(default_factory=dict)
    """Storage type per tensor for GGUF files (``Q4_K``, ``Q8_0``, ``F32``...); empty otherwise."""
    _digest: Callable[[], str] | None = field(default=None, repr=False)

    def names(self) -> tuple[str, ...]:
        return tuple(self.shapes)

    def __contains__(self, name: object) -> bool:
        return name in self.shapes

    def shape(self, name: str) -> tuple[int, ...]:
        """Stored shape of tensor ``name``; LayoutError naming it if it is absent."""
        if name not in self.shapes:
            raise LayoutError(f"{self.path}: missing tensor '{name}'")
        return self.shapes[name]

    def checked_shape(self, name: str, shape: tuple[int, ...] | None = None, *,
                      transposed: bool = False) -> tuple[int, ...]:
        """The stored shape of ``name``, after the header-only checks of :meth:`tensor`: the tensor
        exists, has ``shape`` when one is given, a floating dtype, and two axes when read ``transposed``."""
        got = self.shape(name)
        if shape is not None and tuple(got) != tuple(shape):
            raise LayoutError(
                f"{self.path}: tensor '{name}' has shape {fmt_shape(got)}, "
                f"expected {fmt_shape(shape)}"
            )
        dtype = self.dtypes[name]
        if dtype not in FLOAT_DTYPES:
            raise LayoutError(
                f"{self.path}: tensor '{name}' has dtype {dtype}, expected one of "
                f"{', '.join(sorted(FLOAT_DTYPES))}"
            )
        if transposed and len(got) != 2:
            raise LayoutError(f"{self.path}: tensor '{name}' is not a matrix, cannot be read transposed")
        return tuple(got)

    def tensor(self, name: str, shape: tuple[int, ...] | None = None, *, transposed: bool = False) -> np.ndarray:
        """Exact float64 copy of tensor ``name`` (C order); ``transposed``: of its transpose (a 2-D
        tensor), converted and transposed in one copy.

        Guarantees: the tensor exists, has a floating dtype (:data:`FLOAT_DTYPES`), has exactly
        ``shape`` as stored when one is given (rank included), and every entry is finite.
        """
        got = self.checked_shape(name, shape, transposed=transposed)
        assert self._fetch is not None
        stored = self._fetch(name)
        # One strided pass converts and transposes (faster than a copy and then a transposed copy).
        array = np.array(stored.T if transposed else stored, dtype=np.float64, copy=True, order="C")
        if array.shape != (got[::-1] if transposed else got):  # pragma: no cover - a container lying about its header
            raise CheckpointError(f"{self.path}: tensor '{name}' is corrupt (shape mismatch)")
        if not np.isfinite(array).all():
            bad = int(array.size - np.count_nonzero(np.isfinite(array)))
            raise NonFiniteError(
                f"{self.path}: tensor '{name}' has {bad} NaN/Inf entr{'y' if bad == 1 else 'ies'}"
            )
        return array

    def sha256(self) -> str:
        """Hex SHA-256 identifying exactly what was analysed: the weights file's bytes; for a
        sharded or in-memory checkpoint the digest its module defines."""
        if self._digest is not None:
            return self._digest()
        return file_sha256(self.path)


def fmt_shape(shape: Iterable[int]) -> str:
    """A shape as messages print it: ``(3, 4) (2-D)``, ``(5,) (1-D)``."""
    dims = tuple(int(s) for s in shape)
    return f"({', '.join(map(str, dims))}{',' if len(dims) == 1 else ''}) ({len(dims)}-D)"
