"""The depth/width study: a grid of experiments, the paper's proxies, fitted growth exponents."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
import json
import math
from pathlib import Path
import time

import numpy as np

from specbound.experiments.config import ExperimentConfig, ExperimentError, TEST_SEED
from specbound.experiments.run import (
    certified_bound, float_margins, observed_error, proxies_of, train_reporting, weights_of,
)
from specbound.numeric.bound import evaluate as evaluate_bound
from specbound.numeric.proxies import paper_proxies
from specbound.output import write_json_atomic
from specbound.plan import BoundSettings
from specbound.train import TrainConfig, fresh_sample, training_sample


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


HEAD_DIM_RULES = {"half": 2, "full": 1}
"""How the grid sets the head dimension: ``head_dim = N // (divisor * H)`` (half: N / (2H); full: N / H)."""


@dataclass(frozen=True)
class ScalingConfig:
    """The depth/width grid of :func:`scaling_study`.

    Every model uses ``base`` (task, optimiser, steps, regulariser, seeds) with ``num_layers = L``,
    ``width = N``, ``num_heads = heads``, ``ff_dim = 2 N`` and ``head_dim = N // (2 heads)``
    (``head_dim_rule="half"``, the proportions of the first study) or ``N // heads`` (``"full"``: d_h = N / H,
    the conventional shape).  The bound sample is the training sample (``n = n_train``).
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
    head_dim_rule: str = "half"

    def __post_init__(self) -> None:
        if self.head_dim_rule not in HEAD_DIM_RULES:
            raise ExperimentError(f"scaling: head_dim_rule must be one of {', '.join(HEAD_DIM_RULES)}, "
                                  f"got {self.head_dim_rule!r}")
        if not self.depths or not self.widths or min(self.depths) < 1 or min(self.widths) < 1:
            raise ExperimentError("scaling: depths and widths must be non-empty lists of positive integers")
        if self.bound not in ("numeric", "certified"):
            raise ExperimentError(f"scaling: bound must be 'numeric' or 'certified', got {self.bound!r}")
        if any(w < 2 * self.heads for w in self.widths):
            raise ExperimentError(f"scaling: every width must be >= 2 * heads = {2 * self.heads}")

    def train_config(self, depth: int, width: int) -> TrainConfig:
        per = HEAD_DIM_RULES[self.head_dim_rule] * self.heads
        return replace(self.base, num_layers=int(depth), width=int(width), num_heads=self.heads,
                       head_dim=max(1, int(width) // per), ff_dim=2 * int(width))


def numeric_bound(model, tokens: np.ndarray, labels: np.ndarray, *, delta: float = 0.05):
    """The fast float bound (:func:`specbound.numeric.bound.evaluate`, uncertified) of ``model`` with
    the bound sample ``(tokens, labels)``: ``n = len(labels)``, empirical term from float margins,
    plan (p, margin, scales) from the float planner."""

    weights = weights_of(model)
    settings = BoundSettings(n=int(len(labels)), delta=delta)
    return weights, evaluate_bound(weights, settings, margins=float_margins(model, tokens, labels))


def route_estimates(model, tokens: np.ndarray, labels: np.ndarray, *, delta: float = 0.05) -> dict:
    """Both routes' float estimates (:class:`specbound.estimate.Estimator`, uncertified; each route at
    delta/2, as certify runs them) at n = the sample size, for the float margins of the sample."""
    from specbound.estimate import Estimator

    return Estimator(weights_of(model), float_margins(model, tokens, labels), delta=delta).at(int(len(labels))).row()


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
    model, record = train_reporting(tc, progress, prefix=f"L={depth} N={width}: ")
    seconds = time.perf_counter() - t0
    tokens, labels = fresh_sample(tc.make_task(), config.n_test, config.test_seed)
    observed = observed_error(model, tokens, labels, seed=config.test_seed)
    s_tokens, s_labels = training_sample(tc)
    weights, nb = numeric_bound(model, s_tokens, s_labels, delta=config.delta)
    row = {
        "L": depth, "N": width, "H": tc.num_heads, "head_dim": tc.head_dim, "ff_dim": tc.ff_dim,
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "train_accuracy": record["train"]["accuracy"], "train_seconds": seconds,
        "train_margin_median": record["train"]["margin_median"], "warning": record.get("warning"),
        "test": observed.as_dict(), "n": int(len(s_labels)),
        **proxies_of(weights),
        "numeric": _numeric_row(nb),
        "estimates": route_estimates(model, s_tokens, s_labels, delta=config.delta),
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


TRAINED_ACCURACY = 0.99
"""Training accuracy from which a grid model counts as trained.  The exponents are fitted over the
trained models only: a model left at chance has different weights altogether (the bound of a
network that learnt nothing says nothing about how the bound of a trained one scales)."""

QUANTITIES = {
    "paper_ours": "paper proxy 'ours'",
    "paper_edelman": "Edelman-style proxy",
    "complexity_ss": "our 2*SS (single scale, numeric)",
    "bound": "our bound (numeric)",
    "rademacher_estimate": "Rademacher route (float estimate, delta/2)",
    "occam_estimate": "Occam route (float estimate, delta/2)",
    "occam_H": "Occam route's entropy H (nats; what n must outgrow)",
}


def trained(row: dict) -> bool:
    """Whether a grid model counts as trained (:data:`TRAINED_ACCURACY`): only those enter the fits."""
    return row["train_accuracy"] >= TRAINED_ACCURACY


def _quantity(row: dict, key: str) -> float:
    if key in ("paper_ours", "paper_edelman"):
        return row[key]
    if key.endswith("_estimate") or key == "occam_H":
        return row.get("estimates", {}).get(key, float("nan"))  # rows cached before the estimates: left out
    return row["numeric"][key]


def _cached_row(config: ScalingConfig, depth: int, width: int, cache, progress) -> dict:
    """:func:`scaling_row`, reusing ``cache/L{L}_N{N}.json`` when it was made with the same settings."""
    if cache is None:
        return scaling_row(config, depth, width, progress)

    key = {"train": asdict(config.train_config(depth, width)), "n_test": config.n_test,  # names d_h and d_ff
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
    quantity ``q`` of :data:`QUANTITIES` over the trained models of the grid (train accuracy >=
    :data:`TRAINED_ACCURACY`).
    """
    rows = []
    for L in config.depths:
        for N in config.widths:
            rows.append(_cached_row(config, L, N, cache, progress))
    exps = {}
    fitted = [r for r in rows if trained(r)]
    for key in QUANTITIES:
        exps[key] = fit_exponents([r["L"] for r in fitted], [r["N"] for r in fitted],
                                  [_quantity(r, key) for r in fitted])
    cfg = asdict(config)
    return {"config": cfg, "rows": rows, "exponents": exps}
