"""``lookup-knowledge serve`` end to end: a real uvicorn server on a loopback port, over the sample
knowledge base plus one document only ``finance`` may see, driven by the MCP SDK's
streamable-HTTP client and by ``httpx``. Only the back-pressure tests use a test double (an agent
whose calls wait until released), to hold calls in flight."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
import yaml
from conftest import make_config, write_corpus
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult
from prometheus_client.parser import text_string_to_metric_families
from serve_fixtures import READY_WAIT_S, auth, live, wait_ready
from test_agent_lookup import KAFKA_QUERY, REFUND_QUERY
from typer.testing import CliRunner

from lookup_knowledge import AgentLookup, KnowledgeTool, ingest
from lookup_knowledge.adapters.embedder import SentenceTransformerEmbedder
from lookup_knowledge.adapters.recorder import InvocationRecorder
from lookup_knowledge.agent.lookup import invocation_db_url
from lookup_knowledge.agent.mcp_server import build_server
from lookup_knowledge.agent.tool_definition import TOOL_NAME, VERIFY_TOOL_NAME
from lookup_knowledge.cli.app import app as cli
from lookup_knowledge.config import Config, TokenConfig
from lookup_knowledge.serve.app import SESSION_META_KEY, build_app, serve_app
from lookup_knowledge.serve.tokens import token_hash

LOOKUP_KNOWLEDGE = Path(sys.executable).with_name("lookup-knowledge")
FINANCE_TOKEN = "finance-token-4b1d0c"
SUPPORT_TOKEN = "support-token-93e7aa"
OPS_TOKEN = "ops-token-5c2f81"  # unrestricted: sees every document
TOKENS = [
    {"name": "finance-bot", "sha256": token_hash(FINANCE_TOKEN), "principals": ["finance"]},
    {"name": "support-bot", "sha256": token_hash(SUPPORT_TOKEN), "principals": ["support"]},
    {"name": "ops", "sha256": token_hash(OPS_TOKEN), "unrestricted": True},
]
SECRET_QUERY = "quillion vault key ceremony"
SECRET_DOC = {
    "vault/quillion.md": (
        {
            "id": "quillion-vault-keys",
            "title": "Quillion Vault Ceremony",
            "domain": "vaultops",
            "keywords": ["quillion", "vault"],
            "access": ["finance"],
        },
        "# Quillion Vault Ceremony\n\nThe quillion vault key ceremony needs two zorbquill officers "
        "present; each holds one half of the zorbquill key and signs the ceremony log.\n",
    )
}
# what only the secret document's data holds (its id, title, domain, body words)
SECRET_MARKERS = ("quillion-vault-keys", "Quillion Vault Ceremony", "vaultops", "zorbquill")


@dataclass
class Served:
    base: str
    config: Config
    agent: AgentLookup


@pytest.fixture(scope="module")
def served(
    sample_store: Path, tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder
) -> Iterator[Served]:
    """The sample store plus the secret document, served as ``serve`` serves it, with the three tokens."""
    config = make_config(sample_store, serve__tokens=TOKENS)
    ingest(write_corpus(tmp_path_factory.mktemp("secret-kb"), SECRET_DOC), config, embedder=embedder)
    agent = AgentLookup(
        KnowledgeTool(config, embedder=embedder), InvocationRecorder(invocation_db_url(config))
    )
    with live(serve_app(config, agent)) as base:
        wait_ready(base)
        yield Served(base, config, agent)


def _contract(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None
    [content] = result.content
    assert json.loads(content.text) == result.structured_content
    return result.structured_content


@asynccontextmanager
async def mcp_client(base: str, token: str, mode: str = "auto") -> AsyncIterator[Client]:
    """The MCP SDK's client over streamable HTTP, sending ``token``."""
    async with httpx2.AsyncClient(headers=auth(token), timeout=READY_WAIT_S) as http:
        transport = streamable_http_client(f"{base}/mcp", http_client=http)
        async with Client(transport, mode=mode, read_timeout_seconds=READY_WAIT_S) as client:
            yield client


# --- MCP over streamable HTTP ---------------------------------------------------------------------


