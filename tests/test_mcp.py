"""The MCP server end to end: ``lookup-knowledge mcp`` spawned over stdio, driven by the SDK's client."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import SMALL_CORPUS, make_config, write_corpus
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult
from test_agent_lookup import KAFKA_QUERY, REFUND_QUERY

from lookup_knowledge import AgentLookup, ingest, tool_definition
from lookup_knowledge.adapters.embedder import SentenceTransformerEmbedder
from lookup_knowledge.adapters.recorder import InvocationRecorder
from lookup_knowledge.agent.mcp_server import build_server
from lookup_knowledge.agent.tool_definition import (
    INPUT_SCHEMA,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    VERIFY_DESCRIPTION,
    VERIFY_INPUT_SCHEMA,
    VERIFY_TOOL_NAME,
    anthropic_tool,
)

LOOKUP_KNOWLEDGE = Path(sys.executable).with_name("lookup-knowledge")
STARTUP_TIMEOUT_S = 180  # the server imports torch and loads the model on a busy 2-core machine


def _server(store: Path) -> Client:
    params = StdioServerParameters(
        command=str(LOOKUP_KNOWLEDGE), args=["mcp", "--set", f"store.path={store}"]
    )
    return Client(params, read_timeout_seconds=STARTUP_TIMEOUT_S)


def _contract(result: CallToolResult) -> dict[str, Any]:
    """The contract JSON, checked to be the same as structured content and as text."""
    assert result.structured_content is not None
    [content] = result.content
    assert content.type == "text"
    assert json.loads(content.text) == result.structured_content
    return result.structured_content


async def _first_connection(store: Path) -> dict[str, Any]:
    async with _server(store) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert sorted(tools) == [TOOL_NAME, VERIFY_TOOL_NAME]
        tool = tools[TOOL_NAME]
        refund = await client.call_tool(TOOL_NAME, {"query": REFUND_QUERY})
        empty = await client.call_tool(TOOL_NAME, {"query": ""})
        kafka = await client.call_tool(TOOL_NAME, {"query": KAFKA_QUERY})
    return {"tool": tool, "refund": refund, "empty": empty, "kafka": kafka}


async def _second_connection(store: Path) -> CallToolResult:
    async with _server(store) as client:
        return await client.call_tool(TOOL_NAME, {"query": KAFKA_QUERY})


@pytest.mark.slow  # a CLI process that loads the model
def test_mcp_round_trip_over_stdio(sample_store: Path) -> None:
    store = sample_store
    first = anyio.run(_first_connection, store)

    tool = first["tool"]
    assert tool.name == TOOL_NAME
    assert tool.description == TOOL_DESCRIPTION
    assert tool.input_schema["required"] == ["query"]
    assert tool.input_schema["properties"]["query"]["type"] == "string"
    assert "evidenceBlocks" in tool.output_schema["properties"]

    assert not first["refund"].is_error
    refund = _contract(first["refund"])
    assert refund["evidenceStatus"] == "evidence"
    assert refund["evidenceBlocks"][0]["evidenceKey"].startswith("payments-refund-policy#chunk-")
    assert refund["retrievedDomainsThisSession"] == ["payments"]
    assert refund["retrievalTrace"]["invocationRecord"]["written"] is True

    assert first["empty"].is_error  # a tool error result the agent can read; the server lives on
    empty = _contract(first["empty"])
    assert (empty["evidenceStatus"], empty["message"]) == (
        "invalid_input",
        "Invalid query: the query is empty.",
    )

    kafka = _contract(first["kafka"])
    assert kafka["retrievedDomainsThisSession"][0] == "payments"  # the same connection, the same session
    kafka_domains = list(dict.fromkeys(b["category"] for b in kafka["evidenceBlocks"]))
    assert set(kafka["retrievedDomainsThisSession"]) == {"payments", *kafka_domains}

    second = _contract(anyio.run(_second_connection, store))  # a new connection is a new session
    assert second["retrievedDomainsThisSession"] == kafka_domains

    recorder = InvocationRecorder(f"sqlite:///{store}/invocations.sqlite")
    rows = recorder.list()
    recorder.close()
    assert [(row.status, row.input) for row in rows] == [
        ("evidence", REFUND_QUERY),
        ("invalid_input", ""),
        ("evidence", KAFKA_QUERY),
        ("evidence", KAFKA_QUERY),
    ]
    sessions = [row.session_id for row in rows]
    assert sessions[0] == sessions[1] == sessions[2] != sessions[3]
    assert all(session and session.startswith("mcp-") for session in sessions)


async def _verify_connections(store: Path) -> dict[str, Any]:
    """One connection looks up and verifies answers with each fault; another session's keys come
    from a second connection."""
    async with _server(store) as client:
        kafka = _contract(await client.call_tool(TOOL_NAME, {"query": KAFKA_QUERY}))
    async with _server(store) as client:
        verify_tool = next(t for t in (await client.list_tools()).tools if t.name == VERIFY_TOOL_NAME)
        refund = _contract(await client.call_tool(TOOL_NAME, {"query": REFUND_QUERY}))
        first, second = refund["evidenceBlocks"][:2]
        quote = " ".join(first["content"].split()[2:8])
        other = " ".join(second["content"].split()[2:8])
        answers = {
            "ok": f'Approval: "{quote}" [{first["evidenceKey"]}].',
            "altered": f'Approval: "{quote} indeed" [{first["evidenceKey"]}].',
            "other_block": f'Approval: "{other}" [{first["evidenceKey"]}].',
            "other_session": f"Lag: [{kafka['evidenceBlocks'][0]['evidenceKey']}].",
            "never_returned": f"Approval: [{first['docId']}#chunk-99].",
            "fabricated": "Approval: [refund-handbook-2031#chunk-0].",
        }
        verdicts = {}
        for name, answer in answers.items():
            verdicts[name] = _contract(await client.call_tool(VERIFY_TOOL_NAME, {"answer": answer}))
    return {
        "tool": verify_tool,
        "verdicts": verdicts,
        "other_in_first": other in " ".join(first["content"].split()),
    }


@pytest.mark.slow  # two CLI processes that load the model
def test_verify_answer_over_stdio_flags_each_fault(sample_store: Path) -> None:
    seen = anyio.run(_verify_connections, sample_store)
    assert seen["tool"].description == VERIFY_DESCRIPTION
    assert seen["tool"].input_schema["required"] == ["answer"]
    expected = {
        "ok": "ok",
        "altered": "quote_mismatch",
        "other_block": "ok" if seen["other_in_first"] else "quote_mismatch",
        "other_session": "not_returned",
        "never_returned": "not_returned",
        "fabricated": "unknown_key",
    }
    for name, verdict in seen["verdicts"].items():
        assert [c["status"] for c in verdict["citations"]] == [expected[name]], name
        assert verdict["verified"] is (expected[name] == "ok")
        assert verdict["invocationRecord"]["written"] is True
    recorder = InvocationRecorder(f"sqlite:///{sample_store}/invocations.sqlite")
    rows = recorder.list(last=50)
    recorder.close()
    verify_rows = [row for row in rows if row.tool_name == VERIFY_TOOL_NAME]
    assert len(verify_rows) == len(expected)
    assert {row.session_id for row in verify_rows} == {
        rows[-len(expected) - 1].session_id
    }  # the lookup's session


async def _verify_after_edit(store: Path, source: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A cited block verified before and after its source file was edited, in one session."""
    async with _server(store) as client:
        refund = _contract(await client.call_tool(TOOL_NAME, {"query": REFUND_QUERY}))
        block = next(b for b in refund["evidenceBlocks"] if b["docId"] == "refunds")
        quote = " ".join(block["content"].split()[2:8])
        answer = f'Refunds: "{quote}" [{block["evidenceKey"]}].'
        before = _contract(await client.call_tool(VERIFY_TOOL_NAME, {"answer": answer}))
        with source.open("a", encoding="utf-8") as out:
            out.write("\nEdited after the lookup.\n")
        after = _contract(await client.call_tool(VERIFY_TOOL_NAME, {"answer": answer}))
    return before, after


