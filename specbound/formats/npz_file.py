"""A ``.npz`` checkpoint: one array per tensor, read through :class:`specbound.npz_archive.NpzArchive`.

Contract.  Opened with ``allow_pickle`` never set: every member's header is checked against the
archive's size limits up front, and each tensor is read only when fetched.  A 0-d string member
``__metadata__`` holding a JSON object (at most :data:`MAX_CONFIG_BYTES`, like a model config) is
taken as string metadata and is not a tensor; anything else there is refused with one line.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import CheckpointError, one_line
from . import Opened
from .hf_folder import MAX_CONFIG_BYTES


def open_npz(path: Path) -> Opened:
    """A .npz checkpoint: headers checked against limits up front, each tensor read when fetched."""
    from ..npz_archive import NpzArchive

    archive = NpzArchive(path, error=CheckpointError)
    metadata: dict[str, str] = {}
    if "__metadata__" in archive:
        if archive.members["__metadata__"].nbytes > MAX_CONFIG_BYTES:
            raise CheckpointError(f"{path}: '__metadata__' is larger than {MAX_CONFIG_BYTES} bytes")
        meta = archive.read("__metadata__")
        try:
            parsed = json.loads(str(meta[()]))
            if not isinstance(parsed, dict):
                raise ValueError("not an object")
        except (ValueError, IndexError, TypeError, RecursionError) as exc:
            raise CheckpointError(
                f"{path}: '__metadata__' is not a JSON object string ({one_line(exc)})"
            ) from None
        metadata = {str(k): str(v) for k, v in parsed.items()}
    members = {k: m for k, m in archive.members.items() if k != "__metadata__"}
    shapes = {k: m.shape for k, m in members.items()}
    dtypes = {k: m.dtype.name for k, m in members.items()}
    return Opened(shapes=shapes, dtypes=dtypes, metadata=metadata, fetch=archive.read)
