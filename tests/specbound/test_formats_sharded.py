"""Sharded Hugging Face checkpoints: one Checkpoint over all shards, consistency checks, digest."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from specbound.checkpoint import load_weights, open_checkpoint
from specbound.errors import CheckpointError, SpecboundError
from .test_adapters import bert_config, bert_tensors


def one_line(excinfo, *needles: str) -> None:
    message = str(excinfo.value)
    assert isinstance(excinfo.value, SpecboundError)
    assert message and "\n" not in message, message
    for needle in needles:
        assert needle in message, (needle, message)


def write_sharded(folder, tensors, n_shards=3, kind="safetensors"):
    """Split ``tensors`` round-robin over shards and write the index the way transformers does."""
    folder.mkdir(parents=True, exist_ok=True)
    names = sorted(tensors)
    ext = "safetensors" if kind == "safetensors" else "bin"
    stem = "model" if kind == "safetensors" else "pytorch_model"
    shard_names = [f"{stem}-{i + 1:05d}-of-{n_shards:05d}.{ext}" for i in range(n_shards)]
    wmap = {}
    for i, shard in enumerate(shard_names):
        part = {n: tensors[n] for n in names[i::n_shards]}
        wmap.update({n: shard for n in part})
        if kind == "safetensors":
            save_file(part, str(folder / shard))
        else:
            torch.save({k: torch.from_numpy(v) for k, v in part.items()}, folder / shard)
    index = folder / f"{stem}.{ext}.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": wmap}))
    (folder / "config.json").write_text(json.dumps(bert_config()))
    return index, shard_names


def same_weights(a, b) -> None:
    assert [m.name for m in a.matrices] == [m.name for m in b.matrices]
    for x, y in zip(a.matrices, b.matrices):
        np.testing.assert_array_equal(x.left, y.left)
        if x.right is not None:
            np.testing.assert_array_equal(x.right, y.right)


@pytest.mark.parametrize("kind", ["safetensors", "torch"])
def test_sharded_folder_reads_like_one_file(tmp_path, kind):
    tensors = bert_tensors(1)
    index, shards = write_sharded(tmp_path / "sharded", tensors, kind=kind)
    single = tmp_path / "single"
    single.mkdir()
    save_file(tensors, str(single / "model.safetensors"))
    (single / "config.json").write_text(json.dumps(bert_config()))
    ckpt = open_checkpoint(tmp_path / "sharded")
    assert ckpt.container == f"{kind}-sharded"
    assert set(ckpt.names()) == set(tensors)
    for name, value in tensors.items():
        np.testing.assert_array_equal(ckpt.tensor(name), value.astype(np.float64))
    same_weights(load_weights(tmp_path / "sharded"), load_weights(single))
    # The digest definition, recomputed by hand.
    text = "".join(
        f"{s} {hashlib.sha256((tmp_path / 'sharded' / s).read_bytes()).hexdigest()}\n"
        for s in sorted(shards)
    )
    assert ckpt.sha256() == hashlib.sha256(text.encode()).hexdigest()


def test_only_requested_tensors_are_read(tmp_path):
    """A NaN tensor in one shard does not disturb reading the others: values are read on request."""
    tensors = bert_tensors(2)
    poisoned = sorted(tensors)[1]
    tensors[poisoned] = np.full_like(tensors[poisoned], np.nan)
    write_sharded(tmp_path / "s", tensors)
    ckpt = open_checkpoint(tmp_path / "s")
    for name in sorted(tensors):
        if name != poisoned:
            ckpt.tensor(name)
    with pytest.raises(SpecboundError) as ei:
        ckpt.tensor(poisoned)
    one_line(ei, poisoned, "NaN")


def test_missing_shard(tmp_path):
    index, shards = write_sharded(tmp_path / "s", bert_tensors(3))
    (tmp_path / "s" / shards[1]).unlink()
    with pytest.raises(CheckpointError) as ei:
        open_checkpoint(tmp_path / "s")
    one_line(ei, str(index), shards[1], "missing")


def test_tensor_in_two_shards(tmp_path):
    tensors = bert_tensors(4)
    index, shards = write_sharded(tmp_path / "s", tensors)
    first = sorted(tensors)[0]  # in shard 0; add it to shard 1 as well
    from safetensors.numpy import load_file

    part = load_file(str(tmp_path / "s" / shards[1]))
    part[first] = tensors[first]
    save_file(part, str(tmp_path / "s" / shards[1]))
    with pytest.raises(CheckpointError) as ei:
        open_checkpoint(tmp_path / "s")
    one_line(ei, first, "two shards")


def test_index_inconsistent_with_shards(tmp_path):
    tensors = bert_tensors(5)
    index, shards = write_sharded(tmp_path / "s", tensors)
    doc = json.loads(index.read_text())
    doc["weight_map"]["ghost.weight"] = shards[0]
    index.write_text(json.dumps(doc))
    with pytest.raises(CheckpointError) as ei:
        open_checkpoint(tmp_path / "s")
    one_line(ei, "ghost.weight", shards[0])
    doc["weight_map"].pop("ghost.weight")
    doc["weight_map"][sorted(tensors)[0]] = "../escape.safetensors"
    index.write_text(json.dumps(doc))
    with pytest.raises(CheckpointError) as ei:
        open_checkpoint(tmp_path / "s")
    one_line(ei, "escape", "not a file name")
    index.write_text("{not json")
    with pytest.raises(CheckpointError) as ei:
        open_checkpoint(tmp_path / "s")
    one_line(ei, str(index), "JSON")


def test_truncated_shard(tmp_path):
    index, shards = write_sharded(tmp_path / "s", bert_tensors(6))
    path = tmp_path / "s" / shards[2]
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(CheckpointError) as ei:
        open_checkpoint(tmp_path / "s")
    one_line(ei, shards[2])


# ---------------------------------------------------------------- issue 30: hostile indexes, one line


@pytest.mark.parametrize("text, needle", [
    ('{"weight_map": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    ('{"metadata": {"total_size": 1' + "0" * 5000 + '}, "weight_map": {}}', "4300 digits"),
    ('{"metadata": {"total_size": 1' + "0" * 30 + '}, "weight_map": {}}', "beyond int64"),
    ('{"weight_map": ' + '{"a": ' * 40 + "{}" + "}" * 40 + "}", "nested deeper than 32"),
])
def test_an_index_nested_absurdly_or_holding_a_huge_integer_is_one_line(tmp_path, text, needle):
    folder = tmp_path / "m"
    write_sharded(folder, bert_tensors(0))
    (folder / "model.safetensors.index.json").write_text(text)
    with pytest.raises(CheckpointError) as ei:
        open_checkpoint(folder)
    one_line(ei, "model.safetensors.index.json", needle)


def test_control_characters_of_a_shard_name_are_escaped(tmp_path, capsys):
    from specbound.cli import main

    folder = tmp_path / "m"
    write_sharded(folder, bert_tensors(0))
    index = folder / "model.safetensors.index.json"
    doc = json.loads(index.read_text())
    name = next(iter(doc["weight_map"]))
    doc["weight_map"][name] = "evil\u0000\u001b[2J.safetensors"  # NUL, then ESC [2J: clear the screen
    index.write_text(json.dumps(doc))
    assert main(["spectra", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x00" not in err
    assert "evil\\x00\\x1b[2J" in err and len(err.strip().splitlines()) == 1
