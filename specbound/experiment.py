"""Reference experiments: the certified bound against the observed error of trained models.

One experiment (:func:`run_experiment`) trains an analysis-model Transformer on a synthetic task
(:mod:`specbound.train`, deterministic, CPU), then measures

* the **test error** on ``n_test`` fresh i.i.d. samples, with an exact Clopper-Pearson interval
  (:func:`clopper_pearson`);
* the **certified empirical ramp loss** on the *bound sample* ``S`` of size ``n``
  (:func:`specbound.certified.forward.certified_ramp_loss`);
* the **certified bound** of THEORY.md section 7 with that same ``n``
  (:func:`specbound.pipeline.certify`), and its parts.

Which sample is ``S``.  ``sample="train"`` uses the training sample (``n = n_train``).
``sample="fresh"`` draws ``n`` new i.i.d. samples from the task, independent of training and of
the test sample.  Both are valid: the main theorem holds with probability ``>= 1 - delta`` over
the draw of ``S``, *simultaneously for all weights* (THEORY.md section 6-7), so weights fitted on
another sample are covered too, and ``n`` may exceed the training set.  The empirical term and the
complexity term always use the same ``S`` and the same ``n``.

The depth/width study (:func:`scaling_study`) trains a grid of models, records the paper's
proxies (:mod:`specbound.numeric.proxies`, *not* bounds), our bound and the test error, and fits
growth exponents ``value ~ L^a N^b`` by least squares on the logarithms (:func:`fit_exponents`).
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from specbound.errors import SpecboundError
from specbound.train import TrainConfig, fresh_sample, train, training_sample

SAMPLES = ("fresh", "train")
BOUND_SAMPLE_SEED = 3
"""Seed of the fresh bound sample ``S`` (its stream differs from the test sample's, seed 2)."""
TEST_SEED = 2


class ExperimentError(SpecboundError):
    """A bad experiment request (sizes, confidence levels, an unknown sample kind)."""


# --------------------------------------------------------------------------- Clopper-Pearson


def binomial_tail_upper(k: int, m: int, q) -> "mpmath.mpf":  # noqa: F821
    """``P(X >= k)`` for ``X ~ Binomial(m, q)``, to mpmath's working precision.

    Uses the identity ``P(X >= k) = I_q(k, m - k + 1)`` (regularised incomplete beta function)
    and evaluates ``I`` by :func:`regularized_beta`; ``k <= 0`` gives 1 and ``k > m`` gives 0.
    """
    import mpmath

    if k <= 0:
        return mpmath.mpf(1)
    if k > m:
        return mpmath.mpf(0)
    return regularized_beta(k, m - k + 1, q)


def regularized_beta(a: int, b: int, x) -> "mpmath.mpf":  # noqa: F821
    """``I_x(a, b)`` for integers ``a, b >= 1`` and ``0 <= x <= 1``, at mpmath's working precision.

    The continued fraction of DLMF 8.17.22 (evaluated by the modified Lentz method), used where it
    converges fast, ``x < (a + 1)/(a + b + 2)``, and through ``I_x(a, b) = 1 - I_{1-x}(b, a)``
    otherwise; it needs ``O(sqrt(max(a, b)))`` terms.  (``mpmath.betainc``'s hypergeometric series
    fails to converge for counts of ~10^4 near ``x = 1/2``.)
    """
    import mpmath

    x = mpmath.mpf(x)
    if x <= 0:
        return mpmath.mpf(0)
    if x >= 1:
        return mpmath.mpf(1)
    # closed forms at b = 1 or a = 1 (P(X >= m) and P(X >= 1) of a binomial)
    if b == 1:
        return x**a
    if a == 1:
        return -mpmath.expm1(b * mpmath.log1p(-x))
    if x > mpmath.mpf(a + 1) / (a + b + 2):
        return 1 - regularized_beta(b, a, 1 - x)
    log_front = (a * mpmath.log(x) + b * mpmath.log1p(-x)
                 - mpmath.log(a) - (mpmath.loggamma(a) + mpmath.loggamma(b) - mpmath.loggamma(a + b)))
    tiny = mpmath.mpf(10) ** (-3 * mpmath.mp.dps)
    eps = mpmath.mpf(10) ** (-mpmath.mp.dps)

    def guard(t):
        return tiny if abs(t) < tiny else t

    # modified Lentz: h = 1/(1 + d_1/(1 + d_2/(1 + ...))), the terms d_i in pairs (even, odd)
    c = mpmath.mpf(1)
    d = 1 / guard(1 - (a + b) * x / (a + 1))  # d_1 = -(a+b) x / (a+1)
    h = d
    for j in range(1, 10 * int(math.isqrt(max(a, b))) + 100):
        even = j * (b - j) * x / ((a + 2 * j - 1) * (a + 2 * j))
        d = 1 / guard(1 + even * d)
        c = guard(1 + even / c)
        h *= d * c
        odd = -(a + j) * (a + b + j) * x / ((a + 2 * j) * (a + 2 * j + 1))
        d = 1 / guard(1 + odd * d)
        c = guard(1 + odd / c)
        step = d * c
        h *= step
        if abs(step - 1) < eps:
            return mpmath.exp(log_front) * h
    raise ExperimentError(f"incomplete beta I_x({a}, {b}) did not converge at x = {x}")


def _bisect(increasing: Callable, target, lo: float, hi: float, iterations: int) -> tuple[float, float]:
    """Bracket ``[a, b]`` of the root of ``increasing(x) = target`` with ``increasing(a) < target <=
    increasing(b)``; both ends are float64 numbers (the midpoint is rounded to float), stopped
    when they are a few ulps apart."""
    a, b = lo, hi
    for _ in range(iterations):
        mid = 0.5 * (a + b)
        if mid <= a or mid >= b or b - a <= 4 * 2.0**-53 * b:  # a few ulps apart: done
            break
        if increasing(mid) < target:
            a = mid
        else:
            b = mid
    return a, b


def _bracket(increasing: Callable, target, guess: tuple[float, float]) -> tuple[float, float]:
    """``guess`` if ``increasing(lo) < target <= increasing(hi)`` there, else the whole ``[0, 1]``."""
    lo, hi = guess
    if lo > 0.0 and not increasing(lo) < target:
        lo = 0.0
    if hi < 1.0 and not increasing(hi) >= target:
        hi = 1.0
    return lo, hi


def clopper_pearson(errors: int, m: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) two-sided interval for a binomial proportion.

    For ``errors`` failures out of ``m`` trials, returns ``(lo, hi)`` with
    ``P_lo(X >= errors) <= (1 - confidence)/2`` (``lo = 0`` when ``errors = 0``) and
    ``P_hi(X <= errors) <= (1 - confidence)/2`` (``hi = 1`` when ``errors = m``).  Each end is found
    by bisection on the binomial tail (:func:`binomial_tail_upper`, 30 digits) and rounded
    *outwards* to float64, so the returned interval contains the exact one.
    """
    import mpmath

    if not (isinstance(m, (int, np.integer)) and isinstance(errors, (int, np.integer))):
        raise ExperimentError("clopper_pearson: errors and m must be integers")
    if m < 1 or not 0 <= errors <= m:
        raise ExperimentError(f"clopper_pearson: need m >= 1 and 0 <= errors <= m, got {errors}/{m}")
    if not 0 < confidence < 1:
        raise ExperimentError(f"clopper_pearson: confidence must lie in (0, 1), got {confidence}")
    with mpmath.workdps(30):
        tail = (1 - mpmath.mpf(repr(float(confidence)))) / 2  # the decimal the user typed
        # Start from a wide normal-approximation bracket (checked below, else [0, 1]): the far-away
        # bisection steps are the expensive ones for the continued fraction.
        rate = errors / m
        spread = 12 * math.sqrt(rate * (1 - rate) / m) + 12 / m
        guess = (max(0.0, rate - spread), min(1.0, rate + spread))
        # P_q(X >= k) increases with q; the lower end solves it = tail.
        lo = 0.0
        if errors > 0:
            f = lambda q: binomial_tail_upper(errors, m, mpmath.mpf(q))  # noqa: E731
            lo, _ = _bisect(f, tail, *_bracket(f, tail, guess), 400)
        # P_q(X <= k) = 1 - P_q(X >= k+1) decreases with q; the upper end solves it = tail.
        hi = 1.0
        if errors < m:
            g = lambda q: binomial_tail_upper(errors + 1, m, mpmath.mpf(q))  # noqa: E731
            _, hi = _bisect(g, 1 - tail, *_bracket(g, 1 - tail, guess), 400)
    return lo, hi


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything that determines one experiment (training, the bound sample, the test sample).

    ``n`` is the theorem's sample size: the size of the bound sample ``S`` (``sample="fresh"``:
    ``n`` new samples drawn from ``bound_seed``; ``sample="train"``: the training sample, and ``n``
    must be ``None`` or ``n_train``).  ``margin=None`` lets the pipeline choose ``rho``; ``delta``
    is the bound's failure probability, ``confidence`` the Clopper-Pearson level.
    """

    train: TrainConfig = field(default_factory=TrainConfig)
    n: int | None = None
    sample: str = "fresh"
    n_test: int = 10_000
    margin: float | None = None
    delta: float = 0.05
    confidence: float = 0.95
    bound_seed: int = BOUND_SAMPLE_SEED
    test_seed: int = TEST_SEED
    workers: int = 1

    def __post_init__(self) -> None:
        if self.sample not in SAMPLES:
            raise ExperimentError(f"experiment: unknown sample {self.sample!r} (use one of {SAMPLES})")
        if self.sample == "train" and self.n not in (None, self.train.n_train):
            raise ExperimentError(
                f"experiment: sample='train' fixes n = n_train = {self.train.n_train}, got n = {self.n}")
        if self.n is not None and self.n < 1:
            raise ExperimentError(f"experiment: n must be >= 1, got {self.n}")
        if self.n_test < 1:
            raise ExperimentError(f"experiment: n_test must be >= 1, got {self.n_test}")
        if self.margin is not None and not (self.margin > 0 and math.isfinite(self.margin)):
            raise ExperimentError(f"experiment: the margin must be a positive finite number, got {self.margin}")
        if not 0 < self.delta < 1:
            raise ExperimentError(f"experiment: delta must lie in (0, 1), got {self.delta}")
        if not 0 < self.confidence < 1:
            raise ExperimentError(f"experiment: confidence must lie in (0, 1), got {self.confidence}")
        if self.workers < 1:
            raise ExperimentError(f"experiment: workers must be >= 1, got {self.workers}")
        # the task and the architecture are checked now, before any training starts
        self.train.architecture(self.train.make_task())

    @property
    def bound_n(self) -> int:
        """The theorem's ``n`` (the size of the bound sample ``S``)."""
        if self.sample == "train":
            return self.train.n_train
        return self.n if self.n is not None else self.train.n_train

    def bound_sample(self) -> tuple[np.ndarray, np.ndarray]:
        """The bound sample ``S`` (tokens, labels): the training sample or fresh i.i.d. draws."""
        if self.sample == "train":
            return training_sample(self.train)
        return fresh_sample(self.train.make_task(), self.bound_n, self.bound_seed)

    def test_sample(self) -> tuple[np.ndarray, np.ndarray]:
        return fresh_sample(self.train.make_task(), self.n_test, self.test_seed)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["n"] = self.bound_n
        return out


# --------------------------------------------------------------------------- one experiment


def weights_of(model) -> "AnalysisWeights":  # noqa: F821
    """The :class:`~specbound.matrices.AnalysisWeights` of a trained model.

    Goes through the checkpoint file format on purpose: what is certified is exactly what
    ``specbound certify FILE`` would certify for the saved model (one adapter, one source of truth).
    """
    from specbound.checkpoint import load_weights

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
        }


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def proxies_of(weights) -> dict:
    """The paper's two proxies (float64, *not* bounds) as ``{"paper_ours": ..., "paper_edelman": ...}``."""
    from specbound.numeric.proxies import paper_proxies

    result = paper_proxies(weights)
    return {"paper_ours": result.ours, "paper_edelman": result.edelman,
            "note": "paper proxies (SPEC section 6), not bounds"}


