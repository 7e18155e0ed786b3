"""A Hugging Face repo id resolved offline, from the local cache only.

Contract.  :func:`resolve_repo_id` maps ``"org/name"`` (or ``"name"``) to the snapshot folder the
local Hugging Face cache holds for it, or returns None.  It never opens a network connection:
``huggingface_hub.snapshot_download`` is always called with ``local_files_only=True``.  The cache
folder is decided when the call is made (not when a library was imported), in the order the hub
library documents: ``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``,
else ``~/.cache/huggingface/hub``.

The snapshot found must lie inside the cache: it is a folder directly under the repo's
``snapshots/`` whose name is a commit hash (a ``refs/main`` holding ``../..`` is refused), and every
file below it resolves, symlinks followed, to a file inside the cache folder (the hub links
snapshot files to ``blobs/``).  Anything else is refused with one line (:class:`CacheEscapeError`)
instead of reading files outside the cache.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import CheckpointError

COMMIT = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
"""A snapshot folder's name: a git commit hash (SHA-1, or SHA-256)."""


class CacheEscapeError(CheckpointError):
    """A cached repo's snapshot leads outside the Hugging Face cache."""


REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
"""The shape of a hub repo id: ``name`` or ``owner/name``; letters, digits, ``_ . -``."""


def hub_cache_dir() -> Path:
    """The local hub cache folder the environment selects right now (see the module contract)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def looks_like_repo_id(text: str) -> bool:
    """Whether ``text`` could name a hub repo (``name`` or ``owner/name``; never a path that
    starts with ``/``, ``.`` or ``~`` or has more than one ``/``)."""
    return REPO_ID.fullmatch(text) is not None and ".." not in text


def resolve_repo_id(text: str) -> Path | None:
    """The cached snapshot folder of repo ``text`` (model repos, default revision), else None."""
    if not looks_like_repo_id(text):
        return None
    cache = hub_cache_dir()
    if not cache.is_dir():
        return None
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # no hub library: read the cache layout it documents ourselves
        return _snapshot_by_layout(cache, text)
    try:
        found = snapshot_download(text, cache_dir=cache, local_files_only=True)
    except Exception:  # LocalEntryNotFoundError, a malformed id, an incomplete cache entry
        return None
    folder = Path(str(found))
    return _inside(cache, text, folder) if folder.is_dir() else None


def _snapshot_by_layout(cache: Path, repo_id: str) -> Path | None:
    """``models--owner--name/snapshots/<refs/main>``: the hub cache layout, read directly."""
    entry = _entry(cache, repo_id)
    try:
        commit = (entry / "refs" / "main").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    folder = entry / "snapshots" / commit
    return _inside(cache, repo_id, folder) if commit and folder.is_dir() else None


def _entry(cache: Path, repo_id: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def _inside(cache: Path, repo_id: str, folder: Path) -> Path:
    """``folder`` if it is a snapshot of ``repo_id`` that stays inside ``cache`` (module contract),
    else a one-line CacheEscapeError."""
    snapshots = os.path.realpath(_entry(cache, repo_id) / "snapshots")
    real = os.path.realpath(folder)
    if os.path.dirname(real) != snapshots or not COMMIT.fullmatch(os.path.basename(real)):
        raise CacheEscapeError(f"{repo_id}: the cached snapshot {_show(folder)} is not a commit folder of "
                               f"this repo in the cache {cache} (refs/main names {_show(folder.name)}): refused")
    top = os.path.realpath(cache)
    for root, dirs, files in os.walk(real):
        for name in dirs + files:
            target = os.path.realpath(os.path.join(root, name))
            if os.path.commonpath([top, target]) != top:
                raise CacheEscapeError(f"{repo_id}: the cached file {_show(os.path.join(root, name))} leads to "
                                       f"{_show(target)}, outside the cache {cache}: refused")
    return folder


def _show(text) -> str:
    text = str(text)
    return text if text.isprintable() else ascii(text)
