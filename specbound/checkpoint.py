"""Checkpoint containers: named real tensors read safely from disk, and their mapping to the model.

Contract.  A *checkpoint* is a finite set of named tensors ``T_name`` with entries in the binary
floating-point formats float16, bfloat16, float32 or float64, optional string metadata and, for a
Hugging Face folder, a ``config.json``.  Reading a tensor returns a float64 array whose entries are
*exactly* the stored reals (every binary16/bfloat16/binary32 number is a binary64 number, so the
conversion is the identity on values); nothing is rounded, rescaled or reordered.  Values are read
only for the tensors an adapter asks for, each into a fresh array owned by the caller.

Containers (chosen by file extension, else by the first bytes):

* ``.safetensors`` -- memory-mapped through ``safetensors.safe_open``; header metadata is kept;
* ``.pt`` / ``.pth`` / ``.bin`` -- a PyTorch state dict, loaded *only* with
  ``torch.load(weights_only=True)``: a pickle that refers to anything other than plain tensors and
  containers is refused before any of its code can run; nested dicts are flattened with ``.``;
  a ``"__metadata__"`` entry holding a ``dict[str, str]`` is taken as metadata;
* ``.npz`` -- ``numpy.load(allow_pickle=False)``; a 0-d string array ``__metadata__`` holding a JSON
  object is taken as metadata;
* ``.gguf`` -- a llama.cpp GGUF file (:mod:`specbound.formats.gguf_file`): quantized tensors are
  dequantized exactly to the float32 values the format defines; ``quantization`` records the
  storage type of every tensor and ``config`` the file's metadata;
* a folder -- a Hugging Face model folder: ``config.json`` plus ``model.safetensors`` or
  ``pytorch_model.bin``, or a sharded checkpoint's ``model.safetensors.index.json`` /
  ``pytorch_model.bin.index.json`` (:mod:`specbound.formats.safetensors_sharded`).  A weights file
  with one of those two names also picks up the ``config.json`` beside it;
* a repo id (``owner/name``) that is not an existing path -- the snapshot folder of that repo in
  the local Hugging Face cache, found offline (:mod:`specbound.formats.hf_cache`);
* in memory -- a state dict ``Mapping[str, torch.Tensor | numpy.ndarray]`` or a ``torch.nn.Module``
  (:mod:`specbound.formats.state_dict`), read and checked exactly like a file.

Every failure raises a :class:`~specbound.errors.SpecboundError` subclass with a one-line message
that names the file and, where there is one, the tensor.
"""

from __future__ import annotations

import json
import os
import re
import warnings
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import CheckpointError, LayoutError, NonFiniteError, SourceNotFoundError, one_line
from .formats import Opened, file_sha256
from .formats.gguf_file import open_gguf
from .formats.hf_cache import hub_cache_dir, looks_like_repo_id, resolve_repo_id
from .formats.safetensors_sharded import INDEX_FILES, open_sharded
from .formats.state_dict import describe, is_in_memory, open_state_dict
from .matrices import AnalysisWeights
from .vocabulary import VIEW_ANALYSIS

CheckpointSource = Any
"""A path (``str`` / ``os.PathLike``), a cached repo id, a state dict or a ``torch.nn.Module``."""

MAX_WEIGHT_MAGNITUDE = 1e30
"""A tensor whose largest |entry| exceeds this is refused: products of a few such norms overflow
float64 (the planner's floats), and no trained network has such weights."""
MIN_WEIGHT_MAGNITUDE = 1e-30
"""A nonzero tensor whose largest |entry| is below this is refused (its squares and products
underflow); an exactly zero tensor is fine (rank 0, entropy 0)."""

FLOAT_DTYPES: frozenset[str] = frozenset({"float16", "bfloat16", "float32", "float64"})
"""Stored dtypes whose every value is exactly a binary64 number (so reading them is lossless)."""

HF_WEIGHT_FILES: tuple[str, ...] = ("model.safetensors", "pytorch_model.bin")
"""Weight files of a Hugging Face folder, in order of preference (safetensors never unpickles)."""

_SAFETENSORS_DTYPES = {
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
}
_TORCH_SUFFIXES = (".pt", ".pth", ".bin")


_one_line = one_line


