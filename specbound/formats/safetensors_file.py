"""A single ``.safetensors`` file, memory-mapped; its header metadata is kept.

Contract.  :func:`open_safetensors` reads the header only (names, shapes, dtype tags, string
metadata) through ``safetensors.safe_open``; a tensor's values are read when fetched, exactly as
stored.  bfloat16 (which numpy lacks) is widened to float32 by torch, exactly.  A truncated file,
or one that is not safetensors at all, fails with one line naming the file (and the tensor, when
only its data is bad).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..errors import CheckpointError, one_line
from . import Opened

_SAFETENSORS_DTYPES = {
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
}


def open_safetensors(path: Path) -> Opened:
    from safetensors import safe_open

    try:
        handle = safe_open(str(path), framework="numpy")
        metadata = dict(handle.metadata() or {})
        shapes: dict[str, tuple[int, ...]] = {}
        dtypes: dict[str, str] = {}
        for name in handle.keys():
            sl = handle.get_slice(name)
            shapes[name] = tuple(int(s) for s in sl.get_shape())
            dtypes[name] = safetensors_dtype(sl.get_dtype())
    except Exception as exc:  # SafetensorError / OSError: truncated or not safetensors at all
        raise CheckpointError(
            f"{path}: truncated or corrupt safetensors file ({one_line(exc)})"
        ) from None

    def fetch(name: str) -> np.ndarray:
        try:
            if dtypes[name] == "bfloat16":
                # numpy has no bfloat16; torch widens it to float32 exactly.
                with safe_open(str(path), framework="pt") as pt_handle:
                    return pt_handle.get_tensor(name).float().numpy()
            return handle.get_tensor(name)
        except Exception as exc:
            raise CheckpointError(
                f"{path}: tensor '{name}' cannot be read ({one_line(exc)})"
            ) from None

    return Opened(shapes=shapes, dtypes=dtypes, metadata=metadata, fetch=fetch)


def safetensors_dtype(raw: str) -> str:
    """numpy-style name of a safetensors dtype tag (``F32`` -> ``float32``, ``I64`` -> ``int64``)."""
    if raw in _SAFETENSORS_DTYPES:
        return _SAFETENSORS_DTYPES[raw]
    m = re.fullmatch(r"([FIU])(\d+)(_\w+)?", raw)
    if m:
        kind = {"F": "float", "I": "int", "U": "uint"}[m.group(1)]
        return f"{kind}{m.group(2)}{(m.group(3) or '').lower()}"
    return raw.lower()
