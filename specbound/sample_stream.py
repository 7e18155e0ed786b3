"""A labelled sample that is read in blocks and never held whole: :class:`SampleStream`.

A torch ``Dataset`` or ``DataLoader`` may hold more examples than fit in memory.  The certified passes
need each example only inside its own block (the per-sample enclosure of one example does not depend
on the other examples of its batch: proofs_notes/sample_stream.md), so a stream keeps

* the labels (at most 8 bytes per example: the counts and the Occam margin set are per example),
* per position, the set of token ids that occur (the token table of the fast pass is built from this
  set, so it is the same table as for the whole sample held at once),
* the sample's SHA-256 in the canonical format of :func:`specbound.data_file.data_sha256`,

and reads its rows again, block by block, whenever a pass needs them.  Every reading is compared with
the first (block sizes and a digest of the canonical bytes): a loader that yields other data on a
second reading (random augmentation, a shuffling sampler) is refused, since a bound must be about one
fixed sample.

Not an application module: it imports only numpy, :mod:`specbound.dataset` and :mod:`specbound.errors`, so
``specbound.certified`` may name it.  Building a stream from a loader is
:func:`specbound.data_source.as_dataset`'s job.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator

import numpy as np

from specbound.dataset import DataSet
from specbound.errors import SpecboundError


class StreamChanged(SpecboundError):
    """The reader yielded other data on a later reading than on the first."""


class SampleStream:
    """A labelled sample read in blocks (module docstring).

    ``reader()`` returns a fresh iterator of validated canonical :class:`DataSet` blocks (ids int64 or
    rows float64; labels as :class:`DataSet` holds them), in the sample's order.  The constructor reads
    it once (``first`` may hand over that first reading's iterator) to learn n, the labels, the row shape,
    the token ids per position and a digest of the rows that later readings are checked against.
    """

    def __init__(self, reader: Callable[[], Iterator[DataSet]], source: str,
                 labels_of: Callable[[list[np.ndarray]], np.ndarray] | None = None,
                 first: Iterator[DataSet] | None = None) -> None:
        self._reader = reader
        self.source = source
        labels, sizes = [], []
        kind = shape = None
        seen: list[np.ndarray] = []
        digest = hashlib.blake2b(digest_size=32)
        for block in (first if first is not None else reader()):
            rows = block.tokens if block.tokens is not None else block.inputs
            if kind is None:
                kind, shape = ("tokens" if block.tokens is not None else "inputs"), rows.shape[1:]
                seen = [np.empty(0, dtype=np.int64) for _ in range(shape[0])] if kind == "tokens" else []
            labels.append(np.asarray(block.labels))
            sizes.append(block.n)
            digest.update(np.ascontiguousarray(rows).tobytes())
            if kind == "tokens":
                for t in range(shape[0]):
                    seen[t] = np.union1d(seen[t], np.unique(rows[:, t]))
        if kind is None:
            raise SpecboundError(f"{source}: yields no batch (the sample is empty, n = 0)")
        self.labels = labels_of(labels) if labels_of is not None else np.concatenate(labels)
        self.kind: str = kind
        self.shape: tuple[int, ...] = tuple(int(s) for s in shape)
        self.sizes: tuple[int, ...] = tuple(sizes)
        self._position_tokens = seen
        self._rows_digest = digest.hexdigest()
        self._sha256: str | None = None

    # the DataSet attributes that say which kind of rows a sample holds are None here: a stream's rows
    # are read only through blocks() and take(), so no code can index the whole sample by mistake
    tokens = None
    inputs = None

    @property
    def n(self) -> int:
        return int(self.labels.shape[0])

    @property
    def seq_len(self) -> int:
        return self.shape[0]

    def blocks(self) -> Iterator[tuple[int, DataSet]]:
        """``(start, block)`` for every block in order, read again; StreamChanged when this reading
        differs from the first (checked as each block arrives and at the end)."""
        digest = hashlib.blake2b(digest_size=32)
        start = i = 0
        for i, block in enumerate(self._reader()):
            if i >= len(self.sizes) or block.n != self.sizes[i]:
                raise StreamChanged(f"{self.source}: the sample changed between readings (block {i}); "
                                    "give a loader that yields the same data every time")
            rows = block.tokens if block.tokens is not None else block.inputs
            digest.update(np.ascontiguousarray(rows).tobytes())
            yield start, block
            start += block.n
        if start != self.n or digest.hexdigest() != self._rows_digest:
            raise StreamChanged(f"{self.source}: the sample changed between readings; give a loader that "
                                "yields the same data every time (no shuffling, no random transforms)")

    def take(self, indices: np.ndarray) -> DataSet:
        """The examples ``indices`` (ascending, distinct, in [0, n)) as one :class:`DataSet`, in that
        order (one reading of the stream; only those rows are kept)."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and (np.any(np.diff(idx) <= 0) or idx[0] < 0 or idx[-1] >= self.n):
            raise ValueError("take: indices must be ascending, distinct and in [0, n)")
        parts = []
        for start, block in self.blocks():
            lo, hi = np.searchsorted(idx, [start, start + block.n])
            if hi > lo:
                local = idx[lo:hi] - start
                rows = block.tokens if block.tokens is not None else block.inputs
                parts.append(rows[local].copy())
        rows = np.concatenate(parts) if parts else np.empty((0, *self.shape),
                                                             dtype=np.int64 if self.kind == "tokens" else np.float64)
        labels = self.labels[idx]
        if self.kind == "tokens":
            return DataSet(labels=labels, tokens=rows, source=self.source)
        return DataSet(labels=labels, inputs=rows, source=self.source)

    def position_tokens(self) -> np.ndarray:
        """An int64 array (m, T) whose column t holds exactly the token ids that occur at position t in
        the sample (each at least once; shorter columns padded with their own first id): a (position,
        token) pair occurs in it iff it occurs in the sample.  Token streams only."""
        if self.kind != "tokens":
            raise ValueError("position_tokens: the sample holds embedded rows, not token ids")
        m = max(len(s) for s in self._position_tokens)
        out = np.empty((m, len(self._position_tokens)), dtype=np.int64)
        for t, s in enumerate(self._position_tokens):
            out[:, t] = s[0]
            out[:len(s), t] = s
        return out

    def sha256(self) -> str:
        """SHA-256 of the canonical arrays, byte for byte that of :func:`specbound.data_file.data_sha256` on
        the whole sample (names in sorted order; each: name, dtype, shape, byte length, little-endian
        bytes), computed over one more reading of the blocks."""
        if self._sha256 is None:
            digest = hashlib.sha256()
            name, dtype = ("tokens", "int64") if self.kind == "tokens" else ("inputs", "float64")
            labels = np.ascontiguousarray(self.labels, dtype="<i8")

            def header(key: str, type_name: str, shape: tuple[int, ...], nbytes: int) -> None:
                for text in (key, type_name, ",".join(str(int(s)) for s in shape)):
                    digest.update(text.encode("utf-8") + b"\0")
                digest.update(nbytes.to_bytes(8, "little"))

            def rows() -> None:
                shape = (self.n, *self.shape)
                header(name, dtype, shape, int(np.prod(shape)) * 8)
                for _, block in self.blocks():
                    r = block.tokens if block.tokens is not None else block.inputs
                    digest.update(np.ascontiguousarray(r, dtype="<i8" if self.kind == "tokens" else "<f8").tobytes())

            def labels_part() -> None:
                header("labels", "int64", labels.shape, labels.nbytes)
                digest.update(labels.tobytes())

            for part in sorted([(name, rows), ("labels", labels_part)]):
                part[1]()
            self._sha256 = digest.hexdigest()
        return self._sha256

    def materialize(self) -> DataSet:
        """The whole sample as one :class:`DataSet` (for the few consumers that are not streamed)."""
        return self.take(np.arange(self.n))


__all__ = ["SampleStream", "StreamChanged"]
