"""The one execution engine: in process (default) or a Dask cluster (``--workers N`` / ``--scheduler``).

Work is cut into *tasks* that describe what to compute, never the arrays: a :class:`Source`
(checkpoint path, heads, view, SHA-256) plus a layer and the canonical indices of the matrices of
one kind in it.  A worker opens the checkpoint itself (safetensors are memory-mapped), builds only
that layer's matrices (:func:`specbound.checkpoint.load_layers`; the other layers are zero-memory
placeholders), computes, and returns plain values: certified enclosures in their exact wire form
(:mod:`specbound.certified.serialisation`, bit-identical balls), float spectra as arrays, ramp-loss
partial sums as exact fractions.  The client reassembles them in canonical order and does every Arb
reduction itself, so the certificate is the one the in-process run gives.

:func:`open_engine` gives :class:`InProcess` without a cluster (Dask is then not imported at all),
a ``LocalCluster(n_workers=N, threads_per_worker=1, processes=True)`` for ``workers=N``, or a client
of the scheduler at ``scheduler``.  A failing task is retried (Dask's ``retries``; a worker that
dies is rescheduled by Dask itself); a task that still fails ends the run with one
:class:`~specbound.errors.SpecboundError` line, and no partial result is returned.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import SpecboundError, one_line

RETRIES = 2
"""Times a failed task is resubmitted (Dask ``retries=``) before the run fails."""

INSTALL_HINT = "pip install 'specbound[cluster]'"


@dataclass(frozen=True)
class Source:
    """What a task needs to open the checkpoint on a worker: an absolute path (None: the embedded
    default), ``num_heads``, the ``view`` and the SHA-256 the client computed."""

    checkpoint: str | None
    num_heads: int | None
    view: str
    sha256: str


def source_of(checkpoint, *, num_heads: int | None, view: str, sha256: str) -> Source:
    """The :class:`Source` of a checkpoint path (absolute, so workers find it); a one-line
    SpecboundError for in-memory weights, which cannot be sent as a path."""
    if checkpoint is None:
        return Source(None, num_heads, view, sha256)
    if not isinstance(checkpoint, (str, os.PathLike)):
        raise SpecboundError("--workers/--scheduler need a checkpoint on disk (workers open it by its path); "
                             "in-memory weights run in process")
    path = Path(checkpoint)
    return Source(str(path.resolve()) if path.exists() else str(checkpoint), num_heads, view, sha256)


# ------------------------------------------------------------------------------------------------
# engines


class InProcess:
    """Runs every task here, in order (the default: no cluster, no Dask import)."""

    name = "in-process"
    distributed = False

    def map(self, fn: Callable, items: Sequence, *, weights: Sequence[int] | None = None,
            progress=None) -> list:
        """``[fn(*item) for item in items]``; ``progress.advance(weights[i])`` after item i."""
        out = []
        for i, item in enumerate(items):
            out.append(fn(*item))
            if progress is not None:
                progress.advance(1 if weights is None else weights[i])
        return out


class DaskEngine:
    """Runs tasks on a Dask cluster through ``client`` (and closes ``cluster`` if it started one)."""

    distributed = True

    def __init__(self, client, cluster=None, name: str = "dask") -> None:
        self.client = client
        self.cluster = cluster
        self.name = name

    def map(self, fn: Callable, items: Sequence, *, weights: Sequence[int] | None = None,
            progress=None) -> list:
        """The results of ``fn(*item)`` in the order of ``items``, computed on the workers.

        ``progress.advance(weights[i])`` as each task completes (any order).  The first task that
        fails after its retries cancels the rest and raises one SpecboundError line (the task's own
        SpecboundError when it raised one, e.g. a bad tensor)."""
        from distributed import as_completed

        futures = [self.client.submit(fn, *item, retries=RETRIES, pure=False) for item in items]
        position = {f.key: i for i, f in enumerate(futures)}
        try:
            for fut in as_completed(futures):
                if fut.status != "finished":
                    raise _task_error(fut, fn)
                if progress is not None:
                    i = position[fut.key]
                    progress.advance(1 if weights is None else weights[i])
            return [f.result() for f in futures]
        except BaseException:
            self.client.cancel(futures)
            raise

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            if self.cluster is not None:
                self.cluster.close()


def _task_error(fut, fn) -> BaseException:
    """The error that ends the run for a failed future (one line)."""
    try:
        exc = fut.exception()
    except BaseException as why:  # cancelled, or the scheduler went away
        exc = why
    if isinstance(exc, SpecboundError):
        return exc
    kind = type(exc).__name__
    if kind == "KilledWorker":
        return SpecboundError(f"{fn.__name__}: a worker died on this task repeatedly (out of memory?): "
                              f"{one_line(exc)}")
    return SpecboundError(f"{fn.__name__} failed on a worker: {kind}: {one_line(exc)}")


def _dask():
    try:
        import distributed
    except ImportError:
        raise SpecboundError(f"--workers/--scheduler need Dask: {INSTALL_HINT}") from None
    return distributed


@contextmanager
def open_engine(workers: int | None = None, scheduler: str | None = None) -> Iterator[Any]:
    """The engine for ``workers`` (a local cluster of that many single-threaded worker processes)
    or ``scheduler`` (an existing cluster's address, e.g. ``tcp://host:8786``); neither: in process.
    Whatever the block raises, the cluster this opened is closed."""
    if workers is not None and scheduler is not None:
        raise SpecboundError("give either --workers or --scheduler, not both")
    if workers is None and scheduler is None:
        yield InProcess()
        return
    if workers is not None and workers < 1:
        raise SpecboundError(f"--workers must be >= 1, got {workers}")
    distributed = _dask()
    import logging

    cluster = None
    try:
        if workers is not None:
            cluster = distributed.LocalCluster(n_workers=int(workers), threads_per_worker=1, processes=True,
                                               dashboard_address=":0", silence_logs=logging.ERROR)
            client = distributed.Client(cluster)
            name = f"local cluster of {workers} worker{'s' if workers > 1 else ''}"
        else:
            client = distributed.Client(scheduler, timeout=30)
            name = f"cluster at {scheduler}"
    except (OSError, TimeoutError, ValueError) as exc:
        _close_started(cluster, workers is not None)
        where = f"the scheduler at {scheduler}" if scheduler else "a local cluster"
        raise SpecboundError(f"cannot start {where}: {one_line(exc)}") from None
    except BaseException:  # Ctrl-C or SIGTERM while the cluster starts: stop what started, quietly
        _close_started(cluster, workers is not None)
        raise
    engine = DaskEngine(client, cluster, name)
    try:
        yield engine
    finally:
        engine.close()


def _close_started(cluster, local: bool) -> None:
    """Close ``cluster``, or (``local``: this call was starting one) the local clusters a constructor
    interrupted half-way left behind."""
    from distributed.deploy.spec import SpecCluster

    started = list(getattr(SpecCluster, "_instances", ())) if local else []
    for c in ([cluster] if cluster is not None else []) + started:
        try:
            c.close()
        except Exception:  # noqa: BLE001 - already closing; nothing more to do
            pass


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """``--workers N`` and ``--scheduler ADDRESS`` (shared by certify, spectra and proxies)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--workers", default=None, metavar="N",
                       help=f"run the tasks on a local Dask cluster of N worker processes ({INSTALL_HINT})")
    group.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="run the tasks on an existing Dask cluster, e.g. tcp://host:8786 (workers must "
                            "see the checkpoint at the same path)")


