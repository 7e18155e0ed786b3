"""``specbound proxies`` and ``specbound spectra``: machine output, files, and bad input."""

import csv
import importlib.util
import json
import os
from pathlib import Path

import pytest
import torch

from specbound.cli import main

_HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("bert_reference", _HERE.parent / "numeric" / "bert_reference.py")
bert_reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bert_reference)

IDENTITY = ["name", "layer", "head", "kind", "rows", "cols"]  # every per-matrix frame starts with these
MATRIX_KEYS = set(IDENTITY) | {"spectral", "frobenius", "nuclear", "norm_21", "norm_11", "numerical_rank",
                               "stable_rank", "p_opt", "contribution", "gamma", "alpha", "scale"}


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return bert_reference.write_random_bert(str(tmp_path_factory.mktemp("bert")), seed=0, weight_scale=0.5)


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_proxies_json_has_documented_keys_and_reference_values(capsys, bert_dir):
    code, out, err = run_cli(capsys, "proxies", bert_dir, "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert {"ours", "edelman", "matrices"} <= set(doc)
    assert len(doc["matrices"]) == 2 * (4 + 4 + 2)
    assert all(set(m) == MATRIX_KEYS and list(m)[:6] == IDENTITY for m in doc["matrices"])
    ref = bert_reference.reference_proxies(os.path.join(bert_dir, "model.safetensors"), 2, 4)
    assert doc["ours"] == pytest.approx(ref["ours"], rel=1e-9, abs=0)
    assert doc["edelman"] == pytest.approx(ref["edelman"], rel=1e-9, abs=0)
    for m in doc["matrices"]:
        assert m["p_opt"] == ref["matrices"][(m["layer"], m["head"], m["kind"])]["p_opt"]


def test_proxies_table_states_it_is_not_a_bound(capsys, bert_dir):
    code, out, _ = run_cli(capsys, "proxies", bert_dir)
    assert code == 0
    assert "ours (paper proxy)" in out and "edelman (paper proxy)" in out
    assert "not bounds" in out


def test_proxies_prints_whole_lines_when_stdout_is_not_a_terminal(capsys, bert_dir):
    from specbound.numeric.proxies import DIFFERENCES

    code, out, _ = run_cli(capsys, "proxies", bert_dir)
    assert code == 0 and max(len(line) for line in DIFFERENCES) > 160  # rich would wrap these
    for line in DIFFERENCES:
        assert f"  - {line}" in out.splitlines()


def test_proxies_csv_and_report(capsys, bert_dir, tmp_path):
    table = tmp_path / "p.csv"
    report = tmp_path / "rep"
    code, _, _ = run_cli(capsys, "proxies", bert_dir, "--json", "--csv", str(table), "--report", str(report))
    assert code == 0
    rows = list(csv.DictReader(table.open()))
    assert len(rows) == 20 and set(rows[0]) == MATRIX_KEYS
    for name in ("contribution_vs_p.png", "spectral_decay.png"):
        assert (report / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in report.iterdir()) == ["contribution_vs_p.png", "spectral_decay.png"]


def test_spectra_json_csv_report(capsys, bert_dir, tmp_path):
    table = tmp_path / "s.csv"
    code, out, err = run_cli(capsys, "spectra", bert_dir, "--json", "--values", "--csv", str(table),
                             "--report", str(tmp_path))
    assert code == 0 and err == ""
    doc = json.loads(out)
    first = doc["matrices"][0]
    assert list(first)[:6] == IDENTITY
    assert set(IDENTITY) | {"spectral", "frobenius", "nuclear", "norm_21", "norm_11", "numerical_rank",
                            "stable_rank", "singular_values"} == set(first)
    assert first["name"] == "L0.H0.QK" and len(first["singular_values"]) == 32
    assert first["numerical_rank"] == 8  # head dim 32 / 4
    assert len(list(csv.DictReader(table.open()))) == 20
    assert (tmp_path / "spectral_decay.png").exists()


def test_spectra_takes_factored_values_from_the_cores_unless_asked_for_dense_products(capsys, bert_dir):
    # a QK matrix of head dimension 8 in width 32: 8 values from its core and 24 exact zeros by default;
    # --dense-products gives the SVD of the float64 product (rounding noise beyond 8), as proxies takes it
    docs = {}
    for flag in ((), ("--dense-products",)):
        code, out, err = run_cli(capsys, "spectra", bert_dir, "--json", "--values", *flag)
        assert code == 0 and err == ""
        docs[flag] = json.loads(out)
    core, dense = docs[()], docs[("--dense-products",)]
    assert core["products"] == "factored" and dense["products"] == "dense"
    a, b = core["matrices"][0]["singular_values"], dense["matrices"][0]["singular_values"]
    assert a[8:] == [0.0] * 24 and any(v > 0 for v in b[8:])
    assert max(abs(x - y) for x, y in zip(a[:8], b[:8])) <= 1e-13 * b[0]


def test_spectra_table(capsys, bert_dir):
    code, out, _ = run_cli(capsys, "spectra", bert_dir, "--dtype", "float32")
    assert code == 0 and "L1.M_out" in out and "float32" in out


@pytest.mark.parametrize("command", ["proxies", "spectra"])
def test_missing_checkpoint_is_one_line_exit_2_and_writes_nothing(capsys, tmp_path, command):
    table = tmp_path / "out.csv"
    code, out, err = run_cli(capsys, command, str(tmp_path / "nope.safetensors"), "--csv", str(table),
                             "--report", str(tmp_path / "rep"))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "nope.safetensors" in err
    assert not table.exists() and not (tmp_path / "rep").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has CUDA")
def test_cuda_without_device_is_one_line_error(capsys, bert_dir):
    code, _, err = run_cli(capsys, "proxies", bert_dir, "--device", "cuda")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "CUDA" in err


def test_progress_is_silent_without_a_terminal():
    from specbound.progress import SilentProgress, progress_bar, should_show

    assert should_show(json_output=True) is False
    with progress_bar(3, "x") as bar:  # pytest captures stderr: not a TTY
        assert isinstance(bar, SilentProgress)
        bar.advance()


@pytest.mark.minilm
@pytest.mark.slow
def test_minilm_proxies_json_matches_reference(capsys, minilm_path):
    code, out, _ = run_cli(capsys, "proxies", minilm_path, "--json")
    assert code == 0
    doc = json.loads(out)
    ref = bert_reference.reference_proxies(os.path.join(minilm_path, "model.safetensors"), 6, 12)
    assert doc["ours"] == pytest.approx(ref["ours"], rel=1e-9, abs=0)
    assert doc["edelman"] == pytest.approx(ref["edelman"], rel=1e-9, abs=0)


def test_rates_and_times_read_naturally():
    from specbound.progress import format_rate, format_seconds

    assert format_rate(261.4, "samples") == "261 samples/s"
    assert format_rate(34117.0, "samples") == "34,117 samples/s"
    assert format_rate(3.21, "matrices") == "3.21 matrices/s"
    assert format_rate(0.25, "steps") == "1 step / 4 s"
    assert format_rate(None, "samples") == "" and format_rate(0.0, "samples") == ""
    assert [format_seconds(s) for s in (42, 200, 3900, None)] == ["42 s", "3 min 20 s", "1 h 05 min", "?"]


def test_a_bar_on_a_terminal_shows_rate_and_time_left(monkeypatch):
    import io
    import time

    from rich.console import Console

    from specbound import progress

    buffer = io.StringIO()
    monkeypatch.setattr(progress, "should_show", lambda *a, **k: True)
    monkeypatch.setattr(progress, "Console", lambda **kw: Console(file=buffer, force_terminal=True, width=160))
    with progress.progress_bar(10, "certified forward passes", unit="samples") as bar:
        for _ in range(10):
            time.sleep(0.002)  # rich measures the rate between updates
            bar.advance(1)
    text = buffer.getvalue()
    assert "certified forward passes" in text and "ETA" in text and "samples/s" in text
