"""A hung or unreachable invocation database costs one connect timeout per retry interval.

The database is a real loopback socket that accepts TCP connections and never answers (what a
hung PostgreSQL looks like to a client); the driver is the real psycopg.
"""

from __future__ import annotations

import threading
import time

import pytest

from lookup_knowledge.adapters.recorder import (
    CircuitBreaker,
    Invocation,
    InvocationRecorder,
    RecorderUnavailableError,
)
from lookup_knowledge.config import ConfigError, load_config

TIMEOUT_S = 1.0


@pytest.fixture
def hung_postgres(silent_port: int) -> str:
    """A PostgreSQL URL whose server accepts connections and never answers."""
    return f"postgresql+psycopg://lk:secret@127.0.0.1:{silent_port}/lk"


def row() -> Invocation:
    return Invocation("s", "lookup_knowledge", "q", "evidence", 0, None, None, 1.0, {})


def timed_failure(call) -> float:
    started = time.perf_counter()
    with pytest.raises(RecorderUnavailableError) as excinfo:
        call()
    assert "secret" not in str(excinfo.value)
    return time.perf_counter() - started


def test_a_hung_database_costs_one_timeout_then_calls_fail_fast(hung_postgres: str) -> None:
    recorder = InvocationRecorder(hung_postgres, connect_timeout_s=TIMEOUT_S, breaker=CircuitBreaker(60))
    first = timed_failure(lambda: recorder.record(row()))
    later = [timed_failure(lambda: recorder.record(row())) for _ in range(20)]
    later += [timed_failure(lambda: recorder.session_domains("s")) for _ in range(20)]
    assert TIMEOUT_S * 0.5 < first < TIMEOUT_S + 2
    assert max(later) < 0.05
    recorder.close()


def test_after_the_interval_one_call_retries(hung_postgres: str) -> None:
    recorder = InvocationRecorder(hung_postgres, connect_timeout_s=TIMEOUT_S, breaker=CircuitBreaker(0.5))
    timed_failure(lambda: recorder.record(row()))
    assert timed_failure(lambda: recorder.record(row())) < 0.05
    time.sleep(0.6)
    assert timed_failure(lambda: recorder.record(row())) > TIMEOUT_S * 0.5  # the retry waits again
    assert timed_failure(lambda: recorder.record(row())) < 0.05  # and the circuit opens again
    recorder.close()


def test_concurrent_callers_wait_at_most_once(hung_postgres: str) -> None:
    breaker = CircuitBreaker(60)
    recorder = InvocationRecorder(hung_postgres, connect_timeout_s=TIMEOUT_S, breaker=breaker)
    timed_failure(lambda: recorder.record(row()))
    durations: list[float] = []

    def call() -> None:
        for _ in range(10):
            durations.append(timed_failure(lambda: recorder.record(row())))

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(durations) == 80
    assert max(durations) < 0.05


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
