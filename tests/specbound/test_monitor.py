"""specbound/monitor.py: float estimates every K steps of a plain PyTorch loop (console, CSV, plot),
labelled estimates everywhere, and the certified bound on the training sample at the end; the Trainer
and Lightning adapters."""

from __future__ import annotations

import csv
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from specbound.errors import SpecboundError  # noqa: E402
from specbound.monitor import BoundMonitor, lightning_callback, trainer_callback  # noqa: E402


def _task_and_model(n=240, seed=2):
    from specbound.model import AnalysisTransformer, Architecture
    from specbound.tasks import get_task

    task = get_task("sparse_majority", seq_len=6, k=3)
    tokens, labels = task.sample(n, np.random.default_rng(seed))
    model = AnalysisTransformer(Architecture(1, 2, 6, 2, 4, task.vocab_size, task.seq_len), init_seed=seed)
    return model, {"tokens": tokens, "labels": labels}


def _train(model, data, monitor, steps, lr=2e-2):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    X, y = torch.from_numpy(data["tokens"]), torch.from_numpy(data["labels"].astype(np.float64))
    for _ in range(steps):
        loss = torch.nn.functional.softplus(-y * model(X)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        monitor.step()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("monitor")
    model, data = _task_and_model()
    lines: list[str] = []
    monitor = BoundMonitor(model, data=data, every=3, csv=folder / "bound.csv", plot=folder / "bound.png",
                           say=lines.append)
    _train(model, data, monitor, steps=7)
    result = monitor.finish()
    return monitor, result, lines, folder


def test_the_monitor_logs_every_k_steps_and_the_last_one(run):
    monitor, _, _, folder = run
    assert [r["step"] for r in monitor.history] == [3, 6, 7]
    with open(folder / "bound.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == [3, 6, 7]
    assert all(int(r["n"]) == 240 for r in rows)


def test_every_float_bound_value_is_labelled_an_estimate(run):
    monitor, _, lines, folder = run
    with open(folder / "bound.csv", newline="") as fh:
        header = next(csv.reader(fh))
    assert {"estimate", "occam_estimate", "rademacher_estimate", "route"} <= set(header)
    assert not any("bound" in column for column in header)  # only the certified value is a bound
    for line in lines[:-1]:
        assert "estimates at n = 240 (float, not bounds)" in line and "bound " not in line.replace("not bounds", "")
    row = monitor.history[-1]
    assert row["estimate"] == min(row["occam_estimate"], row["rademacher_estimate"])
    assert {"readout_norm", "spectral_max", "spectral_log_sum", "stable_rank_mean", "spectral_max_QK",
            "occam_H", "occam_count", "rademacher_empirical", "rademacher_complexity"} <= set(row)


def test_finish_certifies_the_model_on_the_training_sample(run):
    monitor, result, lines, folder = run
    assert result is monitor.certification and result.is_bound and result.bound.settings.n == 240
    assert lines[-1].startswith("certified bound on the 0-1 risk: ")
    # every example's margin was in the last estimate (samples >= n): it sits next to the certified value
    est = monitor.history[-1]["estimate"]
    assert result.bound_upper == pytest.approx(est, rel=0.02)
    assert (folder / "bound.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_subsample_estimates_at_the_size_of_the_whole_sample(tmp_path):
    model, data = _task_and_model(n=300, seed=5)
    monitor = BoundMonitor(model, data=data, every=1, samples=50, say=None)
    estimate = monitor.log()
    assert estimate.n == 300 and monitor.history[-1]["n"] == 300
    # the 50 margins spread over 300 examples: each stands for 6, so every count is a multiple of 6
    wrong = round(estimate.error * 300)
    assert wrong == pytest.approx(estimate.error * 300) and wrong % 6 == 0
    assert estimate.routes["occam"].parts["count"] % 6 == 0


def test_a_trainer_step_count_logs_at_its_multiples():
    model, data = _task_and_model(n=60)
    monitor = BoundMonitor(model, data=data, every=5, say=None)
    logged = [s for s in (1, 2, 5, 5, 7, 10) if monitor.step(s) is not None]
    assert logged == [5, 10] and [r["step"] for r in monitor.history] == [5, 10]


@pytest.mark.parametrize("kwargs, words", [
    ({"every": 0}, "every must be a positive integer"),
    ({"samples": 0}, "samples must be a positive integer"),
    ({"delta": 1.5}, "delta"),
    ({"data": None}, "needs the training sample"),
    ({"data": {"labels": [1, -1]}}, "neither 'tokens' nor 'inputs'"),
])
def test_bad_monitor_input_is_one_clear_error(kwargs, words):
    model, data = _task_and_model(n=20)
    with pytest.raises(SpecboundError) as ei:
        BoundMonitor(model, **{"data": data, **kwargs})
    assert words in str(ei.value) and "\n" not in str(ei.value)


def test_a_csv_destination_that_is_a_folder_is_refused_before_training(tmp_path):
    model, data = _task_and_model(n=20)
    with pytest.raises(SpecboundError, match="is a folder"):
        BoundMonitor(model, data=data, csv=tmp_path)


# -- adapters --------------------------------------------------------------------------------------

def test_the_lightning_adapter_says_in_one_line_what_it_needs(monkeypatch):
    # Lightning is not a dependency: with it absent (forced here) the adapter raises one clear line
    monkeypatch.setitem(sys.modules, "lightning", None)
    monkeypatch.setitem(sys.modules, "pytorch_lightning", None)
    model, data = _task_and_model(n=20)
    with pytest.raises(SpecboundError) as ei:
        lightning_callback(BoundMonitor(model, data=data, say=None))
    assert "pip install lightning" in str(ei.value) and "\n" not in str(ei.value)


def test_the_trainer_adapter_says_in_one_line_what_it_needs(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    model, data = _task_and_model(n=20)
    with pytest.raises(SpecboundError, match="pip install transformers"):
        trainer_callback(BoundMonitor(model, data=data, say=None))


def test_the_trainer_adapter_steps_the_monitor_in_a_tiny_trainer_run(tmp_path):
    pytest.importorskip("accelerate")  # the Trainer needs it (the test extra installs it)
    transformers = pytest.importorskip("transformers")

    model, data = _task_and_model(n=64)

    class Wrapped(torch.nn.Module):  # the Trainer's model returns its loss; the monitor watches the inner one
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, labels):
            f = self.inner(input_ids)
            return {"loss": torch.nn.functional.softplus(-labels * f).mean(), "logits": f}

    train = [{"input_ids": torch.from_numpy(data["tokens"][i]),
              "labels": torch.tensor(float(data["labels"][i]), dtype=torch.float64)} for i in range(64)]
    monitor = BoundMonitor(model, data=data, every=2, say=None)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=16,
                                          learning_rate=1e-2, report_to=[], use_cpu=True, save_strategy="no",
                                          logging_strategy="no", disable_tqdm=True)
    trainer = transformers.Trainer(model=Wrapped(model), args=args, train_dataset=train,
                                   callbacks=[trainer_callback(monitor)])
    trainer.train()
    assert [r["step"] for r in monitor.history] == [2, 4]
    assert monitor.certification is not None and monitor.certification.bound.settings.n == 64
