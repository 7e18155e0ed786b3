"""A PyTorch state dict file (``.pt`` / ``.pth`` / ``.bin``), loaded without executing its pickle.

Contract.  :func:`open_torch` loads *only* with ``torch.load(weights_only=True)``: the restricted
unpickler admits tensors and plain containers, so a pickle that refers to anything else is refused
before any of its code can run.  A zip archive is first checked from its directory alone
(:func:`check_torch_zip`: no decompression bomb, no oversized pickle) and then memory-mapped.
Nested dicts are flattened with ``.``; a top-level ``"__metadata__"`` mapping is taken as string
metadata; other plain values (epoch counters, strings) carry no weights and are ignored.  Tensors
on the ``meta`` device, non-strided (sparse) tensors, a state dict that contains itself or is
nested deeper than :data:`MAX_STATE_DEPTH` are refused with one line.
"""

from __future__ import annotations

import re
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError, one_line
from . import MAX_STATE_DEPTH, Opened, flatten_nested  # noqa: F401 (MAX_STATE_DEPTH: re-exported)

TORCH_SUFFIXES = (".pt", ".pth", ".bin")
"""File extensions read as a PyTorch state dict."""

_REFUSED = re.compile(r"(Unsupported global: GLOBAL \S+|Unsupported operand \S+)")


MAX_TORCH_PICKLE = 256 * 2**20
"""Largest pickle (``data.pkl``) of a zip ``.pt`` file read: the unpickler holds it in memory."""
MAX_TORCH_COMPRESSED = 16 * 2**20
"""Largest declared size of a *compressed* member of a zip ``.pt`` file: torch writes its members
stored (uncompressed, then memory-mapped); a compressed one would be inflated into memory."""


def check_torch_zip(path: Path) -> None:
    """Refuse, from the zip directory alone, a ``.pt`` archive whose loading would need memory out of
    proportion to the file: a compressed member declaring more than MAX_TORCH_COMPRESSED bytes (a
    decompression bomb) or a pickle of more than MAX_TORCH_PICKLE bytes."""
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.compress_type != zipfile.ZIP_STORED and info.file_size > MAX_TORCH_COMPRESSED:
                    raise CheckpointError(
                        f"{path}: member {info.filename!r} declares {info.file_size} bytes compressed into "
                        f"{info.compress_size}: refused (a decompression bomb; torch stores members uncompressed)")
                if info.filename.endswith(".pkl") and info.file_size > MAX_TORCH_PICKLE:
                    raise CheckpointError(
                        f"{path}: pickle {info.filename!r} of {info.file_size} bytes exceeds {MAX_TORCH_PICKLE}: refused")
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: truncated or corrupt PyTorch file ({one_line(exc)})") from None


def open_torch(path: Path) -> Opened:
    import pickle

    import torch

    is_zip = zipfile.is_zipfile(path)
    if is_zip:
        check_torch_zip(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # weights_only=True: the restricted unpickler admits tensors and plain containers only,
            # so a hostile pickle is rejected before any callable in it is invoked.
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=is_zip)
    except pickle.UnpicklingError as exc:
        found = _REFUSED.search(str(exc))
        what = found.group(1) if found else "a non-tensor object"
        raise CheckpointError(
            f"{path}: refused to load: the pickle holds more than plain tensors ({what}); "
            f"it was not executed"
        ) from None
    except Exception as exc:
        raise CheckpointError(
            f"{path}: truncated or corrupt PyTorch file ({type(exc).__name__}: {one_line(exc)})"
        ) from None
    if not isinstance(obj, Mapping):
        raise CheckpointError(
            f"{path}: holds a {type(obj).__name__}, not a state dict (a mapping name -> tensor)"
        )
    tensors: dict[str, Any] = {}
    metadata: dict[str, str] = {}
    flatten_state(obj, "", tensors, metadata, path=path)
    shapes = {k: tuple(int(s) for s in t.shape) for k, t in tensors.items()}
    dtypes = {
        k: str(t.dtype).removeprefix("torch.") if t.layout == torch.strided else f"{t.layout}"
        for k, t in tensors.items()
    }

    def fetch(name: str) -> np.ndarray:
        return tensors[name].detach().to(torch.float64).numpy()

    return Opened(shapes=shapes, dtypes=dtypes, metadata=metadata, fetch=fetch)


def flatten_state(obj: Mapping, prefix: str, out: dict, metadata: dict, path: Path | None = None) -> None:
    """Tensors of a loaded state dict into ``out`` (dotted names, :func:`specbound.formats.flatten_nested`)
    and its top-level ``"__metadata__"`` mapping into ``metadata``; other plain values (epoch
    counters, strings) carry no weights and are ignored.  Meta-device and non-strided tensors are
    refused with one line."""
    import torch

    top = obj.get("__metadata__") if not prefix else None
    if isinstance(top, Mapping):
        metadata.update({str(k): str(v) for k, v in top.items()})
    tensors = flatten_nested(obj, path, lambda v: isinstance(v, torch.Tensor), lambda name, value: None,
                             skip=frozenset({"__metadata__"}) if isinstance(top, Mapping) else frozenset())
    for name, value in tensors.items():
        if value.is_meta:
            raise CheckpointError(f"{path}: tensor '{prefix}{name}' is on the meta device (it holds no "
                                  "values; save the loaded weights)")
        if value.layout != torch.strided:
            raise CheckpointError(f"{path}: tensor '{prefix}{name}' has layout {value.layout} (dense only)")
        out[f"{prefix}{name}"] = value
