"""Where a labelled sample comes from: one function, :func:`as_dataset`, for every form the API takes.

``data`` may be

* a :class:`~specbound.dataset.DataSet` (taken as is);
* a path to a ``.npz`` data file (:func:`specbound.data_file.load_data`);
* a pair ``(x, y)`` of numpy arrays, torch tensors or lists: ``x`` integer ids (n, T) or float rows
  (n, T, N) (told apart by dtype), ``y`` labels (n,);
* a mapping ``{"tokens" | "input_ids": ids, "labels" | "label": y}`` or ``{"inputs": rows, "labels": y}``
  (any other key is refused: a left-out ``attention_mask`` would change the sample);
* a ``torch.utils.data.DataLoader`` whose batches are such pairs or mappings, or a
  ``torch.utils.data.Dataset`` (map-style or iterable) whose items are ``(x_i, y_i)`` or such a
  mapping, read through a ``DataLoader(dataset, batch_size=block, shuffle=False)``.

Labels are -1/+1 (a binary model) or classes 0..k-1 (a model with k outputs), checked against the
model by :func:`specbound.data_file.check_labels`.  Every value is kept exactly (ids int64, rows
float64, every float16/bfloat16/float32 value is a float64 number).

**Streaming.**  A torch Dataset or DataLoader becomes a :class:`~specbound.sample_stream.SampleStream`,
never held whole: each batch is converted to the canonical arrays (int64 ids or float64 rows, labels)
and checked on its own -- shapes, dtypes, the same length T (and width N) as the batches before it -- so
a loader yielding a wrong shape or dtype fails at that batch, in one line naming it, before the rest is
read; the batches are regrouped into canonical blocks of ``block`` examples and the user's batch is
dropped.  The stream keeps the labels and, per position, the token ids that occur; every certified pass
reads the loader again block by block (docs/formats.md, "Streaming and memory").  A shuffling loader is
refused: the sample's SHA-256, recorded in the certificate, depends on its order, and ``verify`` reads it
again.  Arrays, tensors, mappings and files (which the caller holds anyway) give a :class:`DataSet`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from specbound.data_file import DataFileError, _labels, dataset_from_arrays, load_data
from specbound.dataset import DataSet
from specbound.errors import one_line
from specbound.sample_stream import SampleStream

BLOCK = 4096
"""Examples per batch when a torch Dataset is read through a DataLoader."""

ROW_KEYS = ("tokens", "input_ids", "inputs")
LABEL_KEYS = ("labels", "label")


def _torch():
    return sys.modules.get("torch")


def _array(value: Any, where: str, what: str) -> np.ndarray:
    """A numpy view or copy of a tensor, array or list (bfloat16 widened exactly to float32)."""
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.to(torch.float32)  # every bfloat16 value is a float32 value
        if t.is_complex() or t.layout != torch.strided:
            raise DataFileError(f"{where}: {what} must be a dense real tensor, got {t.dtype} {t.layout}")
        return t.numpy()
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise DataFileError(f"{where}: {what} is not an array ({type(value).__name__}: {one_line(exc)})") from None
    if arr.dtype.hasobject:
        raise DataFileError(f"{where}: {what} holds Python objects, not numbers ({type(value).__name__})")
    return arr


def _pair(batch: Any, where: str) -> tuple[np.ndarray, np.ndarray, str]:
    """(rows, labels, "tokens" or "inputs") of one batch: a pair (x, y) -- the kind from x's dtype -- or a
    mapping (module docstring) -- the kind from its key; a key outside them is refused (an
    ``attention_mask`` left out would change the sample silently)."""
    if isinstance(batch, Mapping):
        keys = [str(k) for k in batch]
        rows = [k for k in ROW_KEYS if k in keys]
        labels = [k for k in LABEL_KEYS if k in keys]
        unknown = [k for k in keys if k not in ROW_KEYS + LABEL_KEYS]
        if unknown or len(labels) != 1:
            extra = f"; no key {', '.join(repr(k) for k in unknown)} (a mask or other field is not part of the " \
                    "analysis model's input)" if unknown else ""
            raise DataFileError(f"{where}: a mapping needs 'labels' and one of 'tokens' / 'inputs' (got keys "
                                f"{', '.join(repr(k) for k in keys) or 'none'}{extra})")
        if len(rows) != 1:
            what = "neither 'tokens' nor 'inputs'" if not rows else f"{' and '.join(repr(k) for k in rows)}"
            raise DataFileError(f"{where}: has {what}; give exactly one")
        key = rows[0]
        kind = "inputs" if key == "inputs" else "tokens"
        return _array(batch[key], where, repr(key)), _array(batch[labels[0]], where, "'labels'"), kind
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        x, y = batch
    else:
        raise DataFileError(f"{where}: expected a pair (x, labels) or a mapping with 'tokens' / 'inputs' and "
                            f"'labels', got {type(batch).__name__}")
    x = _array(x, where, "x")
    y = _array(y, where, "'labels'")
    if x.dtype != np.bool_ and np.issubdtype(x.dtype, np.integer):
        return x, y, "tokens"
    if np.issubdtype(x.dtype, np.floating):
        return x, y, "inputs"
    raise DataFileError(f"{where}: x must hold integer token ids or float rows, got dtype {x.dtype}")


def _checked(x: np.ndarray, y: np.ndarray, kind: str, where: str) -> DataSet:
    return dataset_from_arrays(y, tokens=x if kind == "tokens" else None, inputs=x if kind == "inputs" else None,
                               source=where)


def canonical_blocks(batches: Iterable, source: str, block: int = BLOCK) -> Iterator[DataSet]:
    """The canonical blocks of an iterable of batches (module docstring): each batch converted and
    checked on its own (one line naming the batch that fails), then regrouped into blocks of exactly
    ``block`` examples (the last one shorter), so the blocks do not depend on the loader's batch size."""
    kind = shape = None
    pending: list[DataSet] = []
    held = 0
    for i, batch in enumerate(batches):
        where = f"{source}: batch {i}"
        x, y, k = _pair(batch, where)
        if kind is not None and k != kind:  # before the shape checks: the dtype is what changed
            raise DataFileError(f"{where}: holds {k} (dtype {x.dtype}) but the batches before it hold {kind}")
        part = _checked(x, y, k, where)
        rows = part.tokens if k == "tokens" else part.inputs
        if kind is None:
            kind, shape = k, rows.shape[1:]
        elif rows.shape[1:] != shape:
            raise DataFileError(f"{where}: {k} of shape {rows.shape[1:]} per example, the batches before it "
                                f"{shape} (one sequence length{' and width' if k == 'inputs' else ''} for the sample)")
        del x, y, batch  # the user's batch is not kept
        pending.append(part)
        held += part.n
        while held >= block:
            out, pending, held = _regroup(pending, block, kind, source)
            yield out
    while held > 0:
        out, pending, held = _regroup(pending, min(block, held), kind, source)
        yield out


