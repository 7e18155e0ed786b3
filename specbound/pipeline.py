"""The Python API behind ``specbound certify``: checkpoint -> certified bound.

:func:`certify` mirrors the command line.  Steps: load the weights; enclose every covered matrix's
singular values (:mod:`specbound.certified`); choose a plan (the float planner
``specbound.numeric.planner.choose_plan``); certify the empirical ramp loss at the plan's margin
(the source resolved by :func:`specbound.empirical.resolve`: data file, fresh samples of the model's
recorded task, or the user's number -- flagged as not certified); evaluate the theorem in Arb
(:func:`specbound.certified.bound.certify_bound`).

Floats only *choose* (proofs_notes/theory.md sections 6-7): whatever the plan, the returned bound is valid.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from fractions import Fraction

import numpy as np
import torch

from specbound.adapters import capabilities, detect
from specbound.certified.bound import certify_bound
from specbound.certified.factored import enclose
from specbound.certified.radii import power_ball
from specbound.checkpoint import load_weights, open_checkpoint
from specbound.empirical import (  # noqa: F401  (task_record/task_sample/EmpiricalSource: public here too)
    DEFAULT_SAMPLES, DEFAULT_SEED, EmpiricalSource, empirical_ball, resolve, task_record, task_sample,
)
from specbound.model import AnalysisTransformer
from specbound.numeric import planner
from specbound.plan import BoundSettings
from specbound.progress import progress_bar
from specbound.errors import SpecboundError
from specbound.vocabulary import CAPABILITY_CERTIFY, CAPABILITY_FLOAT_FORWARD, READOUT_TRAINED

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
# plans


def float_margins(weights, data) -> np.ndarray | None:
    """Float64 margins y f(X) of an own-format model on token data (for choosing rho only)."""
    if data is None or data.tokens is None or CAPABILITY_FLOAT_FORWARD not in capabilities(weights.layout):
        return None
    path = weights.extra.get("weights_file")
    if not path:
        return None
    model = AnalysisTransformer.load(path)
    with torch.no_grad():
        f = model(torch.from_numpy(np.asarray(data.tokens))).numpy()
    return f * np.asarray(data.labels, dtype=np.float64)


def refuse_outside_theorem(checkpoint=None) -> None:
    """A one-line SpecboundError unless the adapter the registry detects for ``checkpoint`` (None:
    the embedded default) declares ``certify``; it names the families and the first component of
    the model outside the theorem.  Reads the names and config only, no tensor values."""
    if checkpoint is None:
        return
    spec = detect(open_checkpoint(checkpoint)).SPEC
    if CAPABILITY_CERTIFY in spec.capabilities:
        return
    raise SpecboundError(
        f"{checkpoint}: certify is not available for this {spec.layout}-style model "
        f"({', '.join(spec.families)}): {spec.outside_theorem or 'outside the theorem'}; "
        f"spectra, proxies and inspect work"
    )


def choose_plan(weights, settings, enclosures, margins=None):
    """The float planner's plan (:func:`specbound.numeric.planner.choose_plan`, which reads the
    enclosures' midpoints instead of a second float SVD)."""
    return planner.choose_plan(weights, settings, enclosures, margins)


# ------------------------------------------------------------------------------------------------
# the pipeline


def enclose_all(weights, *, method: str = "eft", progress=None) -> list:
    """Certified singular-value enclosures of every covered matrix, in canonical order."""
    out = []
    for mat in weights.matrices:
        out.append(enclose(mat, method=method))
        if progress is not None:
            progress.advance(1)
    return out


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
    readout: str = READOUT_TRAINED,
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
    clock = {}
    notes = {}
    t0 = time.perf_counter()
    refuse_outside_theorem(checkpoint)  # from the header: before any tensor is read
    weights = load_weights(checkpoint, num_heads=num_heads)
    if settings is not None:
        n, delta, margin, empirical, readout = (settings.n, settings.delta, settings.margin,
                                                settings.empirical, settings.readout)
    source, dataset, n = resolve(weights, checkpoint, data, n=n, empirical=empirical, samples=samples,
                                 seed=seed)
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
    rho = power_ball(Fraction(settings.beta_rho), plan.k_rho)
    with progress_bar(dataset.n if dataset is not None else 0, "certified forward passes",
                      enabled=show_progress and dataset is not None) as bar:
        done = [0]

        def advance(k):
            bar.advance(k - done[0])
            done[0] = k

        emp_ball, ramp = empirical_ball(weights, source, dataset, rho, workers=workers, progress=advance)
    if ramp is not None:
        source = replace(source, ramp=ramp)
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
