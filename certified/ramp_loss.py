"""The certified empirical ramp loss: an upper bound of the theorem's empirical term.

The term is ``(1/n) sum_i l_rho(y_i f(X_i))`` with the ramp ``l_rho(u) = min(1, max(0, 1 - u/rho))``
(proofs_notes/theory.md section 1; the SymPy expression is ``specbound.derivation.rademacher.RAMP``).
The outputs ``f(X_i)`` come from the certified forward pass (:mod:`specbound.certified.forward`).
The ramp is nonincreasing in ``u`` (for ``rho > 0``), so ``l_rho(lower(u-ball))`` bounds each
sample's loss; it is evaluated rigorously and the upper endpoints are summed exactly
(proofs_notes/certified_forward.md).  An execution engine may run blocks of samples elsewhere
(``map_blocks``): the sums are exact, so the result does not depend on how the samples are split.

Public API: :func:`ramp_upper`, :func:`ramp_lower`, :class:`RampLossCertificate`,
:func:`certified_ramp_loss`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from flint import arb, ctx, fmpq

from specbound.certified.forward import DEFAULT_PREC, Margin
from specbound.certified.fast_forward import NotApplicable
from specbound.certified.fast_pass import (  # re-exported: the pass's names stay importable from here
    APRIORI_RELATIVE_LIMIT, STRADDLER_REFINE, FastPass, _inputs_of, float_margins_k, held_fast_pass,
)
from specbound.certified.forward_ls import certified_outputs, network_for
from specbound.certified.arb import float_lower, float_upper
from specbound.certified.margins import (
    errors_lower, exact_float_sum, from_output_enclosures, margin_ball,  # exact_float_sum: re-exported
    max_radius, ramp_loss_sums, undecided,
)
from specbound.certified.stream_pass import check_stream, stream_fast_pass
from specbound.dataset import DataSet
from specbound.sample_stream import SampleStream
from specbound.errors import SpecboundError
from specbound.matrices import AnalysisWeights
from specbound.vocabulary import FORWARD_ARB, FORWARD_FAST, FORWARD_INTERVAL, FORWARD_METHODS


def _margin_ball(rho: Margin) -> arb:
    """``rho`` as a ball containing the exact real margin (floats exact, strings as decimals)."""
    r = rho if isinstance(rho, arb) else arb(rho)
    if not (r > 0):
        raise SpecboundError(f"margin rho must be a certainly positive real, got {rho!r}")
    return r


def ramp_upper(u: arb, rho: arb) -> arb:
    """An exact point ``>= l_rho(v)`` for every real ``v`` in the ball ``u`` (``rho > 0``).

    ``l_rho`` is nonincreasing, so ``l_rho(v) <= l_rho(lower(u))``; ``1 - lower(u)/rho`` is then
    evaluated in Arb and its upper endpoint clamped to ``[0, 1]`` (clamping is monotone).  A
    non-finite ball gives 1, the ramp's maximum.
    """
    if not u.is_finite():
        return arb(1)
    r = (1 - u.lower() / rho).upper()
    if r >= 1:
        return arb(1)
    if r <= 0:
        return arb(0)
    return r


def ramp_lower(u: arb, rho: arb) -> arb:
    """An exact point ``<= l_rho(v)`` for every real ``v`` in ``u`` (mirror of :func:`ramp_upper`)."""
    if not u.is_finite():
        return arb(0)
    r = (1 - u.upper() / rho).lower()
    if r >= 1:
        return arb(1)
    if r <= 0:
        return arb(0)
    return r


def _exact_fraction(point: arb) -> Fraction:
    """The exact rational value of a radius-0 ball (an endpoint returned by lower()/upper())."""
    man, exp = point.mid().man_exp()
    return Fraction(int(man)) * Fraction(2) ** int(exp)


@dataclass(frozen=True)
class RampLossCertificate:
    """Certified enclosure of the empirical ramp loss ``(1/n) sum_i l_rho(y_i f(X_i))``.

    ``upper`` (the number the bound uses) and ``lower`` are exact points (Arb balls of radius 0)
    with ``lower <= empirical loss <= upper`` for the exact real network.  ``undecided`` counts
    samples whose margin ball ``y_i f(X_i)`` contains 0 or is not finite (sign not certified);
    ``errors01`` counts samples certainly misclassified (``y f < 0`` certainly); ``max_radius`` is
    the largest margin-ball radius (float, informational only); ``seconds`` the wall time.
    """

    upper: arb
    lower: arb
    n: int
    rho: arb
    undecided: int
    errors01: int
    max_radius: float
    prec: int
    seconds: float
    forward: str = FORWARD_ARB
    """The certified forward pass used: "arb" (every sample in Arb) or "fast" (binary64 program with the
    a-priori bound ``epsilon``; samples within ``2 epsilon`` of 0 or rho redone in Arb)."""
    epsilon: float = 0.0
    """The fast pass's a-priori margin error bound (a float >= the exact point; 0 for "arb")."""
    redone: int = 0
    """Samples of a fast run evaluated by the Arb pass (near a breakpoint or non-finite)."""
    interval: int = 0
    """Samples of a fast run whose enclosure came from the per-sample pass (proofs_notes/interval_forward.md):
    all of them when it ran first, else those the a-priori epsilon left near a breakpoint.  ``epsilon`` is
    then the largest per-sample radius when the a-priori pass did not run."""

    @property
    def per_sample_seconds(self) -> float:
        return self.seconds / self.n

    @property
    def upper_float(self) -> float:
        """The least binary64 number ``>= upper`` (safe to hand to float code)."""
        return _float_toward(self.upper, math.inf)

    @property
    def lower_float(self) -> float:
        """The greatest binary64 number ``<= lower``."""
        return _float_toward(self.lower, -math.inf)


