"""GGUF files (the llama.cpp format): header parsed with bounds checks, tensors dequantized exactly.

Contract.  The header (key/value metadata, tensor names, dims, storage types, offsets) is parsed
here from the file's bytes, every declared count and length checked against the bytes that remain
*before* anything is allocated, so a truncated file or one declaring absurd sizes fails with one
line and bounded memory; tensors whose data ranges overlap are refused, so what is read is
bounded by the file's size.  Tensor values are read only on request, one tensor at a time, from a
memory map.  GGUF lists dimensions fastest-varying first (``ne[0]`` is the row length); the shapes
exposed here are reversed into numpy row-major order, so a linear layer's weight has the
``(out_features, in_features)`` orientation of ``torch.nn.Linear``.

Values.  Storage types F32, F64, F16 and BF16 widen exactly to float32/float64.  The quantized
types in :data:`EXACT_QUANT_TYPES` are dequantized by ``gguf.quants``' block decoders; for each of them
every binary32 operation of the block formula is exact except at most one final subtraction, which
is a single correctly rounded binary32 operation, so the result is the unique float32 the format
defines and equals llama.cpp's own dequantization bit for bit (argument: docs/formats.md).  Other
quantized types are refused by name.
"""

from __future__ import annotations

import copy
import mmap
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError, LayoutError, one_line
from . import Opened

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
"""GGML tensors have at most four dimensions."""

MAX_TENSOR_ELEMENTS = 1 << 28
"""Largest tensor dequantized on request: 2^28 entries (2 GiB once widened to float64), so one
read stays bounded whatever a file declares.  Projection matrices of models up to tens of billions
of parameters are far below it (Gemma 3 270M: largest projection 2^20.3 entries, the token
embedding 2^27.3)."""

CONFIG_ARRAY_LIMIT = 1024
"""Metadata arrays longer than this (token vocabularies, merges) are left out of ``config``."""

EXACT_QUANT_TYPES: frozenset[str] = frozenset(
    {"F32", "F64", "F16", "BF16", "Q4_0", "Q5_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K"}
)
"""Storage types whose dequantization is exact binary32 arithmetic (docs/formats.md)."""

# GGUF metadata value types: (struct code, byte size) for the fixed-size ones.
_SCALARS = {
    0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4),
    6: ("<f", 4), 7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8),
}
_STRING, _ARRAY = 8, 9


class _Cursor:
    """Bounds-checked little-endian reader over the file's bytes."""

    def __init__(self, buf: mmap.mmap, path: Path) -> None:
        self.buf, self.pos, self.size, self.path = buf, 0, len(buf), path

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise CheckpointError(
                f"{self.path}: truncated or corrupt GGUF file ({what} needs {n} bytes at offset "
                f"{self.pos}, file has {self.size})"
            )

    def unpack(self, code: str, n: int, what: str) -> Any:
        self.need(n, what)
        (value,) = struct.unpack_from(code, self.buf, self.pos)
        self.pos += n
        return value

    def u32(self, what: str) -> int:
        return int(self.unpack("<I", 4, what))

    def u64(self, what: str) -> int:
        return int(self.unpack("<Q", 8, what))

    def skip_strings(self, count: int, what: str) -> None:
        """Skip ``count`` length-prefixed strings without decoding them, with the bounds checks of
        :meth:`need` (a token vocabulary holds ~10^5 of them: one tight loop, no call per item)."""
        unpack, buf, pos, size = struct.unpack_from, self.buf, self.pos, self.size
        for _ in range(count):
            if pos + 8 > size:
                break
            end = pos + 8 + unpack("<Q", buf, pos)[0]
            if end > size:
                break
            pos = end
        else:
            self.pos = pos
            return
        self.pos = pos  # the failing item: raise the error of the item-by-item reader
        n = self.u64(what)
        self.need(n, what)

    def string(self, what: str) -> str:
        n = self.u64(what)
        self.need(n, what)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise CheckpointError(f"{self.path}: GGUF {what} is not UTF-8") from None

    def value(self, vtype: int, what: str, keep: bool = True) -> Any:
        if vtype in _SCALARS:
            code, n = _SCALARS[vtype]
            return self.unpack(code, n, what)
        if vtype == _STRING:
            return self.string(what)
        if vtype == _ARRAY:
            itype = self.u32(what)
            count = self.u64(what)
            if itype == _ARRAY:
                raise CheckpointError(f"{self.path}: GGUF {what} is a nested array (unsupported)")
            least = _SCALARS[itype][1] if itype in _SCALARS else 8
            self.need(count * least, f"{what} ({count} items)")  # absurd counts stop here
            if itype in _SCALARS and (not keep or count > CONFIG_ARRAY_LIMIT):
                self.pos += count * _SCALARS[itype][1]
                return None
            if itype == _STRING and (not keep or count > CONFIG_ARRAY_LIMIT):
                self.skip_strings(count, what)
                return None
            keep_items = keep and count <= CONFIG_ARRAY_LIMIT
            items = [self.value(itype, what, keep_items) for _ in range(count)]
            return items if keep_items else None
        raise CheckpointError(f"{self.path}: GGUF {what} has unknown value type {vtype}")