def _regroup(parts: list[DataSet], size: int, kind: str, source: str) -> tuple[DataSet, list[DataSet], int]:
    """(the first ``size`` examples of ``parts`` as one block, the rest, how many the rest hold)."""
    rows = np.concatenate([p.tokens if kind == "tokens" else p.inputs for p in parts])
    labels = np.concatenate([p.labels for p in parts])
    rest_rows, rest_labels = rows[size:], labels[size:]
    block = DataSet(labels=labels[:size].copy(), tokens=rows[:size].copy() if kind == "tokens" else None,
                    inputs=rows[:size].copy() if kind == "inputs" else None, source=source)
    rest = [] if rest_labels.shape[0] == 0 else [
        DataSet(labels=rest_labels, tokens=rest_rows if kind == "tokens" else None,
                inputs=rest_rows if kind == "inputs" else None, source=source)]
    return block, rest, int(rest_labels.shape[0])


def _stream_labels(source: str) -> Callable[[list[np.ndarray]], np.ndarray]:
    # all blocks' labels checked together: blocks of -1/+1 and blocks of classes do not mix
    return lambda parts: _labels(source, np.concatenate(parts))


def stream_of(make_batches: Callable[[], Iterable], source: str, block: int = BLOCK) -> SampleStream:
    """The :class:`SampleStream` of a re-iterable source of batches (``make_batches()`` starts a new
    reading): read once here to check every batch and learn n, labels and token ids."""
    return SampleStream(lambda: canonical_blocks(make_batches(), source, block), source,
                        labels_of=_stream_labels(source))


def from_batches(batches: Iterable, source: str) -> DataSet:
    """The whole sample of an iterable of batches as one DataSet, read one batch at a time (for arrays
    the caller holds anyway; loaders become a :class:`SampleStream`)."""
    blocks = list(canonical_blocks(batches, source))
    if not blocks:
        raise DataFileError(f"{source}: yields no batch (the sample is empty, n = 0)")
    kind = "tokens" if blocks[0].tokens is not None else "inputs"
    y = _labels(source, np.concatenate([b.labels for b in blocks]))
    rows = np.concatenate([b.tokens if kind == "tokens" else b.inputs for b in blocks])
    return DataSet(labels=y, tokens=rows if kind == "tokens" else None,
                   inputs=rows if kind == "inputs" else None, source=source)


def _loader_of(data: Any, block: int):
    """(a DataLoader over ``data``, its label) when ``data`` is a torch Dataset or DataLoader, else None."""
    torch = _torch()
    if torch is None:
        return None
    from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler

    if isinstance(data, DataLoader):
        samplers = (getattr(data, "sampler", None), getattr(getattr(data, "batch_sampler", None), "sampler", None))
        if any(isinstance(s, RandomSampler) for s in samplers):
            raise DataFileError("<torch DataLoader>: it shuffles (shuffle=True): the sample's sha256, recorded in "
                                "the certificate, depends on its order; give a DataLoader with shuffle=False")
        return data, f"<torch DataLoader over {type(data.dataset).__name__}>"
    if isinstance(data, (Dataset, IterableDataset)):
        return DataLoader(data, batch_size=block, shuffle=False), f"<torch Dataset {type(data).__name__}>"
    return None


def as_dataset(data: Any, *, block: int = BLOCK) -> DataSet | SampleStream | None:
    """The validated sample of ``data`` (module docstring; None for None): a :class:`DataSet`, or a
    :class:`SampleStream` for a torch Dataset / DataLoader; one-line DataFileError otherwise."""
    if data is None or isinstance(data, (DataSet, SampleStream)):
        return data
    if isinstance(data, (str, os.PathLike)):
        return load_data(data)
    loader = _loader_of(data, block)
    if loader is not None:
        return stream_of(lambda: iter(loader[0]), loader[1], block)
    if isinstance(data, Mapping) or (isinstance(data, tuple) and len(data) == 2):
        source = "<mapping>" if isinstance(data, Mapping) else "<arrays>"
        x, y, kind = _pair(data, source)
        return _checked(x, y, kind, source)
    raise DataFileError(f"data must be a .npz path, a DataSet or a mapping with 'labels' and 'tokens' / 'inputs', "
                        f"a pair (x, labels), or a torch Dataset / DataLoader; got {type(data).__name__}")


__all__ = ["BLOCK", "as_dataset", "canonical_blocks", "from_batches", "stream_of"]
