"""A frozen input map taken from a pretrained checkpoint (:func:`pretrained_map`).

The map itself, its provenance and its assumption are :mod:`specbound.input_map`'s; this module only
reads the source tables, exactly, through the checkpoint loaders (so any source ``certify`` reads
works: a file, a Hugging Face folder, a cached repo id, a state dict in memory).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .checkpoint import open_checkpoint
from .errors import LayoutError
from .formats.state_dict import describe as describe_source, is_in_memory, state_sha256
from .input_map import MINILM_POSITIONS, MINILM_TOKENS, InputMap, project_table, projection_matrix
from .vocabulary import INPUT_MAP_PRETRAINED


def pretrained_map(source: Any, *, tokens: str = MINILM_TOKENS, positions: str | None = MINILM_POSITIONS,
                   width: int | None = None, seed: int = 0, seq_len: int | None = None,
                   name: str | None = None) -> InputMap:
    """The ``pretrained`` map of the tables ``tokens`` (and ``positions``, None for none) of ``source``
    (anything :func:`specbound.checkpoint.open_checkpoint` reads: a file, a Hugging Face folder, a
    cached repo id, a state dict), read exactly as float64.

    ``width``: project to this width by :func:`projection_matrix` of ``seed`` and :func:`project_table`
    (None or the source width: no projection).  ``seq_len``: keep the first ``seq_len`` positional
    rows (default all).  ``name``: how the scope names the source (default: its path or label).
    The source's SHA-256 is that of the two tables as read (module docstring), so it identifies
    the values used whatever file they came from."""
    ckpt = open_checkpoint(source)
    E = ckpt.tensor(tokens)
    if E.ndim != 2:
        raise LayoutError(f"{ckpt.path}: token table '{tokens}' has shape {E.shape}, expected (vocab, width)")
    read = {tokens: E}
    P = None
    if positions is not None:
        P = ckpt.tensor(positions)
        if P.ndim != 2 or P.shape[1] != E.shape[1]:
            raise LayoutError(f"{ckpt.path}: positional table '{positions}' has shape {P.shape}, "
                              f"expected (T, {E.shape[1]})")
        read[positions] = P
        if seq_len is not None:
            if not 1 <= int(seq_len) <= P.shape[0]:
                raise LayoutError(f"{ckpt.path}: seq_len must lie in [1, {P.shape[0]}] (rows of '{positions}'), got {seq_len}")
            P = P[: int(seq_len)]
    src_width = int(E.shape[1])
    label = name or (describe_source(source) if is_in_memory(source) else str(source))
    label = f"{label} [{tokens}" + (f" + {positions}" if positions else "") + "]"
    src_sha = state_sha256({k: np.ascontiguousarray(v) for k, v in read.items()})
    if width is None or int(width) == src_width:
        return InputMap(INPUT_MAP_PRETRAINED, src_width, np.ascontiguousarray(E), None if P is None else np.ascontiguousarray(P),
                        source=label, source_sha256=src_sha, source_width=src_width)
    if not 1 <= int(width) < src_width:
        raise LayoutError(f"input map: projection width must lie in [1, {src_width}), got {width}")
    R = projection_matrix(src_width, int(width), seed)
    return InputMap(INPUT_MAP_PRETRAINED, int(width), project_table(E, R),
                    None if P is None else project_table(P, R), seed=int(seed), source=label,
                    source_sha256=src_sha, source_width=src_width, projected=True)


__all__ = ["pretrained_map"]
