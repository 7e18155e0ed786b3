"""A local pool of worker processes: the executor behind ``workers=N`` (N >= 2).

The pool is a :class:`concurrent.futures.ProcessPoolExecutor` whose workers are tied to the
process that started them, so that no worker outlives a run however the run ends:

* on Linux each worker asks the kernel (``prctl(PR_SET_PDEATHSIG, SIGTERM)``) to be signalled when
  its parent dies, even by SIGKILL, when no Python cleanup runs;
* a worker ignores SIGINT: the terminal sends Ctrl-C to the whole process group, and the parent
  alone reports it (one line) and stops the pool.  SIGINT and SIGTERM are blocked in the parent
  while it forks a worker, so a worker is born with them blocked and unblocks them only once it
  ignores SIGINT (a Ctrl-C that lands while workers start no longer prints their tracebacks; the
  parent receives its own when it unblocks);
* :func:`terminate` kills the workers at once instead of waiting for their tasks (which
  ``shutdown(wait=True)`` would do), for Ctrl-C, SIGTERM turned into an exception, or a failed task.

Workers are forked where the platform allows: they run only library code, and ``spawn`` would
import an unguarded user script again as ``__main__``.
"""

from __future__ import annotations

import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_all_start_methods, get_context


_HELD = {signal.SIGINT, signal.SIGTERM}
"""Signals a worker must not receive before :func:`_worker_init` has set their handlers."""


def start(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes that die with this one and leave Ctrl-C to it."""
    method = "fork" if "fork" in get_all_start_methods() else "spawn"
    return ProcessPoolExecutor(max_workers=workers, mp_context=_held_context(get_context(method)),
                               initializer=_worker_init, initargs=(os.getpid(),))


def _held_context(context):
    """``context`` whose processes start with :data:`_HELD` blocked (inherited across fork and exec;
    the parent's own mask is restored at once, and a signal that arrived meanwhile is delivered)."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - no POSIX signal masks
        return context

    class HeldProcess(context.Process):
        def start(self) -> None:
            previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
            try:
                super().start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    class HeldContext(type(context)):
        Process = HeldProcess

    return HeldContext()


def _worker_init(parent: int) -> None:
    """Pool workers die with the process that started them and leave Ctrl-C to it.

    On Linux, prctl(PR_SET_PDEATHSIG, SIGTERM) makes the kernel signal a worker when its parent
    dies, even by SIGKILL (no Python cleanup runs then); a parent that died before this call is
    caught by comparing getppid().  SIGINT is ignored: the terminal sends it to the whole process
    group, and the parent alone reports it (one line) and terminates the pool.
    """
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # pragma: no cover - no libc prctl
            pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)  # born blocked (see _held_context)
    if os.getppid() != parent:
        os._exit(1)


def terminate(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's workers and release it without waiting for their tasks."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)  # shutdown() forgets it
    for proc in processes:
        try:
            proc.terminate()
        except (OSError, ValueError, AttributeError):  # already gone
            pass
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        try:
            proc.join(timeout=5)
        except (OSError, ValueError, AttributeError, AssertionError):
            pass
    # The executor's manager thread closes its wake-up pipe as it ends; if that races with the
    # interpreter's exit hook of concurrent.futures (which writes to the same pipe without a lock
    # before Python 3.12), the hook prints "Exception ignored ... Bad file descriptor" with a
    # traceback.  Once the thread has ended the pipe is marked closed and the hook skips it.  (Its
    # workers are gone, so it ends at once.)
    if manager is not None:
        manager.join(timeout=5)


__all__ = ["start", "terminate"]