@dataclass(frozen=True, eq=False)
class Checkpoint:
    """An opened checkpoint: names, shapes and dtypes are known; values are read on demand.

    ``path`` is the weights file (inside the folder, for a Hugging Face folder), ``source`` the
    path the user gave.  :meth:`tensor` is the only way values leave the container.
    """

    path: Path
    source: Path
    container: str
    shapes: Mapping[str, tuple[int, ...]]
    dtypes: Mapping[str, str]
    metadata: Mapping[str, str] = field(default_factory=dict)
    config: Mapping[str, Any] | None = None
    config_path: Path | None = None
    _fetch: Callable[[str], np.ndarray] | None = field(default=None, repr=False)
    quantization: Mapping[str, str] = field(default_factory=dict)
    """Storage type per tensor for GGUF files (``Q4_K``, ``Q8_0``, ``F32``...); empty otherwise."""
    _digest: Callable[[], str] | None = field(default=None, repr=False)

    def names(self) -> tuple[str, ...]:
        return tuple(self.shapes)

    def __contains__(self, name: object) -> bool:
        return name in self.shapes

    def shape(self, name: str) -> tuple[int, ...]:
        """Stored shape of tensor ``name``; LayoutError naming it if it is absent."""
        if name not in self.shapes:
            raise LayoutError(f"{self.path}: missing tensor '{name}'")
        return self.shapes[name]

    def tensor(self, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """Exact float64 copy of tensor ``name``.

        Guarantees: the tensor exists, has a floating dtype (:data:`FLOAT_DTYPES`), has exactly
        ``shape`` when one is given (rank included), and every entry is finite.
        """
        got = self.shape(name)
        if shape is not None and tuple(got) != tuple(shape):
            raise LayoutError(
                f"{self.path}: tensor '{name}' has shape {_fmt_shape(got)}, "
                f"expected {_fmt_shape(shape)}"
            )
        dtype = self.dtypes[name]
        if dtype not in FLOAT_DTYPES:
            raise LayoutError(
                f"{self.path}: tensor '{name}' has dtype {dtype}, expected one of "
                f"{', '.join(sorted(FLOAT_DTYPES))}"
            )
        assert self._fetch is not None
        array = np.array(self._fetch(name), dtype=np.float64, copy=True, order="C")
        if array.shape != tuple(got):  # pragma: no cover - a container lying about its header
            raise CheckpointError(f"{self.path}: tensor '{name}' is corrupt (shape mismatch)")
        if not np.isfinite(array).all():
            bad = int(array.size - np.count_nonzero(np.isfinite(array)))
            raise NonFiniteError(
                f"{self.path}: tensor '{name}' has {bad} NaN/Inf entr{'y' if bad == 1 else 'ies'}"
            )
        return array

    def sha256(self) -> str:
        """Hex SHA-256 identifying exactly what was analysed: the weights file's bytes; for a
        sharded or in-memory checkpoint the digest its module defines."""
        if self._digest is not None:
            return self._digest()
        return file_sha256(self.path)


def _fmt_shape(shape: Iterable[int]) -> str:
    dims = tuple(int(s) for s in shape)
    return f"({', '.join(map(str, dims))}{',' if len(dims) == 1 else ''}) ({len(dims)}-D)"


# --------------------------------------------------------------------------- locating files


def _locate(path: Path) -> tuple[Path, Path | None]:
    """(weights file, config.json or None) for a user-given file or Hugging Face folder."""
    if not path.exists():
        raise CheckpointError(f"{path}: no such file or folder")
    if path.is_dir():
        config = path / "config.json"
        for name in HF_WEIGHT_FILES + INDEX_FILES:
            if (path / name).is_file():
                return path / name, config if config.is_file() else None
        raise CheckpointError(
            f"{path}: folder holds no weights file (expected "
            f"{', '.join(HF_WEIGHT_FILES + INDEX_FILES)})"
        )
    config = path.parent / "config.json"
    if path.name in HF_WEIGHT_FILES + INDEX_FILES and config.is_file():
        return path, config
    return path, None


def _read_config(config_path: Path | None) -> dict[str, Any] | None:
    if config_path is None:
        return None
    try:
        size = config_path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise CheckpointError(f"{config_path}: config of {size} bytes is larger than "
                                  f"{MAX_CONFIG_BYTES} (not a model config)")
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except CheckpointError:
        raise
    except RecursionError:
        raise CheckpointError(f"{config_path}: not a readable JSON config (nested too deeply)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: JSON syntax, huge integers
        raise CheckpointError(f"{config_path}: not a readable JSON config ({_one_line(exc)})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{config_path}: config is not a JSON object")
    _check_config_values(config_path, config)
    return config


#: a model config is a few kilobytes; nothing legitimate comes near this
MAX_CONFIG_BYTES = 16 * 2**20
#: deeper nesting than this in a config.json is not a model description
MAX_CONFIG_DEPTH = 32


def _check_config_values(config_path: Path, config: dict) -> None:
    """Refuse integers beyond int64 and nesting beyond MAX_CONFIG_DEPTH (iteratively, no recursion)."""
    stack = [(config, 0, "")]
    while stack:
        node, depth, where = stack.pop()
        if depth > MAX_CONFIG_DEPTH:
            raise CheckpointError(f"{config_path}: config nested deeper than {MAX_CONFIG_DEPTH} levels")
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            name = f"{where}.{key}" if where else str(key)
            if isinstance(value, (dict, list)):
                stack.append((value, depth + 1, name))
            elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
                raise CheckpointError(f"{config_path}: config value {name} is an integer beyond int64")


def _container_of(path: Path) -> str:
    if path.name in INDEX_FILES:
        return "torch-sharded" if path.name.startswith("pytorch") else "safetensors-sharded"
    suffix = path.suffix.lower()
    if suffix == ".gguf":
        return "gguf"
    if suffix == ".safetensors":
        return "safetensors"
    if suffix in _TORCH_SUFFIXES:
        return "torch"
    if suffix == ".npz":
        return "npz"
    # Unknown extension: decide by content.
    with open(path, "rb") as fh:
        head = fh.read(9)
    if head[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(path) as zf:
                names = zf.namelist()
        except (zipfile.BadZipFile, OSError) as exc:
            raise CheckpointError(f"{path}: truncated or corrupt zip archive ({_one_line(exc)})")
        if any(n.endswith("data.pkl") for n in names):
            return "torch"
        return "npz"
    if head[:4] == b"GGUF":
        return "gguf"
    if head[:1] == b"\x80":  # pickle protocol marker: legacy torch.save
        return "torch"
    if len(head) == 9 and head[8:9] == b"{":  # u64 header length, then the JSON header
        return "safetensors"
    raise CheckpointError(
        f"{path}: not a recognized checkpoint (expected .safetensors, a PyTorch state dict "
        f".pt/.pth/.bin, .npz, .gguf, or a Hugging Face folder)"
    )


# --------------------------------------------------------------------------- containers


def _open_safetensors(path: Path) -> Opened:
    from safetensors import safe_open

    try:
        handle = safe_open(str(path), framework="numpy")
        metadata = dict(handle.metadata() or {})
        shapes: dict[str, tuple[int, ...]] = {}
        dtypes: dict[str, str] = {}
        for name in handle.keys():
            sl = handle.get_slice(name)
            shapes[name] = tuple(int(s) for s in sl.get_shape())
            dtypes[name] = _safetensors_dtype(sl.get_dtype())
    except Exception as exc:  # SafetensorError / OSError: truncated or not safetensors at all
        raise CheckpointError(
            f"{path}: truncated or corrupt safetensors file ({_one_line(exc)})"
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
                f"{path}: tensor '{name}' cannot be read ({_one_line(exc)})"
            ) from None

    return Opened(shapes=shapes, dtypes=dtypes, metadata=metadata, fetch=fetch)


def _safetensors_dtype(raw: str) -> str:
    """numpy-style name of a safetensors dtype tag (``F32`` -> ``float32``, ``I64`` -> ``int64``)."""
    if raw in _SAFETENSORS_DTYPES:
        return _SAFETENSORS_DTYPES[raw]
    m = re.fullmatch(r"([FIU])(\d+)(_\w+)?", raw)
    if m:
        kind = {"F": "float", "I": "int", "U": "uint"}[m.group(1)]
        return f"{kind}{m.group(2)}{(m.group(3) or '').lower()}"
    return raw.lower()


_REFUSED = re.compile(r"(Unsupported global: GLOBAL \S+|Unsupported operand \S+)")


MAX_TORCH_PICKLE = 256 * 2**20
"""Largest pickle (``data.pkl``) of a zip ``.pt`` file read: the unpickler holds it in memory."""
MAX_TORCH_COMPRESSED = 16 * 2**20
"""Largest declared size of a *compressed* member of a zip ``.pt`` file: torch writes its members
stored (uncompressed, then memory-mapped); a compressed one would be inflated into memory."""


def _check_torch_zip(path: Path) -> None:
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
        raise CheckpointError(f"{path}: truncated or corrupt PyTorch file ({_one_line(exc)})") from None


def _open_torch(path: Path) -> Opened:
    import pickle

    import torch

    is_zip = zipfile.is_zipfile(path)
    if is_zip:
        _check_torch_zip(path)
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
            f"{path}: truncated or corrupt PyTorch file ({type(exc).__name__}: {_one_line(exc)})"
        ) from None
    if not isinstance(obj, Mapping):
        raise CheckpointError(
            f"{path}: holds a {type(obj).__name__}, not a state dict (a mapping name -> tensor)"
        )
    tensors: dict[str, Any] = {}
    metadata: dict[str, str] = {}
    _flatten_state(obj, "", tensors, metadata, path=path)
    shapes = {k: tuple(int(s) for s in t.shape) for k, t in tensors.items()}
    dtypes = {
        k: str(t.dtype).removeprefix("torch.") if t.layout == torch.strided else f"{t.layout}"
        for k, t in tensors.items()
    }

    def fetch(name: str) -> np.ndarray:
        return tensors[name].detach().to(torch.float64).numpy()

    return Opened(shapes=shapes, dtypes=dtypes, metadata=metadata, fetch=fetch)


#: nesting of a state dict beyond this is not a checkpoint
MAX_STATE_DEPTH = 32


def _flatten_state(obj: Mapping, prefix: str, out: dict, metadata: dict, path: Path | None = None,
                   _seen: tuple[int, ...] = ()) -> None:
    import torch

    if id(obj) in _seen:
        raise CheckpointError(f"{path}: the state dict contains itself (at '{prefix.rstrip('.')}')")
    if len(_seen) >= MAX_STATE_DEPTH:
        raise CheckpointError(f"{path}: the state dict is nested deeper than {MAX_STATE_DEPTH} levels")
    seen = _seen + (id(obj),)
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, torch.Tensor):
            if value.is_meta:
                raise CheckpointError(f"{path}: tensor '{name}' is on the meta device (it holds no "
                                      "values; save the loaded weights)")
            if value.layout != torch.strided:
                raise CheckpointError(f"{path}: tensor '{name}' has layout {value.layout} (dense only)")
            out[name] = value
        elif key == "__metadata__" and not prefix and isinstance(value, Mapping):
            metadata.update({str(k): str(v) for k, v in value.items()})
        elif isinstance(value, Mapping):
            _flatten_state(value, f"{name}.", out, metadata, path, seen)
        # Other plain values (epoch counters, strings) carry no weights and are ignored.


def _open_npz(path: Path) -> Opened:
    """A .npz checkpoint: headers checked against limits up front, each tensor read when fetched."""
    from .npz_archive import NpzArchive

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
                f"{path}: '__metadata__' is not a JSON object string ({_one_line(exc)})"
            ) from None
        metadata = {str(k): str(v) for k, v in parsed.items()}
    members = {k: m for k, m in archive.members.items() if k != "__metadata__"}
    shapes = {k: m.shape for k, m in members.items()}
    dtypes = {k: m.dtype.name for k, m in members.items()}
    return Opened(shapes=shapes, dtypes=dtypes, metadata=metadata, fetch=archive.read)


