"""Package data: the embedded default checkpoint (a small trained analysis-model Transformer)."""

from __future__ import annotations

from pathlib import Path


def default_checkpoint_path() -> Path:
    """Path of the embedded default checkpoint ``specbound/data/default.safetensors``.

    The file is produced by a deterministic script in the repository; this function only names it
    (it may not exist in a checkout where that script has not run yet).
    """
    return Path(__file__).resolve().parent / "default.safetensors"
