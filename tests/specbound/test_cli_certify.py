"""``specbound certify`` / ``specbound verify`` from the command line (in-process ``cli.main``)."""

import json
from pathlib import Path

import numpy as np
import pytest

from specbound.cli import main

REQUIRED = ("format", "checkpoint", "settings", "versions", "plan", "choices", "empirical_source",
            "balls", "matrices", "result")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_certify_default_model_on_fresh_samples(capsys, tmp_path):
    cert = tmp_path / "cert.json"
    code, out, err = run(capsys, "certify", "--samples", "16", "--out", str(cert))
    assert code == 0, err
    assert "certified bound on the 0-1 risk" in out
    assert "fresh samples of task symbol_majority" in out
    doc = json.loads(cert.read_text())
    for key in REQUIRED:
        assert key in doc
    assert doc["result"]["is_bound"] and float(doc["result"]["bound_upper"]) > 0
    assert doc["empirical_source"]["certified"] is True
    code, out, _ = run(capsys, "verify", str(cert))
    assert code == 0 and out.startswith("VALID")


def test_the_main_command_certifies_a_non_vacuous_bound_from_the_training_sample(capsys, tmp_path):
    # README command 1: no argument.  The embedded default's record asks for S = its training
    # sample (10^6 examples, regenerated from the recorded seed); the bound must be below 0.5, say
    # so, and verify must recompute it from the checkpoint (about a minute each on 2 cores).
    cert = tmp_path / "cert.json"
    code, out, err = run(capsys, "certify", "--out", str(cert))
    assert code == 0, err
    # README shows the first lines of exactly this run: the headline and both routes' parts
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    shown = readme.split("`specbound certify` prints first:\n\n```\n", 1)[1].split("```", 1)[0].splitlines()
    lines = out.splitlines()
    assert lines[:len(shown)] == shown
    assert lines[-2:] == [shown[0], f"certificate written to {cert}"]  # the headline again, last
    said = int(readme.split("the per-matrix table and the headline again (", 1)[1].split(" lines", 1)[0])
    assert said == len(lines) - 1  # README's line count of certify without --out
    line = next(l for l in out.splitlines() if l.startswith("certified bound on the 0-1 risk:"))
    assert float(line.split(":")[1].split()[0]) < 0.5 and "vacuous" not in line
    assert "S = the training sample" in out and "n = 1000000" in out
    doc = json.loads(cert.read_text())
    assert doc["empirical_source"]["kind"] == "train" and doc["empirical_source"]["certified"] is True
    assert doc["settings"]["n"] == 1_000_000
    assert doc["result"]["proven"] is True and doc["result"]["vacuous"] is False
    assert float(doc["result"]["bound_upper"]) < 0.5
    code, out, _ = run(capsys, "verify", str(cert))
    assert code == 0 and out.startswith("VALID"), out


@pytest.mark.slow
def test_the_toy_model_still_certifies_what_readme_says(capsys):
    # the default before issue 26 ships as specbound/data/toy.safetensors; README states its bound
    from specbound.data import toy_checkpoint_path

    code, out, err = run(capsys, "certify", str(toy_checkpoint_path()), "--quiet")
    assert code == 0, err
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert "`specbound certify specbound/data/toy.safetensors` certifies 0.0115291" in " ".join(readme.split())
    assert out.splitlines()[0].startswith("certified bound on the 0-1 risk: 0.0115291  (route: occam")


def test_verify_rejects_a_tampered_certificate(capsys, tmp_path):
    cert = tmp_path / "cert.json"
    assert run(capsys, "certify", "--n", "5000", "--empirical-loss", "0.01", "--margin", "2",
               "--out", str(cert))[0] == 0
    doc = json.loads(cert.read_text())
    doc["result"]["bound_upper"] = "0.0001"
    cert.write_text(json.dumps(doc))
    code, out, _ = run(capsys, "verify", str(cert))
    assert code == 1
    assert out.splitlines()[0] == "INVALID" and "result.bound_upper" in out


def test_json_output_is_the_certificate(capsys):
    code, out, _ = run(capsys, "certify", "--n", "1000", "--empirical-loss", "0", "--margin", "1", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["empirical_source"]["kind"] == "user" and doc["empirical_source"]["certified"] is False


def test_certify_with_a_data_file(capsys, tmp_path):
    from specbound.empirical import task_record, task_sample
    from specbound.checkpoint import load_weights

    data = task_sample(task_record(load_weights(None), None), 10, 11)
    path = tmp_path / "d.npz"
    np.savez(path, labels=data.labels, tokens=data.tokens)
    code, out, err = run(capsys, "certify", "--data", str(path))
    assert code == 0, err
    assert "certified on data file" in out


def test_missing_empirical_term_is_not_called_a_bound(capsys, tmp_path):
    # a copy of the default weights without its task record: nothing to draw samples from
    import shutil

    from specbound.data import default_checkpoint_path

    ck = tmp_path / "model.safetensors"
    shutil.copy(default_checkpoint_path(), ck)
    code, out, _ = run(capsys, "certify", str(ck), "--n", "1000", "--margin", "1")
    assert code == 0
    assert "NOT a bound" in out and "certified bound on" not in out


@pytest.mark.parametrize("argv", [
    ("certify", "/nonexistent/model.safetensors", "--n", "10", "--empirical-loss", "0"),
    ("certify", "--n", "abc", "--empirical-loss", "0"),
    ("certify", "--n", "0", "--empirical-loss", "0"),
    ("certify", "--delta", "2", "--n", "10", "--empirical-loss", "0"),
    ("certify", "--empirical-loss", "1.5", "--n", "10"),
    ("certify", "--data", "/nonexistent/data.npz"),
    ("certify", "--data", "BADFILE"),
    ("certify", "--samples", "-3"),
    ("verify", "/nonexistent/cert.json"),
])
def test_bad_input_is_one_line_exit_2_and_no_file(capsys, tmp_path, argv):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"this is not an npz archive")
    out_file = tmp_path / "cert.json"
    argv = [str(bad) if a == "BADFILE" else a for a in argv]
    if argv[0] == "certify":
        argv += ["--out", str(out_file)]
    code, out, err = run(capsys, *argv)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("specbound: error:")
    assert not out_file.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad.npz"]


