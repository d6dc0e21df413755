"""Progress of a long command (an ingest): each phase says when it ends and what it took, and a
phase that counts its work reports its rate and the time left while it runs.

On an interactive terminal Rich draws a live bar per phase. Anywhere else (a log, a pipe, CI)
plain lines come instead, one at least every :data:`LINE_INTERVAL_S` seconds, with no control
codes. :data:`QUIET` says nothing: the library's default.

>>> progress = progress_to(Console(stderr=True))  # doctest: +SKIP
>>> with progress.phase("embedding", total=2_574, unit="chunks") as phase:  # doctest: +SKIP
...     phase.advance(64)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

LINE_INTERVAL_S = 5.0  # the longest a log waits for a line while a phase runs

Clock = Callable[[], float]


class Phase:
    """One phase under way: ``done`` of ``total`` ``unit`` (``total`` None: not counted yet), and
    a ``detail`` its end line adds. Safe to advance from any thread."""

    def __init__(
        self, name: str, total: int | None, unit: str, clock: Clock, on_change: Callable[[Phase], None]
    ) -> None:
        self.name, self.total, self.unit = name, total, unit
        self.done = 0
        self.detail = ""
        self.started = clock()
        self._lock = threading.Lock()
        self._on_change = on_change

    def advance(self, count: int = 1) -> None:
        with self._lock:
            self.done += count
        self._on_change(self)

    def update(self, done: int, total: int | None) -> None:
        with self._lock:
            self.done, self.total = done, total
        self._on_change(self)

    def status(self, now: float) -> str:
        """The phase as it stands: counted, with its rate and the time it still needs."""
        if self.total is None:
            return f"{self.name}: {duration(now - self.started)} so far"
        counted = f"{self.name}: {self.done:,}/{self.total:,} {self.unit}"
        pace = self.pace(now)
        if pace is None:
            return f"{counted}, {duration(now - self.started)} so far"
        share = self.done / self.total if self.total else 1.0
        return f"{counted} ({share:.0%}), {pace}"

    def pace(self, now: float) -> str | None:
        """``5.0/s, about 14.0 s left`` over the phase so far; None before its first unit."""
        elapsed = now - self.started
        if self.total is None or not self.done or elapsed <= 0:
            return None
        rate = self.done / elapsed
        return f"{rate:,.1f}/s, about {duration(max(self.total - self.done, 0) / rate)} left"

    def summary(self, now: float) -> str:
        """The end line: what the phase did and how long it took."""
        elapsed = now - self.started
        if self.total is None:
            line = f"{self.name}: done in {duration(elapsed)}"
        else:
            rate = f" ({self.done / elapsed:,.1f}/s)" if self.done and elapsed > 0 else ""
            line = f"{self.name}: done, {self.done:,} {self.unit} in {duration(elapsed)}{rate}"
        return f"{line}; {self.detail}" if self.detail else line


class ProgressReport:
    """Where phases are reported; this base reports nothing (:data:`QUIET`)."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.clock = clock

    @contextmanager
    def phase(self, name: str, total: int | None = None, unit: str = "") -> Iterator[Phase]:
        """A phase from here to the end of the block; its end line only if the block succeeds."""
        phase = Phase(name, total, unit, self.clock, self._changed)
        self._begin(phase)
        try:
            yield phase
        finally:
            self._stop(phase)
        self._end(phase)

    def _begin(self, phase: Phase) -> None:
        """The phase starts."""

    def _changed(self, phase: Phase) -> None:
        """The phase advanced."""

    def _stop(self, phase: Phase) -> None:
        """The phase stops, done or failed."""

    def _end(self, phase: Phase) -> None:
        """The phase is done: its end line."""


QUIET = ProgressReport()


class LineReport(ProgressReport):
    """Plain lines for a log or a pipe: the phase's status whenever ``interval`` has passed since
    the last line (checked at each advance and by a timer, so a line comes even while nothing
    advances), and its end line."""

    def __init__(
        self, console: Console, interval: float = LINE_INTERVAL_S, clock: Clock = time.monotonic
    ) -> None:
        super().__init__(clock)
        self.console, self.interval = console, interval
        self._lock = threading.Lock()
        self._printed = 0.0
        self._timer: tuple[threading.Event, threading.Thread] | None = None

    def _begin(self, phase: Phase) -> None:
        self._printed = phase.started
        stop = threading.Event()
        thread = threading.Thread(target=self._tick, args=(phase, stop), name="progress-lines", daemon=True)
        self._timer = stop, thread
        thread.start()

    def _tick(self, phase: Phase, stop: threading.Event) -> None:
        while not stop.wait(max(self.interval - (self.clock() - self._printed), 0.01)):
            self._changed(phase)

    def _changed(self, phase: Phase) -> None:
        """A line if ``interval`` has passed since the last one."""
        with self._lock:
            now = self.clock()
            if now - self._printed >= self.interval:
                self._printed = now
                self._print(phase.status(now))

    def _stop(self, phase: Phase) -> None:
        if self._timer is not None:
            stop, thread = self._timer
            stop.set()
            thread.join()
            self._timer = None

    def _end(self, phase: Phase) -> None:
        with self._lock:
            self._print(phase.summary(self.clock()))

    def _print(self, line: str) -> None:
        self.console.print(line, highlight=False, markup=False, soft_wrap=True)


class _PaceColumn(ProgressColumn):
    """The phase's rate and time left, as its log lines say them."""

    def __init__(self, phase: Phase, clock: Clock) -> None:
        super().__init__()
        self.phase, self.clock = phase, clock

    def render(self, task: Task) -> Text:
        return Text(self.phase.pace(self.clock()) or "", style="progress.remaining")


class BarReport(ProgressReport):
    """A live Rich bar per phase on an interactive terminal (gone when the phase ends), then the
    phase's end line."""

    def __init__(self, console: Console) -> None:
        super().__init__()
        self.console = console
        self._live: tuple[Progress, TaskID] | None = None

    def _begin(self, phase: Phase) -> None:
        counted = phase.total is not None or phase.unit != ""
        columns = (
            (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn(phase.unit))
            + (_PaceColumn(phase, self.clock), TimeElapsedColumn())
            if counted
            else (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
        )
        live = Progress(*columns, console=self.console, transient=True)
        self._live = live, live.add_task(phase.name, total=phase.total)
        live.start()

    def _changed(self, phase: Phase) -> None:
        if self._live is not None:
            live, task = self._live
            live.update(task, completed=phase.done, total=phase.total)

    def _stop(self, phase: Phase) -> None:
        if self._live is not None:
            self._live[0].stop()
            self._live = None

    def _end(self, phase: Phase) -> None:
        self.console.print(phase.summary(self.clock()), highlight=False, markup=False, soft_wrap=True)


def progress_to(console: Console) -> ProgressReport:
    """A live bar where ``console`` is an interactive terminal, else plain lines."""
    return BarReport(console) if console.is_interactive else LineReport(console, LINE_INTERVAL_S)


def duration(seconds: float) -> str:
    """``4.2 s``, ``3 min 07 s``, ``1 h 05 min``."""
    if round(seconds, 1) < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"
