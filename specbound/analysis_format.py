"""The own checkpoint format ``specbound-analysis-v1`` of the analysis-family Transformer, on disk.

One safetensors file: float64 tensors under the names of docs/checkpoint_format.md, the architecture
and the input map's provenance in the string metadata.  :func:`write_atomic` serialises it
canonically (sorted keys, no timestamps: the bytes are a pure function of the tensors and metadata)
and atomically; :func:`read_checkpoint` reads it back exactly and :func:`architecture_from` checks
every tensor's shape against the metadata.  The torch module itself is :mod:`specbound.nn`.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from pathlib import Path

import numpy as np

from specbound.architecture import ROPE_BASE, Architecture
from specbound.checkpoint import open_checkpoint
from specbound.errors import CheckpointError, LayoutError
from specbound.input_map import kind_of
from specbound.vocabulary import ANALYSIS_LAYOUT, INPUT_MAP_EMBEDDED, LS_VARIANTS

FORMAT = ANALYSIS_LAYOUT


def read_checkpoint(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """All tensors (as float64 numpy arrays) and the metadata of a specbound-analysis-v1 file.

    Reading and the per-tensor checks (dtype, NaN/Inf) are the loader's
    (:func:`specbound.checkpoint.open_checkpoint`); this adds only the format check.
    """
    ckpt = open_checkpoint(path)
    meta = dict(ckpt.metadata or {})
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: metadata format is {meta.get('format')!r}, expected {FORMAT!r}")
    return {name: ckpt.tensor(name) for name in ckpt.names()}, meta


def architecture_from(tensors: dict[str, np.ndarray], meta: dict[str, str], path="checkpoint") -> Architecture:
    """The :class:`~specbound.architecture.Architecture` the metadata states, checked against every tensor's shape."""
    try:
        L, H, N, d, F = (int(meta[k]) for k in ("num_layers", "num_heads", "width", "head_dim", "ff_dim"))
        k = int(meta.get("num_outputs", "1"))
    except (KeyError, ValueError) as exc:
        raise LayoutError(f"{path}: metadata lacks a decimal {exc}") from None
    embedded = kind_of(meta) == INPUT_MAP_EMBEDDED
    if "embedding.E" not in tensors and not embedded:
        raise LayoutError(f"{path}: missing tensor embedding.E")
    variant = meta.get("variant", "plain")
    V = 0 if embedded else tensors["embedding.E"].shape[0]
    is_ls = variant in LS_VARIANTS
    table = "rope.cos" if is_ls else "embedding.P"
    T = tensors[table].shape[0] if table in tensors else 0
    try:
        G = int(meta.get("num_kv_heads", "0") or 0)
        base = float(meta.get("rope_base", repr(ROPE_BASE)))
    except ValueError as exc:
        raise LayoutError(f"{path}: metadata num_kv_heads/rope_base is not a number ({exc})") from None
    arch = Architecture(L, H, N, d, F, V, T, meta.get("activation", "gelu"), variant, G, base, num_outputs=k)
    G = arch.kv_heads
    expected = {"readout.w": (N,) if k == 1 else (k, N)}
    if not embedded:
        expected["embedding.E"] = (V, N)
    if is_ls:
        expected["rope.cos"] = expected["rope.sin"] = (T, d // 2)
    elif T:
        expected["embedding.P"] = (T, N)
    for l in range(L):
        expected.update({
            f"layers.{l}.attn.W_Q": (H, N, d), f"layers.{l}.attn.W_K": (G, N, d),
            f"layers.{l}.attn.W_V": (G, N, d), f"layers.{l}.attn.W_O": (H, d, N),
        })
        if is_ls:
            expected.update({f"layers.{l}.ff.G": (N, F), f"layers.{l}.ff.U": (N, F),
                             f"layers.{l}.ff.D": (F, N)})
        else:
            expected.update({f"layers.{l}.ff.M_in": (N, F), f"layers.{l}.ff.M_out": (F, N)})
    for name, shape in expected.items():
        if name not in tensors:
            raise LayoutError(f"{path}: missing tensor {name}")
        if tuple(tensors[name].shape) != shape:
            raise LayoutError(f"{path}: tensor {name} has shape {tuple(tensors[name].shape)}, expected {shape}")
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise LayoutError(f"{path}: unexpected tensor {extra[0]}")
    return arch


def _chmod_like_open(path: str) -> None:
    # mkstemp creates 0600; a checkpoint (often package data) gets the mode open() would give it.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def write_atomic(path: Path, tensors: dict[str, np.ndarray], meta: dict[str, str]) -> None:
    """Serialise in the safetensors layout ourselves, so the bytes are canonical.

    Layout: 8-byte little-endian header length, a JSON header (sorted keys, ``__metadata__``
    first), then the raw little-endian buffers in name order.  Written to a temporary file in the
    target folder and renamed, so a crash never leaves a half-written checkpoint.
    """
    header: dict[str, object] = {"__metadata__": dict(sorted(meta.items()))}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name], dtype="<f8")
        raw = arr.tobytes()
        header[name] = {"dtype": "F64", "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)  # pad so the data start is 8-byte aligned
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(struct.pack("<Q", len(head)))
            fh.write(head)
            for raw in blobs:
                fh.write(raw)
        _chmod_like_open(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


__all__ = ["FORMAT", "architecture_from", "read_checkpoint", "write_atomic"]
