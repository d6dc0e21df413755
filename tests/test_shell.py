"""The warm shell path: ``lookup-knowledge shell`` answers many questions with one model load, and
a cold start is reported apart from the lookup it precedes (trace, record, command line)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from lookup_knowledge import AgentLookup, KnowledgeTool, load_config
from lookup_knowledge.adapters.recorder import InvocationRecorder
from lookup_knowledge.agent.lookup import invocation_db_url
from lookup_knowledge.cli.app import app

REFUND = "Who must approve a refund above 500 EUR?"
KAFKA = "kafka consumer lag"


def test_the_shell_answers_each_line_in_one_session(sample_store: Path) -> None:
    store = f"store.path={sample_store}"
    done = CliRunner().invoke(
        app, ["shell", "--set", store], input=f"{REFUND}\n:session\n\n{KAFKA}\n:quit\nnever\n"
    )
    assert done.exit_code == 0, done.output
    assert "payments-refund-policy#chunk-" in done.stdout and "kafka" in done.stdout.lower()
    assert "start-up" in done.stderr and "model load" in done.stderr  # what the ready line counts
    assert done.stderr.count("(warm)") == 2  # two questions; the blank line and commands are not
    config = load_config(overrides={"store.path": str(sample_store)})
    rows = InvocationRecorder(invocation_db_url(config)).list(last=2)
    assert [row.input for row in rows] == [REFUND, KAFKA]  # "never" came after :quit
    assert rows[0].session_id == rows[1].session_id and rows[0].session_id.startswith("shell-")
    assert rows[0].session_id in done.stderr  # :session printed it
    assert rows[0].retrieval_details["coldStartMs"] > 0
    assert rows[1].retrieval_details["coldStartMs"] is None


def test_the_shell_prints_json_when_asked(sample_store: Path) -> None:
    done = CliRunner().invoke(
        app, ["shell", "--set", f"store.path={sample_store}", "--no-record"], input=f":json\n{REFUND}\n"
    )
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    assert result["found"] is True and result["evidenceBlocks"]
    assert "JSON output on" in done.stderr


def test_the_shell_refuses_a_broken_config_in_one_line(tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["shell", "--set", "retrieval.return_n=zero"], input="x\n")
    assert done.exit_code == 2
    assert "error:" in done.stderr and "Traceback" not in done.output


def test_a_cold_start_is_reported_apart_from_the_call_it_precedes(sample_store: Path, embedder) -> None:
    config = load_config(overrides={"store.path": str(sample_store)})
    with AgentLookup(KnowledgeTool(config, embedder=embedder), None) as agent:
        cold_ms = agent.warm_up()
        first, second = agent.call(REFUND), agent.call(KAFKA)
    assert cold_ms > 0
    assert first.retrieval_trace.cold_start_ms == cold_ms
    assert second.retrieval_trace.cold_start_ms is None
    assert "query_vector" in {node.name for node in first.retrieval_trace.executed_nodes}


def test_the_query_command_says_what_the_cold_start_cost(sample_store: Path) -> None:
    done = CliRunner().invoke(app, ["query", KAFKA, "--set", f"store.path={sample_store}", "--no-record"])
    assert done.exit_code == 0, done.output
    assert all(part in done.stderr for part in ("start-up", "model load", "lookup", "`shell`"))
    as_json = CliRunner().invoke(app, ["query", KAFKA, "--set", f"store.path={sample_store}", "--json"])
    trace = json.loads(as_json.stdout)["retrievalTrace"]
    assert trace["coldStartMs"] > 0
