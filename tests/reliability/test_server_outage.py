"""A serving process outlives its Qdrant server's outages.

``lookup-knowledge mcp`` with ``store.backend=qdrant`` and the server down starts anyway and
answers each call with ``retrieval_failed`` (how fast: benchmarks/reliability_faults.py); the
search port behind it reopens the store once the server is back.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import anyio
import pytest
from conftest import ManualClock, make_config
from mcp import Client, StdioServerParameters

from lookup_knowledge import ingest
from lookup_knowledge.adapters import server_port
from lookup_knowledge.adapters.errors import StoreMissingError, StoreUnavailableError
from lookup_knowledge.adapters.qdrant_client_store import QdrantClientStore
from lookup_knowledge.adapters.search import SearchRequest
from lookup_knowledge.adapters.server_port import ReconnectingSearchPort
from lookup_knowledge.agent.lookup import AgentLookup
from lookup_knowledge.agent.tool_definition import TOOL_NAME
from lookup_knowledge.stores import open_store

LOOKUP_KNOWLEDGE = Path(sys.executable).with_name("lookup-knowledge")
STARTUP_TIMEOUT_S = 180  # the server imports torch and loads the model on a busy 2-core machine
TIMEOUT_S = 1.0
CALLS = 3


async def _calls_to_a_server_without_its_store(store: Path, url: str) -> list[dict]:
    sets = [f"store.path={store}", "store.backend=qdrant", f"store.url={url}", f"store.timeout_s={TIMEOUT_S}"]
    args = ["mcp", *[arg for setting in sets for arg in ("--set", setting)]]
    params = StdioServerParameters(command=str(LOOKUP_KNOWLEDGE), args=args)
    answers = []
    async with Client(params, read_timeout_seconds=STARTUP_TIMEOUT_S) as client:
        for _ in range(CALLS):
            result = await client.call_tool(TOOL_NAME, {"query": "Who approves a refund above 500 EUR?"})
            answers.append(result.structured_content)
            assert not result.is_error  # an outage is a result, not a tool error
    return answers


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["refused", "hung"])
def test_mcp_serves_retrieval_failed_while_the_server_is_down(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(f"{kind}_url")
    answers = anyio.run(_calls_to_a_server_without_its_store, tmp_path, url)
    assert len(answers) == CALLS  # the server started and stayed up
    for result in answers:
        assert result["evidenceStatus"] == "retrieval_failed"
        assert result["found"] is False
        errors = [attempt["error"] for attempt in result["retrievalTrace"]["attempts"]]
        assert errors and all(url in error for error in errors)
        if kind == "hung":  # bounded by the timeout, not left hanging
            assert all(f"no answer within store.timeout_s = {TIMEOUT_S} s" in error for error in errors)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    clock = ManualClock()
    monkeypatch.setattr(server_port, "time", clock)
    return clock


class FlakyServer:
    """A real store (qdrant-client's local mode) behind a switch: while ``down``, opening it and
    searching an open one fail as an unreachable server does (the injected fault)."""

    def __init__(self, config) -> None:
        self.config = config
        self.down = True
        self.opened = 0

    def __call__(self) -> FlakyStore:
        self._check()
        self.opened += 1
        return FlakyStore(open_store(self.config, create=False), self)

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailableError("Qdrant at http://qdrant:6333 is unavailable: connection refused")


class FlakyStore:
    def __init__(self, store: QdrantClientStore, server: FlakyServer) -> None:
        self.store, self.server = store, server

    def search(self, request: SearchRequest):
        self.server._check()
        return self.store.search(request)

    def close(self) -> None:
        self.store.close()


def test_the_port_answers_each_outage_and_recovers(
    tmp_path: Path, small_corpus: Path, embedder, clock: ManualClock
) -> None:
    config = make_config(tmp_path, store__backend="qdrant")
    ingest(small_corpus, config, embedder=embedder)
    server = FlakyServer(config)
    reopened: list[int] = []
    port = ReconnectingSearchPort(  # a long wait_s: each reopening is awaited, whatever the load
        server, on_reopen=lambda: reopened.append(server.opened), retry_after_s=0.2, wait_s=30
    )
    request = SearchRequest("refunds", embedder.embed_query("refund policy"), 3)
    try:
        with pytest.raises(StoreUnavailableError, match="unavailable"):
            port.search(request)  # down at the start
        server.down = False
        clock.now += 0.1
        with pytest.raises(StoreUnavailableError):  # within retry_after_s: the same answer at once
            port.search(request)
        clock.now += 0.15
        assert port.search(request).hits[0].doc_id == "refunds"  # back: opened afresh
        assert (server.opened, reopened) == (1, [])  # the first open is no reopening
        server.down = True
        with pytest.raises(StoreUnavailableError):  # down while serving: the open client fails
            port.search(request)
        server.down = False
        with pytest.raises(StoreUnavailableError):
            port.search(request)
        assert server.opened == 1  # failing at once: no new connection attempt yet
        clock.now += 0.25
        assert port.search(request).hits[0].doc_id == "refunds"
        assert (server.opened, reopened) == (2, [2])  # reopened, and the caller told (L0 reload)
    finally:
        port.close()


def test_a_hung_reopening_costs_a_lookup_wait_s_and_serves_the_next(
    tmp_path: Path, small_corpus: Path, embedder
) -> None:
    """A reopening that hangs (a server that accepts and never answers) runs on while each lookup
    waits for it at most ``wait_s`` and fails with the last error; once it completes, the next
    lookup is served by it without opening again."""
    config = make_config(tmp_path, store__backend="qdrant")
    ingest(small_corpus, config, embedder=embedder)
    server, answer, reopened = FlakyServer(config), threading.Event(), threading.Event()
    attempts: list[int] = []

    def opener() -> FlakyStore:
        attempts.append(server.opened)
        if server.opened:  # the reopening hangs until the server answers
            answer.wait(timeout=60)
        return server()

    port = ReconnectingSearchPort(opener, on_reopen=reopened.set, retry_after_s=0, wait_s=0.1)
    request = SearchRequest("refunds", embedder.embed_query("refund policy"), 3)
    try:
        server.down = False
        port.connect()
        server.down = True
        with pytest.raises(StoreUnavailableError, match="connection refused"):
            port.search(request)  # the open client fails: dropped
        server.down = False
        for _ in range(2):  # the reopening hangs: the first lookup waits wait_s, the next none
            with pytest.raises(StoreUnavailableError, match="connection refused"):
                port.search(request)  # failed, not served: no lookup waited for the reopening
        assert (server.opened, len(attempts)) == (1, 2)  # the second lookup started no opening
        answer.set()  # the server answers: the same reopening completes
        assert reopened.wait(timeout=30)
        assert port.search(request).hits[0].doc_id == "refunds"
        assert server.opened == 2  # one reopening, however many lookups waited on it
    finally:
        answer.set()
        port.close()


def test_a_missing_collection_is_retried_too(tmp_path: Path, small_corpus: Path, embedder) -> None:
    config = make_config(tmp_path, store__backend="qdrant")
    port = ReconnectingSearchPort(  # the reopening awaited, whatever the load
        lambda: open_store(config, create=False), retry_after_s=0, wait_s=30
    )
    request = SearchRequest("refunds", embedder.embed_query("refund policy"), 3)
    try:
        with pytest.raises(StoreMissingError, match="ingest first"):
            port.search(request)
        ingest(small_corpus, config, embedder=embedder)
        assert port.search(request).hits[0].doc_id == "refunds"
    finally:
        port.close()


def test_an_agent_host_starts_while_its_server_is_down(tmp_path: Path, refused_url: str, embedder) -> None:
    """``AgentLookup.from_config`` on a Qdrant server that is down builds the tool (no
    ``require_store`` needed) and answers each call ``retrieval_failed``; a local store that is
    missing is still a clear error at start."""
    config = make_config(
        tmp_path, store__backend="qdrant", store__url=refused_url, store__timeout_s=TIMEOUT_S
    )
    with AgentLookup.from_config(config) as agent:
        results = [agent.call("Who approves a refund above 500 EUR?", session_id="host") for _ in range(2)]
    for result in results:
        assert (result.found, result.evidence_status) == (False, "retrieval_failed")
        assert refused_url in result.message
        assert result.retrieval_trace.invocation_record.written is True  # each call still recorded
    with pytest.raises(StoreMissingError, match="ingest first"):
        AgentLookup.from_config(make_config(tmp_path / "nothing-here"))