def run_experiment(
    config: ExperimentConfig,
    *,
    model=None,
    certify_bound: bool = True,
    progress: Callable[[str], None] | None = None,
    keep_model: bool = True,
) -> ExperimentResult:
    """Train (unless ``model`` is given), then measure test error, proxies and the certified bound.

    Returns an :class:`ExperimentResult`.  Guarantee (the theorem, THEORY.md section 7): with
    probability ``>= 1 - delta`` over the bound sample, ``result.bound["value"]`` is at least the
    true error ``P(y f(X) <= 0)``; the observed test error estimates the latter.
    """
    say = progress or (lambda _msg: None)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    if model is None:
        say(f"training {config.train.num_layers} layer(s), width {config.train.width}, {config.train.steps} steps")
        model, record = train(config.train)
    else:
        record = {"config": asdict(config.train), "note": "model supplied by the caller"}
    seconds["train"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    tokens, labels = config.test_sample()
    observed = observed_error(model, tokens, labels, confidence=config.confidence, seed=config.test_seed)
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
                            proxies=proxies, seconds=seconds, model=model if keep_model else None)


# --------------------------------------------------------------------------- the bound


def float_margins(model, tokens: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """float64 margins ``y f(X)`` (uncertified; used only to *choose* the margin rho)."""
    import torch

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
    from specbound.data_file import dataset_from_arrays
    from specbound.pipeline import certify

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
    out["pipeline_seconds"] = dict(result.seconds)
    return out


def float_upper(x) -> float:
    from specbound.certified.arb import float_upper as up

    return up(x)


def float_lower(x) -> float:
    from specbound.certified.arb import float_lower as lo

    return lo(x)


PARTS = ("empirical", "complexity", "confidence", "SS", "DD", "ss_closed", "ss_exact", "Lambda", "rho", "B_w",
         "readout_norm")


def bound_summary(cb) -> dict:
    """A JSON-able view of a :class:`specbound.certified.bound.CertifiedBound`.

    Every number is an *upper* endpoint of its certified ball rounded up to float64 (``rho`` is an
    exact grid point), except ``value_lower`` (lower endpoint of the bound's ball).  ``dominant``
    names the largest of the three additive parts (empirical, 2 min(SS, DD), confidence).
    """
    balls = cb.balls()
    parts = {name: float_upper(balls[name]) for name in PARTS if name in balls}
    additive = {k: parts[k] for k in ("empirical", "complexity", "confidence") if k in parts}
    matrices = [
        {"name": m.name, "type": m.type, "layer": m.layer, "head": m.head, "p": float(m.p),
         "spectral": float_upper(m.spectral_norm), "proven_rank": int(m.proven_rank),
         "kappa": float_upper(m.kappa), "contribution": float_upper(m.contribution)}
        for m in cb.matrices
    ]
    return {
        "value": float_upper(cb.upper) if cb.bound is not None else math.nan,
        "value_lower": float_lower(cb.bound.lower()) if cb.bound is not None else math.nan,
        "certified": cb.bound is not None,
        "n": int(cb.settings.n),
        "delta": float(cb.delta),
        "complexity_route": "single-scale" if float_upper(cb.SS) <= float_lower(cb.DD) else (
            "dudley" if float_upper(cb.DD) <= float_lower(cb.SS) else "tie"),
        "dominant": max(additive, key=additive.get) if additive else None,
        "parts": parts,
        "matrices": matrices,
    }


# --------------------------------------------------------------------------- scaling study


def fit_exponents(depths: Sequence[float], widths: Sequence[float], values: Sequence[float]) -> dict:
    """Least-squares fit ``log v = c + a log L + b log N`` over the points with finite ``v > 0``.

    Returns ``{"a_L": a, "b_N": b, "c": c, "points": k, "rms": residual RMS in log}``; with fewer
    than 3 usable points, or when the design is singular, ``a_L``/``b_N`` are ``nan``.
    """
    L = np.asarray(depths, dtype=np.float64)
    N = np.asarray(widths, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(v) & (v > 0)
    k = int(keep.sum())
    out = {"a_L": math.nan, "b_N": math.nan, "c": math.nan, "points": k, "rms": math.nan}
    if k < 3:
        return out
    design = np.column_stack([np.ones(k), np.log(L[keep]), np.log(N[keep])])
    if np.linalg.matrix_rank(design) < 3:
        return out
    coef, *_ = np.linalg.lstsq(design, np.log(v[keep]), rcond=None)
    resid = np.log(v[keep]) - design @ coef
    out.update({"c": float(coef[0]), "a_L": float(coef[1]), "b_N": float(coef[2]),
                "rms": float(np.sqrt(np.mean(resid ** 2)))})
    return out


@dataclass(frozen=True)
class ScalingConfig:
    """The depth/width grid of :func:`scaling_study`.

    Every model uses ``base`` (task, optimiser, steps, regulariser, seeds) with ``num_layers = L``,
    ``width = N``, ``num_heads = heads``, ``head_dim = N // (2 heads)`` and ``ff_dim = 2 N`` (the
    embedded default's proportions).  The bound sample is the training sample (``n = n_train``).
    ``bound="numeric"`` evaluates the fast float bound (``specbound.numeric.bound``, uncertified,
    empirical term from float64 margins); ``"certified"`` runs the certified pipeline per model
    (slow for wide/deep models: the certified forward pass dominates).
    """

    depths: tuple[int, ...] = (1, 2, 4)
    widths: tuple[int, ...] = (16, 32, 64)
    heads: int = 2
    base: TrainConfig = field(default_factory=lambda: TrainConfig(steps=400, reg=1e-3, reg_kind="schatten"))
    n_test: int = 10_000
    test_seed: int = TEST_SEED
    delta: float = 0.05
    bound: str = "numeric"

    def __post_init__(self) -> None:
        if not self.depths or not self.widths or min(self.depths) < 1 or min(self.widths) < 1:
            raise ExperimentError("scaling: depths and widths must be non-empty lists of positive integers")
        if self.bound not in ("numeric", "certified"):
            raise ExperimentError(f"scaling: bound must be 'numeric' or 'certified', got {self.bound!r}")
        if any(w < 2 * self.heads for w in self.widths):
            raise ExperimentError(f"scaling: every width must be >= 2 * heads = {2 * self.heads}")

    def train_config(self, depth: int, width: int) -> TrainConfig:
        return replace(self.base, num_layers=int(depth), width=int(width), num_heads=self.heads,
                       head_dim=max(1, int(width) // (2 * self.heads)), ff_dim=2 * int(width))


def numeric_bound(model, tokens: np.ndarray, labels: np.ndarray, *, delta: float = 0.05):
    """The fast float bound (:func:`specbound.numeric.bound.evaluate`, uncertified) of ``model`` with
    the bound sample ``(tokens, labels)``: ``n = len(labels)``, empirical term from float margins,
    plan (p, margin, scales) from the float planner."""
    from specbound.numeric.bound import evaluate as evaluate_bound
    from specbound.plan import BoundSettings

    weights = weights_of(model)
    settings = BoundSettings(n=int(len(labels)), delta=delta)
    return weights, evaluate_bound(weights, settings, margins=float_margins(model, tokens, labels))


def _numeric_row(nb) -> dict:
    return {"bound": nb.bound, "empirical": nb.empirical, "complexity_ss": 2.0 * nb.ss,
            "complexity_dd": 2.0 * nb.dd, "confidence": nb.confidence, "rho": nb.rho,
            "p_mean": float(np.mean([float(m.p) for m in nb.matrices])), "Lambda": nb.Lambda,
            "kind": "numeric (float64, uncertified)"}


def scaling_row(config: ScalingConfig, depth: int, width: int, progress=None) -> dict:
    """Train one model of the grid and measure it (see :func:`scaling_study`)."""
    say = progress or (lambda _msg: None)
    tc = config.train_config(depth, width)
    say(f"L={depth} N={width}: training ({tc.steps} steps)")
    t0 = time.perf_counter()
    model, record = train(tc)
    seconds = time.perf_counter() - t0
    tokens, labels = fresh_sample(tc.make_task(), config.n_test, config.test_seed)
    observed = observed_error(model, tokens, labels, seed=config.test_seed)
    s_tokens, s_labels = training_sample(tc)
    weights, nb = numeric_bound(model, s_tokens, s_labels, delta=config.delta)
    row = {
        "L": depth, "N": width, "H": tc.num_heads, "head_dim": tc.head_dim, "ff_dim": tc.ff_dim,
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "train_accuracy": record["train"]["accuracy"], "train_seconds": seconds,
        "test": observed.as_dict(), "n": int(len(s_labels)),
        **proxies_of(weights),
        "numeric": _numeric_row(nb),
    }
    if config.bound == "certified":
        say(f"L={depth} N={width}: certified bound on the training sample")
        row["certified"] = certified_bound(model, ExperimentConfig(train=tc, sample="train", delta=config.delta,
                                                                   workers=2))
    row["_contributions"] = _contributions_vs_p(weights, nb)
    return row


def _contributions_vs_p(weights, nb) -> dict:
    """Per-matrix closed-form term of our bound (``ss_term``) at every grid p, the plan's margin and
    radii otherwise unchanged (numeric path); and the paper proxy's ``c_j(p)``."""
    from specbound.numeric.bound import evaluate as evaluate_bound
    from specbound.numeric.proxies import paper_proxies

    plan = nb.plan
    ours = []
    for i in range(2 * plan.m + 1):
        # a structurally zero matrix must keep p = 0 (the evaluator refuses p > 0 there)
        idx = tuple(0 if m.rank_used == 0 else i for m in nb.matrices)
        ev = evaluate_bound(weights, nb.settings, replace(plan, p_index=idx))
        ours.append([m.ss_term for m in ev.matrices])
    pp = paper_proxies(weights)
    return {"grid": [i / plan.m for i in range(2 * plan.m + 1)],
            "names": [m.name for m in nb.matrices], "types": [m.kind for m in nb.matrices],
            "ours": np.asarray(ours).T.tolist(), "paper": np.asarray(pp.contributions).tolist(),
            "chosen_p": [float(m.p) for m in nb.matrices]}


QUANTITIES = {
    "paper_ours": "paper proxy 'ours'",
    "paper_edelman": "Edelman-style proxy",
    "complexity_ss": "our 2*SS (single scale, numeric)",
    "bound": "our bound (numeric)",
}


def _quantity(row: dict, key: str) -> float:
    if key in ("paper_ours", "paper_edelman"):
        return row[key]
    return row["numeric"][key]


def _cached_row(config: ScalingConfig, depth: int, width: int, cache, progress) -> dict:
    """:func:`scaling_row`, reusing ``cache/L{L}_N{N}.json`` when it was made with the same settings."""
    import json

    if cache is None:
        return scaling_row(config, depth, width, progress)
    from specbound.output import write_json_atomic

    key = {"train": asdict(config.train_config(depth, width)), "n_test": config.n_test,
           "test_seed": config.test_seed, "delta": config.delta, "bound": config.bound}
    path = Path(cache) / f"L{depth}_N{width}.json"
    if path.is_file():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
            if stored.get("key") == json.loads(json.dumps(key)):
                return stored["row"]
        except (OSError, ValueError):
            pass  # unreadable cache entry: recompute
    row = scaling_row(config, depth, width, progress)
    write_json_atomic(path, {"key": key, "row": row})
    return row


def scaling_study(config: ScalingConfig, progress=None, cache: str | Path | None = None) -> dict:
    """Train the grid ``depths x widths`` and measure every model; fit growth exponents.

    ``cache``: a folder keeping one JSON per model, reused when its settings match (a rerun after
    an interruption retrains nothing already measured).

    Returns ``{"config", "rows", "exponents"}``; ``exponents[q]`` is :func:`fit_exponents` of the
    quantity ``q`` of :data:`QUANTITIES` over the grid (and of the test error's upper CP limit).
    """
    rows = []
    for L in config.depths:
        for N in config.widths:
            rows.append(_cached_row(config, L, N, cache, progress))
    exps = {}
    for key in QUANTITIES:
        exps[key] = fit_exponents([r["L"] for r in rows], [r["N"] for r in rows], [_quantity(r, key) for r in rows])
    cfg = asdict(config)
    return {"config": cfg, "rows": rows, "exponents": exps}


# --------------------------------------------------------------------------- report


def _save_figure(fig, path: Path) -> None:
    """Render to memory, then place the PNG atomically (never a half-written file)."""
    import io

    from specbound.output import write_bytes_atomic

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    write_bytes_atomic(path, buffer.getvalue())

BEGIN, END = "<!-- scaling-study:begin -->", "<!-- scaling-study:end -->"


def _g(x: float, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}g}"


def scaling_markdown(study: dict, figures: Sequence[str] = ()) -> str:
    """The Markdown section (table, exponents, figure list) of a scaling study."""
    cfg = study["config"]
    base = cfg["base"]
    lines = [
        BEGIN,
        "## Depth/width scaling study",
        "",
        f"Task `{base['task']}` (seq_len {base['seq_len']}, k {base['k']}); H = {cfg['heads']} heads, "
        f"head_dim = N/(2H), d_ff = 2N; {base['steps']} Adam steps (lr {base['lr']}, batch {base['batch']}), "
        f"regulariser {base['reg_kind']} ({base['reg']}, p = {base['reg_p']}); n = n_train = {base['n_train']} "
        f"(the bound sample is the training sample); delta = {cfg['delta']}; test error on "
        f"{cfg['n_test']} fresh samples with the exact 95% Clopper-Pearson interval.",
        "",
        "Bound columns are the **numeric** bound (float64, uncertified; same theorem, same planner as the "
        "certified path): `bound` = empirical + 2 min(SS, DD) + confidence; `2SS` is the single-scale "
        "complexity alone (often above 2, where the trivial Dudley value DD = 1 at alpha = 1/4 caps the "
        "bound). The two proxies are the paper's formulas (SPEC section 6), **not bounds**.",
        "",
        "| L | N | params | train acc | test err (95% CP) | paper proxy | Edelman proxy | 2SS | 2DD | conf. | emp. | rho | bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in study["rows"]:
        t, nb = r["test"], r["numeric"]
        lines.append(
            f"| {r['L']} | {r['N']} | {r['parameters']} | {r['train_accuracy']:.4f} | "
            f"{t['errors']}/{t['n']} [{_g(t['lower'])}, {_g(t['upper'])}] | {_g(r['paper_ours'], 4)} | "
            f"{_g(r['paper_edelman'], 4)} | {_g(nb['complexity_ss'], 4)} | {_g(nb['complexity_dd'], 4)} | "
            f"{_g(nb['confidence'])} | {_g(nb['empirical'])} | {_g(nb['rho'])} | {_g(nb['bound'], 4)} |")
    lines += ["", "Fitted growth exponents, least squares `log v = c + a log L + b log N` over the grid:", "",
              "| quantity | a (depth L) | b (width N) | rms residual (log) | points |", "|---|---|---|---|---|"]
    for key, label in QUANTITIES.items():
        e = study["exponents"][key]
        lines.append(f"| {label} | {_g(e['a_L'])} | {_g(e['b_N'])} | {_g(e['rms'], 2)} | {e['points']} |")
    if figures:
        lines += ["", "Figures:", ""] + [f"- `{f}`" for f in figures]
    lines += ["", END]
    return "\n".join(lines) + "\n"


def write_scaling_section(path: str | Path, section: str) -> None:
    """Put ``section`` into the Markdown file ``path`` between the scaling-study markers (replacing an
    older section, else appending; a missing file is created), atomically."""
    from specbound.output import write_text_atomic

    path = Path(path)
    text = path.read_text(encoding="utf-8") if path.is_file() else "# Experiments\n\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = head + section.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    write_text_atomic(path, text)


def scaling_plots(study: dict, folder: str | Path) -> list[Path]:
    """``bound_vs_depth.png``, ``bound_vs_width.png`` and ``contribution_vs_p.png`` into ``folder``."""
    import matplotlib

    matplotlib.use("Agg", force=True)  # files only, never a display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    folder = Path(folder)
    rows = study["rows"]
    depths = sorted({r["L"] for r in rows})
    widths = sorted({r["N"] for r in rows})
    at = {(r["L"], r["N"]): r for r in rows}
    styles = {"paper_ours": "o-", "paper_edelman": "s--", "complexity_ss": "^-", "bound": "v:"}
    paths = []
    for name, outer, inner, xlabel in (("bound_vs_depth.png", widths, depths, "depth L"),
                                       ("bound_vs_width.png", depths, widths, "width N")):
        fig, axes = plt.subplots(1, len(outer), figsize=(4 * len(outer), 3.4), squeeze=False)
        for ax, o in zip(axes[0], outer):
            for key, label in QUANTITIES.items():
                xs, ys = [], []
                for i in inner:
                    r = at.get((o, i) if xlabel == "width N" else (i, o))
                    if r is not None and _quantity(r, key) > 0:
                        xs.append(i)
                        ys.append(_quantity(r, key))
                ax.loglog(xs, ys, styles[key], label=label, ms=4)
            ax.set_title(("N = " if xlabel == "depth L" else "L = ") + str(o))
            ax.set_xlabel(xlabel)
            ax.set_xticks(inner)
            ax.set_xticklabels([str(i) for i in inner])
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.grid(True, which="both", alpha=0.3)
        axes[0][0].legend(fontsize="x-small")
        fig.suptitle(f"Proxies (not bounds) and our numeric bound vs {xlabel}", y=1.03)
        path = folder / name
        _save_figure(fig, path)
        plt.close(fig)
        paths.append(path)

    # contribution vs p for the middle model
    mid = at.get((depths[len(depths) // 2], widths[len(widths) // 2]), rows[0])
    c = mid["_contributions"]
    grid = np.asarray(c["grid"])
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    colours = {"QK": "C0", "V_tilde": "C1", "M_in": "C2", "M_out": "C3"}
    for ax, key, title in ((axes[0], "ours", "our closed-form term (numeric)"),
                           (axes[1], "paper", "paper proxy c_j(p) (not a bound)")):
        seen = set()
        for j, kind in enumerate(c["types"]):
            ax.semilogy(grid, c[key][j], color=colours.get(kind, "k"), lw=0.8, alpha=0.7,
                        label=None if kind in seen else kind)
            seen.add(kind)
        ax.set_title(title)
        ax.set_xlabel("p")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize="x-small")
    fig.suptitle(f"Per-matrix contribution vs p (L = {mid['L']}, N = {mid['N']})", y=1.03)
    path = folder / "contribution_vs_p.png"
    _save_figure(fig, path)
    plt.close(fig)
    paths.append(path)
    return paths
