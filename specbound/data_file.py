"""Labelled sample files for the empirical margin loss.

A data file is a ``.npz`` archive (read with ``allow_pickle=False``) holding

* ``labels`` -- shape ``(n,)``, integers (any integer or float dtype): either every entry ``-1`` or
  ``+1`` (a binary task: a model with one read-out vector) or every entry a class index ``0..k-1``
  (a model with k read-out rows; which k is checked where the model is known, :func:`check_labels`);
* and exactly one of
    - ``tokens`` -- shape ``(n, T)``, integer token ids ``>= 0`` (embedded by the model's fixed
      ``E``, ``P``; token 1 = index 0 is CLS), or
    - ``inputs`` -- shape ``(n, T, N)``, floating rows already embedded; the certified forward
      pass projects them with ``Pi`` (the theorem needs ``X_i`` in the unit-row ball).

``n >= 1`` and ``T >= 1``.  Values are kept exactly: ids become int64, labels int8 (-1/+1) or int64
(classes), float16/32/64 inputs float64 (every such value is a binary64 number).  Each problem raises
:class:`DataFileError` with one line naming the file and the array.  Whether ids fit the model's
vocabulary, ``T`` its positional embedding and ``N`` its width is checked where the model is known
(:func:`specbound.certified.ramp_loss.certified_ramp_loss`).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from specbound.dataset import DataSet
from specbound.errors import SpecboundError

KEYS: tuple[str, ...] = ("labels", "tokens", "inputs")


class DataFileError(SpecboundError):
    """A data file is missing, unreadable, or its arrays do not form a labelled sample."""


MAX_CLASS = 2**31 - 1
"""Largest class index a label may be."""


def _labels(where: str, labels: np.ndarray) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise DataFileError(f"{where}: 'labels' must have shape (n,), got {labels.shape}")
    if labels.shape[0] == 0:
        raise DataFileError(f"{where}: the sample is empty (n = 0)")
    if labels.dtype == np.bool_ or not (
        np.issubdtype(labels.dtype, np.integer) or np.issubdtype(labels.dtype, np.floating)
    ):
        raise DataFileError(f"{where}: 'labels' must be numeric (-1/+1 or classes 0..k-1), got dtype {labels.dtype}")
    if np.issubdtype(labels.dtype, np.floating):
        if not np.isfinite(labels).all():
            raise DataFileError(f"{where}: 'labels' has NaN/Inf entries")
        frac = labels != np.floor(labels)
        if frac.any():
            i = int(np.flatnonzero(frac)[0])
            raise DataFileError(f"{where}: 'labels' must be integers, found {labels[i].item()!r} at index {i}")
    if (labels < 0).any():  # binary: every label -1 or +1
        bad = ~((labels == 1) | (labels == -1))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DataFileError(
                f"{where}: 'labels' must be -1 or +1 (binary) or all classes 0..k-1, found {labels[i].item()!r} "
                f"at index {i} among negative labels ({int(bad.sum())} bad)"
            )
        return labels.astype(np.int8)
    if labels.max() > MAX_CLASS:
        raise DataFileError(f"{where}: 'labels' has a class index above {MAX_CLASS}")
    if ((labels == 1) | (labels == -1)).all():
        return labels.astype(np.int8)  # every label +1: binary as well as class 1
    return labels.astype(np.int64)


def check_labels(data: DataSet, num_outputs: int) -> None:
    """The labels of ``data`` against a model with ``num_outputs`` read-out rows k: -1/+1 for one
    read-out vector, classes 0..k-1 for k >= 2 (one-line DataFileError naming the first outside)."""
    y = np.asarray(data.labels)
    if num_outputs == 1:
        bad = ~((y == 1) | (y == -1))
        want = "-1 or +1 for a model with one read-out vector w (for classes 0..k-1 build it with num_outputs=k)"
    else:
        bad = (y < 0) | (y >= num_outputs)
        want = f"classes 0..{num_outputs - 1} for a model with {num_outputs} outputs"
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataFileError(f"{data.source}: 'labels' must be {want}; found {y[i].item()!r} at index {i} "
                            f"({int(bad.sum())} outside)")


def data_sha256(data: DataSet) -> str:
    """SHA-256 of the sample's canonical arrays: ``labels`` as int64 and ``tokens`` as int64 or
    ``inputs`` as float64, in the in-memory digest format of
    :func:`specbound.formats.state_dict.state_sha256` (names, dtypes, shapes, little-endian bytes).
    The same sample gives the same digest from a file, arrays, tensors or a loader; its order counts."""
    from specbound.formats.state_dict import state_sha256
    from specbound.sample_stream import SampleStream

    if isinstance(data, SampleStream):  # the same bytes, read block by block
        return data.sha256()
    arrays = {"labels": np.ascontiguousarray(data.labels, dtype=np.int64)}
    if data.tokens is not None:
        arrays["tokens"] = np.ascontiguousarray(data.tokens, dtype=np.int64)
    else:
        arrays["inputs"] = np.ascontiguousarray(data.inputs, dtype=np.float64)
    return state_sha256(arrays)


def _tokens(where: str, tokens: np.ndarray, n: int) -> np.ndarray:
    tokens = np.asarray(tokens)
    if tokens.dtype == np.bool_ or not np.issubdtype(tokens.dtype, np.integer):
        raise DataFileError(f"{where}: 'tokens' must hold integer ids, got dtype {tokens.dtype}")
    if tokens.ndim != 2:
        raise DataFileError(f"{where}: 'tokens' must have shape (n, T), got {tokens.shape}")
    if tokens.shape[0] != n:
        raise DataFileError(f"{where}: 'tokens' has {tokens.shape[0]} rows but 'labels' has {n}")
    if tokens.shape[1] == 0:
        raise DataFileError(f"{where}: 'tokens' has sequence length 0 (need T >= 1: token 1 is CLS)")
    if tokens.min() < 0:
        raise DataFileError(f"{where}: 'tokens' has negative ids (min {int(tokens.min())})")
    if tokens.dtype == np.uint64 and tokens.max() > np.iinfo(np.int64).max:
        raise DataFileError(f"{where}: 'tokens' has ids beyond int64")
    return tokens.astype(np.int64)


def _inputs(where: str, inputs: np.ndarray, n: int) -> np.ndarray:
    inputs = np.asarray(inputs)
    if inputs.dtype not in (np.float16, np.float32, np.float64):
        raise DataFileError(
            f"{where}: 'inputs' must be float16/float32/float64, got dtype {inputs.dtype}"
        )
    if inputs.ndim != 3:
        raise DataFileError(f"{where}: 'inputs' must have shape (n, T, N), got {inputs.shape}")
    if inputs.shape[0] != n:
        raise DataFileError(f"{where}: 'inputs' has {inputs.shape[0]} rows but 'labels' has {n}")
    if inputs.shape[1] == 0 or inputs.shape[2] == 0:
        raise DataFileError(f"{where}: 'inputs' has an empty axis, shape {inputs.shape} (need T, N >= 1)")
    if not np.isfinite(inputs).all():
        bad = int(inputs.size - np.count_nonzero(np.isfinite(inputs)))
        raise DataFileError(f"{where}: 'inputs' has {bad} NaN/Inf entr{'y' if bad == 1 else 'ies'}")
    return inputs.astype(np.float64)  # exact for float16/32/64


def dataset_from_arrays(
    labels: np.ndarray,
    *,
    tokens: np.ndarray | None = None,
    inputs: np.ndarray | None = None,
    source: str = "<arrays>",
) -> DataSet:
    """Validate arrays into a :class:`DataSet` (same rules and messages as :func:`load_data`)."""
    if (tokens is None) == (inputs is None):
        what = "both 'tokens' and 'inputs'" if tokens is not None else "neither 'tokens' nor 'inputs'"
        raise DataFileError(f"{source}: has {what}; give exactly one")
    y = _labels(source, labels)
    if tokens is not None:
        return DataSet(labels=y, tokens=_tokens(source, tokens, y.shape[0]), source=source)
    return DataSet(labels=y, inputs=_inputs(source, inputs, y.shape[0]), source=source)


def load_data(path: str | Path) -> DataSet:
    """Read and validate a ``.npz`` data file (module contract); one-line DataFileError otherwise."""
    from specbound.npz_archive import NpzArchive

    p = Path(path)
    if not p.is_file():
        raise DataFileError(f"{p}: data file not found")
    if not zipfile.is_zipfile(p):
        raise DataFileError(f"{p}: not a .npz archive (a single array?); save with numpy.savez")
    # headers first: declared sizes are checked against limits before any array is read
    archive = NpzArchive(p, error=DataFileError)
    names = set(archive.files)
    if "labels" not in names:
        raise DataFileError(f"{p}: missing array 'labels' (found: {', '.join(sorted(names)) or 'none'})")
    arrays = {k: archive.read(k) for k in KEYS if k in names}
    return dataset_from_arrays(
        arrays["labels"], tokens=arrays.get("tokens"), inputs=arrays.get("inputs"), source=str(p)
    )
