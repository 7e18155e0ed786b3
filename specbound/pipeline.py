"""The Python API behind ``specbound certify``: checkpoint -> certified bound.

:func:`certify` mirrors the command line.  Steps: load the weights; enclose every covered matrix's
singular values (:mod:`specbound.certified`); choose a plan (the float planner
``specbound.numeric.planner.choose_plan`` when it exists, else :func:`fallback_plan`); certify the
empirical ramp loss at the plan's margin (data file, or fresh samples of the model's recorded task,
or the user's number -- flagged as not certified); evaluate the theorem in Arb
(:func:`specbound.certified.bound.certify_bound`).

Floats only *choose* (THEORY.md sections 6-7): whatever the plan, the returned bound is valid.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path

import numpy as np

from specbound.errors import SpecboundError

DEFAULT_SAMPLES = 2000
"""Fresh samples drawn for the embedded default (and own models with a recorded task)."""

DEFAULT_SEED = 3
"""Seed of those samples: numpy ``default_rng(seed)`` (training used 1, the test set 2)."""


@dataclass(frozen=True)
class EmpiricalSource:
    """Where the empirical term comes from.

    ``kind``: "data" (a data file; ``detail`` has its path and sha256), "task" (fresh i.i.d. samples of
    the model's task; ``detail`` has the task, seed, n), "user" (a number the user supplied: NOT
    certified) or "none" (no empirical term: only complexity + confidence are certified).
    """

    kind: str
    certified: bool
    detail: dict = field(default_factory=dict)
    ramp: object | None = None  #: the RampLossCertificate when certified


@dataclass(frozen=True)
class CertifyResult:
    """A certified bound with its provenance (checkpoint, empirical source, enclosure routes)."""

    bound: object  #: specbound.certified.bound.CertifiedBound
    weights: object  #: AnalysisWeights
    checkpoint: dict
    source: EmpiricalSource
    enclosure_methods: tuple[str, ...]
    seconds: dict = field(default_factory=dict)
    enclosures: tuple = field(default=(), repr=False)  #: the SingularValueEnclosure of each matrix


# ------------------------------------------------------------------------------------------------
# the task of an own-format model


def task_record(weights, checkpoint: str | os.PathLike | None) -> dict | None:
    """The recorded task of an own-format model: the embedded default's ``default.json``, or a
    ``<checkpoint>.json`` record written next to a trained checkpoint (key ``task``)."""
    if checkpoint is None:
        from specbound.data import default_checkpoint_path

        path = default_checkpoint_path().with_suffix(".json")
    else:
        path = Path(checkpoint).with_suffix(".json")
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        task = record["task"]
        if not isinstance(task, dict) or "positions" not in task:
            return None
        return task
    except (OSError, ValueError, KeyError, TypeError):
        return None


def task_sample(task: dict, n: int, seed: int):
    """``n`` fresh i.i.d. samples of a recorded task, drawn with ``numpy.random.default_rng(seed)``."""
    from specbound.data_file import dataset_from_arrays
    from specbound.tasks import Task

    t = Task(name=str(task["name"]), rule=str(task["rule"]), seq_len=int(task["seq_len"]),
             positions=tuple(int(p) for p in task["positions"]), vocab_size=int(task.get("vocab_size", 3)))
    tokens, labels = t.sample(int(n), np.random.default_rng(int(seed)))
    return dataset_from_arrays(labels, tokens=tokens, source=f"task {t.name} (seed {seed}, n {n})")


# ------------------------------------------------------------------------------------------------
# plans


def float_margins(weights, data) -> np.ndarray | None:
    """Float64 margins y f(X) of an own-format model on token data (for choosing rho only)."""
    if data is None or data.tokens is None or weights.layout != "specbound-analysis-v1":
        return None
    path = weights.extra.get("weights_file")
    if not path:
        return None
    import torch

    from specbound.model import AnalysisTransformer

    model = AnalysisTransformer.load(path)
    with torch.no_grad():
        f = model(torch.from_numpy(np.asarray(data.tokens))).numpy()
    return f * np.asarray(data.labels, dtype=np.float64)


def fallback_plan(weights, settings, enclosures, margins: np.ndarray | None = None):
    """A simple valid plan (used only when the float planner is not available).

    p_j minimises the matrix's closed-form term over P_m (evaluated in Arb, midpoints compared);
    u_j = max(1/n, p/(p+2) * (term - 1/n)) (the exact minimiser of u + sqrt(b) u^{-p/2}, THEORY.md
    balance_single_scale); alpha_D = min(1/4, 1/n); vartheta equal; the margin is the user's (rounded
    down onto the grid), else the grid point minimising a float estimate of empirical + complexity.
    """
    from flint import arb

    from specbound.certified.bound import certify_bound, grid_m
    from specbound.certified.radii import index_down
    from specbound.plan import BoundPlan

    J = len(weights.matrices)
    m = grid_m(settings, weights)
    n = settings.n
    beta_rho = Fraction(settings.beta_rho)

    def plan_with(p_index, k_rho, u=None):
        return BoundPlan(m=m, p_index=tuple(p_index), k_rho=k_rho, u=tuple(u or [1.0 / n] * J),
                         u_w=1.0 / n, alpha_D=min(0.25, 1.0 / n), vartheta=(1.0 / (J + 1),) * J,
                         vartheta_w=1.0 / (J + 1), notes={"planner": "specbound.pipeline.fallback_plan"})

    if settings.margin is not None:
        k_rho = index_down(arb(float(settings.margin)), beta_rho)
    else:
        k_rho = 0
    # per-matrix p: each matrix's closed-form term, for every p on the grid (kappa does not depend on p)
    best = [(math.inf, 0)] * J
    for i in range(2 * m + 1):
        cb = certify_bound(weights, settings, plan_with([i] * J, k_rho), enclosures, None)
        for j, rec in enumerate(cb.matrices):
            val = float(rec.contribution.mid())
            if val < best[j][0]:
                best[j] = (val, i)
    p_index = [i for _, i in best]
    if settings.margin is None and margins is not None and margins.size:
        pos = margins[margins > 0]
        top = math.floor(math.log(float(np.max(pos))) / math.log(float(beta_rho))) if pos.size else 0
        scores = []
        for k in range(top - 6, top + 1):
            rho = float(beta_rho) ** k
            emp = float(np.mean(np.clip(1.0 - margins / rho, 0.0, 1.0)))
            cb = certify_bound(weights, settings, plan_with(p_index, k), enclosures, None)
            scores.append((emp + float(cb.partial.mid()), k))
        k_rho = min(scores)[1]
    cb = certify_bound(weights, settings, plan_with(p_index, k_rho), enclosures, None)
    u = []
    for rec in cb.matrices:
        term = float(rec.contribution.mid()) - 1.0 / n
        ratio = float(rec.p / (rec.p + 2)) if rec.p > 0 else 0.0
        u.append(max(1.0 / n, ratio * term))
    return plan_with(p_index, k_rho, u)


def choose_plan(weights, settings, enclosures, margins=None):
    """The float planner's plan when ``specbound.numeric.planner`` exists, else :func:`fallback_plan`."""
    try:
        from specbound.numeric.planner import choose_plan as numeric_choose
    except ImportError:
        return fallback_plan(weights, settings, enclosures, margins)
    kwargs = {}
    import inspect

    params = inspect.signature(numeric_choose).parameters
    if "margins" in params and margins is not None:
        kwargs["margins"] = margins
    return numeric_choose(weights, settings, **kwargs)


