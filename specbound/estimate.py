"""Float estimates of the bound, route by route, at a sample size n: what the sample-size planner
(:mod:`specbound.planning`) searches over n and the bound monitor (:mod:`specbound.monitor`) logs while
a model trains.

An :class:`Estimate` is *not* a bound.  It is the fast float evaluation of each route of the theorem --
the one driver :func:`specbound.certified.evaluation.evaluate` in the numpy context, at the plan the float
planner chooses (:func:`specbound.numeric.planner.plan_for`) -- for a network's float spectra and a
sample of float margins.  Only ``specbound certify`` (:func:`specbound.certify`) turns a model and its
sample into a bound: certified enclosures, a certified forward pass, Arb.

The sample at n.  An :class:`Estimator` holds the margins of one sample (the pilot: m examples).  Its
estimate at n is the evaluation on the sample of size n whose margins are distributed as the pilot's
(:meth:`specbound.numeric.margin_sample.MarginSample.expanded`: the Occam count scales as
``ceil(n K_pilot / m)``, the mean ramp loss stays the pilot's); at ``n = m`` that is the pilot itself.
Each route runs at delta/2, as ``certify`` runs both routes on a sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import numpy as np

from specbound.errors import SpecboundError
from specbound.matrices import AnalysisWeights
from specbound.plan import BoundSettings
from specbound.vocabulary import LS_VARIANTS, ROUTE_OCCAM, ROUTE_RADEMACHER, ROUTES

ESTIMATE = "estimate"
"""The word every float value of this module is labelled with (never "bound")."""

SMALLER = "smaller"
"""The row of the smaller of the two routes' estimates: what ``certify`` would report."""


@dataclass(frozen=True)
class RouteEstimate:
    """One route's float estimate (``value``, not certified) and its parts (floats, by name)."""

    route: str
    value: float
    parts: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Estimate:
    """The float estimates of both routes at sample size ``n`` (each route at level delta/2).

    ``error``: the fraction of the sample's margins <= 0 (its float 0-1 error)."""

    n: int
    delta: float
    routes: Mapping[str, RouteEstimate]
    error: float

    @property
    def smaller(self) -> RouteEstimate:
        """The route with the smaller estimate (the one ``certify`` would report); ties: Rademacher."""
        return min((self.routes[r] for r in ROUTES), key=lambda e: e.value)

    def row(self) -> dict[str, Any]:
        """Flat JSON-ready values: ``n``, ``estimate`` (the smaller) and its ``route``,
        ``<route>_estimate`` and ``<route>_<part>`` for each route, ``error``."""
        best = self.smaller
        out: dict[str, Any] = {"n": self.n, ESTIMATE: best.value, "route": best.route, "error": self.error}
        for name in ROUTES:
            e = self.routes[name]
            out[f"{name}_{ESTIMATE}"] = e.value
            out.update({f"{name}_{k}": v for k, v in e.parts.items()})
        return out


def parameter_count(weights: AnalysisWeights) -> int:
    """The learned parameters of the analysis model of ``weights``: per layer W_Q (H N d_h), W_K and W_V
    (G N d_h each, G key/value groups: H unless grouped), W_O (H d_h N) and the feed-forward (2 N d_ff,
    3 N d_ff gated), plus the read-out (N; k N for k rows).  The fixed input map is not learned and not
    counted."""
    L, H, N, d, F = weights.num_layers, weights.num_heads, weights.width, weights.head_dim, weights.ff_dim
    G = weights.num_kv_heads or H
    gated = weights.variant in LS_VARIANTS
    return int(L * (2 * H * N * d + 2 * G * N * d + (3 if gated else 2) * N * F) + weights.num_outputs * N)


class Estimator:
    """Float estimates of both routes of one network at any sample size n, for the margin distribution
    of one sample (module docstring).

    ``weights``: the covered matrices (:func:`specbound.load_weights`); ``margins``: the float margins
    ``y_i f(X_i)`` of the sample (an array, or a :class:`~specbound.numeric.margin_sample.MarginSample`);
    ``spectra``: precomputed singular values (a ``numeric.spectra.Spectra`` or (J, K) array) or None
    (a float SVD).  Evaluations are cached by n."""

    def __init__(self, weights: AnalysisWeights, margins, *, delta: float = 0.05, spectra=None) -> None:
        from specbound.numeric.terms import as_margins, compiled_theorem, network_facts

        self.margins = as_margins(margins)
        if self.margins is None:
            raise SpecboundError("an estimate needs the margins of a sample")
        self.settings = BoundSettings(n=1, delta=delta, routes=ROUTES)
        # k read-out rows: the k-class theorem (the kclass_ twins), as certify selects it
        self.theorem = compiled_theorem(self.settings, weights.activation, weights.variant, weights.num_outputs)
        self.facts = network_facts(weights, spectra=spectra)
        self.parameters = parameter_count(weights)
        self._cache: dict[int, Estimate] = {}

    def at(self, n: int) -> Estimate:
        """Both routes' float estimates at sample size ``n`` (a positive integer)."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise SpecboundError(f"n must be a positive integer, got {n!r}")
        n = int(n)
        if n not in self._cache:
            self._cache[n] = self._evaluate(n)
        return self._cache[n]

    def _evaluate(self, n: int) -> Estimate:
        from specbound.numeric.evaluation import evaluate_facts
        from specbound.numeric.margin_sample import MarginSample
        from specbound.numeric.planner import plan_for

        settings = replace(self.settings, n=n)
        sample = MarginSample.expanded(self.margins, n)
        plan = plan_for(self.theorem, self.facts, settings, sample)
        main = evaluate_facts(self.theorem, self.facts, settings, plan, margins=sample)
        occ = plan.occam.notes  # the driver's Occam route at the chosen plan (numeric.occam_plan)
        rademacher = RouteEstimate(ROUTE_RADEMACHER, _finite(main.bound), {
            "empirical": float(main.empirical), "complexity": 2.0 * main.complexity, "ss": main.ss, "dd": main.dd,
            "confidence": main.confidence, "Lambda": main.Lambda, "rho": main.rho})
        occam = RouteEstimate(ROUTE_OCCAM, _finite(occ["estimate"]), {
            "H": float(occ["H"]), "C": float(occ["C"]), "count": int(occ["count"]), "gamma": float(occ["gamma"])})
        error = float(sample.count_at(0.0)) / n
        return Estimate(n, self.settings.delta, {ROUTE_RADEMACHER: rademacher, ROUTE_OCCAM: occam}, error)


def float_margins_of(weights: AnalysisWeights, dataset) -> np.ndarray:
    """The float margins ``y_i f(X_i)`` of ``dataset`` under ``weights``, as ``certify`` computes them to
    choose its margins (the fast certified pass's float outputs, else the own-format model's torch
    forward); a one-line SpecboundError when no float forward pass covers the model and the sample."""
    from specbound.errors import option
    from specbound.pipeline import fast_pass_of, float_margins
    from specbound.vocabulary import FORWARD_FAST

    margins = float_margins(weights, dataset, fast_pass_of(weights, dataset, FORWARD_FAST))
    if margins is None:
        raise SpecboundError("no float forward pass covers this model and sample, so its margins cannot be "
                             f"estimated (the planner takes assumed margins: {option('margin')})")
    return np.asarray(margins, dtype=np.float64)


def _finite(value) -> float:
    """A float estimate; a non-finite one (an overflowing entropy) is +inf: reaches no target."""
    v = float(value)
    return v if math.isfinite(v) else math.inf
