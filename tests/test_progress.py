"""Progress of a long command: a line with the rate and the time left at least every interval in
a log (never a control code), one when each phase ends, and nothing from the quiet default."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

from lookup_knowledge.progress import QUIET, BarReport, LineReport, duration, progress_to


class SteppedClock:
    """A clock that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def a_log() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=60), out  # a file: not a terminal, as in CI or a pipe


def test_a_log_gets_the_rate_and_time_left_once_an_interval_has_passed_and_a_line_at_the_end() -> None:
    console, out = a_log()
    clock = SteppedClock()
    with LineReport(console, interval=5, clock=clock).phase("embedding", total=100, unit="chunks") as phase:
        for _ in range(10):  # 10 chunks every 2 s: a line at 6, 12 and 18 s
            clock.now += 2
            phase.advance(10)
        phase.detail = "writing 1.0 s of it"
    lines = out.getvalue().splitlines()
    assert lines[-1] == "embedding: done, 100 chunks in 20.0 s (5.0/s); writing 1.0 s of it"
    status = lines[:-1]
    for expected in (
        "embedding: 30/100 chunks (30%), 5.0/s, about 14.0 s left",
        "embedding: 60/100 chunks (60%), 5.0/s, about 8.0 s left",
        "embedding: 90/100 chunks (90%), 5.0/s, about 2.0 s left",
    ):
        assert expected in status
    assert all(line.startswith("embedding: ") and line.endswith(" left") for line in status)
    assert "\x1b" not in out.getvalue()  # plain text, however long the line (no wrapping codes either)


def test_a_log_gets_lines_while_nothing_advances() -> None:
    """The model loading, a long batch, the store optimizing: lines come from a timer meanwhile."""
    console, out = a_log()
    with LineReport(console, interval=0.01).phase("measuring"):
        deadline = time.monotonic() + 60
        while "so far" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("measuring: ") and lines[0].endswith(" so far")
    assert lines[-1].startswith("measuring: done in ")


def test_a_failed_phase_has_no_end_line() -> None:
    console, out = a_log()
    with pytest.raises(RuntimeError), LineReport(console, interval=60).phase("indexing"):
        raise RuntimeError("disk full")
    assert out.getvalue() == ""


def test_a_counted_phase_before_its_first_unit_says_how_long_it_has_run() -> None:
    console, out = a_log()
    clock = SteppedClock()
    with LineReport(console, interval=5, clock=clock).phase("reading", unit="files") as phase:
        clock.now += 6
        phase.update(0, 40)  # the count is known, nothing is done yet: no rate to tell
    assert out.getvalue().splitlines() == [
        "reading: 0/40 files, 6.0 s so far",
        "reading: done, 0 files in 6.0 s",
    ]


def test_the_quiet_default_says_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with QUIET.phase("reading", total=3, unit="files") as phase:
        phase.advance(3)
    assert capsys.readouterr() == ("", "")


def test_a_terminal_gets_a_live_bar_and_a_log_gets_lines() -> None:
    assert isinstance(progress_to(Console(file=io.StringIO(), force_terminal=True)), BarReport)
    assert isinstance(progress_to(Console(file=io.StringIO())), LineReport)
    not_interactive = Console(file=io.StringIO(), force_terminal=True, force_interactive=False)  # TERM=dumb
    assert isinstance(progress_to(not_interactive), LineReport)


def test_a_bar_phase_ends_with_its_line() -> None:
    out = io.StringIO()
    report = BarReport(Console(file=out, force_terminal=True, width=100))
    with report.phase("embedding and writing", total=4, unit="chunks") as phase:
        phase.advance(4)
    assert "embedding and writing: done, 4 chunks in " in out.getvalue()


@pytest.mark.parametrize(("seconds", "text"), [(4.24, "4.2 s"), (187, "3 min 07 s"), (3900, "1 h 05 min")])
def test_durations_read_as_a_person_says_them(seconds: float, text: str) -> None:
    assert duration(seconds) == text
