"""Bad input at the command line, as a new user would try it (issue 11, item 8).

Each case runs ``specbound ...`` in-process and checks the user-facing contract: exit status 2,
exactly one line on stderr, no traceback (an uncaught exception would fail the test), and nothing
written or changed on disk.  Destinations are checked before any computation.  The signal tests
run the real executable and check that no worker process outlives it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from specbound.cli import main
from .test_adapters import ANALYSIS_META, analysis_tensors, bert_config, bert_tensors
from .test_checkpoint import write_checkpoint

EMP = ["--empirical-loss", "0.1", "--n", "1000"]


def snapshot(folder: Path) -> dict:
    """Every file below ``folder`` with its bytes (symlinks as their target)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_symlink():
            out[str(p)] = ("link", os.readlink(p))
        elif p.is_file():
            out[str(p)] = p.read_bytes()
    return out


def refused(capsys, argv, folder: Path, *needles: str) -> str:
    """Run argv; assert exit 2, one stderr line containing the needles, nothing written in folder."""
    before = snapshot(folder)
    capsys.readouterr()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse
        rc = exc.code
    out, err = capsys.readouterr()
    lines = err.strip("\n").split("\n")
    assert rc == 2, (rc, err)
    assert len(lines) == 1 and lines[0].startswith("specbound"), err
    assert "Traceback" not in err and "Traceback" not in out
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert snapshot(folder) == before, "something was written"
    return lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    own = write_checkpoint(d / "own", analysis_tensors(0), "safetensors", metadata=ANALYSIS_META)
    hf = write_checkpoint(d / "hf", bert_tensors(0), "hf-safetensors", config=bert_config())
    return d, own, hf


# ---------------------------------------------------------------- destinations (before any work)


def test_out_may_not_replace_the_checkpoint(capsys, files):
    d, own, _ = files
    refused(capsys, ["certify", own, *EMP, "--out", own], d, "--out", "input", "refusing")


def test_out_may_not_replace_it_through_a_symlink_or_a_hard_link(capsys, files, tmp_path):
    d, own, _ = files
    (tmp_path / "cert.json").symlink_to(own)
    refused(capsys, ["certify", own, *EMP, "--out", tmp_path / "cert.json"], d, "input")
    os.link(own, tmp_path / "hard.json")
    refused(capsys, ["certify", own, *EMP, "--out", tmp_path / "hard.json"], d, "input")


@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
def test_out_may_not_replace_the_folders_config_or_weights(capsys, files, name):
    d, _, hf = files
    refused(capsys, ["certify", hf, *EMP, "--out", hf / name], d, "input")


def test_out_may_not_replace_the_data_file(capsys, files, tmp_path):
    d, own, _ = files
    data = tmp_path / "data.npz"
    np.savez(data, labels=np.array([1, -1]), tokens=np.zeros((2, 3), dtype=np.int64))
    refused(capsys, ["certify", own, "--data", data, "--out", data], tmp_path, "input")


@pytest.mark.parametrize("case", ["empty", "folder", "parent is a file", "too long", "unwritable"])
def test_out_destination_is_checked_before_computing(capsys, files, case, monkeypatch):
    d, own, _ = files
    out = {"empty": "", "folder": d, "parent is a file": own / "x.json",
           "too long": d / ("x" * 400 + ".json"), "unwritable": "/proc/specbound-test/x.json"}[case]
    import specbound.pipeline as pipeline

    def boom(*a, **k):  # the computation must not start
        raise AssertionError("computed before checking the destination")

    monkeypatch.setattr(pipeline, "certify", boom)
    refused(capsys, ["certify", own, *EMP, "--out", out], d, "--out")


@pytest.mark.parametrize("command", ["spectra", "proxies"])
@pytest.mark.parametrize("option, target", [("--csv", "folder"), ("--csv", "checkpoint"),
                                            ("--report", "file"), ("--csv", ""), ("--report", "long")])
def test_spectra_and_proxies_destinations(capsys, files, command, option, target):
    d, own, _ = files
    value = {"folder": d, "checkpoint": own, "file": own, "": "", "long": d / ("r" * 400)}[target]
    refused(capsys, [command, own, option, value], d, option)


