"""Checkpoint containers: named real tensors read safely from disk, and their mapping to the model.

Contract.  A *checkpoint* is a finite set of named tensors ``T_name`` with entries in the binary
floating-point formats float16, bfloat16, float32 or float64, optional string metadata and, for a
Hugging Face folder, a ``config.json``.  Reading a tensor returns a float64 array whose entries are
*exactly* the stored reals (every binary16/bfloat16/binary32 number is a binary64 number, so the
conversion is the identity on values); nothing is rounded, rescaled or reordered.  Values are read
only for the tensors an adapter asks for, each into a fresh array owned by the caller.

Containers (chosen by file extension, else by the first bytes):

* ``.safetensors`` -- memory-mapped through ``safetensors.safe_open``; header metadata is kept
  (:mod:`specbound.formats.safetensors_file`);
* ``.pt`` / ``.pth`` / ``.bin`` -- a PyTorch state dict, loaded *only* with
  ``torch.load(weights_only=True)``: a pickle that refers to anything other than plain tensors and
  containers is refused before any of its code can run; nested dicts are flattened with ``.``;
  a ``"__metadata__"`` entry holding a ``dict[str, str]`` is taken as metadata
  (:mod:`specbound.formats.torch_file`);
* ``.npz`` -- ``numpy.load(allow_pickle=False)``; a 0-d string array ``__metadata__`` holding a JSON
  object is taken as metadata (:mod:`specbound.formats.npz_file`);
* ``.gguf`` -- a llama.cpp GGUF file (:mod:`specbound.formats.gguf_file`): quantized tensors are
  dequantized exactly to the float32 values the format defines; ``quantization`` records the
  storage type of every tensor and ``config`` the file's metadata;
* a folder -- a Hugging Face model folder: ``config.json`` plus ``model.safetensors`` or
  ``pytorch_model.bin``, or a sharded checkpoint's ``model.safetensors.index.json`` /
  ``pytorch_model.bin.index.json`` (:mod:`specbound.formats.safetensors_sharded`).  A weights file
  with one of those two names also picks up the ``config.json`` beside it
  (:mod:`specbound.formats.hf_folder`);
* a repo id (``owner/name``) that is not an existing path -- the snapshot folder of that repo in
  the local Hugging Face cache, found offline (:mod:`specbound.formats.hf_cache`);
* in memory -- a state dict ``Mapping[str, torch.Tensor | numpy.ndarray]`` or a ``torch.nn.Module``
  (:mod:`specbound.formats.state_dict`), read and checked exactly like a file.

Every failure raises a :class:`~specbound.errors.SpecboundError` subclass with a one-line message
that names the file and, where there is one, the tensor.

This module chooses the container and builds the analysis weights (:func:`load_weights`, and
:func:`load_layers` from a :class:`~specbound.partial.PartialCheckpoint`); the
:class:`~specbound.checkpoint_value.Checkpoint` value lives in :mod:`specbound.checkpoint_value`,
each container in :mod:`specbound.formats`.  Every name they export that callers used from here is
importable from here too.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .checkpoint_value import FLOAT_DTYPES, Checkpoint
from .errors import CheckpointError, NonFiniteError, SourceNotFoundError, one_line
from .formats import Opened, file_sha256
from .formats.gguf_chunks import assembled_source
from .formats.gguf_file import open_gguf
from .formats.hf_cache import hub_cache_dir, looks_like_repo_id, resolve_repo_id
from .formats.hf_folder import HF_WEIGHT_FILES, MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH, locate, read_config
from .formats.npz_file import open_npz
from .formats.safetensors_file import open_safetensors
from .formats.safetensors_sharded import INDEX_FILES, open_sharded
from .formats.state_dict import describe, is_in_memory, open_state_dict
from .formats.torch_file import (
    MAX_STATE_DEPTH,
    MAX_TORCH_COMPRESSED,
    MAX_TORCH_PICKLE,
    TORCH_SUFFIXES,
    open_torch,
)
from .matrices import AnalysisWeights
from .partial import PartialCheckpoint, layer_of_name
from .vocabulary import VIEW_ANALYSIS

__all__ = [
    # defined here
    "CheckpointSource", "MAX_WEIGHT_MAGNITUDE", "MIN_WEIGHT_MAGNITUDE", "resolve_source",
    "open_checkpoint", "read_tensors", "read_metadata", "load_weights", "load_layers", "matrix_tensors",
    "check_digest",
    # re-exported from the modules this one was split into, so callers keep importing them here
    "Checkpoint", "FLOAT_DTYPES", "HF_WEIGHT_FILES", "MAX_CONFIG_BYTES", "MAX_CONFIG_DEPTH",
    "MAX_STATE_DEPTH", "MAX_TORCH_COMPRESSED", "MAX_TORCH_PICKLE", "INDEX_FILES", "Opened",
    "PartialCheckpoint", "file_sha256", "layer_of_name",
]

CheckpointSource = Any
"""A path (``str`` / ``os.PathLike``), a cached repo id, a state dict or a ``torch.nn.Module``."""

MAX_WEIGHT_MAGNITUDE = 1e30
"""A tensor whose largest |entry| exceeds this is refused: products of a few such norms overflow
float64 (the planner's floats), and no trained network has such weights."""
MIN_WEIGHT_MAGNITUDE = 1e-30
"""A nonzero tensor whose largest |entry| is below this is refused (its squares and products
underflow); an exactly zero tensor is fine (rank 0, entropy 0)."""


# --------------------------------------------------------------------------- choosing the container


def _container_of(path: Path) -> str:
    if path.name in INDEX_FILES:
        return "torch-sharded" if path.name.startswith("pytorch") else "safetensors-sharded"
    suffix = path.suffix.lower()
    if suffix == ".gguf":
        return "gguf"
    if suffix == ".safetensors":
        return "safetensors"
    if suffix in TORCH_SUFFIXES:
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
            raise CheckpointError(f"{path}: truncated or corrupt zip archive ({one_line(exc)})")
        if any(n.endswith("data.pkl") for n in names):
            return "torch"
        return "npz"
    if head[:4] == b"GGUF":
        return "gguf"
    # safetensors: a u64 header length that fits in the file, then the JSON header.  Checked before
    # the pickle marker: a header length whose low byte is 0x80 starts with the same byte.
    if len(head) == 9 and head[8:9] == b"{" and 8 + int.from_bytes(head[:8], "little") <= path.stat().st_size:
        return "safetensors"
    if head[:1] == b"\x80":  # pickle protocol marker: legacy torch.save
        return "torch"
    raise CheckpointError(
        f"{path}: not a recognized checkpoint (expected .safetensors, a PyTorch state dict "
        f".pt/.pth/.bin, .npz, .gguf, or a Hugging Face folder)"
    )


_OPENERS: dict[str, Callable[[Path], Opened]] = {
    "safetensors": open_safetensors,
    "torch": open_torch,
    "npz": open_npz,
    "gguf": open_gguf,
    "safetensors-sharded": lambda index: open_sharded(index, open_safetensors),
    "torch-sharded": lambda index: open_sharded(index, open_torch),
}


def resolve_source(source: str | os.PathLike) -> Path:
    """The local path a user-given checkpoint argument names: an existing path as given, else the
    cached snapshot of that repo id (offline); SourceNotFoundError naming both possibilities.  A
    chunk of a chunked GGUF file, or the name of an installed chunk package, is the whole file,
    assembled once into the user cache (:mod:`specbound.formats.gguf_chunks`)."""
    assembled = assembled_source(source)
    if assembled is not None:
        return assembled
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
    weights, config_path = locate(resolve_source(path))
    if not weights.is_file():
        raise CheckpointError(f"{weights}: not a regular file")
    if weights.stat().st_size == 0:
        raise CheckpointError(f"{weights}: file is empty")
    container = _container_of(weights)
    opened = _OPENERS[container](weights)
    if opened.config is not None and config_path is None:  # GGUF: the config is in the file
        config, config_path = opened.config, weights
    else:
        config = read_config(config_path)
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
# partial builds (the engine's tasks): only some tensors are read


def load_layers(
    path: CheckpointSource | None,
    layers: Iterable[int],
    *,
    num_heads: int | None = None,
    activation: str | None = None,
    view: str = VIEW_ANALYSIS,
    sha256: str = "",
    tensors: Iterable[str] = (),
) -> AnalysisWeights:
    """:func:`load_weights` reading only the tensors of ``layers``, the tensors named in ``tensors``
    (an engine task's: :func:`matrix_tensors`) and those of no layer.

    The result has every matrix of the full build, in the same order, with the same facts; a matrix
    whose tensors were all read holds the same values as :func:`load_weights` gives (and passes the
    same magnitude check), the others are zero-memory placeholders
    (:func:`specbound.adapters.helpers.is_placeholder`) that must not be used as values (a matrix
    of which one factor was read has the other as a placeholder).  So a worker holds one task's
    tensors at a time, and ``layers=()`` without ``tensors`` gives the structure alone.
    ``sha256``: the digest the caller computed (an engine task's client); the files this process
    opens must have it (:func:`check_digest`), so that a worker seeing other bytes at the same path
    fails instead of computing another network's enclosures.
    """
    from .adapters.helpers import is_placeholder

    ckpt, partial = _partial(path, layers, tensors, sha256)
    weights = _adapt(partial, num_heads=num_heads, activation=activation, view=view)
    built = [m for m in weights.matrices if not is_placeholder(m.left)]
    _check_magnitudes(ckpt.path, _only(weights, built))
    return weights


def matrix_tensors(
    path: CheckpointSource | None,
    *,
    num_heads: int | None = None,
    activation: str | None = None,
    view: str = VIEW_ANALYSIS,
    sha256: str = "",
) -> tuple[frozenset[str] | None, ...]:
    """Per covered matrix, in canonical order, the names of the checkpoint tensors its values are
    read from (None where that cannot be told: read its whole layer), found from the header alone.

    A structure build whose placeholders are traced (:class:`~specbound.partial.PartialCheckpoint`):
    a factor that is a traced placeholder comes from that tensor alone (slices, transposes and
    contiguous copies keep the placeholder's id; any arithmetic makes a new array).  So
    :func:`load_layers` with ``tensors`` = the union over some matrices reads exactly their tensors
    and builds them with the values of the full build.  A factor that is not a traced placeholder
    (e.g. ``[gate | up]`` put side by side in the proxy view) gives None.
    """
    from .adapters.helpers import is_placeholder
    from .partial import placeholder_id

    traced: dict = {}
    _, partial = _partial(path, (), (), sha256, traced)
    weights = _adapt(partial, num_heads=num_heads, activation=activation, view=view)
    out: list[frozenset[str] | None] = []
    for m in weights.matrices:
        names = set()
        for factor in (m.left, m.right):
            if factor is None:
                continue
            found = traced.get(placeholder_id(factor)) if is_placeholder(factor) else None
            if found is None:
                names = None
                break
            names.add(found[0])
        out.append(None if names is None else frozenset(names))
    return tuple(out)


def _partial(path, layers, tensors, sha256: str, traced: dict | None = None):
    """(the opened checkpoint, its :class:`PartialCheckpoint` reading ``layers`` and ``tensors``),
    the bytes checked against ``sha256`` when given."""
    from dataclasses import fields

    from .data import default_checkpoint_path

    ckpt = open_checkpoint(default_checkpoint_path() if path is None else path)
    if sha256 and not is_in_memory(path):
        check_digest(ckpt.path, ckpt.sha256(), sha256)
    values = {f.name: getattr(ckpt, f.name) for f in fields(Checkpoint)}
    return ckpt, PartialCheckpoint(**values, keep=frozenset(int(l) for l in layers), digest=sha256,
                                   also=frozenset(tensors), traced=traced)


def _adapt(partial, **kw) -> AnalysisWeights:
    from .adapters import detect

    return detect(partial).adapt(partial, **kw)


def check_digest(where, found: str, expected: str) -> None:
    """One-line CheckpointError unless the bytes this process read (digest ``found``) are those the
    client hashed (``expected``): an engine task never computes on other weights than the
    certificate names.  (In-memory weights are the client's own object and are not re-read.)"""
    if found != expected:
        raise CheckpointError(
            f"{where}: this process reads other bytes than the client did (sha256 {found[:16]}..., the "
            f"client's {expected[:16]}...): the checkpoint must be the same file at the same path on "
            "every worker, unchanged during the run")


def _only(weights: AnalysisWeights, matrices: list) -> AnalysisWeights:
    from dataclasses import replace

    return replace(weights, matrices=tuple(matrices))
