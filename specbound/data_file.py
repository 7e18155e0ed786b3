"""Labelled sample files for the empirical margin loss.

A data file is a ``.npz`` archive (read with ``allow_pickle=False``) holding

* ``labels`` -- shape ``(n,)``, every entry exactly ``-1`` or ``+1`` (any integer or float dtype);
* and exactly one of
    - ``tokens`` -- shape ``(n, T)``, integer token ids ``>= 0`` (embedded by the model's fixed
      ``E``, ``P``; token 1 = index 0 is CLS), or
    - ``inputs`` -- shape ``(n, T, N)``, floating rows already embedded; the certified forward
      pass projects them with ``Pi`` (the theorem needs ``X_i`` in the unit-row ball).

``n >= 1`` and ``T >= 1``.  Values are kept exactly: ids become int64, labels int8, float16/32/64
inputs float64 (every such value is a binary64 number).  Each problem raises
:class:`DataFileError` with one line naming the file and the array.  Whether ids fit the model's
vocabulary, ``T`` its positional embedding and ``N`` its width is checked where the model is known
(:func:`specbound.certified.ramp_loss.certified_ramp_loss`).
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from specbound.dataset import DataSet
from specbound.errors import SpecboundError, one_line

KEYS: tuple[str, ...] = ("labels", "tokens", "inputs")


class DataFileError(SpecboundError):
    """A data file is missing, unreadable, or its arrays do not form a labelled sample."""


def _labels(where: str, labels: np.ndarray) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise DataFileError(f"{where}: 'labels' must have shape (n,), got {labels.shape}")
    if labels.shape[0] == 0:
        raise DataFileError(f"{where}: the sample is empty (n = 0)")
    if labels.dtype == np.bool_ or not (
        np.issubdtype(labels.dtype, np.integer) or np.issubdtype(labels.dtype, np.floating)
    ):
        raise DataFileError(f"{where}: 'labels' must be numeric -1/+1, got dtype {labels.dtype}")
    if np.issubdtype(labels.dtype, np.floating) and not np.isfinite(labels).all():
        raise DataFileError(f"{where}: 'labels' has NaN/Inf entries")
    bad = ~((labels == 1) | (labels == -1))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataFileError(
            f"{where}: 'labels' must be -1 or +1, found {labels[i].item()!r} at index {i} ({int(bad.sum())} bad)"
        )
    return labels.astype(np.int8)


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


def as_dataset(data) -> DataSet | None:
    """The sample ``data`` names: None; a :class:`DataSet`; a ``.npz`` path (:func:`load_data`); or a
    mapping with the keys of a data file (``labels`` and one of ``tokens`` / ``inputs``: numpy arrays,
    lists or CPU tensors), validated like a file.  Anything else: one-line DataFileError."""
    if data is None or isinstance(data, DataSet):
        return data
    if isinstance(data, (str, os.PathLike)):
        return load_data(data)
    if isinstance(data, Mapping):
        keys = [str(k) for k in data]
        unknown = [k for k in keys if k not in KEYS]
        if unknown or "labels" not in keys:
            raise DataFileError(f"data: a mapping needs 'labels' and one of 'tokens' / 'inputs' (got keys "
                                f"{', '.join(repr(k) for k in keys) or 'none'})")
        arrays = {k: _array(k, data[k]) for k in keys}
        return dataset_from_arrays(arrays["labels"], tokens=arrays.get("tokens"), inputs=arrays.get("inputs"),
                                   source="<mapping>")
    raise DataFileError(f"data must be a .npz path, a DataSet or a mapping with 'labels' and 'tokens' or "
                        f"'inputs', got {type(data).__name__}")


def _array(key: str, value) -> np.ndarray:
    """``value`` as a numpy array (a CPU tensor or a list too); one line when it is not one."""
    if hasattr(value, "detach"):  # a torch tensor: to the host, without its graph
        value = value.detach().cpu().numpy()
    try:
        out = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise DataFileError(f"data: {key!r} is not an array ({one_line(exc)})") from None
    if out.dtype == object:
        raise DataFileError(f"data: {key!r} is not a numeric array (ragged or mixed entries)")
    return out