# ---------------------------------------------------------------- arguments


def test_argparse_errors_take_one_line(capsys, files):
    d, _, _ = files
    refused(capsys, ["certify", "--bogus"], d, "unrecognized")
    refused(capsys, ["theorem", "--format", "nope"], d, "invalid choice")
    refused(capsys, [], d, "required")


@pytest.mark.parametrize("margin", ["1e308", "1e-300", "5e-324"])
def test_margin_out_of_range(capsys, files, margin):
    d, own, _ = files
    refused(capsys, ["certify", own, *EMP, "--margin", margin], d, "--margin")


@pytest.mark.parametrize("value", ["1e999999", "__import__('os').getcwd()", "1/0", "9" * 200])
def test_theorem_set_takes_plain_numbers_only(capsys, files, value):
    d, _, _ = files
    refused(capsys, ["theorem", "--set", f"C_sm={value}"], d, "C_sm")


# ---------------------------------------------------------------- checkpoints that used to crash


def _own_with(d: Path, name: str, change) -> Path:
    t = analysis_tensors(0)
    t = change(t) or t
    return write_checkpoint(d / name, t, "safetensors", metadata=ANALYSIS_META)


@pytest.mark.parametrize("command", ["certify", "spectra", "proxies"])
@pytest.mark.parametrize("value", [5e-324, 1e308, -1e308])
def test_weights_outside_the_float_range_are_refused_not_nan(capsys, tmp_path, command, value):
    path = _own_with(tmp_path, "w", lambda t: {k: v * 0 + value for k, v in t.items()})
    extra = EMP if command == "certify" else []
    refused(capsys, [command, path, *extra], tmp_path, "outside the range")


def test_zero_shape_tensor(capsys, tmp_path):
    path = _own_with(tmp_path, "z", lambda t: t.update({"layers.0.ff.M_in": np.zeros((0, 0))}))
    refused(capsys, ["certify", path, *EMP], tmp_path, "layers.0.ff.M_in")


# (a JSON null is no value: the activation is then assumed and the scope says "assumed")
@pytest.mark.parametrize("act", [["gelu"], {"gelu": 1}, 3])
def test_hidden_act_of_the_wrong_type(capsys, tmp_path, act):
    cfg = bert_config()
    cfg["hidden_act"] = act
    path = write_checkpoint(tmp_path / "hf", bert_tensors(0), "hf-safetensors", config=cfg)
    refused(capsys, ["certify", path, *EMP], tmp_path, "hidden_act")


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000,
                                  '{"a": ' + "[" * 40 + "]" * 40 + "}",
                                  '{"num_attention_heads": ' + "9" * 5000 + "}",
                                  '{"num_attention_heads": ' + "9" * 30 + "}"])
def test_hostile_config_json(capsys, tmp_path, text):
    path = write_checkpoint(tmp_path / "hf", bert_tensors(0), "hf-safetensors", config=bert_config())
    (path / "config.json").write_text(text)
    refused(capsys, ["certify", path, *EMP], tmp_path, "config.json")


def test_self_referencing_state_dict(capsys, tmp_path):
    sd = {k: torch.from_numpy(v) for k, v in bert_tensors(0).items()}
    sd["loop"] = sd
    torch.save(sd, tmp_path / "loop.pt")
    refused(capsys, ["certify", tmp_path / "loop.pt", "--num-heads", "3", *EMP], tmp_path, "contains itself")


def test_meta_device_tensors(capsys, tmp_path):
    torch.save({k: torch.empty(v.shape, device="meta") for k, v in bert_tensors(0).items()},
               tmp_path / "meta.pt")
    refused(capsys, ["certify", tmp_path / "meta.pt", "--num-heads", "3", *EMP], tmp_path, "meta device")


def test_torch_zip_named_npz(capsys, tmp_path):
    torch.save({k: torch.from_numpy(v) for k, v in bert_tensors(0).items()}, tmp_path / "w.npz")
    refused(capsys, ["certify", tmp_path / "w.npz", "--num-heads", "3", *EMP], tmp_path, "not a .npy array")


