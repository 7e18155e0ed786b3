"""Bad checkpoints: each is refused with one SpecboundError line naming the file and the tensor.

Hostile pickles are refused *without being executed*: their ``__reduce__`` would create a marker
file, and the tests assert that the marker does not exist afterwards.
"""

from __future__ import annotations

import json
import pathlib
import pickle
import struct

import numpy as np
import pytest
import torch

from specbound.checkpoint import load_weights, open_checkpoint, read_tensors
from specbound.errors import CheckpointError, LayoutError, NonFiniteError, SpecboundError
from .test_adapters import ANALYSIS_META, H, N, analysis_tensors, bert_config, bert_tensors
from .test_checkpoint import write_checkpoint

Q0 = "encoder.layer.0.attention.self.query.weight"


def assert_one_line(excinfo, *needles: str) -> str:
    """The error is a SpecboundError whose message is one line containing every needle."""
    message = str(excinfo.value)
    assert isinstance(excinfo.value, SpecboundError)
    assert message and "\n" not in message and "\r" not in message, message
    for needle in needles:
        assert needle in message, (needle, message)
    return message


class Hostile:
    """Unpickling this would create ``marker``: the observable sign of executed code."""

    def __init__(self, marker: pathlib.Path):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


class TestFiles:
    def test_missing_file(self, tmp_path):
        path = tmp_path / "nope.safetensors"
        with pytest.raises(CheckpointError) as ei:
            load_weights(path)
        assert_one_line(ei, str(path))

    @pytest.mark.parametrize("suffix", [".safetensors", ".pt", ".bin", ".npz", ".weird"])
    def test_empty_file(self, tmp_path, suffix):
        path = tmp_path / f"empty{suffix}"
        path.write_bytes(b"")
        with pytest.raises(CheckpointError) as ei:
            load_weights(path)
        assert_one_line(ei, str(path), "empty")

    @pytest.mark.parametrize("keep", [0.5, 0.99, 8, 5])
    def test_truncated_safetensors(self, tmp_path, keep):
        good = write_checkpoint(tmp_path / "good", bert_tensors(0), "safetensors")
        data = good.read_bytes()
        path = tmp_path / "cut.safetensors"
        path.write_bytes(data[: int(keep * len(data)) if keep < 1 else keep])
        with pytest.raises(CheckpointError) as ei:
            load_weights(path, num_heads=H)
        assert_one_line(ei, str(path))

    def test_corrupt_safetensors_header(self, tmp_path):
        path = tmp_path / "bad.safetensors"
        header = b'{"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 9999]}}'
        path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 64)
        with pytest.raises(CheckpointError) as ei:
            read_tensors(path)
        assert_one_line(ei, str(path))

    @pytest.mark.parametrize("container", ["pt", "npz"])
    def test_truncated_zip_containers(self, tmp_path, container):
        good = write_checkpoint(tmp_path / "good", bert_tensors(0), container)
        path = tmp_path / f"cut.{container}"
        path.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
        with pytest.raises(CheckpointError) as ei:
            load_weights(path, num_heads=H)
        assert_one_line(ei, str(path))

    @pytest.mark.parametrize("name", ["garbage.pt", "garbage.npz", "garbage.weird"])
    @pytest.mark.parametrize("head", [b"", b"PK\x03\x04", b"\x80\x04"])
    def test_garbage_bytes(self, tmp_path, name, head):
        path = tmp_path / name
        path.write_bytes(head + b"this is not a checkpoint at all\n" * 4)
        with pytest.raises(CheckpointError) as ei:
            load_weights(path)
        assert_one_line(ei, str(path))

    def test_folder_without_weights(self, tmp_path):
        (tmp_path / "config.json").write_text("{}")
        with pytest.raises(CheckpointError) as ei:
            load_weights(tmp_path)
        assert_one_line(ei, str(tmp_path), "model.safetensors", "pytorch_model.bin")

    def test_sharded_folder_is_refused_by_name(self, tmp_path):
        (tmp_path / "model.safetensors.index.json").write_text("{}")
        with pytest.raises(CheckpointError) as ei:
            load_weights(tmp_path)
        assert_one_line(ei, "model.safetensors.index.json", "sharded")

    def test_unreadable_config(self, tmp_path):
        path = write_checkpoint(tmp_path / "hf", bert_tensors(0), "hf-safetensors")
        (path / "config.json").write_text("{not json")
        with pytest.raises(CheckpointError) as ei:
            load_weights(path)
        assert_one_line(ei, str(path / "config.json"))

    def test_torch_file_that_is_not_a_state_dict(self, tmp_path):
        path = tmp_path / "bare.pt"
        torch.save(torch.zeros(3), path)
        with pytest.raises(CheckpointError) as ei:
            load_weights(path)
        assert_one_line(ei, str(path), "state dict")


