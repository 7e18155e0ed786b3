"""A Hugging Face repo id resolved offline, from the local cache only.

Contract.  :func:`resolve_repo_id` maps ``"org/name"`` (or ``"name"``) to the snapshot folder the
local Hugging Face cache holds for it, or returns None.  It never opens a network connection:
``huggingface_hub.snapshot_download`` is always called with ``local_files_only=True``.  The cache
folder is decided when the call is made (not when a library was imported), in the order the hub
library documents: ``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``,
else ``~/.cache/huggingface/hub``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

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
    return folder if folder.is_dir() else None


def _snapshot_by_layout(cache: Path, repo_id: str) -> Path | None:
    """``models--owner--name/snapshots/<refs/main>``: the hub cache layout, read directly."""
    entry = cache / ("models--" + repo_id.replace("/", "--"))
    try:
        commit = (entry / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    folder = entry / "snapshots" / commit
    return folder if commit and folder.is_dir() else None
