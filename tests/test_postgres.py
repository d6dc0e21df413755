"""The invocation record on a real PostgreSQL server: recorded calls, session domains, the CLI.

``.ci/run`` starts Debian's PostgreSQL on loopback and exports ``LOOKUP_KNOWLEDGE_TEST_PG_URL``.
Without a reachable server these tests are skipped, and the skip says why.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import SMALL_CORPUS, write_corpus
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from typer.testing import CliRunner

from lookup_knowledge import AgentLookup, KnowledgeTool, ingest, load_config
from lookup_knowledge.adapters.embedder import SentenceTransformerEmbedder
from lookup_knowledge.adapters.recorder import SCHEMA_VERSION, InvocationRecorder
from lookup_knowledge.agent.lookup import invocation_db_url
from lookup_knowledge.cli.app import app
from lookup_knowledge.config import Config

PG_URL_ENV = "LOOKUP_KNOWLEDGE_TEST_PG_URL"
DEFAULT_PG_URL = "postgresql+psycopg://lookup_knowledge:lookup_knowledge@127.0.0.1:5432/lookup_knowledge_test"


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """The server's URL, pointed at a fresh schema of its own (dropped afterwards)."""
    base = make_url(os.environ.get(PG_URL_ENV, DEFAULT_PG_URL))
    schema = f"lk_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, connect_args={"connect_timeout": 3})
    try:
        with admin.begin() as connection:
            connection.execute(text(f"CREATE SCHEMA {schema}"))
    except SQLAlchemyError as exc:
        admin.dispose()
        reason = str(exc.orig or exc).strip().splitlines()[0]
        pytest.skip(
            f"no PostgreSQL server reachable at {base.render_as_string(hide_password=True)} ({reason}); "
            f"run .ci/run (it starts one on loopback) or set {PG_URL_ENV}"
        )
    url = base.update_query_dict({"options": f"-csearch_path={schema}"})
    yield url.render_as_string(hide_password=False)
    with admin.begin() as connection:
        connection.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()


@pytest.fixture(scope="module")
def pg_config(
    pg_url: str, tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder
) -> Config:
    root = tmp_path_factory.mktemp("pg")
    config = load_config(overrides={"store.path": str(root / "store"), "recorder.url": pg_url})
    ingest(write_corpus(root / "kb", SMALL_CORPUS), config, embedder=embedder)
    return config


def test_recorded_calls_round_trip_through_postgres(
    pg_config: Config, pg_url: str, embedder: SentenceTransformerEmbedder
) -> None:
    assert invocation_db_url(pg_config) == pg_url
    agent = AgentLookup(KnowledgeTool(pg_config, embedder=embedder), InvocationRecorder(pg_url))
    with agent:
        refund = agent.call("Can I get a refund after 30 days?", session_id="pg-a")
        kafka = agent.call("kafka consumer lag keeps growing", session_id="pg-a")
        other = agent.call("kafka consumer lag keeps growing", session_id="pg-b")
        rejected = agent.call("", session_id="pg-a")
    assert refund.retrieval_trace.invocation_record.written
    assert refund.retrieved_domains_this_session[0] == "payments"
    assert kafka.retrieved_domains_this_session[0] == "payments"
    assert "infrastructure" in kafka.retrieved_domains_this_session
    assert "payments" not in other.retrieved_domains_this_session
    assert rejected.evidence_status == "invalid_input"

    engine = create_engine(pg_url)
    columns = {c["name"]: c["type"] for c in inspect(engine).get_columns("tool_invocation")}
    assert type(columns["retrieval_details"]).__name__ == "JSONB"
    with engine.connect() as connection:
        assert connection.execute(text("SELECT max(version) FROM schema_version")).scalar() == SCHEMA_VERSION
        statuses = connection.execute(
            text("SELECT status FROM tool_invocation WHERE session_id = 'pg-a' ORDER BY id")
        ).scalars()
        assert list(statuses) == ["evidence", "evidence", "invalid_input"]
    engine.dispose()

    recorder = InvocationRecorder(pg_url)
    row = recorder.get(kafka.retrieval_trace.invocation_record.id)
    assert row is not None and row.input == "kafka consumer lag keeps growing"
    assert row.retrieval_details["evidenceDomains"][0] == "infrastructure"
    assert row.retrieval_details["l0Hints"]["matchedKeywords"]
    assert recorder.session_domains("pg-a") == kafka.retrieved_domains_this_session
    assert [r.status for r in recorder.list(session_id="pg-a", last=2)] == ["evidence", "invalid_input"]
    recorder.close()

    # A new process on the same database continues the session from the record.
    with AgentLookup(KnowledgeTool(pg_config, embedder=embedder), InvocationRecorder(pg_url)) as fresh:
        again = fresh.call("API key rotation", session_id="pg-a")
    assert again.retrieved_domains_this_session[:2] == kafka.retrieved_domains_this_session[:2]