def test_task_record_with_a_huge_sequence_length(capsys, tmp_path):
    path = _own_with(tmp_path, "t", lambda t: None)
    record = {"task": {"name": "parity", "rule": "parity", "seq_len": 10**9, "positions": [1, 2]}}
    path.with_suffix(".json").write_text(json.dumps(record))
    refused(capsys, ["certify", path], tmp_path, "seq_len")


# ---------------------------------------------------------------- decompression bombs


def _npy_header(shape, dtype="<f8") -> bytes:
    import io

    from numpy.lib import format as npformat

    buf = io.BytesIO()
    npformat.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def _bomb(path: Path, member: str, megabytes: int = 64) -> Path:
    """A zip whose member expands ~1000:1 (zeros), written in chunks (little memory)."""
    n = megabytes * 2**20 // 8
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open(member, "w", force_zip64=True) as fh:
            fh.write(_npy_header((n,)))
            chunk = bytes(2**20)
            for _ in range(megabytes):
                fh.write(chunk)
    return path


def test_npz_data_file_bomb_is_refused_before_reading(capsys, files, tmp_path):
    _, own, _ = files
    data = _bomb(tmp_path / "bomb.npz", "labels.npy")
    assert data.stat().st_size < 2**20
    refused(capsys, ["certify", own, "--data", data], tmp_path, "decompression bomb")


def test_npz_checkpoint_bomb_is_refused_before_reading(capsys, tmp_path):
    path = _bomb(tmp_path / "w.npz", "encoder.layer.0.attention.self.query.weight.npy")
    refused(capsys, ["certify", path, "--num-heads", "3", *EMP], tmp_path, "decompression bomb")


def test_pt_checkpoint_bomb_is_refused_before_reading(capsys, tmp_path):
    # a real torch zip archive with one more member, deflated, that declares 40 MiB in a few KiB: the
    # zip directory alone says so, and the file is refused before torch inflates anything
    import torch

    path = tmp_path / "bomb.pt"
    torch.save({"encoder.layer.0.attention.self.query.weight": torch.zeros(3, 3)}, path)
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("archive/data/9", "w", force_zip64=True) as fh:
            chunk = bytes(2**20)
            for _ in range(40):
                fh.write(chunk)
    assert path.stat().st_size < 2**20
    refused(capsys, ["certify", path, "--num-heads", "3", *EMP], tmp_path, "decompression bomb")


@pytest.mark.parametrize("what", ["data", "checkpoint"])
def test_npy_header_declaring_a_huge_shape(capsys, files, tmp_path, what):
    _, own, _ = files
    path = tmp_path / "lie.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("labels.npy" if what == "data" else "w.npy", _npy_header((10**12,)) + bytes(64))
    argv = ["certify", own, "--data", path] if what == "data" else ["certify", path, *EMP]
    refused(capsys, argv, tmp_path, "declares shape")


def test_npz_checkpoint_members_are_read_only_when_asked(tmp_path, monkeypatch):
    from specbound.checkpoint import open_checkpoint
    from specbound.npz_archive import NpzArchive

    path = write_checkpoint(tmp_path / "w", bert_tensors(0), "npz")
    reads = []
    original = NpzArchive.read
    monkeypatch.setattr(NpzArchive, "read", lambda self, name: reads.append(name) or original(self, name))
    ckpt = open_checkpoint(path)
    assert reads == []  # headers only
    ckpt.tensor("encoder.layer.0.attention.self.query.weight")
    assert reads == ["encoder.layer.0.attention.self.query.weight"]


