"""Weights already in memory: a state dict (name -> torch tensor or numpy array) or a torch module.

Contract.  An in-memory checkpoint is treated exactly like a file: the same names, shapes and
dtypes, the same exact float64 reads, the same NaN/Inf and shape checks (done by ``Checkpoint``).
Refused with one line before anything is read: a value that is neither a tensor nor an array
(nested mappings are flattened with ``.``, as for PyTorch files), a tensor on the ``meta`` device
(it has no values), a sparse or otherwise non-strided tensor, a numpy array of Python objects.

A ``torch.nn.Module`` contributes ``module.state_dict()``; when it carries a ``config`` with a
``to_dict()`` method (a ``transformers`` ``PreTrainedModel``), that dict is the checkpoint config.
A :class:`specbound.nn.AnalysisTransformer` contributes its own-format tensors and metadata
(``module.specbound_checkpoint()``, which first refuses a network outside the family).

SHA-256 of in-memory weights (what a certificate names instead of a file hash): the SHA-256 of
the concatenation, over tensors in sorted name order, of ``name``, ``dtype``, ``shape`` (decimal
sizes joined by ``,``), each UTF-8 and followed by a NUL byte, then the 8-byte little-endian
length of the tensor's bytes and the bytes themselves (C order, little-endian; a dtype numpy has
no type for -- bfloat16, float8, complex32 -- as its raw element bytes; a conjugate or negative view
as the values it stands for; a quantized tensor as its integer representation followed by its
scales as float64 and zero points (and channel axis) as int64).  It therefore identifies the exact
stored values, names and layout, and nothing else (not the Python objects), for every tensor,
including those that are never read (a tensor of an unreadable dtype is refused only if read).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import CheckpointError
from . import Opened, flatten_nested

# torch is imported inside the functions below, never at module level: this module is imported by
# every checkpoint open, and reading a file must not pay torch's start-up time (in-memory torch
# values mean torch is already loaded, so the local imports cost nothing there).


def _is_module(obj: object) -> bool:
    # A module object exists only if torch was imported: checking sys.modules keeps opening a
    # file from importing torch.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


class InMemorySource:
    """In-memory weights labelled for code that records a checkpoint as a path: ``str()`` and
    ``os.fspath()`` give the label (``<in-memory ...>``), which is never an existing file."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj.obj if isinstance(obj, InMemorySource) else obj

    def __str__(self) -> str:
        return describe(self.obj)

    __fspath__ = __str__


def describe(obj: object) -> str:
    """How an in-memory source is named in messages (it has no path)."""
    if isinstance(obj, InMemorySource):
        return str(obj)
    if _is_module(obj):
        return f"<in-memory {type(obj).__name__}>"
    return "<in-memory state dict>"


def is_in_memory(obj: object) -> bool:
    """Whether ``obj`` is a state dict or a module (rather than a path or repo id)."""
    return isinstance(obj, (Mapping, InMemorySource)) or _is_module(obj)


def _flatten(obj: Mapping, label: str) -> dict[str, Any]:
    """The tensors and arrays of a nested state dict by dotted name (:func:`flatten_nested`); any
    other value is refused with one line."""
    import torch

    def refuse(name: str, value: Any) -> None:
        raise CheckpointError(f"{label}: entry '{name}' is a {type(value).__name__}, not a tensor or array")

    return flatten_nested(obj, label, lambda v: isinstance(v, (torch.Tensor, np.ndarray)), refuse)


def _check(name: str, value: Any, label: str) -> None:
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_meta:
            raise CheckpointError(
                f"{label}: tensor '{name}' is on the meta device (it holds no values; "
                f"load the weights first)"
            )
        if value.layout != torch.strided:
            raise CheckpointError(f"{label}: tensor '{name}' has layout {value.layout} (dense only)")
    elif value.dtype.hasobject:
        raise CheckpointError(f"{label}: array '{name}' holds Python objects, not numbers")


def _torch_tensor(value: Any) -> bool:
    """Whether ``value`` is a torch tensor, without importing torch (a numpy-only caller, e.g. the
    digest of a data sample on the torch-free certify path, must not pay for it)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _dtype_name(value: Any) -> str:
    if _torch_tensor(value):
        return str(value.dtype).removeprefix("torch.")
    return value.dtype.name


def _le_bytes(value: Any) -> bytes:
    """The tensor's values as little-endian C-order bytes (module contract): a dtype numpy lacks
    (bfloat16 as its 16-bit patterns, the float8 types, complex32, ...) as its raw element bytes, a
    conjugate or negative view as the values it stands for, a quantized tensor as its integer
    representation followed by its quantization parameters (scales as float64, zero points and axis
    as int64)."""
    if _torch_tensor(value):
        import torch

        t = value.detach().cpu()
        if t.is_quantized:
            return _quantized_bytes(t)
        t = t.resolve_conj().resolve_neg().contiguous()
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        if t.dtype == torch.bool:
            t = t.to(torch.uint8)
        try:
            value = t.numpy()
        except (TypeError, RuntimeError):  # no numpy dtype: the element bytes themselves
            return t.reshape(-1).view(torch.uint8).numpy().tobytes()
    arr = np.ascontiguousarray(value)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return arr.tobytes(order="C")


def _quantized_bytes(t) -> bytes:
    import torch

    parts = [_le_bytes(t.int_repr())]
    if t.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        parts += [np.float64(t.q_scale()).tobytes(), np.int64(t.q_zero_point()).tobytes()]
    else:
        parts += [_le_bytes(t.q_per_channel_scales().to(torch.float64)),
                  _le_bytes(t.q_per_channel_zero_points().to(torch.int64)),
                  np.int64(t.q_per_channel_axis()).tobytes()]
    return b"".join(parts)


def state_sha256(tensors: Mapping[str, Any]) -> str:
    """SHA-256 of in-memory weights as defined in the module contract."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        value = tensors[name]
        shape = ",".join(str(int(s)) for s in value.shape)
        data = _le_bytes(value)
        for text in (name, _dtype_name(value), shape):
            digest.update(text.encode("utf-8") + b"\0")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def open_state_dict(obj: Any) -> Opened:
    """An :class:`Opened` view of a state dict or module (see the module contract)."""
    import torch

    if isinstance(obj, InMemorySource):
        obj = obj.obj
    label = describe(obj)
    config = None
    metadata: dict[str, str] = {}
    if _is_module(obj) and callable(getattr(obj, "specbound_checkpoint", None)):
        # a specbound.nn model: its own-format tensors and metadata, after its family check
        state, metadata = obj.specbound_checkpoint()
    elif _is_module(obj):
        state = obj.state_dict()
        raw_config = getattr(obj, "config", None)
        if raw_config is not None and callable(getattr(raw_config, "to_dict", None)):
            config = dict(raw_config.to_dict())
    else:
        state = obj
    tensors = _flatten(state, label)
    if not tensors:
        raise CheckpointError(f"{label}: holds no tensors")
    for name, value in tensors.items():
        _check(name, value, label)
    shapes = {k: tuple(int(s) for s in v.shape) for k, v in tensors.items()}
    dtypes = {k: _dtype_name(v) for k, v in tensors.items()}

    def fetch(name: str) -> np.ndarray:
        value = tensors[name]
        if isinstance(value, torch.Tensor):
            return value.detach().to("cpu", torch.float64).numpy()
        return value

    return Opened(
        shapes=shapes, dtypes=dtypes, fetch=fetch, config=config, metadata=dict(metadata),
        digest=lambda: state_sha256(tensors),
    )
