"""A Hugging Face model folder: which file holds the weights, and the ``config.json`` beside it.

Contract.  :func:`locate` maps a user-given path to (weights file, config file or None): a folder
must hold ``model.safetensors`` or ``pytorch_model.bin`` (preferred in that order) or a sharded
index (:data:`specbound.formats.safetensors_sharded.INDEX_FILES`); a weights file with one of those
names picks up the ``config.json`` beside it; any other file stands alone.  :func:`read_config`
reads a config as one JSON object, refusing with one line a file larger than
:data:`MAX_CONFIG_BYTES`, nesting deeper than :data:`MAX_CONFIG_DEPTH` and integers beyond int64
(no model config holds one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import CheckpointError
from .json_file import MAX_DEPTH, read_json
from .safetensors_sharded import INDEX_FILES

HF_WEIGHT_FILES: tuple[str, ...] = ("model.safetensors", "pytorch_model.bin")
"""Weight files of a Hugging Face folder, in order of preference (safetensors never unpickles)."""


def locate(path: Path) -> tuple[Path, Path | None]:
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


def read_config(config_path: Path | None) -> dict[str, Any] | None:
    """The config as one JSON object (bounded: :func:`specbound.formats.json_file.read_json`)."""
    if config_path is None:
        return None
    config = read_json(config_path, "JSON config", max_bytes=MAX_CONFIG_BYTES, max_depth=MAX_CONFIG_DEPTH)
    if not isinstance(config, dict):
        raise CheckpointError(f"{config_path}: config is not a JSON object")
    return config


#: a model config is a few kilobytes; nothing legitimate comes near this
MAX_CONFIG_BYTES = 16 * 2**20
#: deeper nesting than this in a config.json is not a model description
MAX_CONFIG_DEPTH = MAX_DEPTH
