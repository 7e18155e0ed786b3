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

import json
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, one_line
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
        raise CheckpointError(f"{config_path}: not a readable JSON config ({one_line(exc)})") from None
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
