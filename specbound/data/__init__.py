"""Package data: the embedded default checkpoint and the toy model it replaced.

``default.safetensors`` is a conventionally shaped analysis-model Transformer (L = 2, H = 2, N = 32,
d_h = N / H = 16, d_ff = 2N = 64; 16,416 parameters); ``toy.safetensors`` is the earlier default
(rank-1 heads d_h = 1, d_ff = 2; 800 parameters), kept because earlier figures are stated on it.
Each has its training record beside it (``default.json``, ``toy.json``), which binds the record to the
weights by sha256 and architecture and asks ``certify`` for S = the training sample.
"""

from __future__ import annotations

from pathlib import Path


def default_checkpoint_path() -> Path:
    """Path of the embedded default checkpoint ``specbound/data/default.safetensors``.

    The file is produced by a deterministic script in the repository (``scripts/make_default.py``);
    this function only names it (it may not exist in a checkout where that script has not run yet).
    """
    return Path(__file__).resolve().parent / "default.safetensors"


def toy_checkpoint_path() -> Path:
    """Path of the toy model ``specbound/data/toy.safetensors`` (``scripts/make_default.py --recipe toy``):
    the embedded default before the conventional shape replaced it (d_h = 1, d_ff = 2)."""
    return Path(__file__).resolve().parent / "toy.safetensors"