_OPENERS: dict[str, Callable[[Path], Opened]] = {
    "safetensors": _open_safetensors,
    "torch": _open_torch,
    "npz": _open_npz,
    "gguf": open_gguf,
    "safetensors-sharded": lambda index: open_sharded(index, _open_safetensors),
    "torch-sharded": lambda index: open_sharded(index, _open_torch),
}


def resolve_source(source: str | os.PathLike) -> Path:
    """The local path a user-given checkpoint argument names: an existing path as given, else the
    cached snapshot of that repo id (offline); SourceNotFoundError naming both possibilities."""
    path = Path(source)
    if path.exists():
        return path
    text = os.fspath(source)
    folder = resolve_repo_id(text) if isinstance(text, str) else None
    if folder is not None:
        return folder
    if not looks_like_repo_id(text):  # an absolute or dotted path cannot be a repo id
        raise SourceNotFoundError(f"{text}: no such file or folder")
    raise SourceNotFoundError(
        f"{text}: no such file or folder, and no repo '{text}' in the local Hugging Face cache "
        f"{hub_cache_dir()} (offline: nothing is downloaded)"
    )


# --------------------------------------------------------------------------- public API


def open_checkpoint(path: CheckpointSource) -> Checkpoint:
    """Open a checkpoint (file, folder, cached repo id, or weights in memory); read its header,
    not its values.

    Raises CheckpointError (missing, empty, truncated, corrupt, or an unsafe pickle).
    """
    if is_in_memory(path):
        label = Path(describe(path))
        opened = open_state_dict(path)
        return Checkpoint(
            path=label, source=label, container="state-dict", shapes=opened.shapes,
            dtypes=opened.dtypes, metadata=opened.metadata, config=opened.config,
            config_path=None, _fetch=opened.fetch, _digest=opened.digest,
        )
    source = Path(path)
    weights, config_path = _locate(resolve_source(path))
    if not weights.is_file():
        raise CheckpointError(f"{weights}: not a regular file")
    if weights.stat().st_size == 0:
        raise CheckpointError(f"{weights}: file is empty")
    container = _container_of(weights)
    opened = _OPENERS[container](weights)
    if opened.config is not None and config_path is None:  # GGUF: the config is in the file
        config, config_path = opened.config, weights
    else:
        config = _read_config(config_path)
    return Checkpoint(
        path=weights,
        source=source,
        container=container,
        shapes=opened.shapes,
        dtypes=opened.dtypes,
        metadata=opened.metadata,
        config=config,
        config_path=config_path,
        _fetch=opened.fetch,
        quantization=opened.quantization,
        _digest=opened.digest,
    )


