"""Repo ids resolved offline from a fake Hugging Face cache laid out like the hub's."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest
from safetensors.numpy import save_file

from specbound.checkpoint import load_weights, open_checkpoint
from specbound.errors import SourceNotFoundError, SpecboundError
from specbound.formats import hf_cache
from .test_adapters import bert_config, bert_tensors

REPO = "acme/tiny-bert"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fake_cache(hub, repo=REPO, tensors=None):
    """``hub/models--acme--tiny-bert/{refs/main, snapshots/<commit>/..., blobs/...}``."""
    entry = hub / ("models--" + repo.replace("/", "--"))
    snap = entry / "snapshots" / COMMIT
    blobs = entry / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text(COMMIT)
    save_file(tensors or bert_tensors(7), str(blobs / "aaa"))
    (blobs / "bbb").write_text(json.dumps(bert_config()))
    (snap / "model.safetensors").symlink_to(blobs / "aaa")
    (snap / "config.json").symlink_to(blobs / "bbb")
    return snap


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.parametrize("variable", ["HF_HOME", "HF_HUB_CACHE"])
def test_repo_id_resolves_from_cache(tmp_path, monkeypatch, no_network, variable):
    hub = tmp_path / "hf" / "hub"
    snap = fake_cache(hub)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv(variable, str(tmp_path / "hf" if variable == "HF_HOME" else hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hf_cache.hub_cache_dir() == hub
    assert hf_cache.resolve_repo_id(REPO) == snap
    ckpt = open_checkpoint(REPO)
    assert ckpt.path == snap / "model.safetensors" and ckpt.config["num_attention_heads"] == 3
    w = load_weights(REPO)
    assert w.num_heads == 3


def test_layout_fallback_without_hub_library(tmp_path):
    snap = fake_cache(tmp_path / "hub")
    assert hf_cache._snapshot_by_layout(tmp_path / "hub", REPO) == snap
    assert hf_cache._snapshot_by_layout(tmp_path / "hub", "acme/other") is None


def test_absent_repo_id_is_one_line_naming_both(tmp_path, monkeypatch, no_network):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    (tmp_path / "hub").mkdir()
    with pytest.raises(SourceNotFoundError) as ei:
        open_checkpoint("acme/not-there")
    message = str(ei.value)
    assert "\n" not in message
    for needle in ("acme/not-there", "no such file or folder", "Hugging Face cache",
                   str(tmp_path / "hub")):
        assert needle in message
    with pytest.raises(SourceNotFoundError) as ei:
        open_checkpoint(str(tmp_path / "absent.safetensors"))
    assert str(ei.value) == f"{tmp_path / 'absent.safetensors'}: no such file or folder"


def test_existing_path_wins_over_repo_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    local = tmp_path / "acme" / "tiny-bert"
    local.mkdir(parents=True)
    tensors = bert_tensors(8)
    save_file(tensors, str(local / "model.safetensors"))
    (local / "config.json").write_text(json.dumps(bert_config()))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    fake_cache(tmp_path / "hf" / "hub")
    ckpt = open_checkpoint(REPO)
    assert ckpt.path.resolve() == (local / "model.safetensors").resolve()
    name = sorted(tensors)[0]
    np.testing.assert_array_equal(ckpt.tensor(name), tensors[name].astype(np.float64))


# ---------------------------------------------------------------- issue 30: the cache is not left


def _outside(tmp_path):
    """A model folder outside the cache, which a hostile cache entry points at."""
    folder = tmp_path / "outside"
    folder.mkdir()
    save_file(bert_tensors(9), str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(bert_config()))
    return folder


@pytest.mark.parametrize("hub_library", [True, False])
def test_a_ref_that_climbs_out_of_the_cache_is_refused(tmp_path, monkeypatch, no_network, hub_library):
    hub = tmp_path / "hf" / "hub"
    snap = fake_cache(hub)
    _outside(tmp_path)
    # snapshots/<ref> with ref = ../../../../outside: hub/models--.../snapshots -> tmp_path/outside
    (snap.parent.parent / "refs" / "main").write_text("../../../../outside")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    if not hub_library:
        import builtins

        real_import = builtins.__import__

        def no_hub(name, *a, **k):
            if name.startswith("huggingface_hub"):
                raise ImportError(name)
            return real_import(name, *a, **k)

        monkeypatch.setattr(builtins, "__import__", no_hub)
    with pytest.raises(SpecboundError) as ei:  # before: the folder outside the cache was read
        open_checkpoint(REPO)
    message = str(ei.value)
    assert "\n" not in message and REPO in message and "refused" in message


def test_a_snapshot_file_that_links_out_of_the_cache_is_refused(tmp_path, monkeypatch, no_network):
    hub = tmp_path / "hf" / "hub"
    snap = fake_cache(hub)
    outside = _outside(tmp_path)
    (snap / "model.safetensors").unlink()
    (snap / "model.safetensors").symlink_to(outside / "model.safetensors")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    with pytest.raises(SpecboundError) as ei:
        load_weights(REPO)
    assert "outside the cache" in str(ei.value) and "\n" not in str(ei.value)
    with pytest.raises(SpecboundError):  # the layout reader applies the same check
        hf_cache._snapshot_by_layout(hub, REPO)
