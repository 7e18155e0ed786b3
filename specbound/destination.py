"""Output destinations checked *before* any work: a command that would fail to write (or would
overwrite one of its own inputs) refuses at once, with one line, and computes nothing.

Contract: :func:`check_file` / :func:`check_folder` return the destination as given (a Path) when
a later atomic write there can succeed as far as can be known in advance (the name is non-empty
and not too long, it does not name a folder / a file, the nearest existing ancestor is a writable
folder, and it does not resolve -- symlinks included -- to an input); otherwise they raise a
one-line :class:`~specbound.errors.SpecboundError`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .errors import SpecboundError

#: files of a checkpoint folder that are inputs (config, weights, shard indexes)
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".npz", ".gguf", ".ckpt")


def _show(path) -> str:
    """The path for a one-line message (control characters escaped)."""
    text = str(path)
    return text if text.isprintable() else ascii(text)


def _limit(folder: Path, name: str, default: int) -> int:
    try:
        return int(os.pathconf(folder, name))
    except (OSError, ValueError, AttributeError):
        return default


def _existing_ancestor(path: Path) -> Path:
    """The nearest ancestor of ``path`` that exists (what mkdir -p would create below)."""
    for parent in path.parents:
        if os.path.lexists(parent):
            return parent
    return Path(".")


def _check_path(path: Path, option: str) -> None:
    text = str(path)
    if "\0" in text:
        raise SpecboundError(f"{option}: the path contains a NUL character")
    ancestor = _existing_ancestor(path.absolute())
    if not ancestor.is_dir():
        raise SpecboundError(f"{option} {_show(text)}: a parent ({_show(ancestor)}) is a file, not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise SpecboundError(f"{option} {_show(text)}: cannot write in {_show(ancestor)} (permission denied)")
    try:  # os.access says yes to root and knows nothing of read-only or virtual file systems: try it
        fd, probe = tempfile.mkstemp(prefix=".specbound-probe-", dir=ancestor)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise SpecboundError(f"{option} {_show(text)}: cannot write in {_show(ancestor)} "
                             f"({exc.strerror or exc})") from None
    name_max = _limit(ancestor, "PC_NAME_MAX", 255)
    for part in path.absolute().relative_to(ancestor).parts:
        # the atomic writer adds a '.' prefix and an 8-character suffix to the final name
        if len(os.fsencode(part)) + 10 > name_max:
            raise SpecboundError(f"{option}: file name too long ({len(os.fsencode(part))} bytes; "
                                 f"this file system allows {name_max - 10} here)")
    path_max = _limit(ancestor, "PC_PATH_MAX", 4096)
    if len(os.fsencode(str(path.absolute()))) + 10 > path_max:
        raise SpecboundError(f"{option}: path too long ({len(os.fsencode(str(path.absolute())))} bytes)")


def _same(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def check_file(path: str | os.PathLike | None, option: str, inputs: Iterable[Path] = ()) -> Path | None:
    """Refuse a file destination that cannot be written or that is one of ``inputs`` (None: no output)."""
    if path is None:
        return None
    if str(path).strip() == "":
        raise SpecboundError(f"{option}: empty file name")
    p = Path(path)
    _check_path(p, option)  # first: a name too long must not reach stat()
    if os.path.isdir(p):
        raise SpecboundError(f"{option} {_show(p)}: is a folder, expected a file name")
    if p.exists() and not os.access(p, os.W_OK):
        # os.replace would succeed in a writable folder, but the user marked the file read-only
        raise SpecboundError(f"{option} {_show(p)}: the file is read-only")
    for source in inputs:
        if _same(p, source):
            raise SpecboundError(f"{option} {_show(p)}: is an input of this command ({_show(source)}); "
                                 "refusing to overwrite it")
    return p


def check_folder(path: str | os.PathLike | None, option: str) -> Path | None:
    """Refuse a folder destination that is a file or cannot be created / written (None: no output)."""
    if path is None:
        return None
    if str(path).strip() == "":
        raise SpecboundError(f"{option}: empty folder name")
    p = Path(path)
    if os.path.lexists(p) and not os.path.isdir(p):
        raise SpecboundError(f"{option} {_show(p)}: is a file, expected a folder")
    _check_path(p / "x", option)
    if os.path.isdir(p) and not os.access(p, os.W_OK | os.X_OK):
        raise SpecboundError(f"{option} {_show(p)}: cannot write in this folder (permission denied)")
    return p


def input_files(*sources: str | os.PathLike | None) -> list[Path]:
    """The files a command reads from its path arguments: a file itself; for a folder (a Hugging
    Face checkpoint) its config.json, shard indexes and weight files.  Non-paths (a cached repo id,
    None) contribute nothing."""
    out: list[Path] = []
    for src in sources:
        if src is None or not isinstance(src, (str, os.PathLike)) or str(src) == "":
            continue
        p = Path(src)
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            for child in p.iterdir():
                name = child.name
                if child.is_file() and (name == "config.json" or name.endswith(".index.json")
                                        or name.endswith(_WEIGHT_SUFFIXES)):
                    out.append(child)
    return out


def default_inputs() -> list[Path]:
    """The embedded default model's files (an --out must never replace them either)."""
    from .data import default_checkpoint_path

    path = Path(default_checkpoint_path())
    return [path, path.with_suffix(".json")]