def read_tensors(path: CheckpointSource, names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Exact float64 copies of the named tensors (default: every floating tensor) of a checkpoint.

    Each returned array equals the stored tensor entry by entry (see the module contract) and is
    finite; missing names, non-floating dtypes and NaN/Inf raise with the tensor's name.
    """
    ckpt = open_checkpoint(path)
    if names is None:
        names = [n for n in ckpt.names() if ckpt.dtypes[n] in FLOAT_DTYPES]
    return {name: ckpt.tensor(name) for name in names}


def read_metadata(path: CheckpointSource) -> dict[str, str]:
    """The checkpoint's string metadata (safetensors header, or ``__metadata__``; may be empty)."""
    return dict(open_checkpoint(path).metadata)


def load_weights(
    path: CheckpointSource | None = None,
    *,
    num_heads: int | None = None,
    activation: str | None = None,
    view: str = VIEW_ANALYSIS,
) -> AnalysisWeights:
    """All covered matrices of a checkpoint, in canonical order (``matrices.ordered``).

    ``view`` (:data:`specbound.vocabulary.VIEWS`): ``analysis`` (default; the adapter's analysis
    model, the model's score scale on the query side: spectra and certify), ``scores`` (per-head
    score and value-output matrices with the scale) or ``proxy`` (no score scale: the paper
    proxies' convention).

    ``path`` is anything :func:`open_checkpoint` accepts (a path, a cached repo id, a state dict, a
    ``torch.nn.Module`` or ``transformers`` model); ``path=None`` loads the embedded default model.  The layout is detected from tensor names and
    metadata (see :mod:`specbound.adapters`).  ``num_heads`` is needed for a BERT state dict
    without ``config.json``; when both are present they must agree.  ``activation`` overrides
    nothing: it fills in only what the checkpoint does not say, and must agree where it does.
    """
    from .adapters import detect
    from .data import default_checkpoint_path

    ckpt = open_checkpoint(default_checkpoint_path() if path is None else path)
    adapter = detect(ckpt)
    weights = adapter.adapt(ckpt, num_heads=num_heads, activation=activation, view=view)
    _check_magnitudes(ckpt.path, weights)
    return weights


def _check_magnitudes(where, weights: AnalysisWeights) -> None:
    """Refuse covered matrices (factors) and read-outs outside the range trained weights live in."""
    parts = [(m.name, m.left) for m in weights.matrices]
    parts += [(m.name, m.right) for m in weights.matrices if m.right is not None]
    if weights.readout is not None:
        parts.append(("read-out", weights.readout))
    for name, array in parts:
        array = np.asarray(array)
        top = float(np.max(np.abs(array))) if array.size else 0.0
        if top > MAX_WEIGHT_MAGNITUDE or 0.0 < top < MIN_WEIGHT_MAGNITUDE:
            raise NonFiniteError(
                f"{where}: matrix {name} has largest entry {top:.3g}, outside the range "
                f"[{MIN_WEIGHT_MAGNITUDE:g}, {MAX_WEIGHT_MAGNITUDE:g}] of trained weights (norms and "
                "products of such entries overflow or underflow float64; rescale or zero the tensor)"
            )


# ------------------------------------------------------------------------------------------------
# partial builds (the engine's tasks): only some layers' tensors are read


_LAYER_OF_NAME = re.compile(r"(?:^|\.)(\d+)\.")
"""The layer index in a tensor name: the first dotted integer (``h.3.``, ``model.layers.3.``,
``encoder.layer.3.``, ``encoder.block.3.``, ``blk.3.``); names without one belong to no layer."""


def layer_of_name(name: str) -> int | None:
    """The layer a tensor name belongs to (:data:`_LAYER_OF_NAME`), None for no layer."""
    m = _LAYER_OF_NAME.search(name)
    return None if m is None else int(m.group(1))


@dataclass(frozen=True, eq=False)
class _PartialCheckpoint(Checkpoint):
    """A checkpoint whose tensors of layers outside ``keep`` read as zero-memory placeholders
    (shape and dtype still checked against the header); ``digest`` replaces the file hash."""

    keep: frozenset = frozenset()
    digest: str = ""

    def tensor(self, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
        layer = layer_of_name(name)
        if layer is None or layer in self.keep:
            return super().tensor(name, shape)
        got = self.shape(name)
        if shape is not None and tuple(got) != tuple(shape):
            raise LayoutError(f"{self.path}: tensor '{name}' has shape {_fmt_shape(got)}, "
                              f"expected {_fmt_shape(shape)}")
        if self.dtypes[name] not in FLOAT_DTYPES:
            raise LayoutError(f"{self.path}: tensor '{name}' has dtype {self.dtypes[name]}, expected one of "
                              f"{', '.join(sorted(FLOAT_DTYPES))}")
        from .adapters.helpers import placeholder

        return placeholder(got)

    def sha256(self) -> str:
        return self.digest or super().sha256()


def load_layers(
    path: CheckpointSource | None,
    layers: Iterable[int],
    *,
    num_heads: int | None = None,
    activation: str | None = None,
    view: str = VIEW_ANALYSIS,
    sha256: str = "",
) -> AnalysisWeights:
    """:func:`load_weights` reading only the tensors of ``layers`` (and of no layer).

    The result has every matrix of the full build, in the same order, with the same facts; the
    matrices of ``layers`` hold the same values as :func:`load_weights` gives (and pass the same
    magnitude check), the others are zero-memory placeholders
    (:func:`specbound.adapters.helpers.is_placeholder`) that must not be used as values.  So a
    worker holds one layer at a time, and ``layers=()`` gives the structure alone.  ``sha256``
    (when the caller knows it) saves hashing the files again.
    """
    from dataclasses import fields

    from .adapters import detect
    from .adapters.helpers import is_placeholder
    from .data import default_checkpoint_path

    ckpt = open_checkpoint(default_checkpoint_path() if path is None else path)
    values = {f.name: getattr(ckpt, f.name) for f in fields(Checkpoint)}
    partial = _PartialCheckpoint(**values, keep=frozenset(int(l) for l in layers), digest=sha256)
    weights = detect(partial).adapt(partial, num_heads=num_heads, activation=activation, view=view)
    built = [m for m in weights.matrices if not is_placeholder(m.left)]
    _check_magnitudes(ckpt.path, _only(weights, built))
    return weights


def _only(weights: AnalysisWeights, matrices: list) -> AnalysisWeights:
    from dataclasses import replace

    return replace(weights, matrices=tuple(matrices))
