"""The Python API behind ``specbound certify``: checkpoint -> certified bound.

:func:`certify` mirrors the command line.  Steps: read the model's structure (the whole model only
when a certified forward pass needs it); enclose every covered matrix's singular values
(:mod:`specbound.certified`) as tasks of the engine (:mod:`specbound.engine`); choose a plan (the float planner
``specbound.numeric.planner.choose_plan``); certify the empirical ramp loss at the plan's margin
(the source resolved by :func:`specbound.empirical.resolve`: data file, fresh samples of the model's
recorded task, or the user's number -- flagged as not certified); evaluate the theorem in Arb
(:func:`specbound.certified.bound.certify_bound`).  When the certified forward pass gives margin
enclosures of the sample (the fast or per-sample pass), both routes are evaluated, each at delta/2
(the Occam route's count K^ from those enclosures, proofs_notes/occam_route.md), and the smaller bound
is reported; otherwise the Rademacher route alone, at delta.

Floats only *choose* (proofs_notes/theory.md sections 6-7): whatever the plan, the returned bound is valid.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from fractions import Fraction

import numpy as np

from specbound.adapters import capabilities, detect
from specbound.certification import Certification
from specbound.certified.bound import certify_bound
from specbound.certified.certificate import decimal_up, recorded_path
from specbound.certified.gram_enclosure import METHOD as DEFAULT_ENCLOSURE, enclose_matrices
from specbound.certified.fast_forward import NotApplicable
from specbound.certified.margins import MarginEnclosures
from specbound.certified.radii import exact_value, power_ball
from specbound.certified.ramp_loss import fast_pass
from specbound.checkpoint import load_layers, load_weights, open_checkpoint
from specbound.errors import CertificationError, SpecboundError
from specbound.empirical import (  # noqa: F401  (task_record/task_sample/EmpiricalSource: public here too)
    DEFAULT_SAMPLES, DEFAULT_SEED, EmpiricalSource, empirical_ball, resolve, task_record, task_sample,
)
from specbound.numeric import planner
from specbound.plan import BoundSettings, OccamPlan
from specbound.progress import progress_bar
from specbound.scope import scope_block
from specbound.verdict import Verdict, verdict_of
from specbound.vocabulary import (
    CAPABILITY_CERTIFY, CAPABILITY_FLOAT_FORWARD, EMPIRICAL_TRAIN, FORWARD_FAST, FORWARD_INTERVAL, READOUT_TRAINED,
    ROUTE_OCCAM, ROUTE_RADEMACHER, ROUTES, VIEW_ANALYSIS,
)

DEFAULT_DELTA = 0.05
"""The confidence parameter delta when neither ``settings`` nor ``delta`` gives one."""

LOOSE_SETTINGS = ("n", "delta", "margin", "empirical", "readout")
"""The keywords of :func:`certify` that a ``settings`` (BoundSettings) gives instead."""


# ------------------------------------------------------------------------------------------------
# plans


def fast_pass_of(weights, data, forward: str):
    """The fast certified forward pass over ``data`` (:func:`specbound.certified.ramp_loss.fast_pass`;
    the per-sample pass on every sample when ``forward`` is "interval") when a pass covers this model and
    input, else None.  Its float margins choose rho (and the Occam route's gamma), its margin enclosures
    give the Occam count and, unless ``forward`` is "arb" (then every sample's ramp loss is redone in
    Arb), the ramp loss: the sample is run once."""
    if data is None or data.n == 0:
        return None
    try:
        return fast_pass(weights, data, method=FORWARD_INTERVAL if forward == FORWARD_INTERVAL else FORWARD_FAST)
    except NotApplicable:
        return None


def routes_for(requested, fast) -> tuple[str, ...]:
    """The routes evaluated: ``requested`` (a tuple of :data:`~specbound.vocabulary.ROUTES`), or by
    default both when the certified pass gives margin enclosures of the sample (``fast`` not None), else
    the Rademacher route alone.  Fixed by the options and the model before any margin is looked at."""
    if requested is None:
        return (ROUTE_RADEMACHER, ROUTE_OCCAM) if fast is not None else (ROUTE_RADEMACHER,)
    routes = tuple(requested)
    if not set(routes) <= set(ROUTES):
        raise SpecboundError(f"routes must be out of {ROUTES}, got {routes}")
    if ROUTE_OCCAM in routes and fast is None:
        raise SpecboundError("the Occam route needs certified margin enclosures of the sample: a data set or "
                             "recorded task and the fast or interval forward pass")
    return routes


def occam_margins(fast, data, gamma) -> MarginEnclosures:
    """Certified margin enclosures of the sample for the Occam count at ``gamma`` (an Arb ball): the
    pass's enclosures, with the samples whose enclosure contains gamma redone by the per-sample pass with
    the adjoint refinement (:data:`~specbound.certified.ramp_loss.STRADDLER_REFINE`; two certified
    enclosures of one margin: their intersection is one).  Samples still undecided count in K^ (condition C4)."""
    from specbound.certified.arb import float_lower, float_upper

    m = fast.enclosures(data)
    idx = m.straddling((float_lower(gamma), float_upper(gamma)))
    if idx.size and fast.refine is not None:
        try:
            lo, hi = fast.refine(idx)
        except NotApplicable:
            return m
        from specbound.certified.margins import from_output_enclosures

        sharper = from_output_enclosures(lo, hi, np.asarray(data.labels)[idx], "interval")  # 1 or k rows
        m = m.refined(idx, sharper.lower, sharper.upper, "interval")
    return m


def float_margins(weights, data, fast=None) -> np.ndarray | None:
    """Float64 margins y f(X) (k outputs: f_y - max_{c != y} f_c; for choosing rho only): from the fast pass
    ``fast`` when given, else from the own-format model's float forward in torch (the models the fast pass
    does not cover)."""
    if fast is not None:
        return fast.margins(data)
    streamed = getattr(data, "kind", None) == "tokens" and hasattr(data, "blocks")  # a SampleStream of ids
    if data is None or (data.tokens is None and not streamed) or \
            CAPABILITY_FLOAT_FORWARD not in capabilities(weights.layout):
        return None
    path = weights.extra.get("weights_file")
    if not path:
        return None
    import torch  # only here: the own-format float forward; the rest of certify runs without torch

    from specbound.model import AnalysisTransformer

    model = AnalysisTransformer.load(path)
    k = weights.num_outputs
    f = np.empty((data.n, k) if k > 1 else data.n)
    with torch.no_grad():
        # in batches: memory stays bounded whatever n is (one batch's attention tensors at a time)
        for start, tokens in (((s, b.tokens) for s, b in data.blocks()) if streamed else [(0, np.asarray(data.tokens))]):
            for a in range(0, tokens.shape[0], FLOAT_MARGIN_BATCH):
                f[start + a:start + a + FLOAT_MARGIN_BATCH] = model(
                    torch.from_numpy(tokens[a:a + FLOAT_MARGIN_BATCH])).numpy()
    if k > 1:
        from specbound.certified.ramp_loss import float_margins_k

        return float_margins_k(f, data.labels)
    return f * np.asarray(data.labels, dtype=np.float64)


FLOAT_MARGIN_BATCH = 4096
"""Samples per batch of the float forward that chooses the margin."""


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


def enclose_all(weights, *, method: str = DEFAULT_ENCLOSURE, progress=None) -> list:
    """Certified singular-value enclosures of every covered matrix, in canonical order.

    ``method``: a route of :data:`specbound.certified.gram_enclosure.ROUTES`; the default is the
    batched Gram/eigen route, "eft" the older per-matrix residual route (same contract)."""
    out = enclose_matrices(weights.matrices, method=method)
    if progress is not None:
        progress.advance(len(out))
    return out


def certify(
    checkpoint: str | os.PathLike | None = None,
    settings: BoundSettings | None = None,
    data=None,
    *,
    n: int | None = None,
    delta: float | None = None,
    margin: float | None = None,
    empirical: float | None = None,
    readout: str | None = None,
    samples: int | None = None,
    seed: int | None = None,
    num_heads: int | None = None,
    plan=None,
    workers: int | None = None,
    show_progress: bool = False,
    forward: str = FORWARD_FAST,
    engine=None,
    scheduler: str | None = None,
    routes: tuple[str, ...] | None = None,
) -> Certification:
    """Certify the bound of ``checkpoint`` (None: the embedded default), like ``specbound certify``.

    Empirical term, first that applies: ``data`` (a .npz path, a DataSet or a mapping with ``labels``
    and ``tokens`` / ``inputs``: certified ramp loss, n = its size); ``empirical`` / ``settings.empirical`` (user-supplied, NOT certified; needs n);
    the training sample S when the model's record says ``"bound_sample": "train"`` (n = its size);
    fresh ``samples`` (default 2000) of the model's recorded task drawn with ``seed`` (default 3);
    else none (only complexity + confidence are certified; needs n).  The bound's settings are
    either ``settings`` (a BoundSettings; its n is replaced by the data's size when there is data) or
    the loose keywords ``n``, ``delta`` (default 0.05), ``margin``, ``empirical``, ``readout``
    (default "trained"), never both (a SpecboundError).  ``forward`` is the certified forward pass
    of the empirical term: "fast" (default, proofs_notes/fast_forward.md), "interval" or "arb".
    ``routes``: the theorem's routes to evaluate (:func:`routes_for`; default both when the pass gives
    margin enclosures, each at delta/2, the smaller bound reported).

    The enclosures and the Arb forward passes run as tasks of one engine
    (:func:`specbound.engine.open_engine`): in process by default, on ``workers`` processes of this
    machine (N >= 2: a local pool), on the Dask cluster at ``scheduler``, or on an ``engine`` the
    caller opened; the certificate is the same on each.  The client builds the structure only (the
    tasks read one layer each), and the whole model only when a certified forward pass needs it.
    """
    from specbound.engine import open_engine

    loose = {"n": n, "delta": delta, "margin": margin, "empirical": empirical, "readout": readout}
    if settings is not None:
        given = [k for k in LOOSE_SETTINGS if loose[k] is not None]
        if given:
            raise SpecboundError(f"give either settings= or the keywords {', '.join(given)}, not both "
                                 f"(settings holds {', '.join(LOOSE_SETTINGS)})")
    delta = DEFAULT_DELTA if delta is None else delta
    readout = READOUT_TRAINED if readout is None else readout
    with open_engine(workers=workers, scheduler=scheduler, engine=engine) as eng:
        return _certify(eng, checkpoint, settings, data, n=n, delta=delta, margin=margin, empirical=empirical,
                        samples=samples, seed=seed, num_heads=num_heads, readout=readout, plan=plan,
                        show_progress=show_progress, forward=forward, routes=routes)


def _certify(engine, checkpoint, settings, data, *, n, delta, margin, empirical, samples, seed, num_heads,
             readout, plan, show_progress, forward, routes=None) -> Certification:
    """:func:`certify` on ``engine``."""
    from specbound.engine import enclose_on, ramp_blocks, source_of

    clock = {}
    notes = {}
    t0 = time.perf_counter()
    refuse_outside_theorem(checkpoint)  # from the header: before any tensor is read
    weights = load_layers(checkpoint, (), num_heads=num_heads)  # the structure: no layer is read
    if settings is not None:
        n, delta, margin, empirical, readout = (settings.n, settings.delta, settings.margin,
                                                settings.empirical, settings.readout)
    source, dataset, n = resolve(weights, checkpoint, data, n=n, empirical=empirical, samples=samples,
                                 seed=seed)
    if settings is None:
        settings = BoundSettings(n=int(n), delta=delta, margin=margin, empirical=empirical, readout=readout)
    elif settings.n != n:
        settings = replace(settings, n=int(n))
    settings = charged_tries(settings, source)
    if dataset is not None:
        # the certified forward pass reads every layer: the client needs the weights themselves
        weights = load_weights(checkpoint, num_heads=num_heads)
    task_source = source_of(checkpoint, num_heads=num_heads, view=VIEW_ANALYSIS, sha256=weights.sha256,
                            built=weights if dataset is not None else None)
    clock["load"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    with progress_bar(len(weights.matrices), "enclosing singular values", enabled=show_progress,
                      unit="matrices") as bar:
        encs, weights = enclose_on(engine, task_source, weights, progress=bar)
    clock["enclose"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    fast = fast_pass_of(weights, dataset, forward)  # once: margins for the plan, then the certificate
    clock["fast_pass"] = time.perf_counter() - t2
    t2 = time.perf_counter()
    settings = replace(settings, routes=routes_for(routes, fast))
    occam = ROUTE_OCCAM in settings.routes
    if plan is None:
        margins = float_margins(weights, dataset, fast) if (settings.margin is None or occam) else None
        if settings.margin is None and margins is None:
            # nothing to choose the margin from: rho = 1 (stated in the output)
            settings = replace(settings, margin=1.0)
            notes["margin"] = "no margins to choose from: margin rho = 1 assumed"
        plan = choose_plan(weights, settings, encs, margins)
    elif occam and plan.occam is None:
        plan = replace(plan, occam=planner.choose_occam(weights, settings, encs, fast.margins(dataset)))
    clock["plan"] = time.perf_counter() - t2

    t3 = time.perf_counter()
    rho = power_ball(Fraction(settings.beta_rho), plan.k_rho)
    with progress_bar(dataset.n if dataset is not None else 0, "certified forward passes",
                      enabled=show_progress and dataset is not None, unit="samples") as bar:
        done = [0]

        def advance(k):
            bar.advance(k - done[0])
            done[0] = k

        blocks = ramp_blocks(engine, task_source, dataset, progress=advance)
        emp_ball, ramp = empirical_ball(weights, source, dataset, rho, progress=advance, forward=forward,
                                        fast=fast, map_blocks=blocks)
    if ramp is not None:
        source = replace(source, ramp=ramp)
    clock["empirical"] = time.perf_counter() - t3

    t4 = time.perf_counter()
    margin_encs = None
    if occam:  # the certified upper count K^ at the Occam margin comes from these (condition C4)
        margin_encs = occam_margins(fast, dataset, power_ball(Fraction(settings.beta_gamma), plan.occam.k_gamma))
    result = certify_bound(weights, settings, plan, encs, emp_ball, margins=margin_encs)
    bad = [name for name, ball in result.balls().items() if not ball.is_finite()]
    if bad:
        # a ball that is not finite certifies nothing; say so in one line instead of printing nan
        raise CertificationError(
            f"no finite bound: {', '.join(bad[:6])}{' ...' if len(bad) > 6 else ''} evaluated to "
            "non-finite balls (the weights or the margin are outside the range the planner handles)")
    if notes:
        result = replace(result, notes={**result.notes, **notes})
    clock["bound"] = time.perf_counter() - t4
    ckpt = {"path": "<embedded default>" if checkpoint is None else recorded_path(checkpoint),
            "embedded_default": checkpoint is None, "sha256": weights.sha256, "layout": weights.layout}
    scope, verdict = judge(weights, ckpt, source, result)
    return Certification(bound=result, weights=weights, checkpoint=ckpt, source=source,
                         enclosures=tuple(encs), scope=scope, verdict=verdict, seconds=clock)


def charged_tries(settings: BoundSettings, source: EmpiricalSource) -> BoundSettings:
    """``settings`` with K = the training record's ``tries`` when S is the training sample, so that
    the theorem is applied at delta / K (proofs_notes/selection.md, item 4).  Settings that already
    charge other tries than the record states are refused (one line): the record is the statement."""
    if source.kind != EMPIRICAL_TRAIN:
        return settings
    tries = int(source.detail.get("tries", 1))
    if settings.tries not in (1, tries):
        raise SpecboundError(f"the settings charge tries = {settings.tries} but the training record states "
                             f"K = {tries} bound samples tried")
    return replace(settings, tries=tries)


def judge(weights, checkpoint: dict, source: EmpiricalSource, bound) -> tuple[dict, Verdict]:
    """The scope block and the verdict of a certified result, each computed once.

    The verdict (:func:`specbound.verdict.verdict_of`): a bound or not, proven (every lemma-constant
    override at or above its proven value), vacuous, empirical term certified.  The scope block
    (:func:`specbound.scope.scope_block`): the analysis model of which checkpoint, what was
    kept/replaced/dropped, activation, read-out, S and n, whether the empirical term is certified,
    every override against its proven value, and the verdict's facts.  ``verify`` rebuilds both
    from the checkpoint with this same function."""
    st = bound.settings
    variant = getattr(weights, "variant", "plain") or "plain"
    overrides = []
    if st.overrides:  # SymPy only here: the proven values of the overridden constants
        from specbound.derivation.theorem import overrides_record

        overrides = overrides_record(st.overrides, weights.activation, variant)
    verdict = verdict_of(
        bound_upper=None if bound.bound is None else exact_value(bound.bound.upper()),
        partial_upper=exact_value(bound.partial.upper()),
        proven=all(o["proven"] is True for o in overrides), empirical_certified=source.certified)
    return scope_block(
        checkpoint=str(checkpoint["path"]), sha256=str(checkpoint["sha256"]), model=weights.scope,
        variant=variant, activation=weights.activation, readout=bound.readout,
        empirical_kind=source.kind, empirical_certified=source.certified, empirical_detail=source.detail,
        n=st.n, margin=decimal_up(bound.rho, 12),
        overrides=overrides, verdict=verdict), verdict
