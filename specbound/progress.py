"""A progress bar for long work that stays out of the way.

The bar is drawn on stderr with rich only when stderr is a terminal and the caller has not asked for
machine output (``--json``); otherwise every call is a no-op, so scripted and piped use sees exactly
the command's output and nothing else.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator, Protocol

from rich.console import Console
from rich.progress import BarColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn


class Progress(Protocol):
    """What the numeric code needs from a progress reporter: a count of finished work units."""

    def advance(self, amount: float = 1.0) -> None: ...


class SilentProgress:
    """The reporter used whenever no bar should be shown."""

    def advance(self, amount: float = 1.0) -> None:
        return None


class _RichProgress:
    def __init__(self, bar, task_id) -> None:
        self._bar = bar
        self._task = task_id

    def advance(self, amount: float = 1.0) -> None:
        self._bar.advance(self._task, amount)


def should_show(json_output: bool = False, stream=None) -> bool:
    """True when a bar would reach a human: stderr is a TTY and output is not machine-readable."""
    stream = sys.stderr if stream is None else stream
    if json_output:
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


@contextmanager
def progress_bar(total: float, description: str, *, enabled: bool = True) -> Iterator[Progress]:
    """Yield a reporter counting up to ``total``; draw it only if ``enabled`` and stderr is a TTY.

    The bar is transient (removed when the block ends), so the terminal keeps only real output.
    """
    if not (enabled and should_show()):
        yield SilentProgress()
        return
    bar = RichProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with bar:
        yield _RichProgress(bar, bar.add_task(description, total=total))