def test_cli_lists_postgres_invocations(pg_config: Config, pg_url: str, tmp_path: Path) -> None:
    runner = CliRunner()
    settings = ["--set", f"store.path={pg_config.store.path}", "--set", f"recorder.url={pg_url}"]
    queried = runner.invoke(app, ["query", "rotate production API keys", "--session", "pg-cli", *settings])
    assert queried.exit_code == 0, queried.output
    listed = runner.invoke(app, ["invocations", "--session", "pg-cli", "--json", *settings])
    assert listed.exit_code == 0, listed.output
    [row] = json.loads(listed.stdout)
    assert (row["input"], row["status"]) == ("rotate production API keys", "evidence")
    shown = runner.invoke(app, ["invocations", "show", str(row["id"]), "--json", *settings])
    assert json.loads(shown.stdout)["retrieval_details"]["evidenceDomains"][0] == "security"


V1_SCHEMA = [
    """CREATE TABLE tool_invocation (
        id SERIAL PRIMARY KEY, created_at TIMESTAMP NOT NULL, session_id TEXT,
        tool_name VARCHAR(64) NOT NULL, input TEXT NOT NULL, status VARCHAR(32) NOT NULL,
        evidence_count INTEGER NOT NULL, retrieval_layer VARCHAR(16), fallback_reason VARCHAR(64),
        latency_ms FLOAT NOT NULL, retrieval_details JSONB NOT NULL)""",
    "CREATE INDEX ix_tool_invocation_session ON tool_invocation (session_id, id)",
    "CREATE TABLE schema_version (version INTEGER NOT NULL PRIMARY KEY, applied_at TIMESTAMP NOT NULL)",
    "INSERT INTO schema_version VALUES (1, '2026-11-01 10:00:00')",
    """INSERT INTO tool_invocation (created_at, session_id, tool_name, input, status, evidence_count,
        retrieval_layer, fallback_reason, latency_ms, retrieval_details) VALUES ('2026-11-01 10:00:00',
        's-old', 'lookup_knowledge', 'refunds?', 'evidence', 1, 'L1', NULL, 12.0,
        '{"evidenceDomains": ["payments"]}')""",
]


def test_a_version_1_postgres_record_migrates_and_keeps_its_rows(pg_url: str) -> None:
    """A record written before ``returned_evidence`` existed gains the column, keeps its rows."""
    base = make_url(pg_url)
    schema = f"lk_v1_{uuid.uuid4().hex[:12]}"
    url = base.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
    admin = create_engine(base)
    with admin.begin() as connection:
        connection.execute(text(f"CREATE SCHEMA {schema}"))
    old = create_engine(url)
    try:
        with old.begin() as connection:
            for statement in V1_SCHEMA:
                connection.execute(text(statement))
        recorder = InvocationRecorder(url)
        try:
            assert recorder.schema_version() == SCHEMA_VERSION == 2
            [row] = recorder.list()
            assert (row.session_id, row.returned_evidence) == ("s-old", None)
            assert recorder.session_domains("s-old") == ["payments"]
        finally:
            recorder.close()
        with old.connect() as connection:
            versions = connection.execute(text("SELECT version FROM schema_version ORDER BY 1")).scalars()
            assert list(versions) == [1, 2]
        assert "returned_evidence" in {c["name"] for c in inspect(old).get_columns("tool_invocation")}
    finally:
        old.dispose()
        with admin.begin() as connection:
            connection.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()
