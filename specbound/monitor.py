"""A bound monitor for a training loop: float ESTIMATES of each route every K steps, the certified
bound at the end.

    from specbound.monitor import BoundMonitor

    monitor = BoundMonitor(model, data=S, every=100, csv="bound.csv", plot="bound.png")
    for batch in loader:
        ...; loss.backward(); optimiser.step()
        monitor.step()
    result = monitor.finish()          # specbound.certify(model, data=S): the certified bound

``model`` is anything :func:`specbound.certify` accepts that changes as it trains (a torch module; its
weights are read through the same loaders as certify's).  ``data`` is the training sample S (any form
``certify`` takes: a :class:`~specbound.DataSet`, a mapping of arrays, a ``.npz`` path).

Every ``every`` steps (:meth:`BoundMonitor.log`): the model's float spectra and its float margins on a
fixed subsample of S, and from them the float estimate of each route at n = |S|
(:class:`specbound.estimate.Estimator`: the fast evaluation of the theorem; for a subsample, the margins
at n are assumed distributed as the subsample's), with its parts and a spectral summary.  One console
line, one CSV row (the whole file rewritten atomically, so it is never half-written), and at the end a
plot.  Every float value is labelled an estimate (columns ``*_estimate``); :meth:`BoundMonitor.finish`
runs ``certify`` on S, and only its value is called a bound.

Adapters (optional dependencies, imported only when asked for): :func:`trainer_callback` for the Hugging
Face ``Trainer`` and :func:`lightning_callback` for PyTorch Lightning; without the package each raises
one clear line.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .errors import SpecboundError
from .estimate import ESTIMATE, Estimate, Estimator, float_margins_of
from .vocabulary import ROUTE_OCCAM, ROUTE_RADEMACHER, ROUTES

if TYPE_CHECKING:  # pragma: no cover
    from .certification import Certification

ESTIMATE_SAMPLES = 4096
"""Examples of S whose margins are computed at each log (all of S when it is smaller)."""


def spectral_summary(spectra, weights) -> dict[str, float]:
    """Float summaries of the network's norms: ``readout_norm`` (||w||), ``spectral_max`` and
    ``spectral_log_sum`` (max and sum of log ||W_j||_2 over the covered matrices), ``stable_rank_mean``,
    and ``spectral_max_<kind>`` per matrix kind."""
    from .numeric.spectra import norm_summaries

    rows = norm_summaries(spectra)
    spectral = np.array([r.spectral for r in rows], dtype=np.float64)
    out = {"readout_norm": float(np.linalg.norm(weights.readout)) if weights.readout is not None else 1.0,
           "spectral_max": float(spectral.max()),
           "spectral_log_sum": float(np.log(np.where(spectral > 0, spectral, 1.0)).sum()),
           "stable_rank_mean": float(np.mean([r.stable_rank for r in rows]))}
    for kind in dict.fromkeys(r.kind for r in rows):
        out[f"spectral_max_{kind}"] = float(max(r.spectral for r in rows if r.kind == kind))
    return out


class BoundMonitor:
    """Float estimates of the bound while ``model`` trains on ``data``; the certified bound at the end.

    ``every``: log every this many steps (:meth:`step`); ``csv``: a CSV file rewritten at each log;
    ``plot``: a PNG drawn by :meth:`finish` (or :meth:`plot`); ``samples``: examples of S whose margins
    each log computes (default :data:`ESTIMATE_SAMPLES`, a fixed subset drawn with ``seed``);
    ``delta``: the confidence, each route at delta/2 as certify runs them; ``say``: where the console
    line goes (default: stderr; None: nowhere).  ``history``: the rows logged so far (dicts)."""

    def __init__(self, model: Any, data: Any, *, every: int = 100, csv: str | os.PathLike | None = None,
                 plot: str | os.PathLike | None = None, samples: int = ESTIMATE_SAMPLES, delta: float = 0.05,
                 seed: int = 0, say: Callable[[str], None] | None = ...) -> None:
        from .data_source import as_dataset
        from .destination import check_file

        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise SpecboundError(f"every must be a positive integer (steps between logs), got {every!r}")
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise SpecboundError(f"samples must be a positive integer, got {samples!r}")
        if not (isinstance(delta, (int, float)) and 0.0 < float(delta) < 1.0):
            raise SpecboundError(f"delta must lie in (0, 1), got {delta!r}")
        self.dataset = as_dataset(data)
        if self.dataset is not None and hasattr(self.dataset, "materialize"):
            self.dataset = self.dataset.materialize()  # the monitor subsamples S by index: it holds it whole
        if self.dataset is None or self.dataset.n == 0:
            raise SpecboundError("the monitor needs the training sample S: data= (a DataSet, a mapping of arrays "
                                 "or a .npz path)")
        self.csv = check_file(csv, "csv=")
        self.plot_path = check_file(plot, "plot=")
        self.model, self.every, self.delta = model, every, float(delta)
        self.say = _stderr if say is ... else say
        self.history: list[dict[str, Any]] = []
        self.certification: Certification | None = None
        self.steps = 0
        self._start = time.perf_counter()
        # where an in-memory model is written for the loaders; removed with the monitor (finalize: a
        # monitor dropped before finish() is normal use, not a leak worth a ResourceWarning)
        self._folder = tempfile.mkdtemp(prefix="specbound-monitor-")
        weakref.finalize(self, shutil.rmtree, self._folder, True)
        self._subsample = _subsample(self.dataset, samples, seed)

    @property
    def n(self) -> int:
        """The size of the training sample S (the n of every estimate and of the final bound)."""
        return self.dataset.n

    # ----------------------------------------------------------------------------- the loop hooks

    def step(self, step: int | None = None) -> Estimate | None:
        """Count one training step (or set the count to ``step``, e.g. a trainer's global step) and log
        when the count is a multiple of ``every``; the estimate logged, else None."""
        self.steps = self.steps + 1 if step is None else int(step)
        if self.steps % self.every == 0 and not self._logged(self.steps):
            return self.log()
        return None

    def log(self) -> Estimate:
        """Estimate now (module docstring): a console line, a CSV row, a history row; the estimate."""
        from .api import load_weights
        from .module_source import readable
        from .numeric.spectra import compute_spectra_numpy

        t0 = time.perf_counter()
        weights = load_weights(readable(self.model, self._folder))
        spectra = compute_spectra_numpy(weights)
        margins = float_margins_of(weights, self._subsample)
        estimate = Estimator(weights, margins, delta=self.delta, spectra=spectra).at(self.n)
        row = {"step": self.steps, **estimate.row(), **spectral_summary(spectra, weights),
               "elapsed_s": time.perf_counter() - self._start, "log_s": time.perf_counter() - t0}
        self.history.append(row)
        if self.csv is not None:
            from .report import write_csv

            write_csv(self.csv, self.history)
        if self.say is not None:
            self.say(progress_line(row))
        return estimate

    def finish(self, **certify_options: Any) -> Certification:
        """Log the last step (unless just logged), draw the plot, and certify the model on S with
        :func:`specbound.certify` (``certify_options``: its keywords); the :class:`Certification`."""
        import specbound

        from .module_source import readable

        if not self._logged(self.steps):
            self.log()
        source = readable(self.model, self._folder)
        self.certification = specbound.certify(source, data=self.dataset, **certify_options)
        if self.say is not None:
            self.say(certified_line(self.certification))
        if self.plot_path is not None:
            self.plot(self.plot_path)
        return self.certification

    certify = finish

    def plot(self, path: str | os.PathLike) -> Path:
        """Draw the estimates and the spectral summary against the step (and the certified bound, once
        :meth:`finish` has run) into the PNG ``path``; the path."""
        return plot_history(self.history, path, self.certification)

    def _logged(self, step: int) -> bool:
        return bool(self.history) and self.history[-1]["step"] == step


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _subsample(dataset, size: int, seed: int):
    """A fixed subset of ``size`` examples of ``dataset`` (all of it when smaller), drawn once."""
    from dataclasses import replace

    if dataset.n <= size:
        return dataset
    idx = np.sort(np.random.default_rng(int(seed)).choice(dataset.n, size=size, replace=False))
    pick = lambda a: None if a is None else a[idx]  # noqa: E731
    return replace(dataset, labels=dataset.labels[idx], tokens=pick(dataset.tokens), inputs=pick(dataset.inputs),
                   source=f"{size} of {dataset.n} examples of {dataset.source}")


# ------------------------------------------------------------------------------------------------
# what is shown


def progress_line(row: dict[str, Any]) -> str:
    """The console line of one log: the step, both routes' estimates (labelled), their main parts and
    the spectral summary."""
    occ, rad = row[f"{ROUTE_OCCAM}_{ESTIMATE}"], row[f"{ROUTE_RADEMACHER}_{ESTIMATE}"]
    return (f"step {row['step']}: {ESTIMATE}s at n = {row['n']} (float, not bounds): occam {_g(occ)} "
            f"(H {_g(row['occam_H'])}, K {row['occam_count']}), rademacher {_g(rad)} "
            f"(ramp {_g(row['rademacher_empirical'])}) | train error {_g(row['error'])}, ||w|| "
            f"{_g(row['readout_norm'])}, max ||W||_2 {_g(row['spectral_max'])} ({row['log_s']:.2g} s)")


def certified_line(result) -> str:
    """The console line of the final certification: the only value called a bound."""
    up = result.bound_upper
    if up is None:
        return f"certified complexity + confidence {result.partial_upper:.6g} ({result.label})"
    route = getattr(result.bound, "route", None)
    return f"{result.label} on the 0-1 risk: {up:.6g}" + (f" (route: {route})" if route else "")


def _g(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else "inf"


def plot_history(history: list[dict[str, Any]], path: str | os.PathLike, certification=None) -> Path:
    """Two panels against the training step: the float estimates of both routes (log scale, with the
    certified bound as a marker when given), and the spectral summary (||w||, max ||W||_2 per kind)."""
    from .report import _pyplot, _save_figure

    if not history:
        raise SpecboundError("nothing to plot: the monitor has not logged a step yet")
    plt = _pyplot()
    steps = [r["step"] for r in history]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for route in ROUTES:
        left.plot(steps, [r[f"{route}_{ESTIMATE}"] for r in history], marker="o", ms=3,
                  label=f"{route} route ({ESTIMATE})")
    if certification is not None and certification.bound_upper is not None:
        left.scatter([steps[-1]], [certification.bound_upper], marker="*", s=160, color="black", zorder=5,
                     label=f"certified bound {certification.bound_upper:.4g}")
    left.axhline(1.0, color="grey", lw=0.8, ls=":")
    left.set_yscale("log")
    left.set_xlabel("training step")
    left.set_ylabel(f"bound {ESTIMATE} (float; not certified)")
    left.set_title(f"float {ESTIMATE}s at n = {history[-1]['n']}")
    left.legend(fontsize=8)
    right.plot(steps, [r["readout_norm"] for r in history], label="||w||")
    for key in (k for k in history[-1] if k.startswith("spectral_max_")):
        right.plot(steps, [r[key] for r in history], label=f"max ||W||_2 ({key.removeprefix('spectral_max_')})")
    right.set_yscale("log")
    right.set_xlabel("training step")
    right.set_title("spectral summary (float)")
    right.legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    _save_figure(fig, out)
    plt.close(fig)
    return out


# ------------------------------------------------------------------------------------------------
# adapters (optional dependencies)


def trainer_callback(monitor: BoundMonitor, *, certify_at_end: bool = True):
    """A ``transformers.TrainerCallback`` that steps ``monitor`` at every optimiser step (the trainer's
    global step) and, with ``certify_at_end``, runs :meth:`BoundMonitor.finish` when training ends."""
    try:
        from transformers import TrainerCallback
    except ImportError:
        raise SpecboundError("the Hugging Face Trainer adapter needs transformers: pip install transformers") from None

    class SpecboundTrainerCallback(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            monitor.step(state.global_step)

        def on_train_end(self, args, state, control, **kwargs):
            if certify_at_end:
                monitor.finish()

    return SpecboundTrainerCallback()


def lightning_callback(monitor: BoundMonitor, *, certify_at_end: bool = True):
    """A PyTorch Lightning ``Callback`` that steps ``monitor`` after every training batch (the
    trainer's global step) and, with ``certify_at_end``, runs :meth:`BoundMonitor.finish` when training
    ends (``lightning`` or the older ``pytorch_lightning`` package)."""
    try:
        from lightning.pytorch import Callback
    except ImportError:
        try:
            from pytorch_lightning import Callback
        except ImportError:
            raise SpecboundError("the PyTorch Lightning adapter needs lightning: pip install lightning") from None

    class SpecboundLightningCallback(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            monitor.step(trainer.global_step)

        def on_train_end(self, trainer, pl_module):
            if certify_at_end:
                monitor.finish()

    return SpecboundLightningCallback()


__all__ = ["ESTIMATE_SAMPLES", "BoundMonitor", "certified_line", "lightning_callback", "plot_history",
           "progress_line", "spectral_summary", "trainer_callback"]
