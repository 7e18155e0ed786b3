"""S = the training sample rests on the training record ``<checkpoint>.json`` (issue 30 class 3).

The record must name its checkpoint (sha256 and architecture), its sample obeys the limits of every
drawn sample, the assumption it carries is stated in every output, and its retry count K is charged
as delta / K in the certified evaluation, recorded in the certificate and checked by verify.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from fractions import Fraction

import pytest

from specbound.cli import main

TINY = ["--task", "symbol_majority", "--symbols", "4", "--seq-len", "5", "--layers", "1", "--heads", "1",
        "--width", "4", "--head-dim", "1", "--ff", "2", "--steps", "3", "--batch", "8", "--n-train", "24",
        "--data-seed", "5", "--n-test", "50", "--workers", "1"]
"""A model that trains in a moment, bounded on its 24 training examples."""


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _refused(capsys, argv, needle: str) -> None:
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, (code, out, err)
    assert needle in err, err


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny model saved by ``experiment run --sample train --save`` (its record written by it)."""
    folder = tmp_path_factory.mktemp("saved")
    ckpt = folder / "m.safetensors"
    assert main(["experiment", "run", *TINY, "--sample", "train", "--save", str(ckpt), "--json"]) == 0
    return ckpt


def _copy(saved, tmp_path):
    ckpt = tmp_path / "m.safetensors"
    shutil.copy(saved, ckpt)
    shutil.copy(saved.with_suffix(".json"), ckpt.with_suffix(".json"))
    return ckpt, json.loads(ckpt.with_suffix(".json").read_text())


# --------------------------------------------------------------------------- (d) the saved record


def test_experiment_run_sample_train_save_writes_the_record_certify_needs(capsys, saved, tmp_path):
    record = json.loads(saved.with_suffix(".json").read_text())
    assert record["sha256"] == hashlib.sha256(saved.read_bytes()).hexdigest()  # independent digest
    assert record["bound_sample"] == "train" and record["tries"] == 1
    assert record["architecture"] == {"num_layers": 1, "num_heads": 1, "width": 4, "head_dim": 1, "ff_dim": 2,
                                      "activation": "gelu", "num_matrices": 4, "variant": "plain",
                                      "num_kv_heads": 0}
    cert = tmp_path / "cert.json"
    code, out, err = _run(capsys, "certify", saved, "--out", cert)
    assert code == 0, err
    doc = json.loads(cert.read_text())
    assert doc["empirical_source"]["kind"] == "train" and doc["settings"]["n"] == 24
    assert doc["empirical_source"]["detail"]["data_seed"] == 5


def test_a_fresh_sample_run_saves_a_bound_record_that_does_not_ask_for_the_training_sample(tmp_path):
    ckpt = tmp_path / "f.safetensors"
    assert main(["experiment", "run", *TINY, "--save", str(ckpt), "--json"]) == 0
    record = json.loads(ckpt.with_suffix(".json").read_text())
    assert record["sha256"] == hashlib.sha256(ckpt.read_bytes()).hexdigest()
    assert "bound_sample" not in record


# --------------------------------------------------------------------------- (a) bound to its checkpoint


@pytest.mark.parametrize("mutate, needle", [
    (lambda r: r.__setitem__("sha256", "ab" * 32), "belongs to another checkpoint"),
    (lambda r: r.pop("sha256"), "names no checkpoint"),
    (lambda r: r.pop("architecture"), "states no architecture"),
    (lambda r: r["architecture"].__setitem__("variant", "causal"), "variant 'causal'"),
    (lambda r: r["architecture"].__setitem__("num_layers", 2), "num_layers 2"),
    (lambda r: r["architecture"].__setitem__("width", 8), "width 8"),
    (lambda r: r["architecture"].__setitem__("num_heads", 2), "num_heads 2"),
])
def test_a_training_record_that_does_not_name_its_checkpoint_is_refused(capsys, saved, tmp_path, mutate,
                                                                         needle):
    ckpt, record = _copy(saved, tmp_path)
    cert = tmp_path / "cert.json"
    assert _run(capsys, "certify", ckpt, "--out", cert)[0] == 0  # genuine: certifies, then the record is edited
    mutate(record)
    ckpt.with_suffix(".json").write_text(json.dumps(record))
    out_file = tmp_path / "other.json"
    _refused(capsys, ["certify", ckpt, "--out", out_file], needle)
    assert not out_file.exists()
    _refused(capsys, ["verify", cert], needle)  # verify reads the same record, bound the same way


def test_a_record_copied_from_another_run_is_refused(capsys, saved, tmp_path):
    # the record of another checkpoint (same architecture, other weights): its sha256 names that one
    other = tmp_path / "other.safetensors"
    assert main(["experiment", "run", *TINY, "--seed", "1", "--sample", "train", "--save", str(other),
                 "--json"]) == 0
    capsys.readouterr()
    ckpt, _ = _copy(saved, tmp_path)
    shutil.copy(other.with_suffix(".json"), ckpt.with_suffix(".json"))
    _refused(capsys, ["certify", ckpt], "belongs to another checkpoint")


# --------------------------------------------------------------------------- (b) assumption and K


