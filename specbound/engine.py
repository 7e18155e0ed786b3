"""The one execution engine: every task of certify, spectra and proxies runs through an :class:`Engine`.

An engine has two operations, written once for every scheduler:

* ``map(fn, items)``: the results of ``fn(*item)`` for each item, in the order of ``items``;
* ``share(value)``: a handle to ``value`` that tasks receive in place of it (sent once where that
  saves sending it with every task).

Three engines implement them over a :class:`concurrent.futures.Executor` (the way Dask's own
synchronous scheduler is just another executor): :class:`InProcess` (a synchronous executor: each
task runs here when it is submitted; the default), :class:`LocalPool` (``workers=N`` with N >= 2:
N worker processes on this machine, :mod:`specbound.pool`) and :class:`DaskEngine`
(``scheduler=ADDRESS``: the workers of a Dask cluster).  One meaning of the options everywhere (API
and CLI): ``workers`` is how many processes of this machine compute (1, the default, is this
process), ``scheduler`` the address of a Dask cluster; :func:`open_engine` makes the engine.

Work is cut into *tasks* that describe what to compute, never the arrays: a :class:`Source`
(checkpoint path, heads, view, SHA-256) plus a layer, the canonical indices of the matrices of one
kind in it and the names of the checkpoint tensors those matrices are read from
(:func:`task_tensors`, found by the client from the header alone; a small layer is read whole).
A task opens the checkpoint itself, checks that its bytes have the client's SHA-256 (hashed once
per process and file version; a worker that sees another file at the same path fails the run in
one line), reads those tensors and no other (:func:`specbound.checkpoint.load_layers`: safetensors
and GGUF tensors are read from their own byte ranges of a memory map, found in the header; every
other tensor is a zero-memory placeholder), builds its matrices, computes, and returns plain
values: certified enclosures (sent between processes in their exact wire form,
:mod:`specbound.certified.serialisation`: bit-identical balls), float spectra
as arrays, ramp-loss partial sums as exact fractions.  The client reassembles them in canonical order and does every Arb
reduction itself, so the certificate is the same on every engine.  A task that fails on a worker
ends the run with one :class:`~specbound.errors.SpecboundError` line (Dask first retries it), and
no partial result is returned.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, CancelledError, Executor, Future, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .errors import SpecboundError, one_line

RETRIES = 2
"""Times Dask resubmits a failed task (``retries=``) before the run fails."""

INSTALL_HINT = "pip install 'specbound[cluster]'"


@dataclass(frozen=True)
class Source:
    """What a task needs to open the checkpoint: an absolute path (None: the embedded default; an
    in-memory source runs in process only), ``num_heads``, the ``view`` and the SHA-256 the client
    computed.  ``built``: the whole model when this process has already built it, so that tasks
    run here read nothing again; it is never sent (a worker elsewhere reads its own tensors)."""

    checkpoint: Any
    num_heads: int | None
    view: str
    sha256: str
    built: Any = field(default=None, compare=False, repr=False)

    @property
    def portable(self) -> bool:
        """Whether another process can open the checkpoint (it has a path, or is the default)."""
        return self.checkpoint is None or isinstance(self.checkpoint, str)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "built": None}


def source_of(checkpoint, *, num_heads: int | None, view: str, sha256: str, built=None) -> Source:
    """The :class:`Source` of ``checkpoint`` (a path made absolute, so that workers find it; a repo
    id as given; an in-memory source kept as the object)."""
    from .formats.state_dict import is_in_memory

    if checkpoint is not None and not is_in_memory(checkpoint):
        path = Path(checkpoint)
        checkpoint = str(path.resolve()) if path.exists() else str(checkpoint)
    return Source(checkpoint, num_heads, view, sha256, built)


# ------------------------------------------------------------------------------------------------
# engines


class Engine(Protocol):
    """What the pipeline and the API need from a scheduler."""

    name: str

    def map(self, fn: Callable, items: Sequence[tuple], *, weights: Sequence[int] | None = None,
            progress=None) -> list:
        """``[fn(*item) for item in items]`` (in that order); ``progress.advance(weights[i])`` (1
        without weights) as item i completes."""

    def share(self, value: Any) -> Any:
        """A handle that tasks receive in place of ``value``."""

    def close(self) -> None:
        """Release what the engine holds (processes, connections, cached layers)."""


class _OnExecutor:
    """The control flow of every engine: submit (at most ``window`` tasks ahead), collect as they
    complete, advance the progress, and stop the rest at the first failure or interrupt."""

    name = "engine"
    window: int | None = None
    """Tasks in flight at once (None: all): 1 in process, so that progress advances task by task."""
    remote = True
    """Whether tasks run in other processes: they then need a :attr:`Source.portable` source, and
    a failure there is reported as one line (in process, an error propagates as raised)."""
    poll: float | None = None
    """Seconds between calls of :meth:`_watch` while no task completes (None: wait without them)."""

    def _executor(self) -> Executor:
        raise NotImplementedError

    def _watch(self) -> None:
        """Called every :attr:`poll` seconds while tasks are pending and none completes: raises a
        one-line SpecboundError when they can never complete (e.g. a cluster without workers)."""

    def _stop(self, pending: list[Future]) -> None:
        """Stop the tasks ``pending`` after a failure or an interrupt (without waiting for them)."""
        for fut in pending:
            fut.cancel()

    def share(self, value: Any) -> Any:
        return value

    def close(self) -> None:
        return None

    def map(self, fn: Callable, items: Sequence[tuple], *, weights: Sequence[int] | None = None,
            progress=None) -> list:
        items = list(items)
        if self.remote:
            _refuse_in_memory(items)
        executor = self._executor()
        results: list = [None] * len(items)
        queue = iter(range(len(items)))
        pending: dict[Future, int] = {}

        def submit_next() -> None:
            i = next(queue, None)
            if i is not None:
                pending[executor.submit(fn, *items[i])] = i

        try:
            for _ in range(len(items) if self.window is None else self.window):
                submit_next()
            while pending:
                done, _ = wait(list(pending), timeout=self.poll, return_when=FIRST_COMPLETED)
                if not done:
                    self._watch()
                for fut in done:
                    i = pending.pop(fut)
                    exc = _exception(fut)
                    if exc is not None:
                        raise _task_error(exc, fn) if self.remote else exc
                    results[i] = fut.result()
                    if progress is not None:
                        progress.advance(1 if weights is None else weights[i])
                    submit_next()
        except BaseException:
            self._stop(list(pending))
            raise
        return results


class _Synchronous(Executor):
    """An executor that runs each task when it is submitted, here (Ctrl-C goes straight up)."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - handed to the caller through the future
            fut.set_exception(exc)
        return fut


