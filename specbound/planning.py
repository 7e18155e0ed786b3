"""The sample-size planner: the n at which the float estimate of each route reaches a target
(``specbound plan``, :func:`plan_n`).

Everything here is an ESTIMATE, never a bound.  For each target t and route (Occam, Rademacher, and the
smaller of the two, which is what ``certify`` reports), the plan is the smallest n found at which the
float estimate of :mod:`specbound.estimate` is <= t.  The estimate at n rests on two assumptions,
stated in every result (:attr:`SampleSizePlan.assumptions`):

* norms: the network's spectra are those of the model given (a pilot: untrained, partly or fully
  trained), or, for an architecture alone, of the reference model's initialisation (entries of
  variance 1/fan-in, :class:`specbound.model.AnalysisTransformer`, ``init_seed``);
* margins: at n examples the margins y f(X) are distributed as those of a pilot sample -- the pilot
  model's float margins on ``data`` (or on fresh samples of its recorded task) -- or, with no pilot
  sample, as assumed: every example at margin ``margin * ||w||`` (``||w||`` bounds |f|: the rows are in
  the unit ball), a fraction ``error`` of them at ``-margin * ||w||``
  (:data:`ASSUMED_MARGIN`, default error 0).

A trained network usually has larger norms than its initialisation, so an architecture-only plan
tends to be optimistic; a pilot run of the real training is the better input.  The search
(:func:`smallest_n`) brackets n by doubling and bisects to one example, assuming the estimate
decreases in n; the n it returns always has estimate(n) <= t < estimate(n - 1).
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from .errors import SpecboundError, option
from .estimate import SMALLER, Estimator, float_margins_of, parameter_count
from .vocabulary import ROUTE_OCCAM, ROUTE_RADEMACHER

if TYPE_CHECKING:  # pragma: no cover
    import pandas

    from .matrices import AnalysisWeights

PLAN_ROUTES: tuple[str, ...] = (ROUTE_OCCAM, ROUTE_RADEMACHER, SMALLER)
"""The rows of a plan per target: each route, and the smaller of the two (what certify reports)."""

DEFAULT_TARGETS: tuple[float, ...] = (0.5,)
"""The target estimate when none is given."""

ASSUMED_MARGIN = 0.5
"""With no pilot sample: every example's margin is this fraction of ||w|| (|f| <= ||w||)."""

PILOT_SAMPLES = 2000
"""Fresh samples of a model's recorded task drawn as the pilot sample when no data is given."""

MAX_N = 10**12
"""The largest n searched; a target not reached there is reported as not reached."""

ARCHITECTURE_KEYS: tuple[str, ...] = ("num_layers", "num_heads", "width", "head_dim", "ff_dim")
"""The keys an architecture must give; optional: variant, activation, num_kv_heads, num_outputs."""

ARCHITECTURE_OPTIONAL: dict[str, Any] = {"variant": "plain", "activation": "gelu", "num_kv_heads": 0,
                                         "num_outputs": 1}


# ------------------------------------------------------------------------------------------------
# the search