@pytest.mark.minilm
def test_minilm_certified_and_cross_checked(capsys, minilm_path):
    code, out, _ = run(capsys, "certify", minilm_path, "--n", "1000000", "--empirical-loss", "0",
                       "--cross-check")
    # the empirical term is the user's number: the bound is stated, but never headed "certified"
    assert code == 0 and "bound on the 0-1 risk (empirical term user-supplied, NOT certified):" in out
    assert "certified bound on" not in out
    assert "0 disagreements" in out


def test_cross_check_agrees_with_the_certified_values(capsys):
    code, out, _ = run(capsys, "certify", "--n", "5000", "--empirical-loss", "0.01", "--margin", "2",
                       "--cross-check")
    assert code == 0
    assert "0 disagreements" in out


def test_cross_check_with_both_routes_checks_the_rademacher_route(capsys):
    # a certified sample: both routes, each at delta/2; the float path evaluates the Rademacher route
    code, out, _ = run(capsys, "certify", "--samples", "300", "--cross-check")
    assert code == 0 and "0 disagreements" in out
    assert "each route at delta/2, the smaller is reported" in out and "Occam route (delta/2 = 1/40)" in out


def test_forward_option_arb_and_fast_agree(capsys):
    # --forward selects the certified forward pass of the empirical term; both are certified, the
    # fast one wider by at most its a-priori epsilon per sample (proofs_notes/fast_forward.md)
    bounds = {}
    for forward in ("arb", "fast"):
        code, out, err = run(capsys, "certify", "--samples", "4", "--forward", forward, "--json")
        assert code == 0, err
        bounds[forward] = float(json.loads(out)["result"]["bound_upper"])
    assert abs(bounds["fast"] - bounds["arb"]) <= 1e-6 * bounds["arb"]


def test_forward_option_rejects_an_unknown_method(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["certify", "--forward", "gpu"])
    assert exc.value.code == 2
    assert "--forward" in capsys.readouterr().err


def test_certify_on_the_training_sample_when_the_record_asks_for_it(capsys, tmp_path):
    # S = the training sample, regenerated from the recorded data seed: the certified empirical term
    # is computed on exactly the n_train examples training drew, and verify re-draws the same ones.
    from dataclasses import replace

    from specbound.empirical import bound_training_record, resolve
    from specbound.checkpoint import load_weights
    from specbound.errors import SpecboundError
    from specbound.train import TrainConfig, train, training_sample

    cfg = TrainConfig(task="symbol_majority", symbols=4, seq_len=5, k=3, num_layers=1, num_heads=1,
                      width=4, head_dim=1, ff_dim=2, steps=3, batch=8, n_train=24, lr=1e-2, data_seed=5)
    model, record = train(cfg)
    ckpt = tmp_path / "m.safetensors"
    model.save(ckpt)
    weights = load_weights(ckpt)
    record = bound_training_record(record, weights, bound_on_training_sample=True)  # names its checkpoint
    ckpt.with_suffix(".json").write_text(json.dumps(record))
    source, data, n = resolve(weights, ckpt, None, n=None, empirical=None, samples=None, seed=None)
    tokens, labels = training_sample(cfg)
    assert source.kind == "train" and source.certified and n == 24 == data.n
    whole = data.materialize()  # S is generated again block by block (a SampleStream), never held whole
    assert np.array_equal(whole.tokens, tokens) and np.array_equal(whole.labels, labels)
    other, _ = training_sample(replace(cfg, data_seed=6))
    assert not np.array_equal(data.tokens, other)
    assert resolve(weights, ckpt, None, n=None, empirical=None, samples=10, seed=None)[0].kind == "task"
    with pytest.raises(SpecboundError, match="training sample"):
        resolve(weights, ckpt, None, n=25, empirical=None, samples=None, seed=None)

    cert = tmp_path / "cert.json"
    code, out, err = run(capsys, "certify", str(ckpt), "--out", str(cert))
    assert code == 0, err
    assert "S = the training sample (n = 24 training examples of task symbol_majority, data seed 5)" in out
    doc = json.loads(cert.read_text())
    assert doc["empirical_source"]["kind"] == "train" and doc["settings"]["n"] == 24
    code, out, _ = run(capsys, "verify", str(cert), str(ckpt))
    assert code == 0 and out.startswith("VALID")


@pytest.mark.parametrize("extra", [[], ["--samples", "64"]])
def test_certify_imports_neither_torch_nor_sympy(tmp_path, extra):
    # issue 12: the certified path (enclosures, planner on their midpoints, fast forward pass, Arb
    # bound from generated code) runs without torch and SymPy: a BERT checkpoint with an empirical
    # term given by n, and the embedded default on fresh samples (the certified forward pass)
    import subprocess
    import sys

    from tests.numeric.bert_reference import write_random_bert

    target = [write_random_bert(str(tmp_path), seed=2), "--n", "1000000"] if not extra else extra
    code = ("import sys; from specbound.cli import main; rc = main(['certify', *%r, '--json']); "
            "bad = [m for m in ('torch', 'sympy') if m in sys.modules]; "
            "print('IMPORTED', bad, file=sys.stderr) if bad else None; "
            "sys.exit(rc or (3 if bad else 0))" % (target,))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