class InProcess(_OnExecutor):
    """Runs every task here, in order (the default: no worker process, no Dask import)."""

    name = "in process"
    window = 1
    remote = False

    def _executor(self) -> Executor:
        return _Synchronous()

    def close(self) -> None:
        _CACHE.clear()  # the last layer the tasks built here


class LocalPool(_OnExecutor):
    """Runs tasks on ``workers`` processes of this machine (:mod:`specbound.pool`): they die with
    this process, leave Ctrl-C to it, and are killed at once when a run fails or is interrupted."""

    def __init__(self, workers: int) -> None:
        self.workers = int(workers)
        self.name = f"local pool of {self.workers} processes"
        self._pool = None

    def _executor(self) -> Executor:
        if self._pool is None:  # started on first use, again after a failure stopped it
            from .pool import start

            self._pool = start(self.workers)
        return self._pool

    def _stop(self, pending: list[Future]) -> None:
        from .pool import terminate

        if self._pool is not None:
            terminate(self._pool)
            self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


NO_WORKER_SECONDS = 60.0
"""A run on a cluster that has had no worker for this long ends in one line: its tasks cannot run
(no worker ever joined, or the only worker died and none replaced it)."""


class DaskEngine(_OnExecutor):
    """Runs tasks on the workers of a Dask cluster through ``client``; a run whose cluster has had
    no worker for :data:`NO_WORKER_SECONDS`, or whose scheduler stops answering, ends in one line
    instead of waiting forever."""

    poll = 1.0

    def __init__(self, client, name: str = "dask") -> None:
        self.client = client
        self.name = name
        self._futures = client.get_executor(retries=RETRIES, pure=False)
        self._alone_since: float | None = None

    def _executor(self) -> Executor:
        return self._futures

    def map(self, fn: Callable, items: Sequence[tuple], **kw) -> list:
        self._alone_since = None
        return super().map(fn, items, **kw)

    def _watch(self) -> None:
        import time

        try:
            workers = self.client.nthreads(callback_timeout=max(self.poll * 10, NO_WORKER_SECONDS / 2))
        except Exception as exc:  # noqa: BLE001 - the scheduler went away or stopped answering
            raise SpecboundError(f"{self.name}: the scheduler does not answer ({type(exc).__name__}: "
                                 f"{one_line(exc)})") from None
        now = time.monotonic()
        if workers:
            self._alone_since = None
        elif self._alone_since is None:
            self._alone_since = now
        elif now - self._alone_since >= NO_WORKER_SECONDS:
            raise SpecboundError(
                f"{self.name}: no worker for {NO_WORKER_SECONDS:g} s, so the tasks cannot run (none joined, "
                "or the last one died); start workers with `dask worker ADDRESS`")

    def share(self, value: Any) -> Any:
        return self.client.scatter(value, broadcast=False)

    def close(self) -> None:
        self.client.close()


