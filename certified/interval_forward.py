"""Certified forward pass with a per-sample, per-row error bound, vectorised over whole batches.

:func:`interval_outputs` runs the binary64 program of proofs_notes/interval_forward.md on a batch (every
variant: plain, residual, causal, ls, ls_residual; GELU, tanh-GELU, ReLU, SiLU; a k-row read-out) and,
alongside, a binary64 radius per row and stage from the values that occur: row norms, score
magnitudes, the spread of the values under each attention row, the norms before each projection (the
stages' programs and radius formulas: :mod:`specbound.certified.interval_stages`).  Batches: the programs
run one cache-sized batch at a time (:func:`batch_size`), the radius formulas on a group of batches.
Every radius operation is rounded upward (:mod:`specbound.certified.directed`), and every constant is an
exact Arb point rounded up once per model (:mod:`specbound.certified.interval_network`).  The result per
sample and class is an enclosure ``[lo, hi]`` of the exact real output, or ``[-inf, +inf]`` when a bound
overflowed (the sample is then not certified; the caller redoes it in Arb).  A pass with a ``refiner``
(:func:`specbound.certified.interval_adjoint.refined_pass`) then narrows the radius of each batch by the
first-order (adjoint) bound of proofs_notes/interval_adjoint.md; this module does not import it.

Public API: :class:`IntervalPass`, :func:`prepare`, :func:`interval_outputs`, :func:`outputs_of_rows`,
:func:`outputs_of_tokens`, :func:`output_enclosures`, :func:`rows_of`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from specbound.certified.directed import add_up, down, float_up, gamma_up, mul_up, norm_up, up
from specbound.certified.fast_forward import NotApplicable, check_float_environment, token_table
from specbound.certified.interval_network import IntervalLayer, IntervalNetwork
from specbound.certified.interval_stages import (
    TINY, _attention_program, _feed_forward_program, _finite, _project_program, _rec, _residual_program,
    attention_stage_radius, ff_stage_radius,
)
from specbound.matrices import AnalysisWeights

MAX_INPUT = 2.0**500
"""Float input rows with an entry above this are not certified (their squared norms could overflow)."""

BATCH = 1024
"""The most samples per batch (every sample's program is the same whatever the batch)."""

BATCH_BYTES = 2**21
""":func:`batch_size` keeps the widest array of a batch within this many bytes (about one core's L2 cache):
larger batches amortise numpy's per-call overhead on the small per-row bound arrays, but arrays beyond
the cache, and beyond what the allocator keeps mapped, cost more in memory traffic and page faults than
that overhead (benchmarks/bench_interval_forward.py: 128 samples of the L4 N64 models run 1.3-2x faster
per sample than 1024)."""


GROUP = 8
"""The radius formulas run on groups of this many batches at once (:func:`_chunked_outputs`)."""


def batch_size(net: IntervalNetwork, T: int) -> int:
    """Samples per batch for sequences of length ``T``: the largest power of two <= :data:`BATCH` (and
    >= 32) whose widest array (rows, feed-forward rows, scores, value rows) fits :data:`BATCH_BYTES`."""
    widest = max([net.width] + [max(lay.ff[0].shape[1], lay.num_heads * max(T, lay.dv)) for lay in net.layers])
    b = BATCH
    while b > 32 and b * T * widest * 8 > BATCH_BYTES:
        b //= 2
    return b

def _layer(net: IntervalNetwork, lay: IntervalLayer, x, delta, nx, last: bool, ok, tr) -> SimpleNamespace:
    """One layer: programs, then the radii at ``delta``; returns the layer's record (programs and radii)."""
    st = _layer_programs(net, lay, x, nx, last, ok, tr is None)  # the trace records the rows before the sums
    _layer_radii(net, lay, st, delta, tr)
    return st


def _layer_programs(net: IntervalNetwork, lay: IntervalLayer, x, nx, last: bool, ok, in_place: bool) -> SimpleNamespace:
    """One layer's binary64 programs (no radius): the record the radius formulas and the adjoint read."""
    st = SimpleNamespace()
    st.ap = _attention_program(net, lay, x, nx, last, ok)
    att = st.ap.out
    if net.residual:
        st.rp1 = _residual_program(att, st.ap.xq, ok, in_place)
        att = st.rp1.s
    st.pp1 = _project_program(att, ok)
    if net.residual:
        st.rp1.ns = st.pp1.nu_hi
    st.fp = _feed_forward_program(lay, st.pp1.y, ok)
    z = st.fp.z
    if net.residual:
        st.rp2 = _residual_program(z, st.pp1.y, ok, in_place)
        z = st.rp2.s
    st.pp2 = _project_program(z, ok)
    if net.residual:
        st.rp2.ns = st.pp2.nu_hi
    return st


def _layer_radii(net: IntervalNetwork, lay: IntervalLayer, st: SimpleNamespace, delta, tr) -> None:
    """One layer's radius formulas at the input row radii ``delta``, into its record ``st``."""
    st.delta = delta
    st.att = attention_stage_radius(net, lay, st, delta, tr)
    _rec(tr, "y_hat", st.pp1.y)
    st.ff = ff_stage_radius(net, lay, st, st.att.out, tr)


# Fields of a layer's record that the radius formulas read (all per row, per head or per sample): a chunked
# pass keeps only these of each chunk, joins them, and evaluates the formulas once on the joined batch.
_SMALL = {
    "ap": ("T", "Tq", "first", "same", "nx", "nq", "rot", "Qn", "Kn", "Vn", "Hn", "Hlo", "A", "omega", "n_cat"),
    "rp1": ("ns",), "rp2": ("ns",), "pp1": ("nu_lo", "nu_hi"), "pp2": ("nu_lo", "nu_hi"),
    "fp": ("ny", "ng", "nh", "b_inf", "g_inf", "act"), "act": ("F", "nt", "y_inf"),
}


def _small(rec: SimpleNamespace, kind: str = "st") -> SimpleNamespace:
    """The fields of ``rec`` in :data:`_SMALL` (any other field the formulas name only under a trace: None)."""
    out = SimpleNamespace(p=None, a=None, y=None, x=None, u=None, b=None, z=None, hid=None, t=None, g=None,
                          kept=None, q_hat=None, k_hat=None, v=None, q=None, k=None, h=None, out=None)
    for name in _SMALL.get(kind, tuple(vars(rec))):
        value = getattr(rec, name, None)
        setattr(out, name, _small(value, name) if isinstance(value, SimpleNamespace) else value)
    return out


def _join(parts: list):
    """Chunks' small records joined along the samples (arrays concatenated, scalars from the first)."""
    first = parts[0]
    if isinstance(first, np.ndarray):
        return np.concatenate(parts, axis=0)
    if isinstance(first, SimpleNamespace):
        return SimpleNamespace(**{k: _join([vars(p)[k] for p in parts]) for k in vars(first)})
    if isinstance(first, tuple):
        return tuple(_join(list(z)) for z in zip(*parts))
    return first


def interval_outputs(net: IntervalNetwork, x0: np.ndarray, delta0: np.ndarray, ok: np.ndarray | None = None,
                     trace: dict | None = None, tape: list | None = None, chunk: int | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(f_hat, radius, ok)`` for the projected input rows ``x0`` (B, T, N) with row radii ``delta0``
    (B, T): ``f_hat``, ``radius`` of shape (B, k) with ``|f_hat - f_c(X)| <= radius`` for every sample with
    ``ok`` (the note's claim); ``ok`` False marks samples whose bounds overflowed (not certified).
    ``trace``: a dict that receives every intermediate and every term, per layer (for the tests);
    ``tape``: a list that receives each layer's record (programs and radii) for the adjoint refinement;
    ``chunk``: without trace or tape, run the programs that many samples at a time (:func:`_chunked_outputs`)."""
    B, T, N = x0.shape
    ok = np.ones(B, dtype=bool) if ok is None else ok.copy()
    if chunk is not None and chunk < B and trace is None and tape is None:
        return _chunked_outputs(net, x0, delta0, ok, chunk)
    x, delta = x0, delta0
    nx = norm_up(x)
    L = net.num_layers
    for l, lay in enumerate(net.layers):
        tr = None if trace is None else trace.setdefault(f"L{l}", {})
        _rec(tr, "x", x)
        _rec(tr, "delta", delta)
        _finite(ok, nx)
        st = _layer(net, lay, x, delta, nx, l == L - 1, ok, tr)
        st.x, st.nx = x, nx
        if tape is not None:
            tape.append(st)
        x, delta = st.pp2.y, st.ff.out
        nx = norm_up(x)
    # the last layer computed only the read-out row; with L = 0 the read-out token is read directly
    tau = x.shape[1] - 1 if (net.causal and L == 0) else 0
    return _readout(net, x[:, tau], delta[:, tau], nx[:, tau], ok, trace, tape)


def _chunk_programs(net: IntervalNetwork, x0, ok, rows: slice, keep) -> tuple[np.ndarray, np.ndarray]:
    """Every layer's programs on the samples ``rows`` of ``x0`` (their overflow checks land in ``ok[rows]``, a
    view), handing each layer's record to ``keep(l, st, x, nx)`` with the layer's input rows and norms; returns
    the read-out rows and their norms (step 13's inputs)."""
    L = net.num_layers
    x, okc = x0[rows], ok[rows]
    nx = norm_up(x)
    for l, lay in enumerate(net.layers):
        _finite(okc, nx)
        st = _layer_programs(net, lay, x, nx, l == L - 1, okc, True)
        keep(l, st, x, nx)
        x = st.pp2.y
        nx = norm_up(x)
    tau = x.shape[1] - 1 if (net.causal and L == 0) else 0
    return x[:, tau], nx[:, tau]


def _chunked_outputs(net: IntervalNetwork, x0, delta0, ok, chunk: int):
    """:func:`interval_outputs` with every layer's programs run ``chunk`` samples at a time (their arrays
    stay in cache) and the radius formulas once on the whole batch (numpy's per-call overhead on the
    small per-row arrays amortised): the same programs and formulas, each sample's values unchanged."""
    B, T, N = x0.shape
    L = net.num_layers
    parts: list[list] = [[] for _ in range(L)]
    xr, nr = [], []
    for a in range(0, B, chunk):
        xa, na = _chunk_programs(net, x0, ok, slice(a, a + chunk), lambda l, st, x, nx: parts[l].append(_small(st)))
        xr.append(xa)
        nr.append(na)
    delta = delta0
    for l, lay in enumerate(net.layers):
        st = _join(parts[l])
        _layer_radii(net, lay, st, delta, None)
        delta = st.ff.out
    tau = T - 1 if (net.causal and L == 0) else 0
    return _readout(net, np.concatenate(xr), delta[:, tau], np.concatenate(nr), ok, None, None)


def _readout(net: IntervalNetwork, xr, dr, nr, ok, trace, tape):
    """Step 13: the read-out rows ``xr`` (B, N) with radii ``dr`` and norms ``nr``."""
    N = xr.shape[-1]
    _finite(ok, nr)
    f = xr @ net.readout.T
    tr = None if trace is None else trace.setdefault("out", {})
    _rec(tr, "x", xr)
    _rec(tr, "delta", dr)
    rounding = _rec(tr, "rnd", mul_up(nr, gamma_up(N)))
    rad = _rec(tr, "rad", add_up(mul_up(add_up(dr, rounding)[:, None], net.readout_norms[None, :]), TINY))
    ok &= np.isfinite(f).all(axis=1) & np.isfinite(rad).all(axis=1)
    if tape is not None:
        tape.append(SimpleNamespace(x=xr, delta=dr, nx=nr, rounding=rounding))
    return f, rad, ok


# --------------------------------------------------------------------------- inputs and batches


@dataclass(frozen=True, eq=False)
class IntervalPass:
    """The per-sample pass prepared for one model (network and constants built once)."""

    net: IntervalNetwork
    refiner: Callable[..., np.ndarray] | None = None
    """``None``: the per-layer radius only; else called as ``refiner(net, tape, f, radius, ok)`` on each batch
    and returning radii ``<= radius`` that still enclose (the adjoint refinement of
    proofs_notes/interval_adjoint.md, set by :func:`specbound.certified.interval_adjoint.refined_pass`)."""
    goal: float = 0.0
    """The refiner's relative goal: ``> 0`` lets a batch run without a tape when the previous batch had few
    samples whose radius missed ``goal (1 + |f|)`` (those are then run again, with a tape, on their own)."""

    def rows(self, rows: np.ndarray, batch: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return outputs_of_rows(self, rows, batch)

    def tokens(self, E, P, tokens, batch: int | None = None, table=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return outputs_of_tokens(self, E, P, tokens, batch, table)


def prepare(weights: AnalysisWeights | IntervalNetwork) -> IntervalPass:
    """The per-sample pass of ``weights`` (NotApplicable for what it does not cover)."""
    check_float_environment()
    net = weights if isinstance(weights, IntervalNetwork) else IntervalNetwork.from_weights(weights)
    return IntervalPass(net)


RERUN_BELOW = 0.25
"""With a goal, a batch runs first without a tape (the per-layer records of every layer kept for the refiner
cost memory traffic) when fewer than this fraction of the previous batch's samples missed the goal; the
samples missing it are then run again with a tape on their own (a float choice of work, never a bound)."""


def _missing(ip: IntervalPass, f: np.ndarray, rad: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Samples (certified) whose radius misses ``goal (1 + |f|)`` for some read-out row."""
    return ok & ~(rad <= ip.goal * (1.0 + np.abs(f))).all(axis=1)


def _batch(ip: IntervalPass, x0: np.ndarray, delta0: np.ndarray, ok: np.ndarray | None = None,
           state: dict | None = None, chunk: int | None = None):
    """The pass on one group of samples, refined when ``ip.refiner`` is set: the programs ``chunk`` samples at
    a time (None: all at once); a tape (for the refiner) is kept per chunk.  ``state`` carries the fraction
    of the previous group's samples that missed the goal (see :data:`RERUN_BELOW`)."""
    B = x0.shape[0]
    chunk = chunk or B
    ok = np.ones(B, dtype=bool) if ok is None else ok
    with np.errstate(over="ignore", invalid="ignore"):
        if ip.refiner is None:
            return interval_outputs(ip.net, x0, delta0, ok, chunk=chunk)
        state = {} if state is None else state
        if ip.goal > 0 and state.get("missed", 1.0) < RERUN_BELOW:
            f, rad, ok = interval_outputs(ip.net, x0, delta0, ok, chunk=chunk)
            miss = _missing(ip, f, rad, ok)
            state["missed"] = miss.mean()
            if miss.any():  # those samples again, with a tape: their own enclosures replace the first ones
                idx = np.flatnonzero(miss)
                f[idx], rad[idx], ok[idx], _ = _taped(ip, x0[idx], delta0[idx], ok[idx], chunk)
            return f, rad, ok
        f, rad, ok, missed = _taped(ip, x0, delta0, ok, chunk)
        state["missed"] = missed
        return f, rad, ok


def _taped(ip: IntervalPass, x0, delta0, ok, chunk: int):
    """The pass with a tape and the refiner, ``chunk`` samples at a time; also the fraction of the samples
    whose per-layer radius (before the refiner) missed the goal.  With several chunks the programs run
    chunk by chunk (:func:`_chunk_tapes`), the radius formulas once on the group and the refiner on each
    chunk's tape: the same programs and formulas, each sample's values unchanged."""
    B = x0.shape[0]
    if chunk < B:
        f, rad, ok, tapes = _chunk_tapes(ip.net, x0, delta0, ok, chunk)
    else:
        tape: list = []
        f, rad, ok = interval_outputs(ip.net, x0, delta0, ok, tape=tape)
        tapes = [(slice(0, B), tape)]
    missed = int(_missing(ip, f, rad, ok).sum()) if ip.goal > 0 else 0
    out = rad.copy()
    for rows, tape in tapes:
        out[rows] = ip.refiner(ip.net, tape, f[rows], rad[rows], ok[rows])
    return f, out, ok, (missed / max(B, 1) if ip.goal > 0 else 1.0)


def _chunk_tapes(net: IntervalNetwork, x0, delta0, ok, chunk: int):
    """:func:`interval_outputs` with a tape per chunk of ``chunk`` samples: every layer's programs run chunk by
    chunk (their arrays stay in cache), the radius formulas once on the whole group (numpy's per-call overhead
    on the small per-row arrays amortised, as in :func:`_chunked_outputs`), and each chunk's tape then receives
    its rows of every record the formulas wrote.  Returns ``(f, radius, ok, [(rows, tape), ...])``."""
    B, T, N = x0.shape
    L = net.num_layers
    tapes = [(slice(a, min(a + chunk, B)), []) for a in range(0, B, chunk)]
    xr, nr, inputs = [], [], []
    for rows, tape in tapes:
        def keep(l, st, x, nx, tape=tape):
            tape.append(st)
            inputs.append((st, x, nx))  # set after the join (the formulas do not read the rows)

        xa, na = _chunk_programs(net, x0, ok, rows, keep)
        xr.append(xa)
        nr.append(na)
    delta = delta0
    for l, lay in enumerate(net.layers):
        joined = _join([_small(tape[l]) for _, tape in tapes])
        _layer_radii(net, lay, joined, delta, None)
        joined.delta = delta
        for rows, tape in tapes:
            _copy_new_fields(joined, tape[l], rows, B)
        delta = joined.ff.out
    for st, x, nx in inputs:
        st.x, st.nx = x, nx
    tau = T - 1 if (net.causal and L == 0) else 0
    fin: list = []
    f, rad, ok = _readout(net, np.concatenate(xr), delta[:, tau], np.concatenate(nr), ok, None, fin)
    for rows, tape in tapes:
        tape.append(rows_of(fin[0], rows, B))
    return f, rad, ok, tapes


def rows_of(obj, rows, B: int):
    """The samples ``rows`` (a slice or indices) of a record: every array of the pass's records is batch-first
    (each sample computed on its own rows), so they are the rows ``rows`` of every array whose first axis has
    length ``B``; namespaces and tuples are walked, anything else kept."""
    if isinstance(obj, np.ndarray):
        return obj[rows] if obj.ndim and obj.shape[0] == B else obj
    if isinstance(obj, SimpleNamespace):
        return SimpleNamespace(**{k: rows_of(v, rows, B) for k, v in vars(obj).items()})
    if isinstance(obj, tuple):
        return tuple(rows_of(v, rows, B) for v in obj)
    return obj


def _copy_new_fields(joined: SimpleNamespace, rec: SimpleNamespace, rows: slice, B: int) -> None:
    """Give a chunk's record ``rec`` its rows of every field the radius formulas added to the group's joined
    record (the radii, and what they cached in the program records: key maxima, radius-free terms)."""
    for name, value in vars(joined).items():
        mine = getattr(rec, name, None)
        if mine is None:
            setattr(rec, name, rows_of(value, rows, B))
        elif isinstance(value, SimpleNamespace) and isinstance(mine, SimpleNamespace):
            _copy_new_fields(value, mine, rows, B)


def input_rows(rows: np.ndarray, net: IntervalNetwork) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 12 (float rows taken as exact): ``(x0, delta0, ok)`` with ``x0`` the program's ``Pi(rows)``,
    ``delta0 = e_Pi min(1, N(r)) + tau`` per row, and ``ok`` False for samples with an entry above
    :data:`MAX_INPUT` (computed on zeros instead; not certified)."""
    with np.errstate(over="ignore", invalid="ignore"):
        ok = (np.abs(rows) <= MAX_INPUT).reshape(rows.shape[0], -1).all(axis=1)
        r = np.where(ok[:, None, None], rows, 0.0)
        x0 = r / np.maximum(np.sqrt(np.einsum("...i,...i->...", r, r)), 1.0)[..., None]
        delta0 = add_up(mul_up(np.minimum(norm_up(r), 1.0), net.e_pi), TINY)
    return x0, delta0, ok


def outputs_of_rows(ip: IntervalPass, rows: np.ndarray, batch: int | None = None):
    """(f_hat, radius, ok) for float input rows (n, T, N) before Pi (step 12, float-row path); ``batch``
    samples at a time (None: :func:`batch_size`)."""
    rows = np.asarray(rows, dtype=np.float64)
    n, T, N = rows.shape
    if N != ip.net.width:
        raise NotApplicable(f"inputs have width {N}, the network {ip.net.width}")
    batch = batch or batch_size(ip.net, T)
    k = ip.net.k
    f, rad, okall = np.empty((n, k)), np.empty((n, k)), np.empty(n, dtype=bool)
    state: dict = {}
    group = batch * GROUP
    for a in range(0, n, group):
        x0, delta0, ok = input_rows(rows[a:a + group], ip.net)
        f[a:a + group], rad[a:a + group], okall[a:a + group] = _batch(ip, x0, delta0, ok, state, batch)
    return f, rad, okall


def outputs_of_tokens(ip: IntervalPass, E: np.ndarray, P: np.ndarray | None, tokens: np.ndarray,
                      batch: int | None = None, table: tuple | None = None):
    """(f_hat, radius, ok) for token sequences (n, T): the binary64 table of (position, token) rows
    of fast_forward.md step 4 (Arb; or ``table = (rows, delta0)`` of :func:`token_table` for a superset of
    these tokens), then the pass."""
    tokens = np.asarray(tokens)
    if table is None:
        E = np.asarray(E, dtype=np.float64)
        P = None if P is None else np.asarray(P, dtype=np.float64)
        table = token_table(E, P, tokens)[:2]
    table, delta0 = table
    d0 = float_up(delta0)
    n, T = tokens.shape
    batch = batch or batch_size(ip.net, T)
    pos = np.arange(T)
    k = ip.net.k
    f, rad, okall = np.empty((n, k)), np.empty((n, k)), np.empty(n, dtype=bool)
    state: dict = {}
    group = batch * GROUP
    for a in range(0, n, group):
        x0 = table[pos, tokens[a:a + group]]
        f[a:a + group], rad[a:a + group], okall[a:a + group] = _batch(ip, x0, np.full(x0.shape[:2], d0), None,
                                                                      state, batch)
    return f, rad, okall


def output_enclosures(f: np.ndarray, rad: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Binary64 endpoints ``lo <= f_c(X) <= hi`` (step 13: ``down(fl(f - r))``, ``up(fl(f + r))``),
    ``-inf`` / ``+inf`` for samples not certified."""
    with np.errstate(over="ignore", invalid="ignore"):
        lo = np.where(ok[:, None], down(f - rad), -np.inf)
        hi = np.where(ok[:, None], up(f + rad), np.inf)
    lo = np.where(np.isnan(lo), -np.inf, lo)
    hi = np.where(np.isnan(hi), np.inf, hi)
    return lo, hi


__all__ = (
    "BATCH",
    "IntervalPass",
    "batch_size",
    "input_rows",
    "interval_outputs",
    "output_enclosures",
    "outputs_of_rows",
    "outputs_of_tokens",
    "prepare",
    "rows_of",
)