# ---------------------------------------------------------------- signals


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig, rc, line", [
    (signal.SIGTERM, 143, "specbound: terminated"),
    (signal.SIGINT, 130, "specbound: interrupted"),
    pytest.param(signal.SIGKILL, -9, None, marks=pytest.mark.slow),
])
def test_signals_leave_no_worker_behind(sig, rc, line):
    exe = Path(sys.executable).with_name("specbound")
    # --workers 2: a local pool of two worker processes; --forward arb: a long run of tasks on it
    # a run started in the background of a script inherits SIGINT ignored (POSIX), and Python then
    # leaves it ignored: give the command the default disposition a terminal gives it
    proc = subprocess.Popen([str(exe), "certify", "--samples", "4000", "--forward", "arb", "--workers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        kids: list[int] = []
        while time.monotonic() < deadline and len(kids) < 2 and proc.poll() is None:
            kids = _children(proc.pid)
            time.sleep(0.2)
        if len(kids) < 2:
            pytest.skip("the local pool did not start worker processes here")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(k) for k in kids):
        time.sleep(0.1)
    assert not any(_alive(k) for k in kids), "a worker outlived the command"
    assert proc.returncode == rc
    if line is not None:
        assert err.decode().strip().splitlines() == [line]


def test_an_interrupt_while_the_command_module_imports_is_one_line(monkeypatch, capsys):
    # Ctrl-C during start-up (importing torch/SymPy for the command) ends like one during the run.
    from specbound import cli

    def interrupted(only=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["certify"]) == 130
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines() == ["specbound: interrupted"]


# ---------------------------------------------------------------- issue 30: every file read is an input


@pytest.fixture
def sharded(tmp_path):
    """A sharded GPT-2 folder whose shards have no weights suffix (the index names them)."""
    from safetensors.numpy import save_file

    from .test_engine import gpt2_tensors

    folder = tmp_path / "sharded"
    folder.mkdir()
    tensors = gpt2_tensors()
    names = sorted(tensors)
    half = len(names) // 2
    wmap = {}
    for shard, part in (("part-a", names[:half]), ("part-b", names[half:])):
        save_file({k: tensors[k] for k in part}, str(folder / shard))
        wmap.update({k: shard for k in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 3, "n_head": 3, "n_embd": 24}))
    return folder


@pytest.mark.parametrize("given", ["folder", "index"])
@pytest.mark.parametrize("target", ["part-a", "part-b", "config.json", "model.safetensors.index.json"])
def test_out_may_not_replace_a_shard_or_the_config_of_a_sharded_checkpoint(capsys, sharded, given, target):
    source = sharded if given == "folder" else sharded / "model.safetensors.index.json"
    refused(capsys, ["certify", source, "--n", "1000", "--out", sharded / target], sharded.parent, "input")
    refused(capsys, ["spectra", source, "--csv", sharded / target], sharded.parent, "input")


def test_out_may_not_replace_the_training_record(capsys, files):
    d, own, _ = files
    record = own.with_suffix(".json")
    assert not record.exists()  # even absent: a record written there would change the next run's S
    refused(capsys, ["certify", own, *EMP, "--out", record], d, "input")
    record.write_text(json.dumps({"task": {}}))
    try:
        refused(capsys, ["certify", own, *EMP, "--out", record], d, "input")
    finally:
        record.unlink()


def test_out_may_not_write_into_a_cached_repo(capsys, tmp_path, monkeypatch):
    from .test_formats_hf_cache import REPO, fake_cache

    hub = tmp_path / "hub"
    snap = fake_cache(hub)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    for target in (snap / "config.json", snap / "model.safetensors", snap / "cert.json",
                   snap.parent.parent / "blobs" / "bbb"):
        refused(capsys, ["certify", REPO, *EMP, "--out", target], hub, "input")
    refused(capsys, ["spectra", REPO, "--csv", snap / "config.json"], hub, "input")
    assert main(["spectra", REPO, "--json"]) == 0  # the cached model still loads


@pytest.mark.parametrize("command", ["spectra", "proxies"])
def test_report_may_not_replace_a_checkpoint_named_like_a_report_file(capsys, tmp_path, command):
    from .test_engine import gpt2_tensors

    folder = tmp_path / "report"
    folder.mkdir()
    from safetensors.numpy import save_file

    ckpt = folder / "spectral_decay.png"  # a safetensors file with a report file's name
    save_file(gpt2_tensors(), str(ckpt))
    refused(capsys, [command, ckpt, "--num-heads", "3", "--report", folder], tmp_path, "--report", "input")


# ---------------------------------------------------------------- issue 30: no traceback, quiet pipes