async def _tools_and_calls(served: Served) -> dict[str, Any]:
    stdio_tools = {t.name: t for t in await build_server(served.agent).list_tools()}
    conv1, conv2 = {SESSION_META_KEY: "conv-1"}, {SESSION_META_KEY: "conv-2"}
    async with mcp_client(served.base, FINANCE_TOKEN) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        refund = await client.call_tool(TOOL_NAME, {"query": REFUND_QUERY}, meta=conv1)
        empty = await client.call_tool(TOOL_NAME, {"query": ""}, meta=conv1)
        kafka = await client.call_tool(TOOL_NAME, {"query": KAFKA_QUERY}, meta=conv1)
        key = _contract(refund)["evidenceBlocks"][0]["evidenceKey"]
        answer = f"A refund above 500 EUR needs approval [{key}]."
        verified = await client.call_tool(VERIFY_TOOL_NAME, {"answer": answer}, meta=conv1)
        elsewhere = await client.call_tool(VERIFY_TOOL_NAME, {"answer": answer}, meta=conv2)
        too_long = await client.call_tool(VERIFY_TOOL_NAME, {"answer": "x" * 100_001}, meta=conv1)
        unknown_argument = await client.call_tool(TOOL_NAME, {"query": "refunds", "principals": ["hr"]})
    return locals()


def test_mcp_tools_over_streamable_http_are_the_stdio_servers(served: Served) -> None:
    calls = anyio.run(_tools_and_calls, served)
    listed, stdio_tools = calls["listed"], calls["stdio_tools"]
    assert sorted(listed) == [TOOL_NAME, VERIFY_TOOL_NAME]
    for name, tool in listed.items():  # the same names, descriptions and schemas as over stdio
        stdio = stdio_tools[name]
        assert (tool.description, tool.input_schema, tool.output_schema) == (
            stdio.description,
            stdio.input_schema,
            stdio.output_schema,
        )

    refund = _contract(calls["refund"])
    assert not calls["refund"].is_error
    assert refund["evidenceStatus"] == "evidence"
    assert refund["evidenceBlocks"][0]["evidenceKey"].startswith("payments-refund-policy#chunk-")
    assert refund["retrievedDomainsThisSession"] == ["payments"]
    assert refund["retrievalTrace"]["invocationRecord"]["written"] is True

    assert calls["empty"].is_error  # a tool error the agent reads; the server serves on
    empty = _contract(calls["empty"])
    assert (empty["evidenceStatus"], empty["message"]) == (
        "invalid_input",
        "Invalid query: the query is empty.",
    )

    kafka = _contract(calls["kafka"])
    assert kafka["retrievedDomainsThisSession"][0] == "payments"  # the session named in _meta

    verified = _contract(calls["verified"])
    assert verified["verified"] is True
    assert [c["status"] for c in verified["citations"]] == ["ok"]
    assert [c["status"] for c in _contract(calls["elsewhere"])["citations"]] == ["not_returned"]
    assert calls["too_long"].is_error
    assert calls["too_long"].content[0].text.startswith("Invalid answer: the answer has 100,001 characters")
    assert calls["unknown_argument"].is_error  # the body names no principals: refused, not obeyed


async def _handshake_connections(served: Served) -> dict[str, Any]:
    async with mcp_client(served.base, FINANCE_TOKEN, mode="legacy") as client:
        refund = _contract(await client.call_tool(TOOL_NAME, {"query": REFUND_QUERY}))
        kafka = _contract(await client.call_tool(TOOL_NAME, {"query": KAFKA_QUERY}))
        key = refund["evidenceBlocks"][0]["evidenceKey"]
        verified = _contract(await client.call_tool(VERIFY_TOOL_NAME, {"answer": f"Yes [{key}]."}))
    async with mcp_client(served.base, FINANCE_TOKEN, mode="legacy") as client:
        second = _contract(await client.call_tool(TOOL_NAME, {"query": KAFKA_QUERY}))
    return locals()