def smallest_n(estimate: Callable[[int], float], target: float, max_n: int = MAX_N) -> int | None:
    """An n in [1, max_n] with ``estimate(n) <= target`` and (n = 1 or) ``estimate(n - 1) > target``,
    None when ``estimate(max_n) > target``.  Brackets by doubling from 1, then bisects: the smallest
    such n when the estimate decreases in n (the usual case), else one boundary of that kind."""
    if not estimate(max_n) <= target:
        return None
    if estimate(1) <= target:
        return 1
    lo, hi = 1, 2  # estimate(lo) > target throughout
    while hi < max_n and not estimate(hi) <= target:
        lo, hi = hi, min(2 * hi, max_n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if estimate(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


# ------------------------------------------------------------------------------------------------
# the result


@dataclass(frozen=True)
class SampleSizePlan:
    """The n per target and route at which the float estimate reaches the target (ESTIMATES).

    ``rows``: one dict per (target, route) with ``target``, ``route`` (:data:`PLAN_ROUTES`), ``n``
    (None: not reached by ``max_n``), ``n_per_parameter``, ``estimate`` (the route's float estimate at
    that n) and the route's parts there (``<route>_<part>``); ``model``: what was planned for;
    ``assumptions``: the sentences that say what the estimate assumes (norms, margins, levels)."""

    model: str
    parameters: int
    delta: float
    max_n: int
    assumptions: tuple[str, ...]
    rows: tuple[dict[str, Any], ...]
    pilot: dict[str, Any] = field(default_factory=dict)

    def n(self, target: float, route: str = SMALLER) -> int | None:
        """The planned n for ``target`` and ``route`` (None: not reached by ``max_n``)."""
        for row in self.rows:
            if row["target"] == target and row["route"] == route:
                return row["n"]
        raise SpecboundError(f"no plan for target {target!r} and route {route!r}")

    def to_dict(self) -> dict[str, Any]:
        """The ``specbound plan --json`` document."""
        return {"kind": "estimate", "note": NOT_A_BOUND, "model": self.model, "parameters": self.parameters,
                "delta": self.delta, "max_n": self.max_n, "assumptions": list(self.assumptions),
                "pilot": dict(self.pilot), "plans": [dict(r) for r in self.rows]}

    def to_dataframe(self) -> pandas.DataFrame:
        """One row per (target, route) (needs pandas)."""
        from .frames import dataframe

        return dataframe([dict(r) for r in self.rows])


NOT_A_BOUND = ("float estimates, not bounds: each assumes the margin distribution and norms stated; only "
               "certify on the real sample gives a bound")


# ------------------------------------------------------------------------------------------------
# inputs


def _targets(target: float | Sequence[float]) -> tuple[float, ...]:
    values = (target,) if isinstance(target, (int, float, np.floating)) else tuple(target)
    if not values:
        raise SpecboundError(f"give at least one target: {option('target')}")
    out = []
    for t in values:
        try:
            v = float(t)
        except (TypeError, ValueError):
            raise SpecboundError(f"a target must be a number in (0, 1), got {t!r}") from None
        if not 0.0 < v < 1.0:
            raise SpecboundError(f"a target must lie in (0, 1) (a bound >= 1 is vacuous), got {t!r}")
        out.append(v)
    return tuple(sorted(set(out), reverse=True))


def _fraction_in(value, what: str, low_open: bool, high: float, high_open: bool) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SpecboundError(f"{what} must be a number, got {value!r}") from None
    ok = (v > 0.0 if low_open else v >= 0.0) and (v < high if high_open else v <= high)
    if not (math.isfinite(v) and ok):
        lo, hi = "(0" if low_open else "[0", f"{high:g})" if high_open else f"{high:g}]"
        raise SpecboundError(f"{what} must lie in {lo}, {hi}, got {value!r}")
    return v


def architecture_of(architecture: Any) -> dict[str, Any]:
    """The architecture as a dict of :data:`ARCHITECTURE_KEYS` and the optional keys (a mapping, or an
    object with those attributes such as :class:`specbound.model.Architecture`); unknown or missing keys
    are a one-line SpecboundError."""
    if isinstance(architecture, Mapping):
        given = dict(architecture)
    else:
        given = {k: getattr(architecture, k) for k in (*ARCHITECTURE_KEYS, *ARCHITECTURE_OPTIONAL)
                 if hasattr(architecture, k)}
    unknown = sorted(set(given) - set(ARCHITECTURE_KEYS) - set(ARCHITECTURE_OPTIONAL))
    if unknown:
        raise SpecboundError(f"architecture: unknown key {unknown[0]!r} (known: "
                             f"{', '.join((*ARCHITECTURE_KEYS, *ARCHITECTURE_OPTIONAL))})")
    missing = [k for k in ARCHITECTURE_KEYS if given.get(k) is None]
    if missing:
        raise SpecboundError(f"architecture: give {', '.join(missing)} (keys {', '.join(ARCHITECTURE_KEYS)})")
    out = {**ARCHITECTURE_OPTIONAL, **{k: v for k, v in given.items() if v is not None}}
    for k in (*ARCHITECTURE_KEYS, "num_kv_heads", "num_outputs"):
        v = out[k]
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < (0 if k == "num_kv_heads" else 1):
            raise SpecboundError(f"architecture: {k} must be a {'non-negative' if k == 'num_kv_heads' else 'positive'} "
                                 f"integer, got {v!r}")
        out[k] = int(v)
    return out


def initialised_weights(arch: Mapping[str, Any], init_seed: int = 0) -> AnalysisWeights:
    """The covered matrices of the reference model of architecture ``arch`` (:func:`architecture_of`)
    at its initialisation with ``init_seed``, read through the own format as ``certify`` reads it."""
    from .checkpoint import load_weights
    from .model import AnalysisTransformer, Architecture
    from .module_source import readable

    shape = Architecture(num_layers=arch["num_layers"], num_heads=arch["num_heads"], width=arch["width"],
                         head_dim=arch["head_dim"], ff_dim=arch["ff_dim"], vocab_size=2, seq_len=1,
                         activation=arch["activation"], variant=arch["variant"], num_kv_heads=arch["num_kv_heads"],
                         num_outputs=arch["num_outputs"])
    model = AnalysisTransformer(shape, init_seed=int(init_seed))
    with tempfile.TemporaryDirectory(prefix="specbound-plan-") as folder:
        return load_weights(readable(model, folder))


def readout_scale(weights: AnalysisWeights) -> float:
    """``||w||`` of one read-out vector, the largest row norm ``max_c ||w_c||`` of a k-row read-out (1.0
    with none): the read-out radius the theorem uses (proofs_notes/k_class.md).  Rows in the unit ball
    give |f_c| <= ||w_c||, so a k-class margin f_y - max_{c != y} f_c lies within twice this scale."""
    if weights.readout is None:
        return 1.0
    rows = np.atleast_2d(np.asarray(weights.readout, dtype=np.float64))
    return float(np.linalg.norm(rows, axis=1).max())


def assumed_margins(weights: AnalysisWeights, margin: float, error: float):
    """The assumed margin distribution (module docstring) as a
    :class:`~specbound.numeric.margin_sample.MarginSample`: ``+margin ||w||``, and ``-margin ||w||`` with
    weight ``error`` (the decimal the user typed, as an exact fraction); for k read-out rows ``||w||``
    is the largest row norm (:func:`readout_scale`) and the margin is ``f_y - max_{c != y} f_c``."""
    from .numeric.margin_sample import MarginSample

    level = margin * readout_scale(weights)
    if not (math.isfinite(level) and level > 0):
        raise SpecboundError("the read-out is zero: the network is constant, no margin to assume")
    q = Fraction(repr(float(error)))
    if q == 0:
        return MarginSample(np.array([level]), np.array([1]))
    return MarginSample(np.array([-level, level]), np.array([q.numerator, q.denominator - q.numerator]))


# ------------------------------------------------------------------------------------------------
# the planner


def plan_n(
    model: Any = None,
    target: float | Sequence[float] | None = None,
    *,
    architecture: Any = None,
    data: Any = None,
    samples: int | None = None,
    seed: int | None = None,
    margin: float | None = None,
    error: float | None = None,
    delta: float = 0.05,
    num_heads: int | None = None,
    init_seed: int = 0,
    max_n: int = MAX_N,
) -> SampleSizePlan:
    """The n at which the float ESTIMATE of each route reaches each ``target`` (a number or several;
    default :data:`DEFAULT_TARGETS`), as the module docstring says.

    ``model``: a pilot model, anything ``certify`` accepts (path, repo id, state dict, torch module;
    None with no ``architecture``: the embedded default); or ``architecture``: a mapping (or
    :class:`specbound.model.Architecture`) of ``num_layers, num_heads, width, head_dim, ff_dim`` and
    optionally ``variant, activation, num_kv_heads, num_outputs`` (k >= 2: the k-class theorem), planned at
    the reference initialisation (``init_seed``).  Margins: the pilot model's float margins on ``data``
    (any form ``certify`` takes) or on ``samples`` (default :data:`PILOT_SAMPLES`) fresh samples of its
    recorded task drawn with ``seed``; or, with ``margin`` / ``error`` given, an architecture, or no pilot
    sample, the assumed distribution (``margin`` default :data:`ASSUMED_MARGIN`, ``error`` default 0).
    ``delta``: the confidence, each route at delta/2 as certify runs them.  ``max_n``: the search's end.
    """
    targets = _targets(DEFAULT_TARGETS if target is None else target)
    delta = _fraction_in(delta, f"delta ({option('delta')})", True, 1.0, True)
    if isinstance(max_n, bool) or not isinstance(max_n, (int, np.integer)) or not 1 <= max_n <= 10**15:
        raise SpecboundError(f"max_n must be an integer in [1, 10^15], got {max_n!r}")
    if margin is not None:
        margin = _fraction_in(margin, f"margin ({option('margin')}, a fraction of ||w||)", True, 1.0, False)
    if error is not None:
        error = _fraction_in(error, f"error ({option('error')}, the assumed training error)", False, 1.0, True)
    assumed = margin is not None or error is not None
    if architecture is not None:
        if model is not None:
            raise SpecboundError(f"give a pilot model or an architecture, not both ({option('architecture')})")
        if data is not None or samples is not None:
            raise SpecboundError("a pilot sample needs a pilot model: the margins of an architecture are assumed "
                                 f"({option('margin')}, {option('error')})")
        arch = architecture_of(architecture)
        weights = initialised_weights(arch, init_seed)
        label = (f"architecture L={arch['num_layers']} H={arch['num_heads']} N={arch['width']} d_h={arch['head_dim']} "
                 f"d_ff={arch['ff_dim']} {arch['variant']} {arch['activation']}"
                 + ("" if arch["num_outputs"] == 1 else f" k={arch['num_outputs']}"))
        norms = (f"norms: the reference model's initialisation (init seed {init_seed}, entries of variance "
                 "1/fan-in); a trained network's are usually larger, so this plan tends to be optimistic")
        assumed = True
        margins, pilot = None, {"kind": "assumed"}
    else:
        weights, margins, pilot, label = _pilot(model, data, samples, seed, num_heads, assumed)
        norms = "norms: the pilot model's own"
        assumed = margins is None
    if assumed:
        m, e = ASSUMED_MARGIN if margin is None else margin, 0.0 if error is None else error
        margins = assumed_margins(weights, m, e)
        pilot = {**pilot, "kind": "assumed", "margin_fraction": m, "error": e}
        why = "" if pilot.get("why") is None else f" ({pilot['why']})"
        rows = "" if weights.num_outputs == 1 else f"; k = {weights.num_outputs}: its largest row norm"
        said = (f"margins: assumed{why}: every example at margin {m:g} ||w|| (||w|| = "
                f"{readout_scale(weights):.4g}, the largest |f| the read-out allows{rows}), a fraction "
                f"{e:g} of them at -{m:g} ||w||, at every n")
    else:
        said = (f"margins: at every n distributed as the pilot's: the float margins of the pilot model on "
                f"{pilot['sample']} (m = {pilot['m']}; {pilot['error']:.4g} of them <= 0)")
    estimator = Estimator(weights, margins, delta=delta)
    rows = _rows(estimator, targets, int(max_n))
    assumptions = (norms, said, f"delta = {delta:g}: each route at delta/2, as certify runs both routes on a sample")
    return SampleSizePlan(model=label, parameters=estimator.parameters, delta=delta, max_n=int(max_n),
                          assumptions=assumptions, rows=rows, pilot=pilot)


def _pilot(model, data, samples, seed, num_heads, assumed: bool):
    """(weights, float margins or None, pilot record, label) of a pilot model: the margins on ``data`` or
    on fresh samples of its recorded task (None when ``assumed`` or when there is no pilot sample)."""
    from .adapters import capabilities
    from .checkpoint import load_weights
    from .empirical import resolve, task_record
    from .module_source import label_of, readable, source_of
    from .vocabulary import CAPABILITY_RECORDED_TASK

    label = label_of(model)
    with tempfile.TemporaryDirectory(prefix="specbound-plan-") as folder:
        source = source_of(readable(model, folder))
        weights = load_weights(source, num_heads=num_heads)
        if assumed:
            if data is not None or samples is not None:
                raise SpecboundError(f"give a pilot sample or assumed margins ({option('margin')}, "
                                     f"{option('error')}), not both")
            return weights, None, {"why": "as asked"}, label
        records = CAPABILITY_RECORDED_TASK in capabilities(weights.layout)
        if data is None and samples is None and not (records and task_record(weights, source) is not None):
            return weights, None, {"why": "no pilot sample: no data given and the model records no task"}, label
        ns = None if data is not None else (PILOT_SAMPLES if samples is None else samples)
        src, dataset, _ = resolve(weights, source, data, n=None, empirical=None, samples=ns, seed=seed)
        margins = float_margins_of(weights, dataset)
    sample = (f"{dataset.n} fresh samples of its recorded task {src.detail['task'].get('name', '')} (seed "
              f"{src.detail['seed']})" if data is None else f"the data {getattr(dataset, 'source', '<arrays>')}")
    error = float(np.count_nonzero(margins <= 0)) / margins.size
    return weights, margins, {"kind": "pilot", "sample": sample, "m": int(margins.size), "error": error}, label


def _rows(estimator: Estimator, targets: tuple[float, ...], max_n: int) -> tuple[dict[str, Any], ...]:
    """One row per (target, route): the planned n and the estimate and its parts there."""
    rows = []
    for t in targets:
        found = {r: smallest_n(lambda n, r=r: estimator.at(n).routes[r].value, t, max_n)
                 for r in (ROUTE_OCCAM, ROUTE_RADEMACHER)}
        reached = [n for n in found.values() if n is not None]
        found[SMALLER] = min(reached) if reached else None
        for route in PLAN_ROUTES:
            n = found[route]
            row: dict[str, Any] = {"target": t, "route": route, "n": n,
                                   "n_per_parameter": None if n is None else n / estimator.parameters}
            if n is not None:
                est = estimator.at(n)
                chosen = est.smaller if route == SMALLER else est.routes[route]
                row["estimate_route"] = chosen.route
                row["estimate"] = chosen.value
                row.update({f"{chosen.route}_{k}": v for k, v in chosen.parts.items()})
            rows.append(row)
    return tuple(rows)


__all__ = ["ASSUMED_MARGIN", "DEFAULT_TARGETS", "MAX_N", "PILOT_SAMPLES", "PLAN_ROUTES", "SampleSizePlan",
           "architecture_of", "assumed_margins", "readout_scale", "initialised_weights", "parameter_count", "plan_n", "smallest_n"]
