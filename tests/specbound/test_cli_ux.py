"""What a user meets at the command line: help texts that say what the tool does, errors that point
at the right help, machine output where the README promises it, quiet ends of a closed pipe,
certificates that verify from any folder, and commands that say where they wrote."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from specbound.cli import BROKEN_PIPE_STATUS, main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def help_text(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


# --------------------------------------------------------------------------- help and usage errors


def test_the_top_level_help_describes_the_tool_not_the_module(capsys):
    text = help_text(capsys)
    assert "Certified" in text and "specbound COMMAND --help" in text
    assert "Command-line shell" not in text and "``" not in text


def test_help_texts_have_no_doubled_percent_signs(capsys):
    for argv in (("experiment", "run"), ("experiment", "scaling"), ("certify",), ("verify",), ("theorem",),
                 ("spectra",), ("proxies",), ("inspect",)):
        text = help_text(capsys, *argv)
        assert "%%" not in text, argv
    assert "(exact 95% Clopper-" in " ".join(help_text(capsys, "experiment", "run").split())


def test_theorem_activation_has_help(capsys):
    text = " ".join(help_text(capsys, "theorem").split())
    assert "--activation {gelu,gelu_tanh,relu,silu} feed-forward activation" in text


@pytest.mark.parametrize("argv,prog", [
    (["theorem", "--bogus"], "specbound theorem"),
    (["experiment", "run", "--bogus"], "specbound experiment run"),
    (["verify", "cert.json", "--bogus"], "specbound verify"),
    (["--bogus", "theorem"], "specbound theorem"),
])
def test_an_unknown_option_points_to_its_subcommands_help(capsys, argv, prog):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unrecognized arguments: --bogus" in err
    assert err.startswith(f"{prog}: error:") and err.rstrip().endswith(f"(see {prog} --help)")


def test_certify_help_lists_every_source_and_the_bare_default(capsys):
    text = " ".join(help_text(capsys, "certify").split())
    for source in (".safetensors", "sharded", ".pt", ".bin", ".npz", ".gguf", "Hugging Face folder", "repo id"):
        assert source in text, source
    assert "10^6" in text and "training sample" in text
    assert "default 2000" not in text


def test_a_missing_head_count_names_the_command_line_flag(capsys, tmp_path):
    from safetensors.numpy import save_file

    from .test_adapters import bert_tensors  # a BERT state dict: no config.json, so no head count

    path = tmp_path / "bert.safetensors"
    save_file(bert_tensors(0), str(path))
    code, out, err = run(capsys, "spectra", str(path))
    assert code == 2 and "pass --num-heads H" in err and err.count("\n") == 1


# --------------------------------------------------------------------------- a reader that stops early


def test_a_closed_pipe_ends_quietly_with_its_own_status(capsys, monkeypatch):
    class Closed:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Closed())
    assert main(["theorem"]) == BROKEN_PIPE_STATUS
    assert capsys.readouterr().err == ""


def test_a_closed_pipe_in_a_real_process_leaves_no_traceback():
    proc = subprocess.Popen([sys.executable, "-m", "specbound", "theorem", "--route", "both"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line is written (`| head -0`)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == BROKEN_PIPE_STATUS
    assert err == ""


# --------------------------------------------------------------------------- --json everywhere


def test_theorem_json_has_every_section_of_the_text(capsys):
    code, out, _ = run(capsys, "theorem", "--json", "--route", "both")
    doc = json.loads(out)
    assert code == 0 and [s["heading"] for s in doc["sections"]] == [
        "Assembled theorem: Rademacher route", "Assembled theorem: Occam route", "Reported bound"]
    code, text, _ = run(capsys, "theorem", "--route", "both")
    for section in doc["sections"]:
        for name, expr in section["expressions"].items():
            assert f"{name} = {expr['text']}" in text
    assert doc["constants"]["C_sm"]["source"] == "proved" and doc["lemmas"]


def _default_copy(folder: Path) -> Path:
    """The embedded default model copied into ``folder`` (weights and its record)."""
    data = resources.files("specbound") / "data"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("default.safetensors", "default.json"):
        shutil.copyfile(str(data / name), folder / name)
    return folder / "default.safetensors"


CHEAP = ("--n", "5000", "--empirical-loss", "0.01", "--margin", "2")


def test_verify_json_is_the_report_with_the_same_exit_status(capsys, tmp_path):
    ckpt = _default_copy(tmp_path)
    cert = tmp_path / "cert.json"
    assert run(capsys, "certify", str(ckpt), *CHEAP, "--out", str(cert))[0] == 0
    code, out, _ = run(capsys, "verify", str(cert), "--json", "--trust-empirical")
    doc = json.loads(out)
    assert code == 0 and doc["valid"] is True and doc["checked"] > 100 and doc["mismatches"] == []
    assert str(ckpt) in doc["scope"]["bound_for"] and doc["notes"]  # the absolute path, recomputed
    tampered = json.loads(cert.read_text())
    tampered["result"]["bound_upper"] = "0.0001"
    cert.write_text(json.dumps(tampered))
    code, out, _ = run(capsys, "verify", str(cert), "--json")
    doc = json.loads(out)
    assert code == 1 and doc["valid"] is False
    assert any(m["field"] == "result.bound_upper" for m in doc["mismatches"])


# --------------------------------------------------------------------------- certificates travel


def test_a_certificate_verifies_from_another_folder_and_says_what_to_do_when_the_weights_moved(
        capsys, tmp_path, monkeypatch):
    work = tmp_path / "work"
    _default_copy(work)
    monkeypatch.chdir(work)
    assert run(capsys, "certify", "default.safetensors", *CHEAP, "--out", "cert.json")[0] == 0
    doc = json.loads((work / "cert.json").read_text())
    assert doc["checkpoint"]["path"] == str(work / "default.safetensors")  # absolute
    assert len(doc["checkpoint"]["sha256"]) == 64
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, _ = run(capsys, "verify", str(work / "cert.json"), "--trust-empirical")
    assert code == 0 and out.startswith("VALID")
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ("default.safetensors", "default.json"):
        os.replace(work / name, moved / name)
    code, out, err = run(capsys, "verify", str(work / "cert.json"), "--trust-empirical")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "pass the checkpoint as the second argument" in err
    code, out, _ = run(capsys, "verify", str(work / "cert.json"), str(moved / "default.safetensors"),
                       "--trust-empirical")
    assert code == 0 and out.startswith("VALID")


# --------------------------------------------------------------------------- where a command wrote


def test_spectra_says_where_it_wrote_its_csv_and_report(capsys, tmp_path):
    csv, report = tmp_path / "s.csv", tmp_path / "report"
    code, out, err = run(capsys, "spectra", str(_default_copy(tmp_path / "m")), "--csv", str(csv),
                         "--report", str(report))
    assert code == 0, err
    assert out.splitlines()[-2:] == [f"wrote {csv}", f"wrote {report / 'spectral_decay.png'}"]
    assert csv.is_file() and (report / "spectral_decay.png").is_file()
    code, out, err = run(capsys, "spectra", str(tmp_path / "m" / "default.safetensors"), "--json",
                         "--csv", str(csv))
    assert code == 0 and json.loads(out) and err == ""  # machine use: the JSON document, nothing else


def test_certify_report_writes_the_figures_and_says_so(capsys, tmp_path):
    report = tmp_path / "report"
    code, out, err = run(capsys, "certify", *CHEAP, "--report", str(report))
    assert code == 0, err
    names = ("spectral_decay.png", "contributions_by_layer.png")
    assert out.splitlines()[-2:] == [f"wrote {report / n}" for n in names]
    assert all((report / n).read_bytes()[:4] == b"\x89PNG" for n in names)


def test_certify_report_into_a_file_is_refused_before_any_work(capsys, tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    code, out, err = run(capsys, "certify", *CHEAP, "--report", str(target))
    assert code == 2 and "--report" in err and err.count("\n") == 1 and target.read_text() == "x"