def test_each_handshake_connection_is_one_session(served: Served) -> None:
    calls = anyio.run(_handshake_connections, served)
    assert calls["refund"]["retrievedDomainsThisSession"] == ["payments"]
    assert calls["kafka"]["retrievedDomainsThisSession"][0] == "payments"
    assert calls["verified"]["verified"] is True  # verify_answer's scope: this connection's lookups
    kafka_domains = list(dict.fromkeys(b["category"] for b in calls["second"]["evidenceBlocks"]))
    assert calls["second"]["retrievedDomainsThisSession"] == kafka_domains  # a new connection starts empty
    sessions = [
        calls[name]["retrievalTrace"]["invocationRecord"]["id"] for name in ("refund", "kafka", "second")
    ]
    recorder = InvocationRecorder(invocation_db_url(served.config))
    rows = {row.id: row.session_id for row in recorder.list()}
    recorder.close()
    first, same, other = (rows[row_id] for row_id in sessions)
    assert first == same != other
    assert first.startswith("mcp-") and other.startswith("mcp-")


def test_an_mcp_session_serves_only_the_token_that_opened_it(served: Served) -> None:
    headers = {"Accept": "application/json, text/event-stream"}
    client = {"name": "probe", "version": "1"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client},
    }
    opened = httpx.post(f"{served.base}/mcp", json=initialize, headers={**headers, **auth(FINANCE_TOKEN)})
    session = {
        **headers,
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    other = httpx.post(f"{served.base}/mcp", json=listing, headers={**session, **auth(SUPPORT_TOKEN)})
    owner = httpx.post(f"{served.base}/mcp", json=listing, headers={**session, **auth(FINANCE_TOKEN)})
    assert other.status_code == 404  # as if the session did not exist
    assert owner.status_code == 200 and TOOL_NAME in owner.text


# --- the JSON API ---------------------------------------------------------------------------------


def test_json_lookup_and_verify_keep_each_tokens_sessions_apart(served: Served) -> None:
    url = served.base
    first = httpx.post(
        f"{url}/v1/lookup", json={"query": REFUND_QUERY, "session": "s1"}, headers=auth(FINANCE_TOKEN)
    )
    assert first.status_code == 200
    assert first.headers["content-type"] == "application/json"
    refund = first.json()
    assert refund["evidenceStatus"] == "evidence" and refund["retrievedDomainsThisSession"] == ["payments"]
    kafka = httpx.post(
        f"{url}/v1/lookup", json={"query": KAFKA_QUERY, "session": "s1"}, headers=auth(FINANCE_TOKEN)
    )
    assert kafka.json()["retrievedDomainsThisSession"][0] == "payments"
    # the same session name under another token is another session
    other = httpx.post(
        f"{url}/v1/lookup", json={"query": KAFKA_QUERY, "session": "s1"}, headers=auth(SUPPORT_TOKEN)
    )
    assert "payments" not in other.json()["retrievedDomainsThisSession"]

    key = refund["evidenceBlocks"][0]["evidenceKey"]
    answer = {"answer": f"Approval is needed [{key}].", "session": "s1"}
    verdict = httpx.post(f"{url}/v1/verify", json=answer, headers=auth(FINANCE_TOKEN))
    assert verdict.status_code == 200 and verdict.json()["verified"] is True
    assert (
        httpx.post(f"{url}/v1/verify", json=answer, headers=auth(SUPPORT_TOKEN)).json()["verified"] is False
    )


def test_a_document_one_token_may_see_is_absent_from_everything_the_other_gets(served: Served) -> None:
    url = served.base
    seen = httpx.post(
        f"{url}/v1/lookup", json={"query": SECRET_QUERY, "session": "v"}, headers=auth(FINANCE_TOKEN)
    )
    assert seen.json()["evidenceBlocks"][0]["evidenceKey"].startswith("quillion-vault-keys#chunk-")
    secret_key = seen.json()["evidenceBlocks"][0]["evidenceKey"]

    hidden = httpx.post(
        f"{url}/v1/lookup", json={"query": SECRET_QUERY, "session": "v"}, headers=auth(SUPPORT_TOKEN)
    )
    verdict = httpx.post(
        f"{url}/v1/verify",
        json={"answer": f"Two officers [{secret_key}].", "session": "v"},
        headers=auth(SUPPORT_TOKEN),
    )
    assert [c["status"] for c in verdict.json()["citations"]] == ["unknown_key"]  # as if it did not exist

    async def over_mcp() -> CallToolResult:
        async with mcp_client(url, SUPPORT_TOKEN) as client:
            return await client.call_tool(TOOL_NAME, {"query": SECRET_QUERY})

    mcp_result = anyio.run(over_mcp)
    metrics = httpx.get(f"{url}/metrics", headers=auth(SUPPORT_TOKEN)).text
    recorder = InvocationRecorder(invocation_db_url(served.config))
    support_rows = [row for row in recorder.list() if (row.session_id or "").startswith("support-bot/")]
    recorder.close()
    assert support_rows  # the support token's calls were recorded, under its own sessions
    # everything the support token got or left behind, but its own answer citing the key
    seen_by_support = [hidden.text, mcp_result.content[0].text, metrics]
    seen_by_support += [
        json.dumps(row.retrieval_details) for row in support_rows if row.tool_name == TOOL_NAME
    ]
    leaks = [marker for text in seen_by_support for marker in SECRET_MARKERS if marker in text]
    assert leaks == []
    for secret in (FINANCE_TOKEN, SUPPORT_TOKEN, "finance-bot", "support-bot", '"finance"', SECRET_QUERY):
        assert secret not in metrics  # no token, caller, principal or query is a metric label


def test_an_unrestricted_token_sees_every_document_over_json_and_mcp(served: Served) -> None:
    """An ``unrestricted: true`` token's calls are made without principals (``AccessScope()``),
    over the JSON API and MCP alike: the document only finance may see is found, a key of it
    verifies, and the call is recorded as made without principals."""
    url = served.base
    seen = httpx.post(
        f"{url}/v1/lookup", json={"query": SECRET_QUERY, "session": "u"}, headers=auth(OPS_TOKEN), timeout=60
    ).json()
    assert seen["evidenceBlocks"][0]["evidenceKey"].startswith("quillion-vault-keys#chunk-")
    assert seen["retrievalTrace"]["accessFilter"] is None
    key = seen["evidenceBlocks"][0]["evidenceKey"]
    verdict = httpx.post(
        f"{url}/v1/verify", json={"answer": f"Two officers [{key}].", "session": "u"}, headers=auth(OPS_TOKEN)
    ).json()
    assert [c["status"] for c in verdict["citations"]] == ["ok"]

    async def over_mcp() -> CallToolResult:
        async with mcp_client(url, OPS_TOKEN) as client:
            return await client.call_tool(TOOL_NAME, {"query": SECRET_QUERY})

    over = _contract(anyio.run(over_mcp))
    assert over["evidenceBlocks"][0]["evidenceKey"].startswith("quillion-vault-keys#chunk-")
    recorder = InvocationRecorder(invocation_db_url(served.config))
    rows = {row.id: row for row in recorder.list()}
    recorder.close()
    for result in (seen, over):
        row = rows[result["retrievalTrace"]["invocationRecord"]["id"]]
        assert row.session_id.startswith("ops/") and row.retrieval_details.get("access") is None


@pytest.mark.parametrize("path", ["/v1/lookup", "/v1/verify", "/metrics", "/mcp"])
def test_a_request_without_a_valid_token_gets_401_without_a_hint(served: Served, path: str) -> None:
    body = {"query": REFUND_QUERY, "answer": "x", "session": "s"}
    method = "GET" if path == "/metrics" else "POST"
    answers = [
        httpx.request(method, f"{served.base}{path}", json=body, headers=headers)
        for headers in (
            {},
            auth("not-a-token"),
            auth(FINANCE_TOKEN[:-1]),
            {"Authorization": f"Basic {FINANCE_TOKEN}"},
            {"Authorization": FINANCE_TOKEN},
        )
    ]
    assert {a.status_code for a in answers} == {401}
    assert len({a.text for a in answers}) == 1  # the same answer whichever token was wrong
    assert answers[0].json()["error"] == "invalid_token"
    assert answers[0].headers["www-authenticate"].startswith("Bearer")
    assert all(name not in answers[0].text for name in ("finance", "support"))


def test_the_review_pages_at_the_root_see_what_the_token_may(served: Served) -> None:
    """The review UI is served at ``/`` behind the same tokens: none gets the sign-in page, each
    token's Ask page runs as its principals (the secret document only for finance)."""
    signed_out = httpx.get(f"{served.base}/", timeout=READY_WAIT_S)
    assert signed_out.status_code == 401 and "<form" in signed_out.text
    ask = {"q": "Who must be present at the vault key ceremony?"}  # names no marker itself
    pages = {
        token: httpx.get(f"{served.base}/", params=ask, headers=auth(token), timeout=READY_WAIT_S)
        for token in (FINANCE_TOKEN, SUPPORT_TOKEN)
    }
    assert all(page.status_code == 200 for page in pages.values())
    assert "quillion-vault-keys" in pages[FINANCE_TOKEN].text
    assert not [marker for marker in SECRET_MARKERS if marker in pages[SUPPORT_TOKEN].text]


def test_health_readiness_and_openapi_need_no_token(served: Served) -> None:
    assert httpx.get(f"{served.base}/healthz").json() == {"status": "up"}
    ready = httpx.get(f"{served.base}/readyz").json()
    assert ready["ready"] is True and ready["store"] == "open"
    document = httpx.get(f"{served.base}/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    assert set(document["paths"]) >= {"/v1/lookup", "/v1/verify", "/healthz", "/readyz", "/metrics"}
    schemas = document["components"]["schemas"]
    assert {"LookupBody", "VerifyBody", "LookupResult", "AnswerVerdict", "ApiError"} <= set(schemas)
    assert schemas["LookupBody"]["required"] == ["query"]
    assert "evidenceBlocks" in schemas["LookupResult"]["properties"]


BAD_BODIES = [
    (b"{not json", 400, "bad_json"),
    (b"[" * 100_000, 400, "bad_json"),  # nests too deeply to parse
    (b"[1, 2]", 422, "invalid_request"),
    (b'{"query": 5}', 422, "invalid_request"),
    (b'{"query": ["a"]}', 422, "invalid_request"),
    (b'{"session": "s"}', 422, "invalid_request"),
    (b'{"query": "refunds", "session": 7}', 422, "invalid_request"),
    (b'{"query": "refunds", "principals": ["finance"]}', 422, "invalid_request"),
]


@pytest.mark.parametrize(("body", "status", "kind"), BAD_BODIES)
def test_a_malformed_body_gets_a_json_4xx(served: Served, body: bytes, status: int, kind: str) -> None:
    answer = httpx.post(f"{served.base}/v1/lookup", content=body, headers=auth(FINANCE_TOKEN))
    assert (answer.status_code, answer.json()["error"]) == (status, kind)
    assert "Traceback" not in answer.text


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("   ", "Invalid query: the query is empty."),
        (
            "x" * 2001,
            "Invalid query: the query has 2001 characters; the limit is 2000 (retrieval.max_query_chars).",
        ),
        ("refund\ud800", "Invalid query: the query is not valid UTF-8 text."),
        ("refund\x00policy", "Invalid query: the query contains control characters."),
        ("\u200b\u200b", "Invalid query: the query has only invisible (format) characters."),
    ],
)
def test_a_refused_query_gets_422_with_the_contract(served: Served, query: str, message: str) -> None:
    body = json.dumps({"query": query}).encode()  # a lone surrogate as its JSON escape
    answer = httpx.post(f"{served.base}/v1/lookup", content=body, headers=auth(FINANCE_TOKEN))
    assert answer.status_code == 422
    assert (answer.json()["evidenceStatus"], answer.json()["message"]) == ("invalid_input", message)


