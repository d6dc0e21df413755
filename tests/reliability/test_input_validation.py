"""One validation model at every entry point: hostile types, invisible text, undecodable ids,
non-finite config numbers, extra MCP arguments, and bounded session memory."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import anyio
import numpy as np
import pytest
from conftest import make_config
from mcp import Client

from lookup_knowledge.adapters.recorder import InvocationRecorder
from lookup_knowledge.adapters.search import UNRESTRICTED
from lookup_knowledge.agent.knowledge_tool import KnowledgeTool
from lookup_knowledge.agent.lookup import AgentLookup, invocation_db_url
from lookup_knowledge.agent.mcp_server import build_server
from lookup_knowledge.agent.request import (
    MAX_SESSION_ID_CHARS,
    LookupRequest,
    RejectedRequest,
    RequestSettings,
    lookup_request,
    session_key,
)
from lookup_knowledge.config import ConfigError, load_config

QUERY = "Who must approve a refund above 500 EUR?"
KAFKA_QUERY = "How do I fix growing Kafka consumer lag?"


class LoudStr(str):
    """A str subclass whose own methods all fail: it must be read as its plain string."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ called")

    def strip(self, *_: object) -> str:
        raise RuntimeError("strip called")

    def encode(self, *_: object, **__: object) -> bytes:
        raise RuntimeError("encode called")

    def __len__(self) -> int:
        raise RuntimeError("__len__ called")


class Hostile:
    """Not a string; every method that could turn it into one fails."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ called")

    def __repr__(self) -> str:
        raise RuntimeError("__repr__ called")


@pytest.fixture(scope="module")
def agent(sample_store: Path, embedder) -> Iterator[AgentLookup]:
    config = make_config(sample_store)
    with AgentLookup(
        KnowledgeTool(config, embedder=embedder), InvocationRecorder(invocation_db_url(config))
    ) as a:
        yield a


def contract(result) -> dict:
    """The result as strict JSON (no NaN, no lone surrogates), parsed back."""
    text = json.dumps(result.model_dump(by_alias=True, mode="json"), ensure_ascii=False, allow_nan=False)
    return json.loads(text.encode("utf-8"))


def test_str_subclasses_are_read_as_their_plain_string(agent: AgentLookup) -> None:
    plain = contract(agent.call(QUERY, "s-plain"))
    for query in (np.str_(QUERY), LoudStr(QUERY)):
        result = agent.call(query, "s-sub")
        assert result.evidence_status == "evidence"
        assert result.retrieval_trace.invocation_record.written
        assert [b["evidenceKey"] for b in contract(result)["evidenceBlocks"]] == [
            b["evidenceKey"] for b in plain["evidenceBlocks"]
        ]


@pytest.mark.parametrize("query", [Hostile(), 42, 4.2, None, b"refunds", ["refunds"], {"q": 1}])
def test_other_types_are_refused_without_calling_them(agent: AgentLookup, query: object) -> None:
    result = agent.call(query, "s-types")
    assert result.evidence_status == "invalid_input"
    assert f"must be a string, not {type(query).__name__}" in result.message
    assert contract(result)["query"] == f"<{type(query).__name__}>"


@pytest.mark.parametrize(
    "query", ["\u200b", "\ufeff\ufeff", " \u2060 ", "\u200b\u200c\u200d\u200e", "\u00ad"]
)
def test_queries_of_only_invisible_characters_are_refused(agent: AgentLookup, query: str) -> None:
    result = agent.call(query)
    assert result.evidence_status == "invalid_input"
    assert "only invisible" in result.message


def test_a_query_with_invisible_characters_among_visible_ones_is_looked_up(agent: AgentLookup) -> None:
    assert agent.call("\u200brefund\u2060 approval").evidence_status == "evidence"


def test_a_lone_surrogate_pinned_category_gives_a_serializable_result(agent: AgentLookup) -> None:
    result = agent.tool.lookup(QUERY, pinned_category="pay\udcffments")
    assert result.evidence_status == "evidence"
    assert contract(result)["retrievalTrace"]["categoryFilter"] in {"pay\\udcffments", None}


def test_a_session_id_with_undecodable_bytes_is_recorded_without_a_traceback(
    agent: AgentLookup, caplog: pytest.LogCaptureFixture
) -> None:
    session = b"agent-\xff\xfe".decode("utf-8", "surrogateescape")
    with caplog.at_level(logging.WARNING):
        first = agent.call(QUERY, session)
        second = agent.call("kafka consumer lag", session)
    assert first.retrieval_trace.invocation_record.written
    assert second.retrieval_trace.invocation_record.written
    assert "payments" in second.retrieved_domains_this_session
    assert not [r for r in caplog.records if r.exc_info]
    rows = agent.recorder.list(session_id="agent-\\udcff\\udcfe")
    assert len(rows) == 2


def test_a_non_string_session_id_is_refused_and_recorded(agent: AgentLookup) -> None:
    result = agent.call(QUERY, 7)  # type: ignore[arg-type]
    assert result.evidence_status == "invalid_input"
    assert "the session id must be a string, not int" in result.message


def test_the_request_is_the_one_place_of_validation() -> None:
    limit = RequestSettings(max_query_chars=100)
    request = lookup_request(
        np.str_("  refunds "), LoudStr("s"), pinned_category=np.str_("payments"), settings=limit
    )
    assert isinstance(request, LookupRequest)
    assert (type(request.query), request.query) == (str, "refunds")
    assert type(request.session_id) is str and type(request.pinned_category) is str
    refused = lookup_request("x" * 101, "s", principals=["hr"], settings=limit)
    assert isinstance(refused, RejectedRequest)
    assert refused.problem == "the query has 101 characters; the limit is 100 (retrieval.max_query_chars)"
    assert (refused.query, refused.session_id, refused.scope.filter) == ("x" * 101, "s", ("hr", "public"))
    nobody = lookup_request("refunds", 7, principals=[" "])
    assert (
        isinstance(nobody, RejectedRequest) and nobody.problem == "the session id must be a string, not int"
    )
    assert nobody.session_id is None and nobody.scope.sees_nothing


@pytest.mark.parametrize(
    "override",
    [
        "rerank.vector=.inf",
        "rerank.domain_match=.nan",
        "rerank.source_type={runbook: .inf}",
        "store.timeout_s=.nan",
    ],
)
def test_non_finite_config_numbers_are_refused(override: str) -> None:
    with pytest.raises(ConfigError, match="finite number|less than"):
        load_config(overrides=[override])


def test_session_memory_is_bounded(agent: AgentLookup) -> None:
    shared = agent.tool
    recorder = shared.config.recorder.model_copy(update={"session_memory": 3})
    config = shared.config.model_copy(update={"recorder": recorder})
    with KnowledgeTool(config, embedder=shared.embedder, search_port=shared.search_port) as tool:
        for n in range(5):
            tool.lookup(QUERY, session_id=f"s{n}")
        tool.lookup(QUERY, session_id="s2")  # used again: now the most recent
        tool.lookup(QUERY, session_id="s5")
        assert tool.sessions.session_keys() == ["s4", "s2", "s5"]
        assert tool.sessions.domains("s0", UNRESTRICTED) == []
        assert tool.sessions.domains("s2", UNRESTRICTED) == ["payments"]


def _database_bytes(agent: AgentLookup) -> int:
    """The invocation database's size on disk, its write-ahead log included."""
    database = Path(agent.recorder.url.removeprefix("sqlite:///"))
    return sum(f.stat().st_size for f in database.parent.glob(database.name + "*"))


