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
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks (bounded memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