def test_a_bound_on_the_training_sample_states_its_assumption_everywhere(capsys, saved, tmp_path):
    cert = tmp_path / "cert.json"
    code, out, _ = _run(capsys, "certify", saved, "--out", cert)
    assert code == 0
    assert "ASSUMPTION: S = the training sample consists of i.i.d. draws" in out
    assert "not something specbound proves" in out and "K = 1 bound sample" in out
    doc = json.loads(cert.read_text())
    assert any(a.startswith("ASSUMPTION: S = the training sample") for a in doc["scope"]["assumptions"])
    code, out, _ = _run(capsys, "verify", cert)
    assert code == 0 and "ASSUMPTION: S = the training sample" in out
    code, out, _ = _run(capsys, "experiment", "run", *TINY, "--sample", "train")
    assert code == 0 and "ASSUMPTION: S = the training sample" in out
    code, out, _ = _run(capsys, "experiment", "run", *TINY)  # fresh draws: nothing to assume about S
    assert code == 0 and "ASSUMPTION" not in out


def test_the_records_retry_count_is_charged_as_delta_over_k(capsys, saved, tmp_path):
    ckpt, record = _copy(saved, tmp_path)
    record["tries"] = 4
    ckpt.with_suffix(".json").write_text(json.dumps(record))
    cert4 = tmp_path / "k4.json"
    code, out, err = _run(capsys, "certify", ckpt, "--out", cert4, "--margin", "0.5")
    assert code == 0, err
    assert "K = 4 bound samples" in out and "delta / K = 1/80" in out
    k4 = json.loads(cert4.read_text())
    assert k4["settings"]["tries"] == 4 and Fraction(k4["settings"]["delta_charged"]) == Fraction(1, 80)
    assert k4["empirical_source"]["detail"]["tries"] == 4
    assert _run(capsys, "verify", cert4)[0] == 0

    # independent reference: K = 4 at delta 1/20 is the theorem at delta 1/80 with K = 1
    record["tries"] = 1
    ckpt.with_suffix(".json").write_text(json.dumps(record))
    ref = tmp_path / "ref.json"
    assert _run(capsys, "certify", ckpt, "--out", ref, "--margin", "0.5", "--delta", "0.0125")[0] == 0
    one = tmp_path / "k1.json"
    assert _run(capsys, "certify", ckpt, "--out", one, "--margin", "0.5")[0] == 0
    r, k1 = json.loads(ref.read_text()), json.loads(one.read_text())
    for key in ("confidence", "bound"):
        assert k4["result"][key] == r["result"][key]
        assert Fraction(k1["result"][f"{key}_upper"]) < Fraction(k4["result"][f"{key}_upper"])

    # the record now says K = 1 but the certificate charged 4 (or the reverse): verify says so
    rep = _run(capsys, "verify", cert4)
    assert rep[0] == 1 and "settings.tries" in rep[1]
    record["tries"] = 4
    ckpt.with_suffix(".json").write_text(json.dumps(record))
    rep = _run(capsys, "verify", one)
    assert rep[0] == 1 and "settings.tries" in rep[1]
    # a forged certificate that drops K (and delta / K): the recomputation uses K = 1, the record says 4
    forged = dict(k4, settings={k: v for k, v in k4["settings"].items() if k not in ("tries", "delta_charged")})
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    rep = _run(capsys, "verify", tmp_path / "forged.json")
    assert rep[0] == 1 and "settings.tries" in rep[1]


@pytest.mark.parametrize("tries", [0, -1, "4", 1.5, True, 10**10])
def test_a_retry_count_that_is_not_a_positive_integer_is_one_line(capsys, saved, tmp_path, tries):
    ckpt, record = _copy(saved, tmp_path)
    record["tries"] = tries
    ckpt.with_suffix(".json").write_text(json.dumps(record))
    _refused(capsys, ["certify", ckpt], "tries")


# --------------------------------------------------------------------------- (c) limits


def test_a_training_sample_beyond_the_limits_is_refused_before_any_allocation(capsys, saved, tmp_path):
    ckpt, record = _copy(saved, tmp_path)
    record["config"]["n_train"] = 10**11  # 10^11 x 5 int64 tokens: terabytes
    ckpt.with_suffix(".json").write_text(json.dumps(record))
    _refused(capsys, ["certify", ckpt], "outside [1, 100000000]")
    _refused(capsys, ["experiment", "run", *TINY, "--n-train", str(10**11)], "n_train")
    _refused(capsys, ["experiment", "run", *TINY, "--n", str(10**11)], "--n ")
    _refused(capsys, ["experiment", "run", *TINY, "--n-test", str(10**11)], "--n-test")
    _refused(capsys, ["experiment", "run", *TINY, "--seq-len", "17", "--n-train", str(5 * 10**7)], "tokens")


def test_train_config_and_task_sample_check_the_sample_size_themselves():
    import numpy as np

    from specbound.errors import SpecboundError
    from specbound.tasks import symbol_majority
    from specbound.train import TrainConfig

    with pytest.raises(SpecboundError, match="n_train"):
        TrainConfig(n_train=10**11)
    with pytest.raises(SpecboundError, match="sample size"):
        symbol_majority(seq_len=5, symbols=4).sample(10**11, np.random.default_rng(0))


def test_bound_settings_and_certificates_accept_only_a_positive_integer_k(capsys, saved, tmp_path):
    from specbound.errors import SpecboundError
    from specbound.plan import BoundSettings

    for bad in (0, -3, 2.0, True, "2"):
        with pytest.raises(SpecboundError, match="tries"):
            BoundSettings(n=10, tries=bad)
    cert = tmp_path / "cert.json"
    assert _run(capsys, "certify", saved, "--out", cert)[0] == 0
    doc = json.loads(cert.read_text())
    for bad in ("4", 0, 10**12):
        doc["settings"]["tries"] = bad
        cert.write_text(json.dumps(doc))
        _refused(capsys, ["verify", cert], "settings.tries")
