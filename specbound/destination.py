"""Output destinations checked *before* any work: a command that would fail to write (or would
overwrite one of its own inputs) refuses at once, with one line, and computes nothing.

Contract: :func:`check_file` / :func:`check_folder` return the destination as given (a Path) when
a later atomic write there can succeed as far as can be known in advance (the name is non-empty
and not too long, it does not name a folder / a file, the nearest existing ancestor is a writable
folder, and it does not resolve -- symlinks and hard links included -- to an input, nor lie inside
an input folder); otherwise they raise a one-line :class:`~specbound.errors.SpecboundError`.

Inputs are every path a command reads or consults (:func:`checkpoint_inputs`): the checkpoint's
files as the reader finds them (a folder's config and weights, an index's shards whatever their
names, the config beside a weights file), the ``<checkpoint>.json`` training record (even when
absent: writing it would change what a later run reads), a cached repo's whole cache entry, and
data files.  A report folder is checked file by file against them too.
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


def _inside(path: Path, folder: Path) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([real, top]) == top


def check_file(path: str | os.PathLike | None, option: str, inputs: Iterable[Path] = ()) -> Path | None:
    """Refuse a file destination that cannot be written, that is one of ``inputs`` (compared by
    inode, else by resolved path) or that lies inside an input folder (None: no output)."""
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
        if _same(p, source) or (os.path.isdir(source) and _inside(p, source)):
            raise SpecboundError(f"{option} {_show(p)}: is {'inside ' if os.path.isdir(source) else ''}an input "
                                 f"of this command ({_show(source)}); refusing to overwrite it")
    return p


def check_folder(path: str | os.PathLike | None, option: str, inputs: Iterable[Path] = (),
                 files: Iterable[str] = ()) -> Path | None:
    """Refuse a folder destination that is a file or cannot be created / written, or whose ``files``
    (the names the command writes there) would replace one of ``inputs`` (None: no output)."""
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
    inputs = list(inputs)
    for name in files:
        check_file(p / name, f"{option} ({name})", inputs)
    return p


def input_files(*sources: str | os.PathLike | None) -> list[Path]:
    """The files given as path arguments (data files): each file itself.  Checkpoints are
    :func:`checkpoint_inputs`; non-paths and None contribute nothing."""
    return [Path(s) for s in sources if isinstance(s, (str, os.PathLike)) and str(s) != "" and Path(s).is_file()]


def checkpoint_inputs(source) -> list[Path]:
    """Every path that reading checkpoint ``source`` reads or consults (see the module contract);
    None is the embedded default.  In-memory sources contribute nothing."""
    from .formats.hf_cache import resolve_repo_id
    from .formats.hf_folder import HF_WEIGHT_FILES
    from .formats.safetensors_sharded import INDEX_FILES

    if source is None:
        return default_inputs()
    if not isinstance(source, (str, os.PathLike)) or str(source) == "":
        return []
    path = Path(source)
    try:
        out = [path.with_suffix(".json")]  # the training record (empirical._record), present or not
    except ValueError:  # no file name ('.', '/'): no record beside it
        out = []
    if not os.path.lexists(path):
        snapshot = resolve_repo_id(os.fspath(source))
        # a cached repo: nothing inside its cache entry (snapshots, blobs, refs) may be written
        return out + ([snapshot.parent.parent] if snapshot is not None else [])
    if path.is_dir():
        folder, named = path, [path / n for n in HF_WEIGHT_FILES + INDEX_FILES]
        named += [c for c in path.iterdir() if c.name.endswith(_WEIGHT_SUFFIXES) and c.is_file()]
    else:
        folder, named = path.parent, [path]
    out += named
    if path.is_dir() or path.name in HF_WEIGHT_FILES + INDEX_FILES:
        out.append(folder / "config.json")
    for index in (n for n in named if n.name in INDEX_FILES and n.is_file()):
        out += [folder / shard for shard in _shards(index)]
    return out


def _shards(index: Path) -> list[str]:
    """The shard names an index maps to (nothing when it is unreadable: the run refuses it later,
    before writing)."""
    from .errors import CheckpointError
    from .formats.safetensors_sharded import read_weight_map

    try:
        return sorted(set(read_weight_map(index).values()))
    except CheckpointError:
        return []


def default_inputs() -> list[Path]:
    """The shipped models' files, the embedded default's and the toy's (an --out must never replace
    them either)."""
    from .data import default_checkpoint_path, toy_checkpoint_path

    paths = [Path(default_checkpoint_path()), Path(toy_checkpoint_path())]
    return [f for p in paths for f in (p, p.with_suffix(".json"))]