def _float_toward(point: arb, direction: float) -> float:
    """Round an exact point to binary64 in ``direction`` (compared exactly, subnormals included)."""
    exact = _exact_fraction(point)
    f = float(exact)  # correctly rounded to nearest
    if (direction > 0 and Fraction(f) < exact) or (direction < 0 and Fraction(f) > exact):
        f = math.nextafter(f, direction)
    return f


@dataclass(frozen=True)
class _Partial:
    """Exact partial sums of per-sample ramp bounds over a block of samples (picklable)."""

    upper: Fraction
    lower: Fraction
    count: int
    undecided: int
    errors01: int
    max_radius: float


MapBlocks = Callable[[list, arb, int], list]
"""An engine's runner of Arb blocks: ``(chunks of sample indices, rho, prec) -> [_Partial per chunk]``."""

ENGINE_CHUNKS = 64
"""Chunks the samples of an Arb pass are cut into when an engine runs them (balance and progress)."""


def _merged(parts: list[_Partial]) -> _Partial:
    """One partial of several (exact sums, counts added, largest radius)."""
    return _Partial(sum((p.upper for p in parts), Fraction(0)), sum((p.lower for p in parts), Fraction(0)),
                    sum(p.count for p in parts), sum(p.undecided for p in parts),
                    sum(p.errors01 for p in parts), max((p.max_radius for p in parts), default=0.0))


def _block(weights, data, rho, embedding, prec, start, stop) -> _Partial:
    """Ramp bounds of samples ``start..stop-1``, summed exactly."""
    return _block_of(weights, data, rho, embedding, prec, range(start, stop))


def _block_of(weights, data, rho, embedding, prec, indices) -> _Partial:
    """Ramp bounds of the samples ``indices`` by the Arb pass, summed exactly."""
    r = _margin_ball(rho)
    net = network_for(weights)
    rows_of = _inputs_of(data, weights, embedding)
    hi = lo = Fraction(0)
    undecided = errors = 0
    max_radius = 0.0
    with ctx.workprec(prec):
        for i in indices:
            # the margin y f (one read-out vector) or f_y - max_{c != y} f_c (k rows; k_class.md (e))
            u = margin_ball(certified_outputs(net, rows_of(i), prec=prec), int(data.labels[i]))
            hi += _exact_fraction(ramp_upper(u, r))
            lo += _exact_fraction(ramp_lower(u, r))
            if not u.is_finite() or u.contains(0):
                undecided += 1
            elif u < 0:
                errors += 1
            max_radius = max(max_radius, float(u.rad()) if u.is_finite() else math.inf)
    return _Partial(hi, lo, len(indices), undecided, errors, max_radius)