# ------------------------------------------------------------------------------------------------
# the pipeline


def enclose_all(weights, *, method: str = "eft", progress=None) -> list:
    """Certified singular-value enclosures of every covered matrix, in canonical order."""
    from specbound.certified.factored import enclose

    out = []
    for mat in weights.matrices:
        out.append(enclose(mat, method=method))
        if progress is not None:
            progress.advance(1)
    return out


def _load_dataset(data):
    from specbound.data_file import DataSet, load_data

    if data is None or isinstance(data, DataSet):
        return data
    return load_data(data)


def certify(
    checkpoint: str | os.PathLike | None = None,
    settings=None,
    data=None,
    *,
    n: int | None = None,
    delta: float = 0.05,
    margin: float | None = None,
    empirical: float | None = None,
    samples: int | None = None,
    seed: int | None = None,
    num_heads: int | None = None,
    readout: str = "trained",
    plan=None,
    workers: int | None = None,
    show_progress: bool = False,
) -> CertifyResult:
    """Certify the bound of ``checkpoint`` (None: the embedded default), like ``specbound certify``.

    Empirical term, first that applies: ``data`` (a .npz path or DataSet: certified ramp loss, n =
    its size); ``empirical`` / ``settings.empirical`` (user-supplied, NOT certified; needs n);
    fresh ``samples`` (default 2000) of the model's recorded task drawn with ``seed`` (default 3);
    else none (only complexity + confidence are certified; needs n).  ``settings`` (a
    BoundSettings) replaces n/delta/margin/empirical/readout.
    """
    import time

    from flint import arb

    from specbound.certified.bound import certify_bound
    from specbound.certified.forward import certified_ramp_loss
    from specbound.certified.radii import power_ball
    from specbound.checkpoint import load_weights
    from specbound.plan import BoundSettings
    from specbound.progress import progress_bar

    clock = {}
    notes = {}
    t0 = time.perf_counter()
    weights = load_weights(checkpoint, num_heads=num_heads)
    dataset = _load_dataset(data)
    if settings is not None:
        n, delta, margin, empirical, readout = (settings.n, settings.delta, settings.margin,
                                                settings.empirical, settings.readout)
    source = None
    if dataset is not None:
        if empirical is not None:
            raise SpecboundError("give either a data file or an empirical loss, not both")
        if n is not None and n != dataset.n:
            raise SpecboundError(f"n = {n} but the data file has {dataset.n} samples")
        n = dataset.n
        src = str(getattr(dataset, "source", data))
        detail = {"path": src}
        if isinstance(data, (str, os.PathLike)):
            from specbound.checkpoint import file_sha256

            detail["sha256"] = file_sha256(Path(data))
        source = EmpiricalSource("data", True, detail)
    elif empirical is not None:
        if n is None:
            raise SpecboundError("an empirical loss needs the sample size: give --n")
        source = EmpiricalSource("user", False, {"value": float(empirical)})
    else:
        task = task_record(weights, checkpoint) if weights.layout == "specbound-analysis-v1" else None
        if task is not None and not (samples is not None and samples == 0):
            ns = DEFAULT_SAMPLES if samples is None else int(samples)
            if ns < 1:
                raise SpecboundError(f"--samples must be a positive integer, got {samples}")
            sd = DEFAULT_SEED if seed is None else int(seed)
            if n is not None and n != ns:
                raise SpecboundError(f"n = {n} but {ns} samples are drawn; give one of them")
            n = ns
            dataset = task_sample(task, ns, sd)
            source = EmpiricalSource("task", True, {"task": task, "seed": sd, "n": ns,
                                                   "generator": "numpy.random.default_rng(seed)"})
        else:
            if samples is not None:
                raise SpecboundError("this checkpoint records no task to draw samples from; give --data")
            if n is None:
                raise SpecboundError("no data and no empirical loss: give --n for the complexity part")
            source = EmpiricalSource("none", False, {})
    if settings is None:
        settings = BoundSettings(n=int(n), delta=delta, margin=margin, empirical=empirical, readout=readout)
    elif settings.n != n:
        settings = replace(settings, n=int(n))
    clock["load"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    with progress_bar(len(weights.matrices), "enclosing singular values", enabled=show_progress) as bar:
        encs = enclose_all(weights, progress=bar)
    clock["enclose"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    if plan is None:
        margins = float_margins(weights, dataset) if settings.margin is None else None
        if settings.margin is None and margins is None:
            # nothing to choose the margin from: rho = 1 (stated in the output)
            settings = replace(settings, margin=1.0)
            notes["margin"] = "no margins to choose from: margin rho = 1 assumed"
        plan = choose_plan(weights, settings, encs, margins)
    clock["plan"] = time.perf_counter() - t2

    t3 = time.perf_counter()
    emp_ball = None
    if source.kind in ("data", "task"):
        rho = power_ball(Fraction(settings.beta_rho), plan.k_rho)
        workers = workers if workers is not None else max(1, min(2, os.cpu_count() or 1))
        with progress_bar(dataset.n, "certified forward passes", enabled=show_progress) as bar:
            done = [0]

            def advance(k):
                bar.advance(k - done[0])
                done[0] = k

            ramp = certified_ramp_loss(weights, dataset, rho, workers=workers, progress=advance)
        emp_ball = ramp.upper
        source = replace(source, ramp=ramp)
    elif source.kind == "user":
        emp_ball = arb(float(empirical))
    clock["empirical"] = time.perf_counter() - t3

    t4 = time.perf_counter()
    result = certify_bound(weights, settings, plan, encs, emp_ball)
    if notes:
        result = replace(result, notes={**result.notes, **notes})
    clock["bound"] = time.perf_counter() - t4
    ckpt = {"path": "<embedded default>" if checkpoint is None else str(checkpoint),
            "embedded_default": checkpoint is None, "sha256": weights.sha256, "layout": weights.layout}
    return CertifyResult(bound=result, weights=weights, checkpoint=ckpt, source=source,
                         enclosure_methods=tuple(e.method for e in encs), seconds=clock,
                         enclosures=tuple(encs))
