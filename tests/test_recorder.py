"""The invocation recorder adapter on SQLite: schema on first use, versioning, rows, sessions."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, text

from lookup_knowledge.adapters.recorder import (
    SCHEMA_VERSION,
    Invocation,
    InvocationRecorder,
    RecorderUnavailableError,
)
from lookup_knowledge.agent.lookup import invocation_db_url
from lookup_knowledge.config import load_config


def invocation(session_id: str | None = "s1", domains: list[str] | None = None, **fields: Any) -> Invocation:
    values: dict[str, Any] = {
        "session_id": session_id,
        "tool_name": "lookup_knowledge",
        "input": "who approves refunds?",
        "status": "evidence",
        "evidence_count": len(domains or []),
        "retrieval_layer": "L0+L1",
        "fallback_reason": None,
        "latency_ms": 12.5,
        "retrieval_details": {"evidenceDomains": domains or [], "categoryFilter": "payments"},
    }
    return Invocation(**(values | fields))


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "nested" / "invocations.sqlite"


@pytest.fixture
def recorder(db_path: Path) -> Iterator[InvocationRecorder]:
    recorder = InvocationRecorder(f"sqlite:///{db_path}")
    yield recorder
    recorder.close()


def test_default_url_is_a_sqlite_file_under_the_store(tmp_path: Path) -> None:
    config = load_config(overrides={"store.path": str(tmp_path)})
    assert invocation_db_url(config) == f"sqlite:///{tmp_path}/invocations.sqlite"
    url = "postgresql+psycopg://u:p@db/lk"
    assert invocation_db_url(load_config(overrides={"recorder.url": url})) == url


def test_schema_is_created_on_first_use_and_versioned(recorder: InvocationRecorder, db_path: Path) -> None:
    assert not db_path.exists()  # nothing happens before the first call
    assert recorder.list() == []
    tables = set(inspect(create_engine(f"sqlite:///{db_path}")).get_table_names())
    assert tables == {"tool_invocation", "schema_version"}
    assert recorder.schema_version() == SCHEMA_VERSION
    columns = {
        c["name"] for c in inspect(create_engine(f"sqlite:///{db_path}")).get_columns("tool_invocation")
    }
    assert columns == {
        "id",
        "created_at",
        "session_id",
        "tool_name",
        "input",
        "status",
        "evidence_count",
        "retrieval_layer",
        "fallback_reason",
        "latency_ms",
        "retrieval_details",
        "returned_evidence",
    }
    reopened = InvocationRecorder(f"sqlite:///{db_path}")  # an existing schema is reused as is
    assert reopened.schema_version() == SCHEMA_VERSION
    reopened.close()


def test_sqlite_runs_in_wal_mode(recorder: InvocationRecorder, db_path: Path) -> None:
    recorder.record(invocation())
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_row_round_trips(recorder: InvocationRecorder) -> None:
    before = datetime.now(UTC)
    written = invocation(domains=["payments"], fallback_reason="filtered_vector_low_quality")
    row_id = recorder.record(written)
    row = recorder.get(row_id)
    assert row is not None
    assert row.id == row_id
    assert row.created_at is not None and before <= row.created_at <= datetime.now(UTC)
    assert row == Invocation(**{**written.to_json(), "id": row_id, "created_at": row.created_at})
    assert recorder.get(row_id + 1) is None


def test_session_domains_are_distinct_in_first_seen_order(recorder: InvocationRecorder) -> None:
    recorder.record(invocation("a", ["payments"]))
    recorder.record(invocation("b", ["security"]))
    recorder.record(invocation("a", ["infrastructure", "payments"]))
    recorder.record(invocation("a", [], status="invalid_input", retrieval_details={}))
    recorder.record(invocation("a", ["data-platform"]))
    assert recorder.session_domains("a") == ["payments", "infrastructure", "data-platform"]
    assert recorder.session_domains("b") == ["security"]
    assert recorder.session_domains("new") == []


def test_list_returns_the_newest_rows_oldest_first(recorder: InvocationRecorder) -> None:
    ids = [recorder.record(invocation("a" if i % 2 else "b", input=f"q{i}")) for i in range(6)]
    assert [row.id for row in recorder.list(last=3)] == ids[-3:]
    assert [row.input for row in recorder.list(session_id="a", last=2)] == ["q3", "q5"]
    assert [row.id for row in recorder.list(session_id="a")] == ids[1::2]
    assert recorder.list(session_id="nobody") == []


def test_newest_filters_by_session_status_and_time_and_pages_by_id(recorder: InvocationRecorder) -> None:
    times = [datetime(2026, 3, day, 12, tzinfo=UTC) for day in range(1, 7)]
    ids = [
        recorder.record(invocation("a" if i % 2 else "b", status="evidence" if i < 4 else "no_evidence",
                                   created_at=when))
        for i, when in enumerate(times)
    ]  # fmt: skip
    assert [row.id for row in recorder.newest()] == ids[::-1]
    assert [row.id for row in recorder.newest(session_id="a")] == [ids[5], ids[3], ids[1]]
    assert [row.id for row in recorder.newest(status="no_evidence")] == [ids[5], ids[4]]
    since, until = datetime(2026, 3, 2, 12, tzinfo=UTC), datetime(2026, 3, 4, 12, tzinfo=UTC)
    assert [row.id for row in recorder.newest(since=since, until=until)] == [ids[2], ids[1]]  # [since, until)
    naive = datetime(2026, 3, 6, 12)  # read as UTC
    assert [row.id for row in recorder.newest(since=naive)] == [ids[5]]
    assert [row.id for row in recorder.newest(before_id=ids[3], limit=2)] == [ids[2], ids[1]]


def test_text_that_sql_backends_refuse_is_stored_escaped(recorder: InvocationRecorder) -> None:
    row_id = recorder.record(invocation(input="nul\x00 and \udcff", retrieval_details={"message": "a\x00b"}))
    row = recorder.get(row_id)
    assert row is not None
    assert row.input == "nul\\x00 and \\udcff"
    assert row.retrieval_details == {"message": "a\\x00b"}


def test_a_newer_schema_is_refused(db_path: Path) -> None:
    InvocationRecorder(f"sqlite:///{db_path}").schema_version()
    with create_engine(f"sqlite:///{db_path}").begin() as connection:
        connection.execute(text("INSERT INTO schema_version VALUES (99, '2030-01-01 00:00:00')"))
    with pytest.raises(RecorderUnavailableError, match="schema version 99"):
        InvocationRecorder(f"sqlite:///{db_path}").record(invocation())


def test_an_unusable_database_raises_recorder_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    for url in (f"sqlite:///{blocker}/invocations.sqlite", "no-such-dialect://x", "not a url"):
        recorder = InvocationRecorder(url)  # constructing never fails: only using it can
        with pytest.raises(RecorderUnavailableError, match="invocation database"):
            recorder.record(invocation())
        with pytest.raises(RecorderUnavailableError):
            recorder.session_domains("s1")


def test_password_is_hidden_in_the_url() -> None:
    recorder = InvocationRecorder("postgresql+psycopg://lk:secret@127.0.0.1:1/lk")
    assert "secret" not in recorder.url
    with pytest.raises(RecorderUnavailableError) as error:
        recorder.record(invocation())
    assert "secret" not in str(error.value)
