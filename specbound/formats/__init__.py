"""Checkpoint containers, one module per container.

Single files: :mod:`.safetensors_file` (memory-mapped safetensors), :mod:`.torch_file` (a PyTorch
state dict, loaded without executing its pickle), :mod:`.npz_file` (numpy archives) and
:mod:`.gguf_file` (llama.cpp's GGUF, quantized tensors dequantized exactly).  Beyond one file:
:mod:`.hf_folder` (a Hugging Face folder: its weights file and ``config.json``),
:mod:`.safetensors_sharded` (a Hugging Face index over several shards), :mod:`.hf_cache` (a repo id
resolved offline from the local Hugging Face cache) and :mod:`.state_dict` (weights already in
memory).  Each opener returns an :class:`Opened` record that
:func:`specbound.checkpoint.open_checkpoint` wraps into a ``Checkpoint``.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Opened:
    """What a container opener learned from headers alone, plus the way to read one tensor.

    ``fetch(name)`` returns an array whose values are exactly the stored (or exactly dequantized)
    reals of tensor ``name``, in numpy row-major orientation with shape ``shapes[name]``.
    ``digest`` (optional) replaces the single-file SHA-256 when there is no single file.
    """

    shapes: Mapping[str, tuple[int, ...]]
    dtypes: Mapping[str, str]
    fetch: Callable[[str], np.ndarray]
    metadata: Mapping[str, str] = field(default_factory=dict)
    quantization: Mapping[str, str] = field(default_factory=dict)
    config: Mapping[str, Any] | None = None
    digest: Callable[[], str] | None = None


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks (bounded memory).

    A process hashes one version of a file once: the digest is remembered under the file's
    identity (device, inode, size, modification and change times, read from the open file before
    and after hashing).  A file whose times are within :data:`RACY_SECONDS` of now is hashed again
    every time, because the kernel's coarse timestamps cannot tell two writes of that moment apart
    (git's "racily clean" rule); a file that changed while it was hashed is not remembered."""
    with open(path, "rb") as fh:
        key = _identity(os.fstat(fh.fileno()))
        known = _DIGESTS.get(key)
        if known is not None:
            return known
        digest = hashlib.sha256()
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
        value = digest.hexdigest()
        if _identity(os.fstat(fh.fileno())) == key and time.time() - max(key[3], key[4]) / 1e9 > RACY_SECONDS:
            if len(_DIGESTS) >= 4096:
                _DIGESTS.clear()
            _DIGESTS[key] = value
    return value


RACY_SECONDS = 2.0
"""A file modified less than this long ago is hashed again on every request (see :func:`file_sha256`)."""

_DIGESTS: dict[tuple[int, ...], str] = {}
"""SHA-256 per file identity (:func:`_identity`), for this process."""


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


MAX_STATE_DEPTH = 32
"""Nesting of a state dict beyond this is not a checkpoint."""


def flatten_nested(obj: Mapping, label: object, is_leaf: Callable[[Any], bool],
                   on_other: Callable[[str, Any], None], skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``{dotted name: leaf}`` of a nested state dict, in its own order (nested mappings joined with
    ``.``, as ``torch.nn.Module.state_dict`` names them); ``on_other(name, value)`` is called for a
    value that is neither a mapping nor a leaf; top-level keys in ``skip`` are left out.

    Without recursion, whatever the depth.  One-line CheckpointError (naming ``label``) for a
    mapping that contains itself, nesting deeper than :data:`MAX_STATE_DEPTH`, or two entries that
    flatten to the same name (``{"a": {"b": x}, "a.b": y}``): which of them is the weight cannot be
    known, so neither is chosen."""
    from ..errors import CheckpointError

    out: dict[str, Any] = {}
    stack = [(iter(obj.items()), "", (id(obj),))]
    while stack:
        items, prefix, ancestors = stack[-1]
        entry = next(items, None)
        if entry is None:
            stack.pop()
            continue
        key, value = entry
        if not prefix and key in skip:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if id(value) in ancestors:
                raise CheckpointError(f"{label}: the state dict contains itself (at '{name}')")
            if len(ancestors) >= MAX_STATE_DEPTH:
                raise CheckpointError(f"{label}: the state dict is nested deeper than {MAX_STATE_DEPTH} levels")
            stack.append((iter(value.items()), f"{name}.", ancestors + (id(value),)))
        elif is_leaf(value):
            if name in out:
                raise CheckpointError(f"{label}: two entries are named '{name}' once nested names are joined "
                                      "with '.': refusing to choose one")
            out[name] = value
        else:
            on_other(name, value)
    return out