def test_limits_and_unknown_routes_answer_in_json(served: Served) -> None:
    url, headers = served.base, auth(FINANCE_TOKEN)
    limit = served.config.serve.max_body_bytes
    declared = httpx.post(f"{url}/v1/lookup", content=b"x" * (limit + 1), headers=headers)
    assert (declared.status_code, declared.json()["error"]) == (413, "too_large")
    streamed = httpx.post(
        f"{url}/v1/lookup", content=iter([b"x" * 65536] * (limit // 65536 + 2)), headers=headers
    )
    assert (streamed.status_code, streamed.json()["error"]) == (413, "too_large")  # chunked, no length given
    long_answer = {"answer": "x" * 100_001, "session": "s"}
    too_long = httpx.post(f"{url}/v1/verify", json=long_answer, headers=headers)
    assert (too_long.status_code, too_long.json()["error"]) == (422, "answer_too_long")
    assert httpx.get(f"{url}/v1/lookup", headers=headers).json()["error"] == "method_not_allowed"
    assert httpx.get(f"{url}/v1/no/such/route", headers=headers).json()["error"] == "not_found"
    assert httpx.get(f"{url}/no/such/route", headers=headers).status_code == 404  # a review page's 404
    assert httpx.get(f"{url}/healthz").status_code == 200  # and the server serves on


def test_metrics_count_requests_latency_errors_and_the_store(served: Served) -> None:
    url, headers = served.base, auth(FINANCE_TOKEN)
    httpx.post(f"{url}/v1/lookup", json={"query": KAFKA_QUERY}, headers=headers)
    httpx.post(f"{url}/v1/lookup", content=b"{", headers=headers)
    httpx.get(f"{url}/some/client/path")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", headers=headers).text)
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return samples.get((name, tuple(sorted(labels.items()))), 0.0)

    assert value("lookup_knowledge_http_requests_total", route="/v1/lookup", code="200") >= 1
    assert value("lookup_knowledge_http_requests_total", route="/v1/lookup", code="400") >= 1
    assert value("lookup_knowledge_http_requests_total", route="other", code="404") >= 1  # no path as a label
    assert value("lookup_knowledge_http_request_duration_seconds_count", route="/v1/lookup") >= 2
    assert value("lookup_knowledge_errors_total", kind="bad_json") >= 1
    assert value("lookup_knowledge_lookups_total", status="evidence") >= 1
    assert value("lookup_knowledge_calls_in_flight") == 0
    assert value("lookup_knowledge_store_documents") == len(served.agent.tool.l0_index.documents)
    assert not any("some/client" in str(labels) for _, labels in samples)


# --- back-pressure and shutdown (a test double holds calls in flight) ------------------------------


class HeldAgent:
    """The fault: an agent whose lookups wait until :attr:`release` is set, then run for real."""

    def __init__(self, agent: AgentLookup) -> None:
        self.agent, self.tool = agent, agent.tool
        self.release = threading.Event()
        self.closed_after: list[str] = []  # what had finished when the app closed it

    def call(self, *args: Any, **kwargs: Any) -> Any:
        assert self.release.wait(120)
        result = self.agent.call(*args, **kwargs)
        self.closed_after.append("call")
        return result

    def verify_answer(self, *args: Any, **kwargs: Any) -> Any:
        return self.agent.verify_answer(*args, **kwargs)

    def warm_up(self, principals: Any = None) -> float:
        return 0.0

    def close(self) -> None:
        self.closed_after.append("close")


def _held_app(served: Served, **limits: Any) -> tuple[HeldAgent, Any]:
    settings = served.config.serve.model_copy(update={"max_in_flight": 1, **limits})
    held = HeldAgent(served.agent)
    return held, build_app(held, settings, warm_up=False)  # type: ignore[arg-type]


def _post_in_background(url: str, body: dict[str, Any]) -> tuple[threading.Thread, list[httpx.Response]]:
    answers: list[httpx.Response] = []
    thread = threading.Thread(
        target=lambda: answers.append(httpx.post(url, json=body, headers=auth(FINANCE_TOKEN), timeout=300))
    )
    thread.start()
    return thread, answers


def _wait_in_flight(app: Any, count: int) -> None:
    deadline = time.monotonic() + 120
    while app.state.service.admission.in_flight != count:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_calls_beyond_the_bound_get_429_with_retry_after_and_the_held_one_finishes(served: Served) -> None:
    held, app = _held_app(served)
    with live(app) as base:
        thread, answers = _post_in_background(f"{base}/v1/lookup", {"query": REFUND_QUERY})
        _wait_in_flight(app, 1)
        refused = httpx.post(f"{base}/v1/lookup", json={"query": KAFKA_QUERY}, headers=auth(FINANCE_TOKEN))

        async def over_mcp() -> CallToolResult:
            async with mcp_client(base, FINANCE_TOKEN) as client:
                return await client.call_tool(TOOL_NAME, {"query": KAFKA_QUERY})

        mcp_refused = anyio.run(over_mcp)
        metrics = httpx.get(f"{base}/metrics", headers=auth(FINANCE_TOKEN)).text
        threading.Timer(0.5, held.release.set).start()  # released while the server shuts down
    thread.join(300)
    assert (refused.status_code, refused.json()["error"]) == (429, "busy")
    assert refused.headers["retry-after"] == "1"
    assert mcp_refused.is_error and "busy" in mcp_refused.content[0].text
    assert "lookup_knowledge_calls_in_flight 1.0" in metrics
    assert 'lookup_knowledge_errors_total{kind="busy"} 2.0' in metrics
    assert 'lookup_knowledge_http_requests_total{code="429",route="/v1/lookup"} 1.0' in metrics
    assert answers[0].status_code == 200 and answers[0].json()["evidenceStatus"] == "evidence"
    assert held.closed_after == ["call", "close"]  # shutdown let the call in flight finish, then closed


def test_a_call_past_its_deadline_gets_503_and_keeps_its_slot_until_it_ends(served: Served) -> None:
    held, app = _held_app(served, request_timeout_s=0.2)
    with live(app) as base:
        late = httpx.post(f"{base}/v1/lookup", json={"query": REFUND_QUERY}, headers=auth(FINANCE_TOKEN))
        still_running = httpx.post(
            f"{base}/v1/lookup", json={"query": KAFKA_QUERY}, headers=auth(FINANCE_TOKEN)
        )
        held.release.set()
        _wait_in_flight(app, 0)
    assert (late.status_code, late.json()["error"], late.headers["retry-after"]) == (503, "timeout", "1")
    assert (still_running.status_code, still_running.json()["error"]) == (
        429,
        "busy",
    )  # the bound holds threads


def test_a_slow_body_gets_408_and_holds_no_worker(served: Served) -> None:
    held, app = _held_app(served, body_timeout_s=0.5)
    held.release.set()
    with live(app) as base:
        port = int(base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as slow:
            slow.sendall(
                b"POST /v1/lookup HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                + f"Authorization: Bearer {FINANCE_TOKEN}\r\nContent-Length: 100\r\n\r\n".encode()
                + b'{"query": "ref'
            )
            answer = http.client.HTTPResponse(slow)
            answer.begin()
            body = json.loads(answer.read())
        served_meanwhile = app.state.service.admission.in_flight
    assert (answer.status, body["error"]) == (408, "body_timeout")
    assert served_meanwhile == 0


# --- the command ----------------------------------------------------------------------------------


def test_token_command_prints_a_token_and_only_its_hash_for_the_config() -> None:
    result = CliRunner().invoke(cli, ["token", "team-a", "-p", "finance", "-p", "hr"])
    assert result.exit_code == 0, result.output
    token = result.output.split("token: ", 1)[1].split()[0]
    entry = TokenConfig(
        name="team-a", sha256=result.output.split("sha256: ", 1)[1].split()[0], principals=["finance", "hr"]
    )
    assert entry.sha256 == hashlib.sha256(token.encode()).hexdigest()
    assert token not in result.output.split("serve.tokens entry:", 1)[1]


def test_token_command_makes_an_unrestricted_token_only_when_asked() -> None:
    result = CliRunner().invoke(cli, ["token", "admin", "--unrestricted"])
    assert result.exit_code == 0, result.output
    token = result.output.split("token: ", 1)[1].split()[0]
    entry = yaml.safe_load(result.output.split("serve.tokens entry:", 1)[1])
    assert entry == [{"name": "admin", "sha256": token_hash(token), "unrestricted": True}]
    assert TokenConfig(**entry[0]).principals == []
    for args in (["token", "admin"], ["token", "admin", "-p", "hr", "--unrestricted"]):
        refused = CliRunner().invoke(cli, args)
        assert refused.exit_code == 2
        assert "--principal NAME, repeatable) or pass --unrestricted" in refused.output
        assert "token: " not in refused.output


def test_serve_refuses_another_address_without_tokens(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0", "--set", f"store.path={tmp_path}"])
    assert result.exit_code == 2
    assert "--allow-unauthenticated" in result.output


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow  # a CLI process that loads the model
def test_serve_process_answers_then_shuts_down_cleanly_on_sigterm(
    sample_store: Path, tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    store = shutil.copytree(sample_store, tmp_path / "store")  # its own: the module's is served in-process
    port = _free_port()
    command = [str(LOOKUP_KNOWLEDGE), "serve", "--port", str(port), "--set", f"store.path={store}"]
    process = subprocess.Popen(
        command, stderr=subprocess.PIPE, text=True, env={**os.environ, "NO_COLOR": "1"}
    )
    try:
        lines = iter(process.stderr.readline, "")
        started = next((line for line in lines if "serving on" in line), "")
        base = f"http://127.0.0.1:{port}"
        wait_ready(base)
        answer = httpx.post(
            f"{base}/v1/lookup", json={"query": REFUND_QUERY}
        )  # no tokens: loopback, no header
        process.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal: the exit says it was SIGTERM
        assert process.wait(120) == -signal.SIGTERM
    finally:
        process.kill()
    assert "no tokens configured" in started and "loopback only" in started
    assert answer.status_code == 200 and answer.json()["evidenceStatus"] == "evidence"
    # the store was closed: another process opens it at once
    with KnowledgeTool(make_config(store, store__lock_wait_s=0), embedder=embedder) as tool:
        assert tool.lookup(REFUND_QUERY).evidence_status == "evidence"


ADDED_DOC = {
    "payments/glimmer.md": (
        {"id": "glimmer-settlement", "title": "Glimmer Settlement Window", "domain": "payments"},
        "# Glimmer Settlement Window\n\nGlimmer settlements close at 17:30 CET; a payout requested after "
        "the glimmer window waits for the next business day and the treasury desk confirms it.\n",
    )
}


@pytest.mark.slow  # an ingest process that loads the model
def test_an_ingest_while_clients_call_fails_no_call_and_serves_no_half_document(
    sample_store: Path, tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    store = shutil.copytree(sample_store, tmp_path / "store")  # its own: the module's is served already
    config = make_config(store)
    agent = AgentLookup(
        KnowledgeTool(config, embedder=embedder), InvocationRecorder(invocation_db_url(config))
    )
    new_text = ADDED_DOC["payments/glimmer.md"][1].split("\n\n", 1)[1].strip()
    answers: list[httpx.Response] = []
    ingesting = threading.Event()
    with live(build_app(agent, config.serve)) as base:
        wait_ready(base)

        def client(n: int) -> None:
            with httpx.Client(base_url=base, timeout=300) as http:
                queries = ["glimmer settlement window payout", REFUND_QUERY, KAFKA_QUERY]
                i = 0
                while ingesting.is_set() or i < 3:
                    answers.append(http.post("/v1/lookup", json={"query": queries[(n + i) % 3]}))
                    i += 1

        ingesting.set()
        clients = [threading.Thread(target=client, args=(n,)) for n in range(3)]
        for thread in clients:
            thread.start()
        source = write_corpus(tmp_path / "added", ADDED_DOC)
        done = subprocess.run(
            [str(LOOKUP_KNOWLEDGE), "ingest", str(source), "--set", f"store.path={store}"],
            capture_output=True,
            text=True,
        )
        ingesting.clear()
        for thread in clients:
            thread.join(300)
        after = httpx.post(f"{base}/v1/lookup", json={"query": "glimmer settlement window payout"}).json()
    assert done.returncode == 0, done.stderr
    assert len(answers) >= 9
    assert {a.status_code for a in answers} == {200}  # no call failed while the store was handed over
    blocks = [b for a in answers for b in a.json()["evidenceBlocks"] if b["docId"] == "glimmer-settlement"]
    assert all(new_text in b["content"] for b in blocks)  # the document whole, or not at all
    assert after["evidenceBlocks"][0]["docId"] == "glimmer-settlement"  # found once the ingest returned