def engine_of_args(args: argparse.Namespace):
    """:func:`open_engine` for the parsed ``--workers`` / ``--scheduler`` (validated, one line)."""
    workers = getattr(args, "workers", None)
    if workers is not None:
        try:
            workers = int(str(workers))
        except ValueError:
            raise SpecboundError(f"--workers must be an integer, got {workers!r}") from None
        if workers < 1:
            raise SpecboundError(f"--workers must be >= 1, got {workers}")
    return open_engine(workers, getattr(args, "scheduler", None))


# ------------------------------------------------------------------------------------------------
# tasks (run on the workers; module-level so that they pickle by reference)

_CACHE: dict = {}
"""The last weights a worker built (one entry: a worker holds one layer, or one full model)."""


def _weights(source: Source, layer: int | None):
    """The weights of ``source`` with ``layer`` built (None: every layer), cached for the next task."""
    key = (source, layer)
    weights = _CACHE.get(key)
    if weights is None:
        _CACHE.clear()  # release the previous layer before reading the next
        from .checkpoint import load_layers, load_weights

        if layer is None:
            weights = load_weights(source.checkpoint, num_heads=source.num_heads, view=source.view)
        else:
            weights = load_layers(source.checkpoint, (layer,), num_heads=source.num_heads,
                                  view=source.view, sha256=source.sha256)
        _CACHE.clear()  # (a worker with several threads: keep one entry)
        _CACHE[key] = weights
    return weights


def enclose_task(source: Source, layer: int, indices: tuple[int, ...]) -> tuple[list[dict], list[tuple]]:
    """Certified enclosures of the matrices ``indices`` (all of ``layer``), as exact wire records,
    and for each matrix whether its left and right factors are exactly zero (right: None if dense)."""
    import numpy as np

    from .certified.gram_enclosure import enclose_matrices
    from .certified.serialisation import enclosure_to_wire

    weights = _weights(source, layer)
    mats = [weights.matrices[j] for j in indices]
    zero = [(not np.any(m.left), None if m.right is None else not np.any(m.right)) for m in mats]
    return [enclosure_to_wire(e) for e in enclose_matrices(mats)], zero