@pytest.mark.parametrize("argv", [["certify", "--samples", "50"], ["certify", "--samples", "50", "--json"],
                                  ["verify", "CERT"]])
def test_a_reader_that_stops_early_ends_the_run_quietly(tmp_path, argv):
    # `specbound ... | head`: the reader goes away; no traceback, and not status 1 (verify's INVALID),
    # also when the output is a rich table (rich itself exits with status 1 on a broken pipe)
    from specbound.cli import BROKEN_PIPE_STATUS

    if "CERT" in argv:
        cert = tmp_path / "cert.json"
        assert main(["certify", "--samples", "50", "--out", str(cert)]) == 0
        argv = ["verify", str(cert)]
    read, write = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "specbound", *argv], stdout=write, stderr=subprocess.PIPE)
    os.close(write)
    os.close(read)  # nobody reads: every write of the command fails with EPIPE
    err = proc.communicate(timeout=300)[1].decode()
    assert proc.returncode == BROKEN_PIPE_STATUS and err == "", (proc.returncode, err)


@pytest.mark.parametrize("mutate, needle", [
    (lambda r: r.__setitem__("task", {"name": "x", "positions": [1]}), "recorded task is malformed"),
    (lambda r: r["task"].__setitem__("symbol_bits", [[1]]), "recorded task is malformed"),
    (lambda r: r["config"].__setitem__("n_train", 10**11), "outside [1, 100000000]"),
    (lambda r: r["config"].__setitem__("data_seed", "seven"), "config.data_seed"),
    (lambda r: r["config"].pop("n_train"), "asks for its training sample"),
])
def test_a_malformed_training_record_is_one_line(capsys, tmp_path, mutate, needle):
    import shutil

    from specbound.data import default_checkpoint_path

    src = default_checkpoint_path()
    shutil.copy(src, tmp_path / "m.safetensors")
    record = json.loads(src.with_suffix(".json").read_text())
    mutate(record)
    (tmp_path / "m.json").write_text(json.dumps(record))
    refused(capsys, ["certify", tmp_path / "m.safetensors"], tmp_path, needle)


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_a_checkpoint_whose_tensors_are_all_empty_is_one_line(capsys, tmp_path, family):
    from .test_engine import gpt2_tensors

    tensors = bert_tensors(0) if family == "bert" else gpt2_tensors()
    empty = {k: np.zeros((0,) * v.ndim, np.float32) for k, v in tensors.items()}
    path = write_checkpoint(tmp_path / family, empty, "hf-safetensors")
    for command in (["certify", path, "--num-heads", "2", *EMP], ["spectra", path, "--num-heads", "2"]):
        refused(capsys, command, tmp_path, "empty")


def test_inputs_all_at_the_smallest_subnormal_certify_without_a_warning(capsys, files, tmp_path):
    # every float choice overflows here: the planner's first candidate stands (floats only choose),
    # and no numpy warning reaches the terminal
    d, own, _ = files
    data = tmp_path / "tiny.npz"
    np.savez(data, labels=np.array([1, -1, 1]), inputs=np.full((3, 4, 6), 5e-324))
    capsys.readouterr()
    assert main(["certify", str(own), "--data", str(data), "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and json.loads(out)["result"]["is_bound"]


def test_a_safetensors_file_whose_header_length_starts_like_a_pickle_is_read(tmp_path):
    # an unknown extension is decided by content: a header length with low byte 0x80 made the file
    # look like a pickle (protocol marker 0x80)
    import struct

    from safetensors.numpy import save_file

    from specbound.checkpoint import open_checkpoint

    tensors = bert_tensors(0)
    path = tmp_path / "weights"
    for pad in range(0, 600):
        save_file(tensors, str(path), metadata={"pad": "x" * pad})
        if path.read_bytes()[0] == 0x80:
            break
    assert path.read_bytes()[0] == 0x80 and struct.unpack("<Q", path.read_bytes()[:8])[0] < path.stat().st_size
    ckpt = open_checkpoint(path)
    assert ckpt.container == "safetensors"
    name = sorted(tensors)[0]
    np.testing.assert_array_equal(ckpt.tensor(name), tensors[name].astype(np.float64))
