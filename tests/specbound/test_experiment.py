"""specbound.experiment: Clopper-Pearson, exponent fits, the report section, and the theorem itself
checked against observed error on trained models (a failure of the latter is a bug)."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from specbound.experiment import (
    BEGIN, END, ExperimentConfig, ExperimentError, ScalingConfig, clopper_pearson, fit_exponents,
    run_experiment, scaling_markdown, scaling_plots, scaling_study, write_scaling_section,
)
from specbound.train import TrainConfig, fresh_sample, train

# A tiny analysis model that trains in about a second and whose certified forward pass costs a
# few ms per sample: L = 2, one head of dim 1, width 8, d_ff = 2.
TINY = TrainConfig(num_layers=2, num_heads=1, head_dim=1, width=8, ff_dim=2, steps=40, lr=1e-2,
                   n_train=512, reg=0.0, reg_kind="none")


# --------------------------------------------------------------------------- Clopper-Pearson


def _tail_at_least(k: int, m: int, q: Fraction) -> Fraction:
    """P(X >= k) for X ~ Binomial(m, q), as an exact rational (brute force)."""
    return sum((Fraction(math.comb(m, i)) * q**i * (1 - q) ** (m - i) for i in range(k, m + 1)), Fraction(0))


@pytest.mark.parametrize("k,m", [(0, 1), (1, 1), (0, 10), (3, 10), (10, 10), (7, 40), (1, 60)])
def test_clopper_pearson_ends_solve_the_binomial_tail_equations_exactly(k, m):
    # Brute-force rational tails: the outward-rounded ends bracket the exact roots.
    lo, hi = clopper_pearson(k, m, 0.95)
    tail = Fraction(1, 40)
    if k == 0:
        assert lo == 0.0
    else:
        assert _tail_at_least(k, m, Fraction(lo)) <= tail  # lo is at or below the root
        assert _tail_at_least(k, m, Fraction(lo) * (1 + Fraction(1, 10**9))) > tail  # ... and tight
    if k == m:
        assert hi == 1.0
    else:
        at_most = lambda q: 1 - _tail_at_least(k + 1, m, q)  # noqa: E731
        assert at_most(Fraction(hi)) <= tail
        assert at_most(Fraction(hi) * (1 - Fraction(1, 10**9))) > tail


@pytest.mark.parametrize("k,m,conf", [(0, 10_000, 0.95), (5, 10_000, 0.95), (5_000, 10_000, 0.9),
                                      (123, 100_000, 0.99), (99_990, 100_000, 0.95)])
def test_clopper_pearson_matches_the_beta_quantiles_of_scipy(k, m, conf):
    # Independent reference: the textbook beta-quantile form evaluated by scipy.
    beta = pytest.importorskip("scipy.stats").beta
    a = 1 - conf
    lo, hi = clopper_pearson(k, m, conf)
    ref_lo = 0.0 if k == 0 else beta.ppf(a / 2, k, m - k + 1)
    ref_hi = 1.0 if k == m else beta.ppf(1 - a / 2, k + 1, m - k)
    assert lo == pytest.approx(ref_lo, rel=1e-9, abs=1e-300)
    assert hi == pytest.approx(ref_hi, rel=1e-9)
    assert lo <= k / m <= hi


def test_clopper_pearson_zero_errors_has_the_closed_form_upper_end():
    m = 1000
    _, hi = clopper_pearson(0, m, 0.95)
    assert hi == pytest.approx(1 - 0.025 ** (1 / m), rel=1e-12)
    assert hi >= 1 - 0.025 ** (1 / m) * (1 + 1e-15)  # rounded outwards


@pytest.mark.parametrize("args", [(-1, 10), (11, 10), (0, 0), (1, 10, 1.0), (1, 10, 0.0), (1.5, 10)])
def test_clopper_pearson_rejects_bad_input(args):
    with pytest.raises(ExperimentError):
        clopper_pearson(*args)


# --------------------------------------------------------------------------- exponent fit


def test_fit_exponents_recovers_a_power_law():
    Ls, Ns = np.meshgrid([1, 2, 4], [16, 32, 64])
    v = 3.0 * Ls.ravel() ** 1.5 * Ns.ravel() ** 0.25
    fit = fit_exponents(Ls.ravel(), Ns.ravel(), v)
    assert fit["a_L"] == pytest.approx(1.5, abs=1e-12)
    assert fit["b_N"] == pytest.approx(0.25, abs=1e-12)
    assert math.exp(fit["c"]) == pytest.approx(3.0, rel=1e-12)
    assert fit["points"] == 9 and fit["rms"] < 1e-12


def test_fit_exponents_skips_non_positive_values_and_reports_an_unidentifiable_fit():
    fit = fit_exponents([1, 2, 4, 8], [16, 16, 16, 16], [1.0, 2.0, 4.0, 8.0])
    assert math.isnan(fit["a_L"]) and math.isnan(fit["b_N"])  # N never varies
    fit = fit_exponents([1, 2, 1, 2], [8, 8, 16, 16], [1.0, 0.0, math.nan, 5.0])
    assert fit["points"] == 2 and math.isnan(fit["a_L"])


# --------------------------------------------------------------------------- configuration


def test_the_bound_sample_is_fresh_by_default_and_of_size_n():
    cfg = ExperimentConfig(train=TINY, n=300)
    tokens, labels = cfg.bound_sample()
    assert cfg.bound_n == 300 and tokens.shape == (300, TINY.seq_len) and labels.shape == (300,)
    test_tokens, _ = cfg.test_sample()
    assert not np.array_equal(tokens[:50], test_tokens[:50])  # different streams


def test_the_training_sample_fixes_n():
    cfg = ExperimentConfig(train=TINY, sample="train")
    assert cfg.bound_n == TINY.n_train
    with pytest.raises(ExperimentError, match="n = n_train"):
        ExperimentConfig(train=TINY, sample="train", n=TINY.n_train + 1)


@pytest.mark.parametrize("kwargs", [dict(n=0), dict(n_test=0), dict(margin=-1.0), dict(margin=math.inf),
                                    dict(delta=1.0), dict(confidence=0.0), dict(sample="test"), dict(workers=0)])
def test_bad_experiment_settings_are_one_clear_error(kwargs):
    with pytest.raises(ExperimentError):
        ExperimentConfig(train=TINY, **kwargs)


# --------------------------------------------------------------------------- the theorem, observed


@pytest.fixture(scope="module")
def tiny_model():
    model, _ = train(TINY)
    return model


@pytest.fixture(scope="module", params=[("fresh", 300), ("train", None)], ids=["fresh-S", "training-S"])
def tiny_result(request, tiny_model):
    sample, n = request.param
    cfg = ExperimentConfig(train=TINY, n=n, sample=sample, n_test=4000, workers=1)
    return cfg, run_experiment(cfg, model=tiny_model)


def test_certified_bound_is_at_least_the_lower_confidence_limit_of_the_test_error(tiny_result):
    # Theorem (proofs_notes/theory.md section 7): with prob >= 1 - delta, risk <= bound.  The observed error's
    # 95% CP lower limit is below the risk with prob >= 0.975; a violation here means a bug.
    cfg, result = tiny_result
    b = result.bound
    assert b["certified"] and b["n"] == cfg.bound_n == b["empirical_sample"]["n"]
    assert b["value"] >= result.test.lower
    assert b["value"] >= b["value_lower"]
    parts = b["parts"]
    rademacher = b["routes"]["rademacher"]
    assert rademacher == pytest.approx(parts["empirical"] + parts["complexity"] + parts["confidence"], rel=1e-9)
    # two routes, each at delta/2: the reported value is the smaller one
    assert b["value"] == min(v for v in (rademacher, b["routes"].get("occam")) if v is not None)


def test_certified_empirical_term_dominates_the_float_zero_one_error_on_the_same_sample(tiny_model, tiny_result):
    # ramp >= 0-1 loss pointwise: the certified ramp average on S bounds the 0-1 error on S, which we
    # recount with the float64 torch forward pass (an independent implementation).
    from specbound.experiment import float_margins

    cfg, result = tiny_result
    tokens, labels = cfg.bound_sample()
    errors = int(np.count_nonzero(float_margins(tiny_model, tokens, labels) <= 0))
    emp = result.bound["empirical_sample"]
    assert errors > 0  # barely trained: the check is not vacuous
    assert emp["certified_upper"] >= errors / cfg.bound_n - 1e-12
    assert result.bound["parts"]["empirical"] >= emp["certified_upper"] * (1 - 1e-15)


def test_heldout_bound_is_the_one_sided_clopper_pearson_limit_on_n_fresh_samples(tiny_result):
    cfg, result = tiny_result
    h = result.heldout
    assert h.n == cfg.bound_n and h.confidence == pytest.approx(1 - 2 * cfg.delta)
    assert h.upper == clopper_pearson(h.errors, h.n, 1 - 2 * cfg.delta)[1]
    d = result.as_dict()["heldout_same_n"]
    assert d["n"] == cfg.bound_n and d["one_sided_level"] == pytest.approx(0.95)
    # the generalization bound from S is never tighter than the held-out limit here (barely trained)
    assert result.bound["value"] >= h.lower


def test_exact_risk_enumerates_every_bit_string(tiny_model, tiny_result):
    # Independent enumeration: itertools over the 2^16 bit strings, labels by hand.
    import itertools

    from specbound.experiment import exact_risk, float_margins
    from specbound.tasks import symbol_majority

    cfg, result = tiny_result
    bits = np.array(list(itertools.product((0, 1), repeat=16)), dtype=np.int64)
    tokens = np.hstack([np.zeros((len(bits), 1), dtype=np.int64), bits + 1])
    hidden = bits[:, [p - 1 for p in TINY.make_task().positions]]
    labels = np.where(hidden.sum(axis=1) >= 2, 1.0, -1.0)
    expected = np.count_nonzero(float_margins(tiny_model, tokens, labels) <= 0) / 2 ** 16
    assert result.exact == expected and result.as_dict()["exact_risk"] == expected
    assert 0 < expected < 0.5  # barely trained: the check is not vacuous
    assert result.test.lower <= expected <= result.test.upper  # the seeds are fixed: deterministic
    assert exact_risk(None, symbol_majority()) is None  # 2^64 inputs: not enumerable


def test_observed_error_agrees_with_the_training_evaluator_and_counts_zero_outputs_as_errors(tiny_model):
    import copy

    import torch

    from specbound.experiment import observed_error
    from specbound.train import evaluate

    tokens, labels = fresh_sample(TINY.make_task(), 500, 9)
    t = observed_error(tiny_model, tokens, labels, seed=9)
    assert t.errors == round(500 * (1 - evaluate(tiny_model, tokens, labels)["accuracy"]))
    assert t.n == 500 and t.lower <= t.rate <= t.upper
    silent = copy.deepcopy(tiny_model)
    with torch.no_grad():
        silent.w.zero_()  # f = 0 everywhere: y f <= 0 is an error (the theorem's event)
    assert observed_error(silent, tokens, labels).errors == 500


# --------------------------------------------------------------------------- command line


def test_cli_run_prints_json_with_the_bound_and_the_interval(capsys, tmp_path):
    from specbound.cli import main

    ckpt = tmp_path / "tiny.safetensors"
    code = main(["experiment", "run", "--layers", "1", "--heads", "1", "--head-dim", "1", "--width", "8",
                 "--ff", "2", "--steps", "5", "--n-train", "256", "--n", "64", "--n-test", "500",
                 "--reg", "0", "--reg-kind", "none", "--workers", "1", "--json", "--save", str(ckpt)])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bound"]["value"] >= out["test"]["lower"]
    assert out["config"]["n"] == 64 and out["bound"]["empirical_sample"]["kind"] == "fresh"
    assert ckpt.is_file() and json.loads(ckpt.with_suffix(".json").read_text())["task"]["name"] == "sparse_majority"


def test_cli_run_with_the_training_sample_saves_a_record_certify_reads_as_S(capsys, tmp_path):
    from specbound.cli import main
    from specbound.checkpoint import load_layers
    from specbound.empirical import training_record

    ckpt = tmp_path / "tiny.safetensors"
    code = main(["experiment", "run", "--layers", "1", "--heads", "1", "--head-dim", "1", "--width", "8",
                 "--ff", "2", "--steps", "5", "--n-train", "256", "--sample", "train", "--data-seed", "5",
                 "--n-test", "500", "--reg", "0", "--reg-kind", "none", "--workers", "1", "--json",
                 "--save", str(ckpt)])
    assert code == 0
    capsys.readouterr()
    recorded = training_record(load_layers(ckpt, ()), ckpt)  # the record names this checkpoint
    assert recorded is not None and recorded["n"] == 256 and recorded["data_seed"] == 5


@pytest.mark.parametrize("bad", [["--n", "0"], ["--margin", "-2"], ["--sample", "train", "--n", "7"],
                                 ["--task", "nope"]])
def test_cli_bad_input_is_one_line_and_exit_2(capsys, tmp_path, bad):
    from specbound.cli import main

    out = tmp_path / "r.json"
    code = main(["experiment", "run", "--layers", "1", "--width", "8", "--heads", "1", "--steps", "1",
                 "--n-train", "64", "--out", str(out)] + bad)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("specbound: error:")
    assert not out.exists()


# --------------------------------------------------------------------------- report


def test_scaling_section_replaces_only_its_own_part(tmp_path):
    md = tmp_path / "experiments.md"
    md.write_text("# Experiments\n\nhand-written intro\n\n" + BEGIN + "\nold\n" + END + "\n\nafter\n")
    write_scaling_section(md, BEGIN + "\nnew table\n" + END + "\n")
    text = md.read_text()
    assert "hand-written intro" in text and "after" in text and "new table" in text and "old" not in text
    write_scaling_section(tmp_path / "fresh.md", BEGIN + "\nx\n" + END + "\n")
    assert (tmp_path / "fresh.md").read_text().startswith("# Experiments")


@pytest.mark.slow
def test_scaling_study_on_a_tiny_grid_writes_table_exponents_and_plots(tmp_path):
    cfg = ScalingConfig(depths=(1, 2), widths=(8, 16), heads=1,
                        base=TrainConfig(steps=20, n_train=256, reg=0.0, reg_kind="none"), n_test=500)
    study = scaling_study(cfg)
    assert len(study["rows"]) == 4
    for row in study["rows"]:
        assert row["numeric"]["bound"] >= row["test"]["lower"]
        assert row["estimates"]["occam_estimate"] > 0 and row["estimates"]["rademacher_estimate"] > 0
    text = scaling_markdown(study, ["figures/bound_vs_depth.png"])
    assert text.count("\n| ") >= 4 + 4 and "Edelman" in text
    paths = scaling_plots(study, tmp_path)
    assert all(p.stat().st_size > 1000 for p in paths)


@pytest.mark.slow
def test_non_vacuous_certified_bound_on_a_two_layer_model():
    # The push of docs/experiments.md: a rank-1-head, d_ff = 2, width-8, 2-layer model; n = 20000
    # fresh samples for both the empirical and the complexity term.  About 2 minutes.
    cfg = ExperimentConfig(train=TrainConfig(num_layers=2, num_heads=1, head_dim=1, width=8, ff_dim=2,
                                             steps=600, lr=1e-2, reg=0.0, reg_kind="none"),
                           n=20_000, n_test=20_000, workers=2)
    result = run_experiment(cfg)
    assert result.bound["value"] < 1.0
    assert result.bound["value"] >= result.test.lower


def test_exponents_are_fitted_over_the_trained_models_only(monkeypatch):
    # a model left at chance is not a point of the scaling law: the fit must recover the exact
    # power law of the trained cells whatever the untrained cell's values, and the table says which
    # cells were left out and shows the certified bound next to the numeric one
    from specbound.experiments import scaling

    def fake_row(config, L, N, cache, progress):
        trained = not (L == 4 and N == 64)
        law = 3.0 * L ** 0.5 * N ** 1.25
        value = law if trained else 1e9
        numeric = {"complexity_ss": value, "complexity_dd": 2.0, "confidence": 0.3, "empirical": 0.0,
                   "rho": 4.0, "bound": 2.0 + value * 1e-12}
        return {"L": L, "N": N, "parameters": L * N, "train_accuracy": 1.0 if trained else 0.5,
                "test": {"errors": 0, "n": 100, "lower": 0.0, "upper": 0.03},
                "paper_ours": value, "paper_edelman": value, "numeric": numeric,
                "estimates": {"occam_estimate": 0.5 * L ** 2 * N ** 0.75 if trained else 7.0,
                              "rademacher_estimate": value, "occam_H": 9.0 * L * N ** 2},
                "certified": {"value": 2.25, "vacuous": True}}

    monkeypatch.setattr(scaling, "_cached_row", fake_row)
    cfg = ScalingConfig(depths=(1, 2, 4), widths=(16, 32, 64), base=TrainConfig(steps=1, n_train=16))
    study = scaling_study(cfg)
    e = study["exponents"]["complexity_ss"]
    assert e["points"] == 8
    assert e["a_L"] == pytest.approx(0.5, abs=1e-9) and e["b_N"] == pytest.approx(1.25, abs=1e-9)
    occam = study["exponents"]["occam_estimate"]  # both routes' estimates get their exponents
    assert occam["points"] == 8 and occam["a_L"] == pytest.approx(2.0, abs=1e-9)
    assert occam["b_N"] == pytest.approx(0.75, abs=1e-9)
    assert study["exponents"]["occam_H"]["b_N"] == pytest.approx(2.0, abs=1e-9)
    text = scaling_markdown(study)
    assert text.count("0.5000 *not trained*") == 1 and "| certified |" in text and "2.25 (vacuous)" in text
    assert "Occam route (float estimate, delta/2)" in text and "| Occam est. |" in text


@pytest.mark.parametrize("rule,head_dim", [("half", 8), ("full", 16)])
def test_the_grid_head_dimension_follows_its_rule(rule, head_dim):
    cfg = ScalingConfig(depths=(1,), widths=(32,), heads=2, head_dim_rule=rule)
    tc = cfg.train_config(1, 32)
    assert tc.head_dim == head_dim and tc.ff_dim == 64
    with pytest.raises(Exception, match="head_dim_rule"):
        ScalingConfig(head_dim_rule="third")


# --------------------------------------------------------------------------- what the commands say and write


# the spectral penalty pulls this tiny model to f = 0: training ends at chance
AT_CHANCE = ["--layers", "1", "--width", "4", "--heads", "2", "--head-dim", "1", "--ff", "2", "--steps", "30",
             "--lr", "0.05", "--reg", "100", "--seq-len", "5", "--n-train", "256", "--n", "256",
             "--n-test", "256", "--workers", "1"]


def test_experiment_run_near_chance_warns_and_says_what_to_change(capsys):
    from specbound.cli import main

    assert main(["experiment", "run", *AT_CHANCE]) == 0
    out, err = capsys.readouterr()
    warning = next(line for line in out.splitlines() if line.startswith("WARNING:"))
    assert "training ended near chance" in warning
    for flag in ("--seed", "--lr", "--steps"):
        assert flag in warning
    assert "step 30/30, loss" in err and "trained in" in err  # training progress (not a terminal: lines)


def _fake_row(config, L, N, cache, progress):
    value = 3.0 * L * N
    numeric = {"complexity_ss": value, "complexity_dd": 2.0, "confidence": 0.3, "empirical": 0.0, "rho": 4.0,
               "bound": 2.3}
    return {"L": L, "N": N, "parameters": L * N, "train_accuracy": 0.5 if (L, N) == (2, 16) else 1.0,
            "test": {"errors": 0, "n": 100, "lower": 0.0, "upper": 0.03},
            "paper_ours": value, "paper_edelman": value, "numeric": numeric,
            "_contributions": {"grid": [0.0, 0.5, 1.0], "types": ["QK", "M_in"],
                               "ours": [[1.0, 2.0, 3.0], [1.0, 1.5, 2.0]], "paper": [[1.0, 3.0, 9.0], [1.0, 2.0, 4.0]]}}


SMALL_GRID = ["experiment", "scaling", "--depths", "1,2", "--widths", "8,16", "--heads", "1", "--steps", "1"]


def test_scaling_writes_nothing_unless_told(capsys, tmp_path, monkeypatch):
    from specbound.cli import main
    from specbound.experiments import scaling

    monkeypatch.setattr(scaling, "_cached_row", _fake_row)
    monkeypatch.chdir(tmp_path)
    assert main(SMALL_GRID) == 0
    out, err = capsys.readouterr()
    assert "## Depth/width scaling study" in out and "*not trained*" in out and "--seed" in out
    assert list(tmp_path.iterdir()) == []  # not ./docs, not anything
    assert "nothing written" in err


def test_scaling_out_writes_the_table_and_the_figures_beside_it(capsys, tmp_path, monkeypatch):
    from specbound.cli import main
    from specbound.experiments import scaling

    monkeypatch.setattr(scaling, "_cached_row", _fake_row)
    monkeypatch.chdir(tmp_path)
    md = tmp_path / "report" / "scaling.md"
    assert main([*SMALL_GRID, "--out", str(md)]) == 0
    _, err = capsys.readouterr()
    figures = sorted(p.name for p in (tmp_path / "report" / "figures").iterdir())
    assert figures == ["bound_vs_depth.png", "bound_vs_width.png", "contribution_vs_p.png"]
    assert "- `figures/bound_vs_depth.png`" in md.read_text()
    assert f"wrote {md} (scaling section)" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]