def _exception(fut: Future) -> BaseException | None:
    try:
        return fut.exception()
    except CancelledError as why:  # the cluster cancelled it (its scheduler went away)
        return why


def _task_error(exc: BaseException, fn) -> BaseException:
    """The error that ends the run for a task that failed on a worker (one line)."""
    if isinstance(exc, SpecboundError):
        return exc
    kind = type(exc).__name__
    if kind in ("KilledWorker", "BrokenProcessPool"):
        return SpecboundError(f"{fn.__name__}: a worker died on this task (out of memory?): {one_line(exc)}")
    return SpecboundError(f"{fn.__name__} failed on a worker: {kind}: {one_line(exc)}")


def _refuse_in_memory(items: Sequence[tuple]) -> None:
    """One line when a task would have to send in-memory weights to another process."""
    if any(isinstance(a, Source) and not a.portable for item in items for a in item):
        raise SpecboundError("workers open the checkpoint by its path: in-memory weights run in process "
                             "(without workers or a scheduler)")


WORKERS_PER_CPU = 4
"""A local pool has at most this many processes per CPU of the machine (:func:`max_workers`)."""


def max_workers() -> int:
    """The largest local pool: :data:`WORKERS_PER_CPU` processes per CPU, and at least 8.  More
    processes than that only add memory (each holds one task's tensors) and start-up time on one machine."""
    return max(8, WORKERS_PER_CPU * (os.cpu_count() or 1))


def _count(workers, option: str = "workers") -> int | None:
    if workers is None:
        return None
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SpecboundError(f"{option} must be an integer >= 1, got {workers!r}")
    if workers > max_workers():
        raise SpecboundError(f"{option} must be at most {max_workers()} ({WORKERS_PER_CPU} per CPU of this "
                             f"machine), got {workers}; for more, run the tasks on a Dask cluster (scheduler)")
    return workers


@contextmanager
def open_engine(workers: int | None = None, scheduler: str | None = None, engine: Engine | None = None
                ) -> Iterator[Engine]:
    """The engine of the options, at most one of them: ``engine`` (one the caller opened and closes),
    ``workers`` (1: in process; N >= 2: a :class:`LocalPool` of N processes), ``scheduler`` (the
    Dask cluster at that address, e.g. ``tcp://host:8786``); none: in process.  Whatever the block
    raises, what this opened is closed."""
    given = [name for name, v in (("engine", engine), ("workers", workers), ("scheduler", scheduler))
             if v is not None]
    if len(given) > 1:
        raise SpecboundError(f"give one of {' / '.join(given)}, not several")
    if engine is not None:
        yield engine
        return
    count = _count(workers)
    opened: Engine = (_connect(scheduler) if scheduler is not None
                      else LocalPool(count) if count is not None and count > 1 else InProcess())
    try:
        yield opened
    finally:
        opened.close()


