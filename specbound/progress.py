"""Progress for long work that stays out of the way.

The bar is drawn on stderr with rich only when stderr is a terminal and the caller has not asked for
machine output (``--json``); otherwise every call is a no-op, so scripted and piped use sees exactly
the command's output and nothing else.  A bar shows the count, the rate (``samples/s``) and the time
left, so that a run of an hour says so in its first seconds.

Training (:func:`training_progress`) also reports a few plain lines (step, loss, time left) through
the caller's ``say`` when no bar can be drawn: a log of an unattended run still shows it is moving.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Iterator, Protocol

from rich.console import Console
from rich.progress import BarColumn, Progress as RichProgress, ProgressColumn, TextColumn, TimeRemainingColumn
from rich.table import Column
from rich.text import Text


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


def format_rate(per_second: float | None, unit: str) -> str:
    """``'261 samples/s'``, ``'3.2 matrices/s'``, ``'1 step / 4 s'``; empty while there is no rate yet."""
    if per_second is None or not math.isfinite(per_second) or per_second <= 0:
        return ""
    if per_second >= 100:
        return f"{per_second:,.0f} {unit}/s"
    if per_second >= 1:
        return f"{per_second:.3g} {unit}/s"
    return f"1 {unit.rstrip('s') or unit} / {1 / per_second:.3g} s"


def format_seconds(seconds: float | None) -> str:
    """``'42 s'``, ``'3 min 20 s'``, ``'1 h 05 min'``; ``'?'`` when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {(s % 3600) // 60:02d} min"


class _RateColumn(ProgressColumn):
    """Work units per second (rich's own speed estimate over its recent window)."""

    def __init__(self, unit: str) -> None:
        super().__init__(table_column=Column(no_wrap=True))  # '241 samples/s' stays on one line
        self.unit = unit

    def render(self, task) -> Text:
        return Text(format_rate(task.speed, self.unit), style="progress.data.speed")


def _columns(unit: str, *extra) -> tuple:
    """Description, bar, count, ``extra``, rate and time left: fits an 80-column terminal."""
    return (TextColumn("{task.description}"), BarColumn(bar_width=20), TextColumn("{task.completed:.0f}/{task.total:.0f}"),
            *extra, _RateColumn(unit), TextColumn("ETA"), TimeRemainingColumn())


@contextmanager
def progress_bar(total: float, description: str, *, enabled: bool = True, unit: str = "items") -> Iterator[Progress]:
    """Yield a reporter counting up to ``total`` ``unit``; draw it only if ``enabled`` and stderr is a TTY.

    The bar shows the count, the rate and the time left; it is transient (removed when the block
    ends), so the terminal keeps only real output.
    """
    if not (enabled and should_show()):
        yield SilentProgress()
        return
    bar = RichProgress(*_columns(unit), console=Console(stderr=True), transient=True)
    with bar:
        yield _RichProgress(bar, bar.add_task(description, total=total))


TRAINING_LINES = 4
"""Plain progress lines of one training run when no bar is drawn (at 25%, 50%, 75%, 100%)."""


@contextmanager
def training_progress(steps: int, say: Callable[[str], None] | None, *, description: str = "training",
                      ) -> Iterator[Callable[[int, float], None]]:
    """Yield ``report(step, loss)`` for a training loop of ``steps`` steps.

    With ``say`` None nothing is reported.  Else, on a terminal, a transient bar shows the step, the
    batch loss, the rate and the time left; off a terminal ``say`` gets :data:`TRAINING_LINES` lines
    ``step 500/2000, loss 0.0453, 23 s elapsed, about 1 min 09 s left``.
    """
    if say is None or steps <= 0:
        yield lambda step, loss: None
        return
    if should_show():
        bar = RichProgress(*_columns("steps", TextColumn("loss {task.fields[loss]}", table_column=Column(no_wrap=True))),
                           console=Console(stderr=True), transient=True)
        with bar:
            task = bar.add_task(description, total=steps, loss="?")

            def update(step: int, loss: float) -> None:
                bar.update(task, completed=step, loss=f"{loss:.4g}")

            yield update
        return
    start = time.perf_counter()
    marks = sorted({max(1, round(steps * i / TRAINING_LINES)) for i in range(1, TRAINING_LINES + 1)})

    def line(step: int, loss: float) -> None:
        if step not in marks:
            return
        elapsed = time.perf_counter() - start
        left = elapsed * (steps - step) / step
        say(f"  step {step}/{steps}, loss {loss:.4g}, {format_seconds(elapsed)} elapsed"
            + ("" if step == steps else f", about {format_seconds(left)} left"))

    yield line