def spectra_task(source: Source, layer: int, indices: tuple[int, ...], dtype: str) -> tuple:
    """Float singular values and norms of the matrices ``indices`` (numpy, as ``spectra`` computes)."""
    from .numeric.spectra import compute_spectra_numpy

    weights = _weights(source, layer)
    s = compute_spectra_numpy([weights.matrices[j] for j in indices], dtype=dtype)
    return (s.values, s.counts, s.frobenius, s.norm_21, s.norm_11)


def ramp_task(source: Source, data, rho_wire, prec: int, indices) -> Any:
    """Exact ramp-loss partial sums of the samples ``indices`` (the Arb forward pass)."""
    from .certified.ramp_loss import _block_of
    from .certified.serialisation import arb_from_wire

    return _block_of(_weights(source, None), data, arb_from_wire(rho_wire), None, prec, list(indices))


# ------------------------------------------------------------------------------------------------
# the client's side


def tasks_of(weights) -> list[tuple[int, tuple[int, ...]]]:
    """(layer, canonical indices) per task: one task per layer and matrix kind (all heads together)."""
    groups: dict[tuple[int, str], list[int]] = {}
    for j, m in enumerate(weights.matrices):
        groups.setdefault((m.layer, m.kind), []).append(j)
    return [(layer, tuple(idx)) for (layer, _), idx in groups.items()]


def enclose_on(engine, source: Source, weights, progress=None) -> tuple[list, Any]:
    """(enclosures of every matrix of ``weights`` in canonical order, ``weights`` with its
    placeholders marking which factors are exactly zero), computed by ``engine``'s tasks.

    ``weights`` is the structure (:func:`specbound.checkpoint.load_layers` with no layer); the float
    planner reads from matrix values only whether a factor is exactly zero, which the marked
    placeholders (:func:`specbound.adapters.helpers.placeholder`) answer as the real factors would."""
    from dataclasses import replace

    from .adapters.helpers import is_placeholder, placeholder
    from .certified.serialisation import enclosure_from_wire

    tasks = tasks_of(weights)
    parts = engine.map(enclose_task, [(source, layer, idx) for layer, idx in tasks],
                       weights=[len(idx) for _, idx in tasks], progress=progress)
    out: list = [None] * len(weights.matrices)
    mats = list(weights.matrices)
    for (_, idx), (wires, zero) in zip(tasks, parts):
        for j, w, (left_zero, right_zero) in zip(idx, wires, zero):
            out[j] = enclosure_from_wire(w)
            m = mats[j]
            if is_placeholder(m.left):
                right = None if m.right is None else placeholder(m.right.shape, 0.0 if right_zero else 1.0)
                mats[j] = replace(m, left=placeholder(m.left.shape, 0.0 if left_zero else 1.0), right=right)
    return out, replace(weights, matrices=tuple(mats))


def spectra_of(engine, source: Source, weights, dtype: str = "float64", progress=None):
    """The :class:`specbound.numeric.spectra.Spectra` of ``weights`` computed by ``engine``'s tasks."""
    import numpy as np

    from .numeric.spectra import Spectra

    tasks = tasks_of(weights)
    parts = engine.map(spectra_task, [(source, layer, idx, dtype) for layer, idx in tasks],
                       weights=[len(idx) for _, idx in tasks], progress=progress)
    count = len(weights.matrices)
    width = max((min(m.shape) for m in weights.matrices), default=0)
    values = np.zeros((count, width), dtype=np.float64)
    counts = np.zeros(count, dtype=np.int64)
    frob, n21, n11 = np.zeros(count), np.zeros(count), np.zeros(count)
    for (_, idx), (v, c, f, a, b) in zip(tasks, parts):
        rows = list(idx)
        values[rows, : v.shape[1]] = v
        counts[rows], frob[rows], n21[rows], n11[rows] = c, f, a, b
    return Spectra(tuple(weights.matrices), values, counts, frob, n21, n11)


def ramp_blocks(engine, source: Source, data, progress: Callable[[int], None] | None = None):
    """A ``map_blocks`` for :func:`specbound.certified.ramp_loss.certified_ramp_loss`: the Arb
    forward pass over chunks of samples as ``engine`` tasks (partials in chunk order)."""
    from .certified.serialisation import arb_to_wire

    def run(chunks: list[list[int]], rho, prec: int) -> list:
        future_data = engine.client.scatter(data, broadcast=False) if engine.distributed else data
        rho_wire = arb_to_wire(rho)
        done = [0]

        class _Counter:
            def advance(self, k):
                done[0] += k
                if progress is not None:
                    progress(done[0])

        return engine.map(ramp_task, [(source, future_data, rho_wire, prec, tuple(c)) for c in chunks],
                          weights=[len(c) for c in chunks], progress=_Counter())

    return run


__all__ = ["DaskEngine", "InProcess", "Source", "add_engine_arguments", "enclose_on", "engine_of_args",
           "open_engine", "ramp_blocks", "source_of", "spectra_of", "tasks_of"]