def _gguf_module(path: Path) -> Any:
    """The optional ``gguf`` package (its type tables and dequantizers), or one line saying so."""
    try:
        import gguf
        import gguf.quants
    except ImportError:
        raise CheckpointError(
            f"{path}: reading GGUF files needs the gguf package: pip install 'specbound[gguf]'"
        ) from None
    return gguf


def _parse(buf: mmap.mmap, path: Path) -> tuple[dict[str, Any], dict[str, tuple], int]:
    """(metadata KV, {name: (numpy shape, type name, byte offset, byte size)}, data start)."""
    gguf = _gguf_module(path)
    qtypes, sizes = gguf.GGMLQuantizationType, gguf.GGML_QUANT_SIZES
    cur = _Cursor(buf, path)
    cur.need(4, "magic")
    if bytes(buf[:4]) != GGUF_MAGIC:
        raise CheckpointError(f"{path}: not a GGUF file (bad magic)")
    cur.pos = 4
    version = cur.u32("version")
    if version not in SUPPORTED_VERSIONS:
        raise CheckpointError(
            f"{path}: GGUF version {version} is not supported (supported: "
            f"{', '.join(map(str, SUPPORTED_VERSIONS))}; big-endian files are not supported)"
        )
    n_tensors = cur.u64("tensor count")
    n_kv = cur.u64("metadata count")
    # Each KV pair needs >= 8+4+1 bytes and each tensor info >= 8+4+8+4+8: absurd counts fail here.
    cur.need(n_kv * 13 + n_tensors * 32, f"{n_kv} metadata entries and {n_tensors} tensor infos")
    kv: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string("metadata key")
        vtype = cur.u32(f"metadata '{key}' type")
        kv[key] = cur.value(vtype, f"metadata '{key}'")
    infos: dict[str, tuple] = {}
    for _ in range(n_tensors):
        name = cur.string("tensor name")
        n_dims = cur.u32(f"tensor '{name}' rank")
        if not 1 <= n_dims <= MAX_DIMS:
            raise CheckpointError(f"{path}: GGUF tensor '{name}' has rank {n_dims} (1..{MAX_DIMS})")
        ne = [cur.u64(f"tensor '{name}' dims") for _ in range(n_dims)]
        type_id = cur.u32(f"tensor '{name}' type")
        offset = cur.u64(f"tensor '{name}' offset")
        if name in infos:
            raise CheckpointError(f"{path}: GGUF tensor '{name}' is declared twice")
        try:
            qtype = qtypes(type_id)
        except ValueError:
            raise CheckpointError(
                f"{path}: GGUF tensor '{name}' has unknown storage type {type_id}"
            ) from None
        block, type_size = sizes[qtype]
        if any(d < 1 for d in ne) or ne[0] % block:
            raise CheckpointError(
                f"{path}: GGUF tensor '{name}' has dims {ne} (row length must be a positive "
                f"multiple of {block} for {qtype.name})"
            )
        n_elements = int(np.prod([float(d) for d in ne]))
        nbytes = n_elements // block * type_size
        infos[name] = (tuple(reversed(ne)), qtype.name, offset, nbytes)
    alignment = kv.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1):
        raise CheckpointError(f"{path}: GGUF general.alignment={alignment!r} is not a power of 2")
    start = -(-cur.pos // alignment) * alignment
    for name, (shape, tname, offset, nbytes) in infos.items():
        if start + offset + nbytes > cur.size:
            raise CheckpointError(
                f"{path}: truncated or corrupt GGUF file (tensor '{name}' declares {nbytes} bytes "
                f"at offset {start + offset}, file has {cur.size})"
            )
    _refuse_overlaps(path, infos)
    return kv, infos, start


def _refuse_overlaps(path: Path, infos: dict[str, tuple]) -> None:
    """Each tensor owns its data bytes: two declared ranges that overlap are refused, so that the
    values read (and the memory they take) stay bounded by the file's size."""
    ranges = sorted((offset, offset + nbytes, name) for name, (_, _, offset, nbytes) in infos.items())
    for (a0, a1, a), (b0, b1, b) in zip(ranges, ranges[1:]):
        if b0 < a1:
            raise CheckpointError(
                f"{path}: corrupt GGUF file (tensors '{a}' and '{b}' declare overlapping data: bytes "
                f"[{a0}, {a1}) and [{b0}, {b1}) after the header)"
            )


_HEADERS: dict[tuple, tuple] = {}
"""Parsed headers of the files opened last, by (path, device, inode, size, mtime): a layer-wise run
opens the same file once per layer, and a header with a token vocabulary takes ~0.1 s to parse."""
_HEADERS_KEPT = 4


def _parsed_header(buf: mmap.mmap, path: Path, key: tuple) -> tuple[dict[str, Any], dict[str, tuple], int]:
    """:func:`_parse` of the file identified by ``key``, reused while the file is unchanged (same
    inode, size and modification time); the metadata is returned as a copy."""
    if key not in _HEADERS:
        header = _parse(buf, path)
        while len(_HEADERS) >= _HEADERS_KEPT:
            _HEADERS.pop(next(iter(_HEADERS)))
        _HEADERS[key] = header
    kv, infos, start = _HEADERS[key]
    return copy.deepcopy(kv), infos, start


def _value_dtype(type_name: str) -> str:
    """The dtype of the exact values a stored type yields (every quantized type: float32)."""
    return "float64" if type_name == "F64" else "float32"


def open_gguf(path: Path) -> Opened:
    """Parse a GGUF file's header; values are dequantized per tensor by the returned ``fetch``.

    ``config`` is the metadata as Python values (arrays longer than :data:`CONFIG_ARRAY_LIMIT`
    dropped); ``metadata`` the same as strings; ``quantization`` the storage type per tensor.
    """
    try:
        with open(path, "rb") as fh:
            buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            st = os.fstat(fh.fileno())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: cannot be memory-mapped ({one_line(exc)})") from None
    kv, infos, start = _parsed_header(buf, path, (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    config = {k: v for k, v in kv.items() if v is not None}
    metadata = {k: str(v) for k, v in config.items()}
    shapes = {name: info[0] for name, info in infos.items()}
    quantization = {name: info[1] for name, info in infos.items()}
    dtypes = {
        name: _value_dtype(t) if t in EXACT_QUANT_TYPES else f"gguf-{t}"
        for name, t in quantization.items()
    }

    def fetch(name: str) -> np.ndarray:
        shape, type_name, offset, nbytes = infos[name]
        return dequantize(buf, start + offset, nbytes, shape, type_name, path, name)

    return Opened(
        shapes=shapes, dtypes=dtypes, fetch=fetch, metadata=metadata,
        quantization=quantization, config=config,
    )


def dequantize(
    buf: Any, offset: int, nbytes: int, shape: tuple[int, ...], type_name: str,
    path: Path, name: str,
) -> np.ndarray:
    """Exact values of one stored tensor, shape ``shape`` (numpy order), float32 (F64: float64)."""
    gguf = _gguf_module(path)
    if type_name not in EXACT_QUANT_TYPES:
        raise LayoutError(
            f"{path}: tensor '{name}' is stored as {type_name}, which is not supported "
            f"(supported: {', '.join(sorted(EXACT_QUANT_TYPES))})"
        )
    n_elements = int(np.prod([float(d) for d in shape]))
    if n_elements > MAX_TENSOR_ELEMENTS:
        raise LayoutError(
            f"{path}: tensor '{name}' declares {n_elements} entries (limit {MAX_TENSOR_ELEMENTS})"
        )
    raw = np.frombuffer(buf, dtype=np.uint8, count=nbytes, offset=offset)
    if type_name == "F64":
        return raw.view("<f8").reshape(shape)
    if type_name == "BF16":
        # bfloat16 is the top half of a binary32: shifting it up 16 bits is the exact widening.
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    qtype = gguf.GGMLQuantizationType[type_name]
    rows = raw.reshape(-1, nbytes // max(1, n_elements // shape[-1]))
    try:
        values = _dequantize_rows(gguf, rows, qtype)
    except Exception as exc:  # pragma: no cover - sizes were checked when the header was parsed
        raise CheckpointError(f"{path}: tensor '{name}' cannot be dequantized ({one_line(exc)})")
    return np.asarray(values, dtype=np.float32).reshape(shape)


DEQUANTIZE_CHUNK_ELEMENTS = 1 << 18
"""Entries dequantized per call of the format's block decoder (1 MiB of float32 plus the decoder's
temporaries, a few times that)."""


def _dequantize_rows(gguf: Any, rows: np.ndarray, qtype: Any) -> np.ndarray:
    """``gguf.quants.dequantize(rows, qtype)``, bit for bit, in chunks of whole rows.

    ``gguf.quants.dequantize`` calls the type's block decoder on groups of 16 rows, which at these
    sizes spends most of its time in per-group numpy overhead (2.5 s of Python for Gemma 3 270M's
    projections).  The decoder is elementwise binary32 arithmetic per block (no reduction across
    blocks), so decoding more rows per call gives the same floats (a test compares every supported
    type bit for bit).  Falls back to ``gguf.quants.dequantize`` where this gguf version has no
    per-type ``dequantize_rows``."""
    decoder = getattr(gguf.quants, qtype.name, None)
    if decoder is None or not hasattr(decoder, "dequantize_rows"):
        return gguf.quants.dequantize(rows, qtype)
    if hasattr(decoder, "init_grid"):
        decoder.init_grid()
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    row_length = rows.shape[1] // size * block
    out = np.empty((rows.shape[0], row_length), dtype=np.float32)
    step = max(1, DEQUANTIZE_CHUNK_ELEMENTS // max(1, row_length))
    for start in range(0, rows.shape[0], step):
        out[start : start + step] = decoder.dequantize_rows(rows[start : start + step])
    return out