class TestHostilePickles:
    """A pickle that is more than plain tensors is refused and never executed."""

    def _refused(self, path: pathlib.Path, marker: pathlib.Path) -> None:
        with pytest.raises(CheckpointError) as ei:
            load_weights(path, num_heads=H)
        assert_one_line(ei, str(path), "refused", "not executed")
        assert not marker.exists()

    def test_torch_save_with_a_hostile_object(self, tmp_path):
        marker = tmp_path / "EXECUTED"
        state = {k: torch.from_numpy(v) for k, v in bert_tensors(0).items()}
        state["payload"] = Hostile(marker)
        torch.save(state, tmp_path / "evil.pt")
        self._refused(tmp_path / "evil.pt", marker)

    @pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
    def test_raw_pickle_named_like_a_state_dict(self, tmp_path, protocol):
        marker = tmp_path / "EXECUTED"
        path = tmp_path / "evil.bin"
        path.write_bytes(pickle.dumps({"w": Hostile(marker)}, protocol=protocol))
        self._refused(path, marker)

    def test_hostile_pytorch_model_bin_in_a_folder(self, tmp_path):
        marker = tmp_path / "EXECUTED"
        folder = tmp_path / "hf"
        folder.mkdir()
        torch.save({"w": Hostile(marker)}, folder / "pytorch_model.bin")
        (folder / "config.json").write_text(json.dumps(bert_config()))
        with pytest.raises(CheckpointError) as ei:
            load_weights(folder)
        assert_one_line(ei, str(folder / "pytorch_model.bin"), "refused")
        assert not marker.exists()

    def test_npz_with_a_pickled_object_array(self, tmp_path):
        marker = tmp_path / "EXECUTED"
        path = tmp_path / "evil.npz"
        payload = np.empty(1, dtype=object)
        payload[0] = Hostile(marker)
        np.savez(path, w=np.zeros(3), payload=payload)
        self._refused(path, marker)


