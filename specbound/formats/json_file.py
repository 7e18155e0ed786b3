"""Small JSON files a checkpoint comes with (``config.json``, a shard index, a training record), read
with bounds.

Contract.  :func:`read_json` returns the parsed value of a UTF-8 JSON file, or raises one line (the
``error`` class given, naming the file and ``what`` it was read as) when the file cannot be read,
is larger than ``max_bytes``, is not UTF-8 or not JSON, nests deeper than ``max_depth`` (checked
without recursion; the parser's own RecursionError is caught too), or holds an integer beyond
int64 (Python refuses to parse integers of more than 4300 digits with a ValueError, caught here).
No model file legitimately holds any of these, and each used to escape as a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, SpecboundError, one_line

MAX_DEPTH = 32
"""Deeper nesting than this is not a model description (configs, indexes and records nest 2-4)."""


def read_json(path: Path, what: str, *, max_bytes: int, max_depth: int = MAX_DEPTH,
              error: type[SpecboundError] = CheckpointError) -> Any:
    """The JSON value in ``path`` (module contract)."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise error(f"{path}: {what} of {size} bytes is larger than {max_bytes} (not a {what})")
        value = json.loads(path.read_text(encoding="utf-8"))
    except SpecboundError:
        raise
    except RecursionError:
        raise error(f"{path}: not a readable {what} (JSON nested too deeply)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: syntax, integers too long
        raise error(f"{path}: not a readable {what} ({one_line(exc)})") from None
    check_values(path, value, what, max_depth=max_depth, error=error)
    return value


def check_values(path, value: Any, what: str, *, max_depth: int = MAX_DEPTH,
                 error: type[SpecboundError] = CheckpointError) -> None:
    """Refuse nesting beyond ``max_depth`` and integers beyond int64 in a parsed JSON ``value``
    (iteratively: no recursion, whatever the depth)."""
    stack = [(value, 0, "")]
    while stack:
        node, depth, where = stack.pop()
        if depth > max_depth:
            raise error(f"{path}: {what} nested deeper than {max_depth} levels")
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, item in items:
            name = f"{where}.{key}" if where else str(key)
            if isinstance(item, (dict, list)):
                stack.append((item, depth + 1, name))
            elif isinstance(item, int) and not isinstance(item, bool) and abs(item) >= 2**63:
                raise error(f"{path}: {what} value {name} is an integer beyond int64")
