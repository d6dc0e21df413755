"""`agent/lookup.py`: recorded calls (the callable, rows, session domains, the record's failures)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lookup_knowledge import AgentLookup, KnowledgeTool
from lookup_knowledge.adapters.embedder import SentenceTransformerEmbedder
from lookup_knowledge.adapters.recorder import Invocation, InvocationRecorder
from lookup_knowledge.adapters.search import UNRESTRICTED
from lookup_knowledge.agent.lookup import invocation_db_url
from lookup_knowledge.agent.tool_definition import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
)
from lookup_knowledge.cli.app import app
from lookup_knowledge.config import Config
from lookup_knowledge.contract import evidence_domains
from lookup_knowledge.stores import l0_index_path

REFUND_QUERY = "Who must approve a refund above 500 EUR?"
KAFKA_QUERY = "kafka consumer lag"
# One L0 domain (payments, from "chargeback"); the best content is a support runbook: the filtered
# top scores ~0.75 of the unfiltered top, well under the 0.9 ratio the fallback test sets.
FALLBACK_QUERY = "chargeback compensation for parcels arriving late"


def _row(agent: AgentLookup, row_id: int | None) -> Invocation:
    assert agent.recorder is not None and row_id is not None
    row = agent.recorder.get(row_id)
    assert row is not None
    return row


# --- the Python callable ------------------------------------------------------------------------


def test_lookup_function_is_a_plain_described_callable(agent: AgentLookup) -> None:
    lookup = agent.lookup_function()
    assert lookup.__name__ == TOOL_NAME
    assert lookup.__doc__ is not None and lookup.__doc__.startswith(TOOL_DESCRIPTION)
    assert list(inspect.signature(lookup).parameters) == ["query"]
    payload = lookup(REFUND_QUERY)
    assert isinstance(payload, dict)
    assert json.loads(json.dumps(payload)) == payload
    assert payload["evidenceStatus"] == "evidence"
    assert payload["evidenceBlocks"][0]["evidenceKey"].startswith("payments-refund-policy#chunk-")
    assert payload["retrievalTrace"]["invocationRecord"]["written"] is True


def test_each_lookup_function_is_its_own_session(agent: AgentLookup) -> None:
    first, second = agent.lookup_function(), agent.lookup_function()
    assert first(REFUND_QUERY)["retrievedDomainsThisSession"] == ["payments"]
    assert "payments" not in second(KAFKA_QUERY)["retrievedDomainsThisSession"]
    assert first(KAFKA_QUERY)["retrievedDomainsThisSession"][0] == "payments"


# --- the tool_invocation record -----------------------------------------------------------------


def test_every_call_writes_one_row_with_the_retrieval_details(agent: AgentLookup) -> None:
    result = agent.call(REFUND_QUERY, session_id="row-fields")
    status = result.retrieval_trace.invocation_record
    assert status is not None and status.written and status.error is None
    row = _row(agent, status.id)
    assert agent.recorder.list(session_id="row-fields") == [row]
    assert (row.session_id, row.tool_name, row.input) == ("row-fields", "lookup_knowledge", REFUND_QUERY)
    assert (row.status, row.evidence_count) == ("evidence", len(result.evidence_blocks))
    assert row.retrieval_layer == "L0+L1"
    assert row.fallback_reason is None
    assert row.latency_ms > 0
    assert row.created_at is not None and row.created_at.tzinfo is not None

    details = row.retrieval_details
    hints = details["l0Hints"]
    assert {"matchedKeywords", "domains", "entities", "matchedTitles"} <= set(hints)
    assert hints["domains"] == ["payments"] and "refund" in hints["matchedKeywords"]
    assert details["categoryFilter"] == "payments"
    assert [(a["kind"], a["used"]) for a in details["attempts"]] == [
        ("filtered", True),
        ("unfiltered", False),
    ]
    assert details["fallbackDecision"]["fired"] == "filter_holds_up"
    evidence = details["evidence"]
    assert [e["evidenceKey"] for e in evidence] == [b.evidence_key for b in result.evidence_blocks]
    assert {"evidenceKey", "source", "title", "normalizedScore", "rerankScore", "hitReasons"} <= set(
        evidence[0]
    )
    assert "content" not in evidence[0]  # compact: the record keeps what was found, not the text
    assert details["evidenceDomains"] == ["payments"]
    assert details["contextPack"]["budgetChars"] == 6000
    assert details["contextPack"]["includedSources"] == result.context_pack.summary.included_sources
    assert [e["evidenceKey"] for e in details["rerank"]["entries"]] == [e["evidenceKey"] for e in evidence]
    assert details["rerank"]["entries"][0]["boosts"]
    assert details["settings"]["referenceThreshold"] == agent.tool.config.retrieval.reference_threshold
    assert "lookup_result" in [node["name"] for node in details["executedNodes"]]


def test_a_fallback_call_records_both_attempts(
    store_config: Config, embedder: SentenceTransformerEmbedder
) -> None:
    strict = store_config.model_copy(
        update={"retrieval": store_config.retrieval.model_copy(update={"fallback_score_ratio": 0.9})}
    )
    recorder = InvocationRecorder(invocation_db_url(strict))
    with AgentLookup(KnowledgeTool(strict, embedder=embedder), recorder) as agent:
        result = agent.call(FALLBACK_QUERY, session_id="row-fallback")
        trace = result.retrieval_trace
        assert trace.fallback_reason == "filtered_vector_low_quality"
        row = _row(agent, trace.invocation_record.id)
    assert row.fallback_reason == "filtered_vector_low_quality"
    attempts = row.retrieval_details["attempts"]
    assert [(a["kind"], a["used"]) for a in attempts] == [("filtered", False), ("unfiltered", True)]
    assert attempts[0]["filter"] == "payments"
    decision = row.retrieval_details["fallbackDecision"]
    assert (decision["fired"], decision["used"]) == ("filter_lost", "unfiltered")
    assert decision["scoreRatio"] < 0.9


def test_invalid_input_is_recorded_too(agent: AgentLookup) -> None:
    result = agent.call("   ", session_id="row-invalid")
    assert result.evidence_status == "invalid_input" and result.retrieval_trace is None
    [row] = agent.recorder.list(session_id="row-invalid")
    assert (row.status, row.evidence_count, row.retrieval_layer) == ("invalid_input", 0, None)
    assert row.retrieval_details["message"] == result.message


# --- session domains ----------------------------------------------------------------------------


def test_session_domains_accumulate_in_first_seen_order(agent: AgentLookup) -> None:
    first = agent.call(REFUND_QUERY, session_id="domains-a")
    assert first.retrieved_domains_this_session == ["payments"]
    second = agent.call(KAFKA_QUERY, session_id="domains-a")
    kafka_domains = [b.category for b in second.evidence_blocks]
    assert second.retrieved_domains_this_session[0] == "payments"
    assert set(second.retrieved_domains_this_session) == {"payments", *kafka_domains}
    assert len(set(second.retrieved_domains_this_session)) == len(second.retrieved_domains_this_session)
    again = agent.call(REFUND_QUERY, session_id="domains-a")
    assert again.retrieved_domains_this_session == second.retrieved_domains_this_session

    other = agent.call(KAFKA_QUERY, session_id="domains-b")  # a new session starts empty
    assert "payments" not in other.retrieved_domains_this_session
    no_session = agent.call(KAFKA_QUERY)
    assert no_session.retrieved_domains_this_session == list(dict.fromkeys(kafka_domains))


def test_session_domains_come_from_the_record(
    agent: AgentLookup, store_config: Config, embedder: SentenceTransformerEmbedder
) -> None:
    agent.call(REFUND_QUERY, session_id="domains-recorded")
    agent.close()  # a new process, say: no in-memory session memory, only the record
    recorder = InvocationRecorder(invocation_db_url(store_config))
    with AgentLookup(KnowledgeTool(store_config, embedder=embedder), recorder) as fresh:
        assert fresh.tool.sessions.domains("domains-recorded", UNRESTRICTED) == []
        result = fresh.call(KAFKA_QUERY, session_id="domains-recorded")
    assert result.retrieved_domains_this_session[0] == "payments"


# The sample KB's nearest passages to this question ("how many days of annual leave does an
# employee get?") pass the floors but hold none of its words: the verdict holds them back, and
# they are not returned (no_evidence), read with the multilingual leg off as the test asks of
# words alone. ("如何申请发票" was one; the fapiao page answers it.)
HELD_BACK_QUERY = "员工每年有多少天年假？"


@pytest.mark.parametrize("recorded", [True, False], ids=["record", "memory"])
def test_session_domains_are_those_of_the_blocks_returned_in_every_status(
    store_config: Config,
    embedder: SentenceTransformerEmbedder,
    recorded: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = InvocationRecorder(invocation_db_url(store_config)) if recorded else None
    leg_off = store_config.model_copy(
        update={"multilingual": store_config.multilingual.model_copy(update={"search": "off"})}
    )
    with AgentLookup(KnowledgeTool(leg_off, embedder=embedder), recorder) as agent:
        returned: list[str] = []

        def call(query: object) -> str:
            result = agent.call(query, "walk-" + str(recorded))
            returned.extend(evidence_domains(result.evidence_blocks))
            assert result.retrieved_domains_this_session == list(dict.fromkeys(returned))
            return result.evidence_status

        assert call(HELD_BACK_QUERY) == "no_evidence"  # was ["customer-support"], with no block
        assert returned == []
        assert call(REFUND_QUERY) == "evidence" and returned == ["payments"]
        assert call(HELD_BACK_QUERY) == "no_evidence"
        assert call("   ") == "invalid_input"
        refused = agent.call(REFUND_QUERY, "walk-" + str(recorded), principals=[" "])
        assert (refused.evidence_status, refused.retrieved_domains_this_session) == ("invalid_input", [])
        port = agent.tool.search_port
        with monkeypatch.context() as patch:
            for method in ("search", "search_batch"):
                patch.setattr(port, method, _raise_store_down)
            assert call(KAFKA_QUERY) == "retrieval_failed"
        assert call(KAFKA_QUERY) == "evidence" and "payments" in returned
        restricted = agent.call(REFUND_QUERY, "walk-" + str(recorded), principals=["finance"])
        assert restricted.retrieved_domains_this_session == evidence_domains(restricted.evidence_blocks)
        assert call(HELD_BACK_QUERY) == "no_evidence"  # the unrestricted scope kept its own


def _raise_store_down(*_: object) -> None:
    raise ConnectionError("the store is down")


# --- an unavailable database --------------------------------------------------------------------


@pytest.fixture
def unrecorded_agent(
    store_config: Config, embedder: SentenceTransformerEmbedder, tmp_path: Path
) -> Iterator[AgentLookup]:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the database folder should be")
    recorder = InvocationRecorder(f"sqlite:///{blocker}/invocations.sqlite")
    with AgentLookup(KnowledgeTool(store_config, embedder=embedder), recorder) as agent:
        yield agent


def test_an_unavailable_database_never_fails_the_lookup(
    unrecorded_agent: AgentLookup, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="lookup_knowledge.agent.lookup"):
        result = unrecorded_agent.call(REFUND_QUERY, session_id="offline")
    assert result.found and result.evidence_status == "evidence"
    status = result.retrieval_trace.invocation_record
    assert status is not None and not status.written and status.id is None
    assert "invocation database" in status.error
    assert "not recorded" in caplog.text
    payload = result.model_dump(by_alias=True, mode="json")
    assert payload["retrievalTrace"]["invocationRecord"]["written"] is False

    # Session domains fall back to the tool's in-memory session memory.
    second = unrecorded_agent.call(KAFKA_QUERY, session_id="offline")
    assert second.retrieved_domains_this_session[0] == "payments"


def test_an_unrecorded_call_without_a_trace_says_so_in_its_message(unrecorded_agent: AgentLookup) -> None:
    result = unrecorded_agent.call("", session_id="offline")
    assert result.evidence_status == "invalid_input"
    assert result.message.startswith("Invalid query: the query is empty.")
    assert "not recorded" in result.message


def test_without_a_recorder_nothing_is_recorded(
    store_config: Config, embedder: SentenceTransformerEmbedder
) -> None:
    with AgentLookup(KnowledgeTool(store_config, embedder=embedder), None) as agent:
        result = agent.call(REFUND_QUERY, session_id="unrecorded")
    assert result.retrieval_trace.invocation_record is None


# --- the command line ---------------------------------------------------------------------------


def test_cli_query_records_unless_no_record(store_config: Config) -> None:
    runner = CliRunner()
    store = f"store.path={store_config.store.path}"
    recorded = runner.invoke(app, ["query", KAFKA_QUERY, "--set", store, "--session", "cli", "--json"])
    assert recorded.exit_code == 0, recorded.output
    status = json.loads(recorded.stdout)["retrievalTrace"]["invocationRecord"]
    assert status["written"] is True
    skipped = runner.invoke(
        app, ["query", KAFKA_QUERY, "--set", store, "--session", "cli", "--no-record", "--json"]
    )
    assert skipped.exit_code == 0, skipped.output
    assert json.loads(skipped.stdout)["retrievalTrace"]["invocationRecord"] is None
    rejected = runner.invoke(app, ["query", "bad\x07query", "--set", store, "--session", "cli", "--json"])
    assert rejected.exit_code == 2
    contract = json.loads(rejected.stdout)  # --json: the invalid_input result, as an agent parses it
    assert (contract["evidenceStatus"], contract["found"]) == ("invalid_input", False)
    assert contract["message"].startswith("Invalid query:") and "invalid query" in rejected.stderr

    listed = runner.invoke(app, ["invocations", "--session", "cli", "--json", "--set", store])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert [(r["id"], r["status"]) for r in rows] == [
        (status["id"], "evidence"),
        (status["id"] + 1, "invalid_input"),
    ]
    shown = runner.invoke(app, ["invocations", "show", str(status["id"]), "--set", store])
    assert shown.exit_code == 0, shown.output
    assert KAFKA_QUERY in shown.stdout and "evidenceDomains" in shown.stdout


def test_cli_query_without_a_session_is_recorded_under_a_session_of_its_own(store_config: Config) -> None:
    runner = CliRunner()
    store = f"store.path={store_config.store.path}"
    for _ in range(2):
        done = runner.invoke(app, ["query", KAFKA_QUERY, "--set", store, "--json"])
        assert done.exit_code == 0, done.output
    rows = InvocationRecorder(invocation_db_url(store_config)).list(last=2)
    sessions = [row.session_id for row in rows]
    assert all(session and session.startswith("cli-") for session in sessions)
    assert len(set(sessions)) == 2


def test_closing_the_tool_closes_its_l0_index_and_drops_unsaved_writes(
    store_config: Config, embedder: SentenceTransformerEmbedder
) -> None:
    path = l0_index_path(store_config)
    before = path.read_bytes()
    with KnowledgeTool(store_config, embedder=embedder) as tool:
        doc = next(iter(tool.l0_index.documents.values()))
        tool.l0_index.upsert([dataclasses.replace(doc, keywords=(*doc.keywords, "unsaved-term"))])
        assert path.with_name(path.name + ".tmp").is_file()  # the copy that holds the write
    assert not list(path.parent.glob(path.name + ".tmp*"))  # neither the copy nor its journal left
    assert path.read_bytes() == before