@pytest.mark.slow  # a CLI process that loads the model
def test_verify_answer_over_stdio_flags_a_block_whose_source_changed(
    tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    kb = write_corpus(tmp_path / "kb", SMALL_CORPUS)
    ingest(kb, make_config(tmp_path / "store"), embedder=embedder)
    before, after = anyio.run(_verify_after_edit, tmp_path / "store", kb / "payments/refunds.md")
    assert [c["status"] for c in before["citations"]] == ["ok"]
    assert [c["status"] for c in after["citations"]] == ["stale"]
    assert (before["verified"], after["verified"]) == (True, False)


async def _listed_and_called(agent: AgentLookup) -> dict[str, Any]:
    async with Client(build_server(agent)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        calls = {
            "plain": await client.call_tool(TOOL_NAME, {"query": REFUND_QUERY}),
            "undeclared": await client.call_tool(TOOL_NAME, {"query": REFUND_QUERY, "top_k": 3}),
            "not a string": await client.call_tool(TOOL_NAME, {"query": 5}),
            "verify, undeclared": await client.call_tool(VERIFY_TOOL_NAME, {"answer": "x", "session": "s"}),
        }
    return {"tools": tools, "calls": calls}


def test_the_mcp_server_lists_and_enforces_the_tool_definition(agent: AgentLookup) -> None:
    """One schema: what the MCP server lists is what tool_definition() and anthropic_tool() give,
    and the server refuses what that schema refuses."""
    seen = anyio.run(_listed_and_called, agent)
    tools, calls = seen["tools"], seen["calls"]
    assert tools[TOOL_NAME].input_schema == INPUT_SCHEMA == tool_definition()["parameters"]
    assert tools[TOOL_NAME].input_schema == anthropic_tool()["input_schema"]
    assert tools[TOOL_NAME].description == tool_definition()["description"]
    assert tools[VERIFY_TOOL_NAME].input_schema == VERIFY_INPUT_SCHEMA
    assert not calls["plain"].is_error
    assert _contract(calls["plain"])["evidenceStatus"] == "evidence"
    for refused in ("undeclared", "not a string", "verify, undeclared"):
        assert calls[refused].is_error, refused
        assert "validation error" in calls[refused].content[0].text, refused