def test_long_session_ids_cost_a_bounded_size(agent: AgentLookup) -> None:
    """1 MB session ids: each is kept and recorded as its prefix and hash (stable: the session
    still accumulates), so recorded calls and remembered sessions cost what short ids do."""
    long_ids = [f"{n:03d}" + "x" * 2**20 for n in range(20)]
    agent.call(QUERY, "warm-up")  # the schema exists before the size is taken
    before = _database_bytes(agent)
    for session in long_ids:
        assert agent.call(QUERY, session).retrieval_trace.invocation_record.written
    growth = _database_bytes(agent) - before
    print(f"20 recorded calls with 1 MB session ids: database +{growth / 1024:.0f} KiB")
    assert growth < 20 * 2**20 / 4  # unbounded, the ids alone (stored and indexed) were 40 MB
    key = session_key(long_ids[0])
    assert len(key) <= MAX_SESSION_ID_CHARS and key.startswith("000xxx")
    assert [row.session_id for row in agent.recorder.list(session_id=key)] == [key]
    assert session_key(long_ids[1]) != key and session_key(key) == key  # distinct, and idempotent
    again = agent.call(KAFKA_QUERY, long_ids[0])
    assert again.retrieved_domains_this_session[0] == "payments"  # the same session as before

    tool = agent.tool
    tool.lookup(QUERY, session_id="y" * 2**20)
    assert tool.sessions.domains(session_key("y" * 2**20), UNRESTRICTED) == ["payments"]
    for n in range(300):  # what 300 lookups remember, without running them
        request = lookup_request(QUERY, f"{n:03d}" + "y" * 2**20)
        tool.sessions.add(request.session_id, request.scope, ["payments"])
    assert max(map(len, tool.sessions.session_keys())) <= MAX_SESSION_ID_CHARS
    print(f"session memory after 300 sessions with 1 MB ids: {tool.sessions.size_bytes / 1024:.0f} KiB")
    assert tool.sessions.size_bytes < 300 * 1000  # was 300 MB of ids


async def _call_with_extra_argument(agent: AgentLookup) -> tuple[dict, object, object]:
    async with Client(build_server(agent)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}  # and verify_answer
        tool = tools["lookup_knowledge"]
        extra = await client.call_tool("lookup_knowledge", {"query": QUERY, "category": "payments"})
        plain = await client.call_tool("lookup_knowledge", {"query": QUERY})
    return tool.input_schema, extra, plain


def test_the_mcp_tool_refuses_undeclared_arguments(agent: AgentLookup) -> None:
    schema, extra, plain = anyio.run(_call_with_extra_argument, agent)
    assert schema["additionalProperties"] is False
    assert extra.is_error and "Extra inputs are not permitted" in extra.content[0].text
    assert not plain.is_error
