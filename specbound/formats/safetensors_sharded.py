"""Sharded Hugging Face checkpoints: an index file mapping each tensor to one shard file.

Contract.  ``model.safetensors.index.json`` (or ``pytorch_model.bin.index.json``) holds a
``weight_map`` object ``{tensor name: shard file name}``.  The checkpoint it describes is the union
of the shards' tensors; it is consistent when every shard the map names exists beside the index,
is a plain file name (no folders), and holds exactly the tensors the map assigns to it (a tensor in
two shards, or a tensor the map does not list, is an error).  Safetensors shards are memory-mapped
one by one; values are read only for the tensors requested.  PyTorch ``.bin`` shards are loaded
with ``torch.load(weights_only=True)`` (memory-mapped when they are zip archives).

The SHA-256 of a sharded checkpoint is defined as the SHA-256 of the text
``"<shard file name> <hex sha256 of the shard's bytes>\\n"`` over the shards in sorted name order:
it changes whenever any stored byte changes, and does not depend on the index's formatting.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError
from . import Opened, file_sha256
from .json_file import read_json

INDEX_FILES: tuple[str, ...] = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
"""Index files of a sharded Hugging Face folder, in order of preference."""

MAX_INDEX_BYTES = 64 << 20
"""An index is a small JSON file: refuse to parse one larger than this."""


def read_weight_map(index: Path) -> dict[str, str]:
    """The index's ``weight_map`` after the consistency checks on its own content."""
    parsed = read_json(index, "JSON index", max_bytes=MAX_INDEX_BYTES)
    wmap = parsed.get("weight_map") if isinstance(parsed, dict) else None
    if not isinstance(wmap, dict) or not wmap:
        raise CheckpointError(
            f"{index}: sharded checkpoint index has no 'weight_map' object (tensor -> shard file)"
        )
    for name, shard in wmap.items():
        if not isinstance(shard, str) or not shard or Path(shard).name != shard:
            raise CheckpointError(
                f"{index}: tensor '{name}' is mapped to {shard!r}, not a file name beside the index"
            )
        if not (index.parent / shard).is_file():
            raise CheckpointError(f"{index}: shard '{shard}' (holding '{name}') is missing")
    return dict(wmap)


def open_sharded(index: Path, open_shard: Callable[[Path], Any]) -> Opened:
    """Open every shard's header (``open_shard(path) -> Opened``) and check it against the index."""
    wmap = read_weight_map(index)
    shards = sorted(set(wmap.values()))
    shapes: dict[str, tuple[int, ...]] = {}
    dtypes: dict[str, str] = {}
    metadata: dict[str, str] = {}
    owner: dict[str, tuple[str, Any]] = {}
    for shard in shards:
        opened = open_shard(index.parent / shard)
        for name in opened.shapes:
            if name in owner:
                raise CheckpointError(
                    f"{index}: tensor '{name}' is stored in two shards "
                    f"('{owner[name][0]}' and '{shard}')"
                )
            if wmap.get(name) != shard:
                raise CheckpointError(
                    f"{index}: shard '{shard}' holds tensor '{name}', which the index "
                    f"{'maps to ' + repr(wmap[name]) if name in wmap else 'does not list'}"
                )
            owner[name] = (shard, opened)
            shapes[name] = opened.shapes[name]
            dtypes[name] = opened.dtypes[name]
        metadata.update(opened.metadata)
    absent = [n for n in wmap if n not in owner]
    if absent:
        raise CheckpointError(
            f"{index}: tensor '{absent[0]}' is listed but shard '{wmap[absent[0]]}' does not hold it"
        )

    def fetch(name: str) -> np.ndarray:
        return owner[name][1].fetch(name)

    def digest() -> str:
        return sharded_sha256(index.parent, shards)

    return Opened(shapes=shapes, dtypes=dtypes, fetch=fetch, metadata=metadata, digest=digest)


def sharded_sha256(folder: Path, shards: list[str]) -> str:
    """SHA-256 of ``"<shard> <sha256(shard bytes)>\\n"`` over the shards in sorted order."""
    outer = hashlib.sha256()
    for shard in sorted(shards):
        outer.update(f"{shard} {file_sha256(folder / shard)}\n".encode("utf-8"))
    return outer.hexdigest()
