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
from flint import arb, arb_mat, ctx, fmpq

from specbound.certified.forward import (
    DEFAULT_PREC, ArbNetwork, Margin, embedded_input_ball, input_ball,
)
from specbound.certified.fast_forward import (
    NotApplicable, margins_of_rows, margins_of_tokens, prepare_rows, prepare_tokens,
)
from specbound.certified.forward_ls import certified_forward, network_for
from specbound.certified.margins import exact_float_sum
from specbound.dataset import DataSet
from specbound.errors import LayoutError, SpecboundError
from specbound.matrices import AnalysisWeights
from specbound.vocabulary import FORWARD_ARB, FORWARD_FAST, FORWARD_METHODS


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


def _inputs_of(data: DataSet, weights: AnalysisWeights, embedding) -> Callable[[int], arb_mat]:
    if data.inputs is not None:
        if data.inputs.shape[2] != weights.width:
            raise LayoutError(
                f"{data.source}: inputs have width {data.inputs.shape[2]}, the network width is {weights.width}"
            )
        return lambda i: input_ball(data.inputs[i])
    if embedding is None:
        E = weights.extra.get("embedding.E")
        P = weights.extra.get("embedding.P")
    else:
        E, P = embedding
    if E is None:
        raise LayoutError(
            f"{data.source}: the data holds token ids but the model has no fixed embedding 'embedding.E'"
        )
    E = np.asarray(E, dtype=np.float64)
    P = None if P is None else np.asarray(P, dtype=np.float64)
    if E.ndim != 2 or E.shape[1] != weights.width:
        raise LayoutError(f"embedding E has shape {E.shape}, expected (vocab, {weights.width})")
    if P is not None and (P.ndim != 2 or P.shape[1] != weights.width):
        raise LayoutError(f"embedding P has shape {P.shape}, expected (T, {weights.width})")
    if not (np.isfinite(E).all() and (P is None or np.isfinite(P).all())):
        raise LayoutError(f"{data.source}: the model's embedding tables have NaN/Inf entries")
    tokens = np.asarray(data.tokens)
    if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer):
        raise LayoutError(f"{data.source}: token ids must be an integer array (n, T), got {tokens.dtype} {tokens.shape}")
    T = tokens.shape[1]
    V = E.shape[0]
    if tokens.size and (tokens.min() < 0 or tokens.max() >= V):
        # a negative id would silently index row V - 1 of a float table
        raise LayoutError(f"{data.source}: token ids must lie in [0, {V}) for this model, "
                          f"found [{tokens.min()}, {tokens.max()}]")
    if P is not None and P.shape[0] > 0 and T > P.shape[0]:
        raise LayoutError(
            f"{data.source}: sequence length {T} exceeds the model's positional embedding ({P.shape[0]} rows)"
        )
    return lambda i: embedded_input_ball(data.tokens[i], E, P)


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
            u = certified_forward(net, rows_of(i), prec=prec)
            if int(data.labels[i]) < 0:
                u = -u
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
    binary64 program with a proven a-priori error bound, proofs_notes/fast_forward.md, falling back to
    "arb" for models it does not cover) or "arb" (every sample in Arb ball arithmetic; ``prec``
    applies to it and to the samples the fast pass redoes).  ``fast``: the
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
    _inputs_of(data, weights, embedding)  # validate before any work (and before any task is sent)
    if embedding is not None:
        map_blocks = None  # an engine's tasks embed with the model's own fixed embedding only
    n = int(data.labels.shape[0])
    if forward == FORWARD_FAST and n > 0:
        try:
            return _fast_ramp_loss(weights, data, r, embedding, prec, progress, began, fast, map_blocks)
        except NotApplicable:
            pass  # a model or input the fast pass does not cover: every sample in Arb
    if map_blocks is not None and n > 0:
        size = max(1, -(-n // ENGINE_CHUNKS))
        parts = map_blocks([list(range(a, min(n, a + size))) for a in range(0, n, size)], r, prec)
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


def _embedding_of(weights, embedding):
    if embedding is None:
        return weights.extra.get("embedding.E"), weights.extra.get("embedding.P")
    return embedding


@dataclass(frozen=True, eq=False)
class FastPass:
    """The fast forward pass of one model over one sample: float outputs ``f`` with the exact point
    ``epsilon`` such that ``|f[i] - f(X_i)| <= epsilon`` for every sample i (proofs_notes/fast_forward.md).

    Computed once per certify run: its signed margins choose the margin rho (floats only choose) and
    the same outputs, with ``epsilon``, certify the ramp loss at the chosen rho."""

    f: np.ndarray
    epsilon: arb

    def margins(self, data: DataSet) -> np.ndarray:
        """Float margins ``y_i f[i]`` (an exact sign flip of ``f``), for choosing rho only.  A sample the
        fast pass left as NaN (its run met a non-finite value; the certified loss redoes it in Arb)
        counts as margin 0 here, the choice's most pessimistic value (ramp loss 1 at every rho)."""
        g = np.where(np.asarray(data.labels) < 0, -self.f, self.f)
        return np.where(np.isfinite(g), g, 0.0)


def fast_pass(weights: AnalysisWeights, data: DataSet, embedding=None) -> FastPass:
    """The fast forward pass of ``weights`` over ``data`` (NotApplicable for a model or input it does
    not cover; then the Arb pass is the route)."""
    _inputs_of(data, weights, embedding)  # the same input checks as the Arb pass
    if data.inputs is not None:
        fast = prepare_rows(weights, data.inputs.shape[1])
        f = margins_of_rows(fast, data.inputs)
    else:
        E, P = _embedding_of(weights, embedding)
        tokens = np.asarray(data.tokens)
        fast, table = prepare_tokens(weights, E, P, tokens)
        f = margins_of_tokens(fast, table, tokens)
    return FastPass(f, fast.epsilon)


def _fast_ramp_loss(weights, data, r: arb, embedding, prec, progress, began,
                    done: FastPass | None = None, map_blocks=None) -> RampLossCertificate:
    """certified_ramp_loss by the fast pass (proofs_notes/fast_forward.md step 8); ``done``: the pass
    already computed for exactly these weights and data (else it is computed here); ``map_blocks``:
    an engine's runner for the samples redone in Arb."""
    n = int(data.labels.shape[0])
    fast = done if done is not None else fast_pass(weights, data, embedding)
    f = fast.f
    if f.shape != (n,):
        raise ValueError("a fast pass of another sample")
    eps = fast.epsilon  # exact point
    eps_f, rho_f = _float_toward(eps, math.inf), float(r.mid())
    g = np.where(np.asarray(data.labels) < 0, -f, f)  # exact sign flip
    finite = np.isfinite(g)
    with np.errstate(invalid="ignore"):
        # floats only *choose* the classes; each class is checked exactly below
        redo = ~finite | (np.abs(g) <= 2 * eps_f) | (np.abs(g - rho_f) <= 2 * eps_f)
        zero = ~redo & (g > rho_f)
        one = ~redo & (g < 0)
    mid = ~redo & ~zero & ~one
    with ctx.workprec(max(prec, 128)):
        if zero.any() and not (arb(float(g[zero].min())) - eps >= r):
            redo, zero = redo | zero, np.zeros_like(zero)
        if one.any() and not (arb(float(g[one].max())) + eps < 0):
            redo, one = redo | one, np.zeros_like(one)
        if mid.any() and not (arb(float(g[mid].min())) - eps > 0 and arb(float(g[mid].max())) + eps < r):
            redo, mid = redo | mid, np.zeros_like(mid)
    redo_idx = np.flatnonzero(redo).tolist()
    if redo_idx and map_blocks is not None:
        size = max(1, -(-len(redo_idx) // ENGINE_CHUNKS))
        arb_part = _merged(map_blocks([redo_idx[a:a + size] for a in range(0, len(redo_idx), size)], r, prec))
    elif redo_idx:
        arb_part = _block_of(weights, data, r, embedding, prec, redo_idx)
    else:
        arb_part = _Partial(Fraction(0), Fraction(0), 0, 0, 0, 0.0)
    m, ones = int(mid.sum()), int(one.sum())
    S = exact_float_sum(g[mid])
    with ctx.workprec(max(prec, 128)):
        S_b, e_b = arb(fmpq(S.numerator, S.denominator)), eps
        hi_b = ones + m + (m * e_b - S_b) / r + arb(fmpq(arb_part.upper.numerator, arb_part.upper.denominator))
        lo_b = ones + m - (m * e_b + S_b) / r + arb(fmpq(arb_part.lower.numerator, arb_part.lower.denominator))
        upper = (hi_b / n).upper()
        lower = (lo_b / n).lower()
        if upper > 1:
            upper = arb(1)
        if lower < 0:
            lower = arb(0)
    if progress is not None:
        progress(n)
    return RampLossCertificate(
        upper=upper,
        lower=lower,
        n=n,
        rho=r,
        undecided=arb_part.undecided,
        errors01=ones + arb_part.errors01,
        max_radius=max(eps_f, arb_part.max_radius),
        prec=prec,
        seconds=time.perf_counter() - began,
        forward=FORWARD_FAST,
        epsilon=eps_f,
        redone=len(redo_idx),
    )


__all__: Sequence[str] = (
    "FastPass",
    "RampLossCertificate",
    "certified_ramp_loss",
    "fast_pass",
    "ramp_lower",
    "ramp_upper",
)