class TestLayout:
    def test_unknown_layout_lists_what_was_expected(self, tmp_path):
        path = write_checkpoint(tmp_path / "ck", {"conv1.weight": np.ones((2, 2))}, "safetensors")
        with pytest.raises(LayoutError) as ei:
            load_weights(path)
        assert_one_line(ei, str(path), "unknown layout", "conv1.weight",
                        "encoder.layer", "layers.{l}.attn.W_Q")

    @pytest.mark.parametrize("missing", [
        "encoder.layer.1.attention.self.key.weight", "encoder.layer.0.output.dense.weight",
        "encoder.layer.1.attention.output.dense.weight"])
    def test_bert_missing_tensor_is_named(self, tmp_path, missing):
        src = bert_tensors(0)
        del src[missing]
        path = write_checkpoint(tmp_path / "ck", src, "safetensors")
        with pytest.raises(LayoutError) as ei:
            load_weights(path, num_heads=H)
        assert_one_line(ei, str(path), missing, "missing")

    def test_bert_missing_layer_from_config(self, tmp_path):
        path = write_checkpoint(tmp_path / "ck", bert_tensors(0), "hf-safetensors",
                                config={**bert_config(), "num_hidden_layers": 3})
        with pytest.raises(LayoutError) as ei:
            load_weights(path)
        assert_one_line(ei, "encoder.layer.2.attention.self.query.weight")

    @pytest.mark.parametrize("missing", ["layers.1.ff.M_out", "readout.w", "layers.0.attn.W_O"])
    def test_analysis_missing_tensor_is_named(self, tmp_path, missing):
        src = analysis_tensors(0)
        del src[missing]
        path = write_checkpoint(tmp_path / "ck", src, "safetensors", metadata=ANALYSIS_META)
        with pytest.raises(LayoutError) as ei:
            load_weights(path)
        assert_one_line(ei, str(path), missing)

    def test_bert_shape_mismatch_names_expected_and_got(self, tmp_path):
        src = bert_tensors(0)
        name = "encoder.layer.1.attention.self.key.weight"
        src[name] = np.zeros((N, N - 1), np.float32)
        path = write_checkpoint(tmp_path / "ck", src, "pt")
        with pytest.raises(LayoutError) as ei:
            load_weights(path, num_heads=H)
        assert_one_line(ei, str(path), name, f"({N}, {N - 1})", f"({N}, {N})")

    def test_bert_ff_shape_mismatch(self, tmp_path):
        src = bert_tensors(0)
        name = "encoder.layer.1.output.dense.weight"
        src[name] = np.zeros((N, 7), np.float32)
        path = write_checkpoint(tmp_path / "ck", src, "npz")
        with pytest.raises(LayoutError) as ei:
            load_weights(path, num_heads=H)
        assert_one_line(ei, name, "expected")

    @pytest.mark.parametrize("name, shape", [
        (Q0, (N, N, 1)), ("encoder.layer.1.attention.self.value.weight", (N * N,))])
    def test_bert_wrong_rank(self, tmp_path, name, shape):
        src = bert_tensors(0)
        src[name] = np.zeros(shape, np.float32)
        path = write_checkpoint(tmp_path / "ck", src, "safetensors")
        with pytest.raises(LayoutError) as ei:
            load_weights(path, num_heads=H)
        assert_one_line(ei, str(path), name, f"{len(shape)}-D")

    @pytest.mark.parametrize("name, shape", [
        ("layers.0.attn.W_Q", (6, 4)), ("layers.1.attn.W_K", (1, 2, 6, 4)),
        ("layers.0.ff.M_in", (6, 10, 1)), ("readout.w", (6, 1))])
    def test_analysis_wrong_rank(self, tmp_path, name, shape):
        src = analysis_tensors(0)
        src[name] = np.zeros(shape)
        path = write_checkpoint(tmp_path / "ck", src, "safetensors", metadata=ANALYSIS_META)
        with pytest.raises(LayoutError) as ei:
            load_weights(path)
        assert_one_line(ei, str(path), name, f"{len(shape)}-D")

    def test_metadata_disagreeing_with_tensors(self, tmp_path):
        path = write_checkpoint(tmp_path / "ck", analysis_tensors(0), "safetensors",
                                metadata={**ANALYSIS_META, "num_heads": "3"})
        with pytest.raises(LayoutError) as ei:
            load_weights(path)
        assert_one_line(ei, str(path), "layers.0.attn.W_Q", "(3, 6, 4)", "(2, 6, 4)")

    def test_unsupported_format_version(self, tmp_path):
        path = write_checkpoint(tmp_path / "ck", analysis_tensors(0), "safetensors",
                                metadata={**ANALYSIS_META, "format": "specbound-analysis-v9"})
        with pytest.raises(LayoutError) as ei:
            load_weights(path)
        assert_one_line(ei, str(path), "specbound-analysis-v9")

    def test_analysis_activation_unknown_or_contradicted(self, tmp_path):
        bare = write_checkpoint(tmp_path / "bare", analysis_tensors(0), "npz")
        with pytest.raises(LayoutError) as ei:
            load_weights(bare)
        assert_one_line(ei, str(bare), "activation")
        meta = write_checkpoint(tmp_path / "meta", analysis_tensors(0), "safetensors",
                                metadata=ANALYSIS_META)
        with pytest.raises(LayoutError) as ei:
            load_weights(meta, activation="gelu")
        assert_one_line(ei, str(meta), "activation", "relu", "gelu")

    def test_integer_tensor_where_weights_are_needed(self, tmp_path):
        src = bert_tensors(0)
        src[Q0] = np.zeros((N, N), np.int32)
        path = write_checkpoint(tmp_path / "ck", src, "safetensors")
        with pytest.raises(LayoutError) as ei:
            load_weights(path, num_heads=H)
        assert_one_line(ei, str(path), Q0, "int32")


class TestHeads:
    def test_heads_must_divide_hidden_size(self, tmp_path):
        path = write_checkpoint(tmp_path / "ck", bert_tensors(0), "safetensors")
        with pytest.raises(LayoutError) as ei:
            load_weights(path, num_heads=5)
        assert_one_line(ei, str(path), str(N), "5", "divisible")

    def test_heads_unknown_without_config_or_argument(self, tmp_path):
        path = write_checkpoint(tmp_path / "ck", bert_tensors(0), "safetensors")
        with pytest.raises(LayoutError) as ei:
            load_weights(path)
        assert_one_line(ei, str(path), "num_heads")

    def test_argument_contradicting_config(self, tmp_path):
        path = write_checkpoint(tmp_path / "ck", bert_tensors(0), "hf-safetensors",
                                config=bert_config())
        with pytest.raises(LayoutError) as ei:
            load_weights(path, num_heads=4)
        assert_one_line(ei, "num_heads", "4", str(H))

    def test_unsupported_hidden_act(self, tmp_path):
        path = write_checkpoint(tmp_path / "ck", bert_tensors(0), "hf-safetensors",
                                config=bert_config("silu"))
        with pytest.raises(LayoutError) as ei:
            load_weights(path)
        assert_one_line(ei, "config.json", "silu")