def _connect(scheduler: str) -> DaskEngine:
    """A :class:`DaskEngine` on the cluster at ``scheduler`` (one line when it cannot be reached)."""
    try:
        import distributed
    except ImportError:
        raise SpecboundError(f"a scheduler needs Dask: {INSTALL_HINT}") from None
    try:
        client = distributed.Client(scheduler, timeout=30)
    except (OSError, TimeoutError, ValueError) as exc:
        raise SpecboundError(f"cannot reach the scheduler at {scheduler}: {one_line(exc)}") from None
    return DaskEngine(client, f"cluster at {scheduler}")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """``--workers N`` and ``--scheduler ADDRESS`` (shared by certify, spectra and proxies)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--workers", default=None, metavar="N",
                       help="processes of this machine that compute: 1 (default) is this process, N >= 2 a "
                            "local pool of N worker processes (the certificate is the same)")
    group.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help=f"run the tasks on the Dask cluster at ADDRESS, e.g. tcp://host:8786 (workers must "
                            f"see the checkpoint at the same path; {INSTALL_HINT})")


def engine_options(args: argparse.Namespace) -> dict:
    """``workers`` and ``scheduler`` of the parsed ``--workers`` / ``--scheduler`` (validated, one
    line), for :func:`open_engine` and every job that takes them."""
    workers = getattr(args, "workers", None)
    if workers is not None:
        try:
            workers = int(str(workers))
        except ValueError:
            raise SpecboundError(f"--workers must be an integer, got {workers!r}") from None
        if workers < 1:
            raise SpecboundError(f"--workers must be >= 1, got {workers}")
        _count(workers, "--workers")
    return {"workers": workers, "scheduler": getattr(args, "scheduler", None)}


# ------------------------------------------------------------------------------------------------
# tasks (module-level so that they pickle by reference)

_CACHE: dict = {}
"""The last weights a process built for its tasks (one entry: one task's tensors, or one full model)."""


def _weights(source: Source, layer: int | None, tensors: frozenset[str] | None = None):
    """The weights of ``source`` with ``tensors`` built (None: every tensor of ``layer``; ``layer``
    None: every layer), cached for the next task."""
    if source.built is not None:
        return source.built
    key = (source, layer, tensors)
    weights = _CACHE.get(key)
    if weights is None:
        _CACHE.clear()  # release the previous task's tensors before reading the next
        from .checkpoint import check_digest, load_layers, load_weights

        if layer is None:
            weights = load_weights(source.checkpoint, num_heads=source.num_heads, view=source.view)
            if source.portable:  # the bytes read here must be those the client hashed
                check_digest(weights.extra.get("weights_file", source.checkpoint), weights.sha256, source.sha256)
        else:  # load_layers checks the digest itself
            weights = load_layers(source.checkpoint, (layer,) if tensors is None else (),
                                  tensors=tensors or (), num_heads=source.num_heads, view=source.view,
                                  sha256=source.sha256)
        _CACHE.clear()  # (a worker with several threads: keep one entry)
        _CACHE[key] = weights
    return weights


def _built(weights, indices: tuple[int, ...]) -> list:
    """The matrices ``indices`` of ``weights``, each with every factor read: a placeholder here
    would be computed on as if it were the matrix, so it ends the task instead (one line)."""
    from .adapters.helpers import is_placeholder

    mats = [weights.matrices[j] for j in indices]
    for m in mats:
        if is_placeholder(m.left) or (m.right is not None and is_placeholder(m.right)):
            raise SpecboundError(f"matrix {m.name}: a task was given without the tensors it is built from "
                                 "(an engine bug; nothing was computed on it)")
    return mats


class _Enclosures(list):
    """Certified enclosures as a task returns them: unchanged in process, and pickled (back from a
    pool or a cluster) in their exact wire form, every ball rebuilt bit-identical on arrival."""

    def __reduce__(self):
        from .certified.serialisation import enclosure_to_wire

        return (_enclosures_from_wire, ([enclosure_to_wire(e) for e in self],))


def _enclosures_from_wire(wires: list[dict]) -> _Enclosures:
    from .certified.serialisation import enclosure_from_wire

    return _Enclosures(enclosure_from_wire(w) for w in wires)


def enclose_task(source: Source, layer: int, indices: tuple[int, ...], tensors: frozenset[str] | None = None
                 ) -> tuple[_Enclosures, list[tuple]]:
    """Certified enclosures of the matrices ``indices`` (all of ``layer``), read from the checkpoint
    tensors ``tensors`` alone (None: every tensor of ``layer``), and for each matrix whether its
    left and right factors are exactly zero (right: None if dense)."""
    import numpy as np

    from .certified.gram_enclosure import enclose_matrices

    mats = _built(_weights(source, layer, tensors), indices)
    zero = [(not np.any(m.left), None if m.right is None else not np.any(m.right)) for m in mats]
    return _Enclosures(enclose_matrices(mats)), zero


def spectra_task(source: Source, layer: int | None, indices: tuple[int, ...], dtype: str,
                 device="cpu", tensors: frozenset[str] | None = None, products: str = "dense") -> tuple:
    """Float singular values and norms of the matrices ``indices`` (as ``spectra`` / ``proxies``
    compute them: ``products`` of :func:`specbound.numeric.spectra.compute_spectra_numpy`), read from
    ``tensors`` as :func:`enclose_task` does."""
    from .numeric.spectra import spectra_on

    s = spectra_on(_built(_weights(source, layer, tensors), indices), dtype=dtype, device=device, products=products)
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


WHOLE_LAYER_BYTES = 64 << 20
"""A layer whose covered matrices' factors take at most this many bytes in float64 (64 MiB: MiniLM,
GPT-2, Gemma 3 270M) is read whole by its tasks, as one build that the layer's other tasks in the
same process reuse; a larger one (GPT-2-medium and up, 1.5 GB at 7B) is read tensor by tensor, each
task holding its own tensors only.  Below it the memory saved is small and a build per task (a few
ms: opening the checkpoint and the adapter's pass over the structure) would cost more than it."""


def task_tensors(source: Source, weights, tasks: Sequence[tuple[int, tuple[int, ...]]]
                 ) -> list[frozenset[str] | None]:
    """Per task of ``tasks`` (over the structure ``weights``), the checkpoint tensors its matrices
    are read from (:func:`specbound.checkpoint.matrix_tensors`, from the header alone), so that a
    task reads those and nothing else of its layer; None (read the whole layer) for the tasks of a
    layer of at most :data:`WHOLE_LAYER_BYTES`, where a matrix's tensors cannot be told, and for
    every task when ``source`` is already built (nothing is read)."""
    if source.built is not None:
        return [None] * len(tasks)
    size: dict[int, int] = {}
    for m in weights.matrices:
        size[m.layer] = size.get(m.layer, 0) + 8 * (m.left.size + (0 if m.right is None else m.right.size))
    large = [size[layer] > WHOLE_LAYER_BYTES for layer, _ in tasks]
    if not any(large):
        return [None] * len(tasks)
    from .checkpoint import matrix_tensors

    per_matrix = matrix_tensors(source.checkpoint, num_heads=source.num_heads, view=source.view,
                                sha256=source.sha256)
    out: list[frozenset[str] | None] = []
    for (_, idx), read_apart in zip(tasks, large):
        names = [per_matrix[j] for j in idx]
        whole = not read_apart or any(n is None for n in names)
        out.append(None if whole else frozenset().union(*names))
    return out


def enclose_on(engine: Engine, source: Source, weights, progress=None) -> tuple[list, Any]:
    """(enclosures of every matrix of ``weights`` in canonical order, ``weights`` with its
    placeholders marking which factors are exactly zero), computed by ``engine``'s tasks.

    ``weights`` is the structure (:func:`specbound.checkpoint.load_layers` with no layer) or the
    whole model; the float planner reads from matrix values only whether a factor is exactly zero,
    which the marked placeholders (:func:`specbound.adapters.helpers.placeholder`) answer as the
    real factors would."""
    from dataclasses import replace

    from .adapters.helpers import is_placeholder, placeholder

    tasks = tasks_of(weights)
    reads = task_tensors(source, weights, tasks)
    parts = engine.map(enclose_task, [(source, layer, idx, r) for (layer, idx), r in zip(tasks, reads)],
                       weights=[len(idx) for _, idx in tasks], progress=progress)
    out: list = [None] * len(weights.matrices)
    mats = list(weights.matrices)
    for (_, idx), (encs, zero) in zip(tasks, parts):
        for j, enc, (left_zero, right_zero) in zip(idx, encs, zero):
            out[j] = enc
            m = mats[j]
            if is_placeholder(m.left):
                right = None if m.right is None else placeholder(m.right.shape, 0.0 if right_zero else 1.0)
                mats[j] = replace(m, left=placeholder(m.left.shape, 0.0 if left_zero else 1.0), right=right)
    return out, replace(weights, matrices=tuple(mats))


def spectra_of(engine: Engine, source: Source, weights, dtype: str = "float64", device="cpu", progress=None,
               products: str = "dense"):
    """The :class:`specbound.numeric.spectra.Spectra` of ``weights`` computed by ``engine``'s tasks:
    one per layer and kind on the CPU (one task's tensors held at a time), one of the whole model on a torch
    ``device`` (batched by shape across layers; the values stay on the device)."""
    import numpy as np

    from .numeric.spectra import Spectra

    count = len(weights.matrices)
    if str(device) != "cpu":
        (parts,) = engine.map(spectra_task, [(source, None, tuple(range(count)), dtype, device, None, products)],
                              weights=[count], progress=progress)
        return Spectra(tuple(weights.matrices), *parts)
    tasks = tasks_of(weights)
    reads = task_tensors(source, weights, tasks)
    parts = engine.map(spectra_task, [(source, layer, idx, dtype, "cpu", r, products)
                                      for (layer, idx), r in zip(tasks, reads)],
                       weights=[len(idx) for _, idx in tasks], progress=progress)
    width = max((min(m.shape) for m in weights.matrices), default=0)
    values = np.zeros((count, width), dtype=np.float64)
    counts = np.zeros(count, dtype=np.int64)
    frob, n21, n11 = np.zeros(count), np.zeros(count), np.zeros(count)
    for (_, idx), (v, c, f, a, b) in zip(tasks, parts):
        rows = list(idx)
        values[rows, : v.shape[1]] = v
        counts[rows], frob[rows], n21[rows], n11[rows] = c, f, a, b
    return Spectra(tuple(weights.matrices), values, counts, frob, n21, n11)


def ramp_blocks(engine: Engine, source: Source, data, progress: Callable[[int], None] | None = None):
    """The ``map_blocks`` of :func:`specbound.certified.ramp_loss.certified_ramp_loss`: the Arb
    forward pass over chunks of samples as ``engine`` tasks (partials in chunk order)."""
    from .certified.serialisation import arb_to_wire

    def run(chunks: list[list[int]], rho, prec: int) -> list:
        shared = engine.share(data)
        rho_wire = arb_to_wire(rho)
        done = [0]

        class _Counter:
            def advance(self, k):
                done[0] += k
                if progress is not None:
                    progress(done[0])

        return engine.map(ramp_task, [(source, shared, rho_wire, prec, tuple(c)) for c in chunks],
                          weights=[len(c) for c in chunks], progress=_Counter())

    return run


__all__ = ["DaskEngine", "Engine", "InProcess", "LocalPool", "Source", "add_engine_arguments", "enclose_on",
           "engine_options", "open_engine", "ramp_blocks", "source_of", "spectra_of", "task_tensors", "tasks_of"]
