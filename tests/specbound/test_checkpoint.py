"""Checkpoint containers: what is read equals what was written, exactly, in every container.

The reference values are the arrays the test itself wrote (converted by numpy, not by the code
under test); files are written with the containers' own libraries (safetensors, torch, numpy).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file as save_safetensors_np
from safetensors.torch import save_file as save_safetensors_torch

from specbound.checkpoint import file_sha256, open_checkpoint, read_metadata, read_tensors
from specbound.errors import LayoutError

CONTAINERS = ("safetensors", "pt", "pth", "bin", "npz", "hf-safetensors", "hf-bin")


def write_checkpoint(
    base: Path,
    tensors: dict[str, np.ndarray],
    container: str,
    metadata: dict[str, str] | None = None,
    config: dict | None = None,
) -> Path:
    """Write ``tensors`` to ``base`` (+ extension) in ``container``; return the path to load.

    ``hf-*`` containers make a Hugging Face folder (``config.json`` only if ``config`` is given).
    """
    if container.startswith("hf-"):
        folder = base.with_suffix("")
        folder.mkdir(parents=True, exist_ok=True)
        stem, inner = ("model", "safetensors") if container == "hf-safetensors" else (
            "pytorch_model", "bin")
        write_checkpoint(folder / stem, tensors, inner, metadata)
        if config is not None:
            (folder / "config.json").write_text(json.dumps(config))
        return folder
    path = base.with_suffix("." + container)
    if container == "safetensors":
        save_safetensors_np({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(path),
                            metadata=metadata)
    elif container in ("pt", "pth", "bin"):
        state: dict = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tensors.items()}
        if metadata is not None:
            state["__metadata__"] = dict(metadata)
        torch.save(state, path)
    elif container == "npz":
        extra = {} if metadata is None else {"__metadata__": np.array(json.dumps(metadata))}
        np.savez(path, **tensors, **extra)
    else:  # pragma: no cover
        raise ValueError(container)
    if config is not None:
        (path.parent / "config.json").write_text(json.dumps(config))
    return path


def _random_tensors(seed: int, dtype=np.float32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "a.weight": rng.standard_normal((5, 3)).astype(dtype),
        "b": rng.standard_normal((7,)).astype(dtype),
        "c.deep": rng.standard_normal((2, 3, 4)).astype(dtype),
    }


class TestRoundTrip:
    @pytest.mark.parametrize("container", CONTAINERS)
    @pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
    def test_values_are_read_exactly_as_float64(self, tmp_path, container, dtype):
        src = _random_tensors(1, dtype)
        path = write_checkpoint(tmp_path / "ck", src, container)
        got = read_tensors(path)
        assert set(got) == set(src)
        for name, array in src.items():
            assert got[name].dtype == np.float64
            # binary16/32 -> binary64 is exact, so equality (not closeness) is the specification.
            np.testing.assert_array_equal(got[name], array.astype(np.float64))

    @pytest.mark.parametrize("container", ["safetensors", "pt", "hf-bin"])
    def test_bfloat16_is_widened_exactly(self, tmp_path, container):
        rng = np.random.default_rng(2)
        # float32 values whose low 16 bits are zero are exactly bfloat16 numbers.
        bits = rng.integers(0, 2**32, size=(4, 6), dtype=np.uint64).astype(np.uint32) & 0xFFFF0000
        ref = bits.view(np.float32)
        ref = np.where(np.isfinite(ref), ref, 1.0).astype(np.float32)
        tensor = torch.from_numpy(ref).to(torch.bfloat16)
        assert np.array_equal(tensor.float().numpy(), ref)  # the premise of the test
        if container == "safetensors":
            path = tmp_path / "bf.safetensors"
            save_safetensors_torch({"w": tensor}, str(path))
        elif container == "pt":
            path = tmp_path / "bf.pt"
            torch.save({"w": tensor}, path)
        else:
            path = tmp_path / "hf"
            path.mkdir()
            torch.save({"w": tensor}, path / "pytorch_model.bin")
        np.testing.assert_array_equal(read_tensors(path)["w"], ref.astype(np.float64))

    @pytest.mark.parametrize("container", CONTAINERS)
    def test_metadata_round_trips(self, tmp_path, container):
        meta = {"format": "x", "num_layers": "3"}
        path = write_checkpoint(tmp_path / "ck", _random_tensors(3), container, metadata=meta)
        assert read_metadata(path) == meta

    def test_only_requested_tensors_are_read(self, tmp_path):
        src = _random_tensors(4)
        src["unused"] = np.full((3,), np.nan, dtype=np.float32)  # must not be touched
        path = write_checkpoint(tmp_path / "ck", src, "safetensors")
        got = read_tensors(path, ["a.weight"])
        assert list(got) == ["a.weight"]

    def test_integer_tensors_are_skipped_by_default(self, tmp_path):
        src = _random_tensors(5)
        src["position_ids"] = np.arange(6, dtype=np.int64)
        path = write_checkpoint(tmp_path / "ck", src, "safetensors")
        assert "position_ids" not in read_tensors(path)

    def test_each_read_is_a_fresh_writable_copy(self, tmp_path):
        path = write_checkpoint(tmp_path / "ck", _random_tensors(6, np.float64), "safetensors")
        ckpt = open_checkpoint(path)
        first = ckpt.tensor("b")
        first[:] = 0.0
        assert not np.array_equal(ckpt.tensor("b"), first)

    @pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
    def test_a_transposed_read_is_the_exact_transpose_in_c_order(self, tmp_path, dtype):
        src = _random_tensors(11, dtype)
        path = write_checkpoint(tmp_path / "ck", src, "safetensors")
        ckpt = open_checkpoint(path)
        got = ckpt.tensor("a.weight", (5, 3), transposed=True)
        assert got.shape == (3, 5) and got.flags.c_contiguous and got.dtype == np.float64
        np.testing.assert_array_equal(got, src["a.weight"].astype(np.float64).T)
        with pytest.raises(LayoutError, match="not a matrix"):
            ckpt.tensor("c.deep", transposed=True)

    def test_a_partial_build_transposes_its_placeholders_too(self, tmp_path):
        from dataclasses import fields

        from specbound.adapters.helpers import is_placeholder
        from specbound.checkpoint_value import Checkpoint
        from specbound.partial import PartialCheckpoint

        name = "encoder.layer.3.attention.self.query.weight"  # a tensor of layer 3, which is not kept
        path = write_checkpoint(tmp_path / "ck", {name: np.ones((5, 3), np.float32)}, "safetensors")
        ckpt = open_checkpoint(path)
        partial = PartialCheckpoint(**{f.name: getattr(ckpt, f.name) for f in fields(Checkpoint)}, keep=frozenset())
        stub = partial.tensor(name, (5, 3), transposed=True)
        assert is_placeholder(stub) and stub.shape == (3, 5)

    def test_nested_state_dicts_are_flattened_with_dots(self, tmp_path):
        src = _random_tensors(7)
        path = tmp_path / "nested.pt"
        torch.save({"epoch": 3, "model": {k: torch.from_numpy(v) for k, v in src.items()}}, path)
        got = read_tensors(path)
        assert set(got) == {f"model.{k}" for k in src}
        np.testing.assert_array_equal(got["model.b"], src["b"].astype(np.float64))


class TestContainerDetection:
    @pytest.mark.parametrize("container", ["safetensors", "pt", "npz"])
    def test_unknown_extension_is_detected_by_content(self, tmp_path, container):
        src = _random_tensors(8)
        path = write_checkpoint(tmp_path / "ck", src, container)
        renamed = tmp_path / "weights.data"
        shutil.copy(path, renamed)
        ckpt = open_checkpoint(renamed)
        assert ckpt.container == {"pt": "torch"}.get(container, container)
        np.testing.assert_array_equal(ckpt.tensor("b"), src["b"].astype(np.float64))

    def test_folder_reads_config_and_prefers_safetensors(self, tmp_path):
        folder = tmp_path / "hf"
        folder.mkdir()
        save_safetensors_np({"x": np.ones(2, np.float32)}, str(folder / "model.safetensors"))
        torch.save({"x": torch.zeros(2)}, folder / "pytorch_model.bin")
        (folder / "config.json").write_text(json.dumps({"num_attention_heads": 4}))
        ckpt = open_checkpoint(folder)
        assert ckpt.path == folder / "model.safetensors"
        assert ckpt.config == {"num_attention_heads": 4}
        np.testing.assert_array_equal(ckpt.tensor("x"), np.ones(2))

    def test_standard_weights_file_picks_up_its_config(self, tmp_path):
        path = write_checkpoint(tmp_path / "hf", _random_tensors(9), "hf-safetensors",
                                config={"hidden_act": "relu"})
        assert open_checkpoint(path / "model.safetensors").config == {"hidden_act": "relu"}

    def test_other_file_names_ignore_a_neighbouring_config(self, tmp_path):
        path = write_checkpoint(tmp_path / "ck", _random_tensors(10), "safetensors",
                                config={"hidden_act": "relu"})
        assert open_checkpoint(path).config is None

    def test_sha256_is_that_of_the_weights_file(self, tmp_path):
        path = write_checkpoint(tmp_path / "hf", _random_tensors(11), "hf-bin")
        expected = hashlib.sha256((path / "pytorch_model.bin").read_bytes()).hexdigest()
        assert open_checkpoint(path).sha256() == expected == file_sha256(path / "pytorch_model.bin")
