"""The fast certified forward pass over a sample held in memory: :class:`FastPass` and
:func:`held_fast_pass` (the a-priori pass of proofs_notes/fast_forward.md where its error is small, else the
per-sample pass of proofs_notes/interval_forward.md), with the input checks shared by every pass.

:func:`specbound.certified.ramp_loss.fast_pass` is the entry point: it runs this pass on a
:class:`~specbound.dataset.DataSet` and :func:`specbound.certified.stream_pass.stream_fast_pass` on a
:class:`~specbound.sample_stream.SampleStream` (block by block, the same numbers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from flint import arb, arb_mat

from specbound.certified.forward import embedded_input_ball, input_ball
from specbound.certified.fast_forward import (
    FastForward, FastNetwork, NotApplicable, check_float_environment, error_budget, margins_of_rows,
    margins_of_tokens, prepare_rows, token_table,
)
from specbound.certified.interval_forward import output_enclosures
from specbound.certified.interval_forward import prepare as interval_prepare
from specbound.certified.interval_adjoint import refined_pass
from specbound.certified.margins import MarginEnclosures, from_center_radius, from_output_enclosures
from specbound.dataset import DataSet
from specbound.errors import LayoutError
from specbound.matrices import AnalysisWeights
from specbound.vocabulary import FORWARD_FAST, FORWARD_INTERVAL


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


def _embedding_of(weights, embedding):
    if embedding is None:
        return weights.extra.get("embedding.E"), weights.extra.get("embedding.P")
    return embedding


APRIORI_RELATIVE_LIMIT = 1e-3
"""The a-priori pass runs first only when its ``epsilon <= APRIORI_RELATIVE_LIMIT * ||w||`` (margins are
of the order of ||w||); a larger epsilon would leave most samples undecided, so the per-sample pass
runs on every sample instead.  A choice of speed only: both passes are certified."""

STRADDLER_REFINE = 0.0
"""The samples a first pass leaves near a breakpoint are redone by the per-sample pass with the adjoint
refinement (proofs_notes/interval_adjoint.md) run as far as it helps (goal 0), before any goes to Arb.  It
is not on for every sample: on the L4 N64 residual model it costs about 2.7x the per-layer pass, past the
3x-a-float-forward budget, and margins far from every breakpoint gain nothing from it (README, (e))."""


@dataclass(frozen=True, eq=False)
class FastPass:
    """The fast certified forward pass of one model over one sample: float outputs ``f`` (n,) and either
    the a-priori exact point ``epsilon`` with ``|f[i] - f(X_i)| <= epsilon`` (proofs_notes/fast_forward.md)
    or per-sample enclosures ``lower[i] <= f(X_i) <= upper[i]`` (proofs_notes/interval_forward.md).  A
    k-row read-out (k >= 2; the per-sample pass only): ``f``, ``lower``, ``upper`` of shape (n, k), one
    column per output, labels the classes 0..k-1 (proofs_notes/k_class.md).

    Computed once per certify run: its signed margins choose the margin rho (floats only choose) and
    the same outputs certify the ramp loss at the chosen rho.  ``refine(indices)`` runs the per-sample
    pass with the adjoint refinement (proofs_notes/interval_adjoint.md) on some samples, those the first
    pass leaves near a breakpoint (None when it does not cover the model)."""

    f: np.ndarray
    epsilon: arb | None = None
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None
    refine: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None

    @property
    def method(self) -> str:
        return "fast" if self.lower is None else "interval"

    def margins(self, data: DataSet) -> np.ndarray:
        """Float margins ``y_i f[i]`` (an exact sign flip of ``f``; k outputs: ``f_y - max_{c != y} f_c``), for
        choosing rho only.  A sample the fast pass left as NaN (its run met a non-finite value; the
        certified loss redoes it in Arb) counts as margin 0 here, the choice's most pessimistic value
        (ramp loss 1 at every rho)."""
        labels = np.asarray(data.labels)
        if self.f.ndim == 2:
            g = float_margins_k(self.f, labels)
        else:
            g = np.where(labels < 0, -self.f, self.f)
        return np.where(np.isfinite(g), g, 0.0)

    def enclosures(self, data: DataSet) -> MarginEnclosures:
        """Certified margin enclosures of ``y_i f(X_i)`` (:mod:`specbound.certified.margins`)."""
        labels = np.asarray(data.labels)
        if self.lower is not None:
            return from_output_enclosures(self.lower, self.upper, labels, "interval")
        g = np.where(labels < 0, -self.f, self.f)  # a NaN stays NaN: [-inf, +inf], redone below
        return from_center_radius(g, self.epsilon, "fast")


def float_margins_k(f: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Float margins ``f_y - max_{c != y} f_c`` of float outputs ``f`` (n, k), labels 0..k-1 (for choosing)."""
    f = np.asarray(f, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    rows = np.arange(f.shape[0])
    others = np.where(np.arange(f.shape[1])[None, :] == y[:, None], -np.inf, f)
    with np.errstate(invalid="ignore"):
        return f[rows, y] - others.max(axis=1)


def _interval_runner(weights, data: DataSet, embedding, table=None, lazy: bool = False, refine: float | None = None,
                     cache: dict | None = None):
    """``indices -> (lower, upper)`` of the outputs by the per-sample pass (shape (m,) for one read-out
    vector, (m, k) for k rows); NotApplicable if it does not
    cover the model (when ``lazy``, raised by the first call, which also prepares the network).
    ``table``: the token table of all of ``data`` (:func:`~specbound.certified.fast_forward.token_table`);
    ``refine``: the adjoint refinement's relative width goal (:func:`~specbound.certified.interval_adjoint.refined_pass`; None: off);
    ``cache``: a dict shared by the runners of blocks of one sample (the prepared pass is made once)."""
    state: dict = {} if cache is None else cache
    key = ("interval", refine)  # the prepared pass depends on the weights and the goal only

    def prepared():
        if key not in state:
            state[key] = interval_prepare(weights) if refine is None else refined_pass(weights, refine)
        return state[key]

    def run(idx):
        ip, idx = prepared(), np.asarray(idx, dtype=np.int64)
        if data.inputs is not None:
            lo, hi = output_enclosures(*ip.rows(np.asarray(data.inputs)[idx]))
        else:
            E, P = _embedding_of(weights, embedding)
            lo, hi = output_enclosures(*ip.tokens(E, P, np.asarray(data.tokens)[idx], table=table))
        return (lo[:, 0], hi[:, 0]) if ip.net.k == 1 else (lo, hi)

    if not lazy:
        prepared()
    return run


def held_fast_pass(weights: AnalysisWeights, data: DataSet, embedding=None, method: str = FORWARD_FAST,
                   *, tokens_table: tuple | None = None, cache: dict | None = None) -> FastPass:
    """The fast forward pass of ``weights`` over ``data``: the a-priori pass where it covers the model and
    its epsilon is small (:data:`APRIORI_RELATIVE_LIMIT`; the per-sample pass then redoes only samples near
    a breakpoint), else the per-sample pass on every sample (``method="interval"`` forces that);
    NotApplicable when neither covers the model or input.  ``data`` is held in memory (a stream is passed
    block by block by :func:`specbound.certified.stream_pass.stream_fast_pass`).  ``tokens_table``: the
    :func:`~specbound.certified.fast_forward.token_table` ``(rows, delta0, R0)`` to use (it must cover every
    (position, token) pair of ``data``; None: built from ``data``); ``cache``: a dict shared by the calls on the
    blocks of one sample with one table (the prepared passes and their error bounds, made once: they depend
    on the weights, the table and T only)."""
    _inputs_of(data, weights, embedding)  # the same input checks as the Arb pass
    fast = rows = table = None
    if data.inputs is None:  # one table of (position, token) rows for both passes
        if tokens_table is None:
            E, P = _embedding_of(weights, embedding)
            E = np.asarray(E, dtype=np.float64)
            P = None if P is None else np.asarray(P, dtype=np.float64)
            tokens_table = token_table(E, P, np.asarray(data.tokens))
        rows, delta0, R0 = tokens_table
        table = (rows, delta0)
    if method != FORWARD_INTERVAL:
        if cache is not None and "a-priori" in cache:
            fast = cache["a-priori"]
            check_float_environment()  # the mode could have changed since the pass was prepared
        else:
            try:
                if data.inputs is not None:
                    fast = prepare_rows(weights, data.inputs.shape[1])
                else:
                    check_float_environment()
                    net = FastNetwork.from_weights(weights)
                    fast = FastForward(net, error_budget(net, data.tokens.shape[1], delta0, R0))
            except NotApplicable:
                fast = None
            if cache is not None:
                cache["a-priori"] = fast
    if fast is not None and fast.epsilon <= APRIORI_RELATIVE_LIMIT * float(np.linalg.norm(fast.net.readout)):
        refine = _interval_runner(weights, data, embedding, table, lazy=True, refine=STRADDLER_REFINE, cache=cache)
    else:
        try:
            refine = _interval_runner(weights, data, embedding, table, cache=cache)
        except NotApplicable:
            if fast is None:
                raise
            refine = None
        if refine is not None:
            lo, hi = refine(np.arange(int(data.labels.shape[0])))
            with np.errstate(invalid="ignore", over="ignore"):
                f = np.where(np.isfinite(lo) & np.isfinite(hi), lo / 2 + hi / 2, np.nan)
            refined = _interval_runner(weights, data, embedding, table, lazy=True, refine=STRADDLER_REFINE, cache=cache)
            return FastPass(f, None, lo, hi, refine=refined)
    f = (margins_of_rows(fast, data.inputs) if data.inputs is not None
         else margins_of_tokens(fast, rows, np.asarray(data.tokens)))
    return FastPass(f, fast.epsilon, refine=refine)


__all__ = ["APRIORI_RELATIVE_LIMIT", "STRADDLER_REFINE", "FastPass", "NotApplicable", "float_margins_k",
           "held_fast_pass"]