class TestNonFinite:
    @pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
    @pytest.mark.parametrize("container", ["safetensors", "pt", "npz"])
    def test_bert_used_tensor(self, tmp_path, bad, container):
        src = bert_tensors(0)
        name = "encoder.layer.1.intermediate.dense.weight"
        src[name][3, 4] = bad
        path = write_checkpoint(tmp_path / "ck", src, container)
        with pytest.raises(NonFiniteError) as ei:
            load_weights(path, num_heads=H)
        assert_one_line(ei, str(path), name, "NaN/Inf")

    def test_analysis_used_tensor(self, tmp_path):
        src = analysis_tensors(0)
        src["readout.w"][0] = np.nan
        path = write_checkpoint(tmp_path / "ck", src, "safetensors", metadata=ANALYSIS_META)
        with pytest.raises(NonFiniteError) as ei:
            load_weights(path)
        assert_one_line(ei, str(path), "readout.w")

    def test_unused_tensor_does_not_matter(self, tmp_path):
        src = bert_tensors(0)
        src["encoder.layer.0.attention.self.query.bias"][:] = np.nan  # biases are not covered
        path = write_checkpoint(tmp_path / "ck", src, "safetensors")
        assert load_weights(path, num_heads=H).num_matrices == 2 * (2 * H + 2)

    def test_open_checkpoint_reads_no_values(self, tmp_path):
        src = bert_tensors(0)
        src[Q0][:] = np.nan
        ckpt = open_checkpoint(write_checkpoint(tmp_path / "ck", src, "safetensors"))
        assert ckpt.shape(Q0) == (N, N)


class TestCommandLine:
    """``specbound spectra|proxies BAD``: exit status 2, one stderr line, no output file."""

    def _bad_checkpoints(self, tmp_path) -> dict[str, pathlib.Path]:
        marker = tmp_path / "EXECUTED"
        evil = tmp_path / "evil.pt"
        torch.save({"w": Hostile(marker)}, evil)
        empty = tmp_path / "empty.safetensors"
        empty.write_bytes(b"")
        nan = bert_tensors(0)
        nan[Q0][0, 0] = np.nan
        return {
            "missing": tmp_path / "absent.safetensors",
            "empty": empty,
            "hostile": evil,
            "unknown-layout": write_checkpoint(tmp_path / "u", {"x": np.ones(2)}, "safetensors"),
            "nan": write_checkpoint(tmp_path / "nan", nan, "hf-safetensors", config=bert_config()),
            "no-heads": write_checkpoint(tmp_path / "noh", bert_tensors(0), "safetensors"),
        }

    @pytest.mark.parametrize("command", ["spectra", "proxies"])
    def test_bad_checkpoints(self, tmp_path, capsys, command):
        pytest.importorskip(f"specbound.commands.{command}")
        from specbound.cli import main

        for case, path in self._bad_checkpoints(tmp_path).items():
            csv = tmp_path / f"{command}-{case}.csv"
            status = main([command, str(path), "--csv", str(csv)])
            captured = capsys.readouterr()
            lines = captured.err.strip().splitlines()
            assert status == 2, case
            assert len(lines) == 1 and lines[0].startswith("specbound: error:"), (case, lines)
            assert str(path) in lines[0] or str(path.with_suffix("")) in lines[0], (case, lines)
            assert captured.out == "" and not csv.exists(), case
        assert not (tmp_path / "EXECUTED").exists()

    def test_console_script_process(self, tmp_path):
        import subprocess
        import sys

        pytest.importorskip("specbound.commands.spectra")
        path = tmp_path / "absent.safetensors"
        proc = subprocess.run([sys.executable, "-m", "specbound", "spectra", str(path)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines() == [
            f"specbound: error: {path}: no such file or folder"]
        assert proc.stdout == ""
