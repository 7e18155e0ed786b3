"""One experiment: train a model, measure its test error, certify its bound (:func:`run_experiment`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
import math
from pathlib import Path
import tempfile
import time

import numpy as np
import torch

from specbound.certified.arb import float_lower as lo
from specbound.certified.arb import float_upper as up
from specbound.checkpoint import load_weights
from specbound.data_file import dataset_from_arrays
from specbound.experiments.binomial import clopper_pearson
from specbound.experiments.config import ExperimentConfig
from specbound.numeric.proxies import paper_proxies
from specbound.pipeline import certify
from specbound.progress import format_seconds, training_progress
from specbound.scope import is_vacuous, training_sample_assumption
from specbound.tasks import Task
from specbound.vocabulary import LS_VARIANTS, RESIDUAL_VARIANTS
from specbound.train import fresh_sample, train


# --------------------------------------------------------------------------- one experiment


def weights_of(model) -> "AnalysisWeights":  # noqa: F821
    """The :class:`~specbound.matrices.AnalysisWeights` of a trained model.

    Goes through the checkpoint file format on purpose: what is certified is exactly what
    ``specbound certify FILE`` would certify for the saved model (one adapter, one source of truth).
    """

    with tempfile.TemporaryDirectory(prefix="specbound-exp-") as folder:
        path = Path(folder) / "model.safetensors"
        model.save(path)
        return load_weights(path)


@dataclass(frozen=True)
class ObservedError:
    """Observed 0-1 error on a fresh sample with its exact confidence interval."""
    n: int
    errors: int
    rate: float
    lower: float
    upper: float
    confidence: float
    seed: int

    def as_dict(self) -> dict:
        return asdict(self)


def observed_error(model, tokens: np.ndarray, labels: np.ndarray, *, confidence: float = 0.95, seed: int = -1) -> ObservedError:
    """0-1 error of ``model`` (a zero output counts as an error, as in the theorem's ``y f <= 0``)
    on the given sample, with the Clopper-Pearson interval (:func:`clopper_pearson`)."""
    n = int(len(labels))
    errors = int(np.count_nonzero(float_margins(model, tokens, labels) <= 0))
    lo, hi = clopper_pearson(errors, n, confidence)
    return ObservedError(n=n, errors=errors, rate=errors / n, lower=lo, upper=hi, confidence=confidence, seed=seed)


def heldout_bound(model, task: Task, n: int, *, delta: float = 0.05, seed: int = 2) -> ObservedError:
    """The test-set bound an auditor with ``n`` *fresh* examples could compute instead of a
    generalization bound: the one-sided ``1 - delta`` Clopper-Pearson upper limit of the 0-1 error
    on ``n`` fresh i.i.d. samples (drawn from ``seed``).  It is the upper end of the two-sided
    ``1 - 2 delta`` interval (:func:`clopper_pearson`), stored with ``confidence = 1 - 2 delta``."""
    tokens, labels = fresh_sample(task, int(n), seed)
    return observed_error(model, tokens, labels, confidence=1.0 - 2.0 * delta, seed=seed)


def exact_risk(model, task: Task) -> float | None:
    """The exact 0-1 risk ``P(y f(X) <= 0)`` by enumerating every input (float64 forward pass, every
    input has probability ``1 / task.input_count``), or None when the task is not enumerable."""
    if not task.enumerable:
        return None
    tokens, labels = task.all_inputs()
    return float(np.count_nonzero(float_margins(model, tokens, labels) <= 0)) / len(labels)


@dataclass(frozen=True)
class ExperimentResult:
    """What :func:`run_experiment` measured (JSON-able through :meth:`as_dict`)."""
    config: ExperimentConfig
    training: dict
    test: ObservedError
    bound: dict
    proxies: dict
    seconds: dict
    model: object = field(default=None, repr=False, compare=False)  #: the trained AnalysisTransformer
    heldout: ObservedError | None = None  #: :func:`heldout_bound` with as many fresh examples as S
    exact: float | None = None  #: :func:`exact_risk` (None when the task is not enumerable)

    @property
    def ratio(self) -> float:
        """bound / observed test error (``inf`` when no test error was observed)."""
        value = self.bound.get("value", math.nan)
        return value / self.test.rate if self.test.rate > 0 else math.inf

    def as_dict(self) -> dict:
        return {
            "config": self.config.as_dict(),
            "training": self.training,
            "test": self.test.as_dict(),
            "bound": self.bound,
            # null (not Infinity/NaN, which strict JSON lacks) when no error was observed
            "bound_over_test_error": _finite_or_none(self.ratio),
            "bound_over_test_upper": _finite_or_none(self.bound.get("value", math.nan) / self.test.upper),
            "proxies": self.proxies,
            "seconds": self.seconds,
            "heldout_same_n": None if self.heldout is None else {
                **self.heldout.as_dict(), "one_sided_level": 1.0 - self.config.delta,
                "note": "one-sided 1-delta Clopper-Pearson upper limit on n fresh samples (a test-set bound)"},
            "exact_risk": self.exact,
        }


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def proxies_of(weights) -> dict:
    """The paper's two proxies (float64, *not* bounds) as ``{"paper_ours": ..., "paper_edelman": ...}``."""
    if weights.variant in LS_VARIANTS or weights.variant in RESIDUAL_VARIANTS:  # the paper's networks are neither
        return {"paper_ours": None, "paper_edelman": None,
                "note": f"the paper proxies are defined for the plain matrix kinds, not the {weights.variant} model"}
    result = paper_proxies(weights)
    return {"paper_ours": result.ours, "paper_edelman": result.edelman,
            "note": "paper proxies (docs/design.md section 6), not bounds"}


def run_experiment(
    config: ExperimentConfig,
    *,
    model=None,
    certify_bound: bool = True,
    progress: Callable[[str], None] | None = None,
    keep_model: bool = True,
) -> ExperimentResult:
    """Train (unless ``model`` is given), then measure test error, proxies and the certified bound.

    Returns an :class:`ExperimentResult`.  Guarantee (the theorem, proofs_notes/theory.md section 7): with
    probability ``>= 1 - delta`` over the bound sample, ``result.bound["value"]`` is at least the
    true error ``P(y f(X) <= 0)``; the observed test error estimates the latter.
    """
    say = progress or (lambda _msg: None)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    if model is None:
        say(f"training {config.train.num_layers} layer(s), width {config.train.width}, {config.train.steps} steps")
        model, record = train_reporting(config.train, progress, warn=False)  # the result says it
    else:
        record = {"config": asdict(config.train), "note": "model supplied by the caller"}
    seconds["train"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    tokens, labels = config.test_sample()
    observed = observed_error(model, tokens, labels, confidence=config.confidence, seed=config.test_seed)
    task = config.train.make_task()
    heldout = heldout_bound(model, task, config.bound_n, delta=config.delta, seed=config.test_seed)
    exact = exact_risk(model, task)
    seconds["test"] = time.perf_counter() - t0

    weights = weights_of(model)
    t0 = time.perf_counter()
    proxies = proxies_of(weights)
    seconds["proxies"] = time.perf_counter() - t0

    bound: dict = {}
    if certify_bound:
        t0 = time.perf_counter()
        say(f"certified bound on n = {config.bound_n} samples ({config.sample})")
        bound = certified_bound(model, config)
        seconds["bound"] = time.perf_counter() - t0
    return ExperimentResult(config=config, training=record, test=observed, bound=bound,
                            proxies=proxies, seconds=seconds, model=model if keep_model else None,
                            heldout=heldout, exact=exact)


def train_reporting(config, progress: Callable[[str], None] | None = None, *, prefix: str = "",
                    warn: bool = True):
    """:func:`specbound.train.train` with its progress reported through ``progress`` (a bar on a
    terminal, else a few lines), then one summary line, and (``warn``) the near-chance warning if
    training ended there (:func:`specbound.train.chance_warning`; it is in the record either way)."""
    t0 = time.perf_counter()
    with training_progress(config.steps, progress) as report:
        model, record = train(config, progress=report)
    if progress is not None:
        ev = record["train"]
        progress(f"{prefix}trained in {format_seconds(time.perf_counter() - t0)}: final batch loss "
                 f"{record['final_batch_loss']:.4g}, train accuracy {ev['accuracy']:.4f}, median margin "
                 f"{ev['margin_median']:.3g}")
        if warn and "warning" in record:
            progress(f"{prefix}WARNING: {record['warning']}")
    return model, record


# --------------------------------------------------------------------------- the bound


def float_margins(model, tokens: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """float64 margins ``y f(X)`` (uncertified; used only to *choose* the margin rho)."""
    with torch.no_grad():
        out = torch.cat([model(torch.from_numpy(tokens[i:i + 8192])) for i in range(0, len(tokens), 8192)])
    return out.numpy() * labels


def certified_bound(model, config: ExperimentConfig, *, plan=None) -> dict:
    """The certified bound of ``model`` on the bound sample of ``config`` (see the module
    docstring for which sample), via :func:`specbound.pipeline.certify`.

    The model is saved to a temporary checkpoint and certified from the file, so the numbers are
    those ``specbound certify`` gives for the saved model.  The empirical term is the certified
    ramp loss on the bound sample (so its ``n`` is the complexity term's ``n``).  Returns a
    JSON-able dict (:func:`bound_summary`).
    """

    tokens, labels = config.bound_sample()
    data = dataset_from_arrays(labels, tokens=tokens, source=f"bound sample ({config.sample}, n={len(labels)})")
    with tempfile.TemporaryDirectory(prefix="specbound-exp-") as folder:
        path = Path(folder) / "model.safetensors"
        model.save(path)
        result = certify(path, data=data, delta=config.delta, margin=config.margin,
                         workers=config.workers, plan=plan)
    out = bound_summary(result.bound)
    ramp = result.source.ramp
    out["empirical_sample"] = {
        "kind": config.sample, "n": int(data.n),
        "seed": config.bound_seed if config.sample == "fresh" else config.train.data_seed,
        "certified_lower": float_lower(ramp.lower), "certified_upper": float_upper(ramp.upper),
        "undecided": int(ramp.undecided), "certainly_misclassified": int(ramp.errors01),
        "seconds": float(ramp.seconds), "per_sample_ms": 1e3 * float(ramp.per_sample_seconds),
    }
    if config.sample == "train":  # what a bound on the training sample rests on, in every output
        out["empirical_sample"]["assumption"] = training_sample_assumption()
    out["pipeline_seconds"] = dict(result.seconds)
    return out


def float_upper(x) -> float:

    return up(x)


def float_lower(x) -> float:

    return lo(x)


PARTS = ("empirical", "complexity", "confidence", "SS", "DD", "ss_closed", "ss_exact", "Lambda", "rho", "B_w",
         "readout_norm")


def bound_summary(cb) -> dict:
    """A JSON-able view of a :class:`specbound.certified.bound.CertifiedBound`.

    Every number is an *upper* endpoint of its certified ball rounded up to float64 (``rho`` is an
    exact grid point), except ``value_lower`` (lower endpoint of the bound's ball).  ``dominant``
    names the largest of the three additive parts (empirical, 2 min(SS, DD), confidence) of the
    Rademacher route; ``value`` is the reported bound, the smaller of the routes (``route`` names it,
    ``routes`` gives each route's bound and the Occam route's parts).
    """
    balls = cb.balls()
    parts = {name: float_upper(balls[name]) for name in PARTS if name in balls}
    additive = {k: parts[k] for k in ("empirical", "complexity", "confidence") if k in parts}
    matrices = [
        {"name": m.name, "type": m.kind, "layer": m.layer, "head": m.head, "p": float(m.p),
         "spectral": float_upper(m.spectral_norm), "proven_rank": int(m.proven_rank),
         "kappa": float_upper(m.kappa), "contribution": float_upper(m.contribution)}
        for m in cb.matrices
    ]
    return {
        "value": float_upper(cb.upper) if cb.bound is not None else math.nan,
        "value_lower": float_lower(cb.bound.lower()) if cb.bound is not None else math.nan,
        "certified": cb.bound is not None,
        "vacuous": None if cb.bound is None else bool(is_vacuous(float_upper(cb.upper))),
        "n": int(cb.settings.n),
        "delta": float(cb.delta),
        "complexity_route": "single-scale" if float_upper(cb.SS) <= float_lower(cb.DD) else (
            "dudley" if float_upper(cb.DD) <= float_lower(cb.SS) else "tie"),
        "dominant": max(additive, key=additive.get) if additive else None,
        "parts": parts,
        "matrices": matrices,
        "route": cb.route,
        "routes": routes_summary(cb),
    }


def routes_summary(cb) -> dict:
    """Each route's bound (upper endpoints) and the Occam route's parts (margin, K^, H, C)."""
    out = {"rademacher": None if cb.rademacher is None else float_upper(cb.rademacher)}
    o = cb.occam
    if o is not None:
        out["occam"] = None if o.bound is None else float_upper(o.bound)
        out["occam_parts"] = {"gamma": float_upper(o.gamma), "k_gamma": o.k_gamma, "count": o.count,
                              "H": float_upper(o.H), "Lambda": float_upper(o.Lambda), "C": float_upper(o.mass)}
    return out