def certified_ramp_loss(
    weights: AnalysisWeights,
    data: DataSet,
    rho: Margin,
    *,
    embedding: tuple[np.ndarray, np.ndarray | None] | None = None,
    prec: int = DEFAULT_PREC,
    progress: Callable[[int], None] | None = None,
    forward: str = FORWARD_FAST,
    fast: FastPass | None = None,
    map_blocks: MapBlocks | None = None,
) -> RampLossCertificate:
    """Certified enclosure of the empirical ramp loss of ``weights`` on ``data`` at margin ``rho``.

    ``data`` is a :class:`specbound.dataset.DataSet` (token ids or already-embedded rows, labels
    +-1).  Token ids are embedded with ``embedding = (E, P)`` or, by default, with the model's
    fixed ``weights.extra['embedding.E'/'embedding.P']``.  ``rho`` is a positive float (exact), a
    decimal string (enclosed), or an ``arb``.
    ``progress(k)`` is called with the number of samples done so far.  ``forward``: "fast" (default;
    binary64 programs with proven error bounds: the a-priori bound of proofs_notes/fast_forward.md where it
    is small, else the per-sample bound of proofs_notes/interval_forward.md; samples whose enclosure
    contains 0 or rho go to the per-sample pass, then to "arb"; models neither covers use "arb"),
    "interval" (the per-sample pass on every sample, then "arb" where needed) or "arb" (every sample in
    Arb ball arithmetic; ``prec`` applies to it and to the samples the fast route redoes).  ``fast``: the
    :func:`fast_pass` of exactly these ``weights`` and ``data``, when the caller already has it.
    ``map_blocks`` (an execution engine's, e.g. :func:`specbound.engine.ramp_blocks`; None: every
    block here) runs the Arb pass: it is called as ``map_blocks(chunks, rho_ball, prec)`` with lists of
    sample indices and must return :func:`_block_of`'s partial sums of each chunk, in order (the sums
    are exact, so the result is the same however the samples are split).

    Guarantee: ``result.lower <= (1/n) sum_i l_rho(y_i f(X_i)) <= result.upper`` for the exact real
    network and inputs ``X_i = Pi(rows_i)``.
    """
    began = time.perf_counter()
    if forward not in FORWARD_METHODS:
        raise SpecboundError(f"forward pass must be one of {FORWARD_METHODS}, got {forward!r}")
    r = _margin_ball(rho)
    streamed = isinstance(data, SampleStream)
    if streamed:
        check_stream(data, weights, embedding)
        map_blocks = None  # a stream's rows are read here, block by block; no task holds the sample
    else:
        _inputs_of(data, weights, embedding)  # validate before any work (and before any task is sent)
    if embedding is not None:
        map_blocks = None  # an engine's tasks embed with the model's own fixed embedding only
    n = int(data.labels.shape[0])
    if forward in (FORWARD_FAST, FORWARD_INTERVAL) and n > 0:
        try:
            return _fast_ramp_loss(weights, data, r, embedding, prec, progress, began, fast, map_blocks, forward)
        except NotApplicable:
            pass  # a model or input the fast pass does not cover: every sample in Arb
    if map_blocks is not None and n > 0:
        size = max(1, -(-n // ENGINE_CHUNKS))
        parts = map_blocks([list(range(a, min(n, a + size))) for a in range(0, n, size)], r, prec)
    elif streamed:
        parts = [_block(weights, block, r, embedding, prec, 0, block.n) for _, block in data.blocks()]
        if progress is not None:
            progress(n)
    else:
        parts = [_block(weights, data, r, embedding, prec, 0, n)]
        if progress is not None:
            progress(n)
    hi = sum((p.upper for p in parts), Fraction(0)) / n
    lo = sum((p.lower for p in parts), Fraction(0)) / n
    with ctx.workprec(prec):
        upper = arb(fmpq(hi.numerator, hi.denominator)).upper()
        lower = arb(fmpq(lo.numerator, lo.denominator)).lower()
    return RampLossCertificate(
        upper=upper,
        lower=lower,
        n=n,
        rho=r,
        undecided=sum(p.undecided for p in parts),
        errors01=sum(p.errors01 for p in parts),
        max_radius=max(p.max_radius for p in parts),
        prec=prec,
        seconds=time.perf_counter() - began,
    )


def fast_pass(weights: AnalysisWeights, data: DataSet | SampleStream, embedding=None,
              method: str = FORWARD_FAST) -> FastPass:
    """The fast certified forward pass of ``weights`` over ``data``
    (:func:`specbound.certified.fast_pass.held_fast_pass` on a sample held in memory,
    :func:`specbound.certified.stream_pass.stream_fast_pass` on a :class:`SampleStream`, block by block with
    the same numbers); NotApplicable when no fast pass covers the model or input."""
    if isinstance(data, SampleStream):
        return stream_fast_pass(weights, data, embedding, method)
    return held_fast_pass(weights, data, embedding, method)


def _fast_ramp_loss(weights, data, r: arb, embedding, prec, progress, began,
                    done: FastPass | None = None, map_blocks=None, method: str = FORWARD_FAST) -> RampLossCertificate:
    """certified_ramp_loss by the fast route: the margin enclosures of the fast pass (a-priori or
    per-sample), the samples whose enclosure contains 0 or rho redone by the per-sample pass (after the
    a-priori one) and then in Arb; the ramp loss of the enclosures summed exactly
    (:func:`specbound.certified.margins.ramp_loss_sums`).  ``done``: the pass already computed for exactly
    these weights and data; ``map_blocks``: an engine's runner for the samples redone in Arb."""
    n = int(data.labels.shape[0])
    fast = done if done is not None else fast_pass(weights, data, embedding, method)
    if fast.f.shape[:1] != (n,):
        raise ValueError("a fast pass of another sample")
    thresholds = (0.0, float_lower(r), float_upper(r))
    m = fast.enclosures(data)
    refined = 0
    idx = m.straddling(thresholds)
    if idx.size and fast.refine is not None:
        try:
            lo, hi = fast.refine(idx)
        except NotApplicable:
            pass  # the per-sample pass does not cover this model: Arb decides these samples
        else:
            sharper = from_output_enclosures(lo, hi, np.asarray(data.labels)[idx], "interval")  # 1 or k rows
            m = m.refined(idx, sharper.lower, sharper.upper, "interval")
            refined = int(idx.size)
            idx = m.straddling(thresholds)
    redo_idx = idx.tolist()
    if redo_idx and map_blocks is not None:
        size = max(1, -(-len(redo_idx) // ENGINE_CHUNKS))
        arb_part = _merged(map_blocks([redo_idx[a:a + size] for a in range(0, len(redo_idx), size)], r, prec))
    elif redo_idx and isinstance(data, SampleStream):  # only those rows are read back
        arb_part = _block_of(weights, data.take(np.asarray(redo_idx)), r, embedding, prec, range(len(redo_idx)))
    elif redo_idx:
        arb_part = _block_of(weights, data, r, embedding, prec, redo_idx)
    else:
        arb_part = _Partial(Fraction(0), Fraction(0), 0, 0, 0, 0.0)
    keep = np.ones(n, dtype=bool)
    keep[idx] = False
    kept = m.subset(keep)
    up_sum, lo_sum = ramp_loss_sums(kept, r, max(prec, 128))
    with ctx.workprec(max(prec, 128)):
        hi_b = up_sum + arb(fmpq(arb_part.upper.numerator, arb_part.upper.denominator))
        lo_b = lo_sum + arb(fmpq(arb_part.lower.numerator, arb_part.lower.denominator))
        upper = (hi_b / n).upper()
        lower = (lo_b / n).lower()
        if upper > 1:
            upper = arb(1)
        if lower < 0:
            lower = arb(0)
    if progress is not None:
        progress(n)
    radius = float(max_radius(kept)) if kept.n else 0.0
    if fast.epsilon is not None:  # the a-priori radius (the enclosures add the outward rounding of g +- eps)
        radius = eps_f = _float_toward(fast.epsilon, math.inf)
    else:
        eps_f = radius
    return RampLossCertificate(
        upper=upper,
        lower=lower,
        n=n,
        rho=r,
        undecided=undecided(kept) + arb_part.undecided,
        errors01=errors_lower(kept) + arb_part.errors01,
        max_radius=max(radius, arb_part.max_radius),
        prec=prec,
        seconds=time.perf_counter() - began,
        forward=FORWARD_FAST,
        epsilon=eps_f,
        redone=len(redo_idx),
        interval=refined if fast.lower is None else n,
    )


__all__: Sequence[str] = (
    "APRIORI_RELATIVE_LIMIT",
    "STRADDLER_REFINE",
    "FastPass",
    "float_margins_k",
    "RampLossCertificate",
    "certified_ramp_loss",
    "fast_pass",
    "ramp_lower",
    "ramp_upper",
)
