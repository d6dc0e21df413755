"""A hung or unreachable invocation database costs one connect timeout per retry interval.

The database is a real loopback socket that accepts TCP connections and never answers (what a
hung PostgreSQL looks like to a client); the driver is the real psycopg.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from conftest import ManualClock, SilentServer

from lookup_knowledge.adapters import recorder as recorder_module
from lookup_knowledge.adapters.recorder import (
    CircuitBreaker,
    Invocation,
    InvocationRecorder,
    RecorderUnavailableError,
)
from lookup_knowledge.config import ConfigError, load_config

TIMEOUT_S = 1.0
CONNECT_FAILED = "connection timeout expired"
FAST = "(retrying in"  # the open circuit's answer: no connection was tried


@pytest.fixture
def hung_postgres(silent_port: int) -> str:
    """A PostgreSQL URL whose server accepts connections and never answers."""
    return f"postgresql+psycopg://lk:secret@127.0.0.1:{silent_port}/lk"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    clock = ManualClock()
    monkeypatch.setattr(recorder_module, "time", clock)  # the breaker's clock only, not the driver's
    return clock


def row() -> Invocation:
    return Invocation("s", "lookup_knowledge", "q", "evidence", 0, None, None, 1.0, {})


def failure(call: Callable[[], object]) -> str:
    """The message of the :class:`RecorderUnavailableError` ``call`` raises (never the password)."""
    with pytest.raises(RecorderUnavailableError) as excinfo:
        call()
    assert "secret" not in str(excinfo.value)
    return str(excinfo.value)


def together(calls: Callable[[], list[str]], callers: int = 8) -> list[str]:
    """What ``callers`` threads released at once by a barrier each got from ``calls``."""
    start, messages = threading.Barrier(callers), []

    def caller() -> None:
        start.wait()
        messages.extend(calls())

    threads = [threading.Thread(target=caller) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return messages


def test_a_hung_database_costs_one_timeout_then_calls_fail_fast(
    hung_postgres: str, silent_server: SilentServer
) -> None:
    """The first call connects and times out; the next 40 are answered by the open circuit,
    without a connection (the silent server counts them). How fast: benchmarks/reliability_faults.py."""
    recorder = InvocationRecorder(hung_postgres, connect_timeout_s=TIMEOUT_S, breaker=CircuitBreaker(60))
    first = failure(lambda: recorder.record(row()))
    assert CONNECT_FAILED in first and FAST not in first
    assert silent_server.accepted() == 1
    later = [failure(lambda: recorder.record(row())) for _ in range(20)]
    later += [failure(lambda: recorder.session_domains("s")) for _ in range(20)]
    assert all(message.endswith(f"{FAST} 60 s)") for message in later), later[:3]
    assert silent_server.accepted() == 1  # no call after the first reached the database
    recorder.close()


def test_after_the_interval_one_call_retries(
    hung_postgres: str, silent_server: SilentServer, clock: ManualClock
) -> None:
    recorder = InvocationRecorder(hung_postgres, connect_timeout_s=TIMEOUT_S, breaker=CircuitBreaker(0.5))
    failure(lambda: recorder.record(row()))
    assert FAST in failure(lambda: recorder.record(row()))
    clock.now += 0.4  # within the interval: still open
    assert FAST in failure(lambda: recorder.record(row()))
    assert silent_server.accepted() == 1
    clock.now += 0.2  # the interval passed: the next call tries the database again
    assert FAST not in failure(lambda: recorder.record(row()))
    assert silent_server.accepted() == 2
    assert failure(lambda: recorder.record(row())).endswith(f"{FAST} 1 s)")  # open again, twice as long
    assert silent_server.accepted() == 2
    recorder.close()


def test_concurrent_callers_wait_at_most_once(hung_postgres: str, silent_server: SilentServer) -> None:
    """8 threads x 10 calls while the circuit is open: every one is answered by the breaker,
    none connects. Their wait: benchmarks/reliability_faults.py."""
    breaker = CircuitBreaker(60)
    recorder = InvocationRecorder(hung_postgres, connect_timeout_s=TIMEOUT_S, breaker=breaker)
    failure(lambda: recorder.record(row()))
    messages = together(lambda: [failure(lambda: recorder.record(row())) for _ in range(10)])
    assert len(messages) == 80
    assert all(FAST in message for message in messages)
    assert silent_server.accepted() == 1  # the first call's connection only


def test_concurrent_callers_after_the_interval_send_one_trial(
    hung_postgres: str, silent_server: SilentServer, clock: ManualClock
) -> None:
    """When the interval has passed, one of 8 concurrent callers tries the database; the others
    are told a retry is under way instead of each waiting a timeout."""
    recorder = InvocationRecorder(hung_postgres, connect_timeout_s=TIMEOUT_S, breaker=CircuitBreaker(1))
    failure(lambda: recorder.record(row()))
    clock.now += 2
    messages = together(lambda: [failure(lambda: recorder.record(row()))])
    tried = [message for message in messages if FAST not in message and "a retry is under way" not in message]
    assert len(tried) == 1 and CONNECT_FAILED in tried[0]
    assert silent_server.accepted() == 2


def test_the_breaker_closes_after_a_success() -> None:
    breaker = CircuitBreaker(retry_after_s=0.0)
    breaker.failed("down")
    breaker.check()  # the trial
    with pytest.raises(RecorderUnavailableError, match="a retry is under way"):
        breaker.check()
    breaker.succeeded()
    breaker.check()
    breaker.check()


def test_the_interval_doubles_up_to_its_maximum() -> None:
    breaker = CircuitBreaker(retry_after_s=10, max_retry_after_s=25)
    for expected in (10, 20, 25, 25):
        breaker.failed("down")
        with pytest.raises(RecorderUnavailableError, match=f"retrying in {expected} s"):
            breaker.check()


@pytest.mark.parametrize(
    "url", ["not a url", "nosuchdb://u:secret@host/db", "postgresql+nodriver://u:secret@h/d", ""]
)
def test_a_bad_recorder_url_is_refused_at_load(url: str) -> None:
    with pytest.raises(ConfigError, match="recorder.url") as excinfo:
        load_config(overrides={"recorder.url": url})
    assert "secret" not in str(excinfo.value)
