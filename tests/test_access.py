"""Access control: a document's access (frontmatter or JSONL), the caller's principals (API, CLI,
MCP), and the filter in every part of the result: nothing of an invisible document leaks.

The store-level tests run both adapters; the lookups use the hashing embedder (the filter is the
store's, the model adds nothing) except the stdio MCP round trip, which runs the real CLI.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
import qdrant_edge as qe
from access_fixtures import (
    Doc,
    check_lookups,
    comparable,
    leaked_markers,
    may_see,
    write_corpus,
)
from conftest import SMALL_CORPUS, make_config, write_markdown
from conftest import write_corpus as write_markdown_corpus
from dataflow_fixtures import searched
from hashing_embedder import HashingEmbedder
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters
from typer.testing import CliRunner

from lookup_knowledge import AgentLookup, KnowledgeTool, ingest
from lookup_knowledge.adapters.corpus import read_corpus
from lookup_knowledge.adapters.embedder import Embedder
from lookup_knowledge.adapters.l0_index import L0Index
from lookup_knowledge.adapters.payload import ACCESS_FIELD
from lookup_knowledge.adapters.qdrant_client_store import QdrantClientStore
from lookup_knowledge.adapters.qdrant_edge_store import QdrantEdgeStore, engine_queries
from lookup_knowledge.adapters.recorder import InvocationRecorder
from lookup_knowledge.adapters.search import (
    UNRESTRICTED,
    AccessScope,
    KnowledgeStore,
    SearchRequest,
    StoredChunk,
    evidence_key,
)
from lookup_knowledge.adapters.sparse import bm25_encoder
from lookup_knowledge.agent.lookup import invocation_db_url
from lookup_knowledge.agent.mcp_server import build_server
from lookup_knowledge.agent.tool_definition import TOOL_NAME
from lookup_knowledge.cli.app import app
from lookup_knowledge.config import Config, ConfigError, load_config
from lookup_knowledge.ranking import searched_hits
from lookup_knowledge.stores import l0_index_path, open_store

EMBEDDER = HashingEmbedder()
LOOKUP_KNOWLEDGE = Path(sys.executable).with_name("lookup-knowledge")
HR_QUERY = "how many vacation days does parental leave give"
HR_DOC = {
    "id": "hr-leave",
    "title": "Parental Leave Rules",
    "domain": "hr",
    "keywords": ["parental leave", "vacation days"],
    "entities": ["Leave Board"],
    "access": ["hr", "managers"],
}
HR_BODY = (
    "# Parental Leave Rules\n\nParental leave gives 20 vacation days on top of the yearly ones. "
    "The Leave Board approves extensions; the secret marker is zebra-hr-7731.\n"
)


def _json(result: Any) -> str:
    return json.dumps(result.model_dump(by_alias=True, mode="json"), ensure_ascii=False)


# --- the access field: reading, config ----------------------------------------------------------


def test_frontmatter_and_jsonl_access_are_read_and_a_mistyped_one_skips_the_file(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    write_markdown(root, "a.md", {"id": "a", "access": ["hr", " managers ", "hr"]}, "# A\n\ntext\n")
    write_markdown(root, "b.md", {"id": "b", "access": "secops"}, "# B\n\ntext\n")
    write_markdown(root, "c.md", {"id": "c"}, "# C\n\ntext\n")
    write_markdown(root, "d.md", {"id": "d", "access": []}, "# D\n\ntext\n")
    write_markdown(root, "e.md", {"id": "e", "access": {"hr": True}}, "# E\n\ntext\n")
    write_markdown(root, "f.md", {"id": "f", "access": ["hr", 7]}, "# F\n\ntext\n")
    corpus = read_corpus(root)
    assert {d.doc_id: d.access for d in corpus.documents} == {
        "a": ("hr", "managers"),
        "b": ("secops",),
        "c": None,
        "d": (),
    }
    assert sorted(s.path for s in corpus.skipped) == ["e.md", "f.md"]  # never widened to the default
    assert all("access must be" in s.reason for s in corpus.skipped)

    jsonl = tmp_path / "corpus.jsonl"
    records = [{"_id": "x", "text": "t", "access": ["hr"]}, {"_id": "y", "text": "t", "access": 3}]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    corpus = read_corpus(jsonl)
    assert [(d.doc_id, d.access) for d in corpus.documents] == [("x", ("hr",))]
    assert [s.doc_source for s in corpus.skipped] == ["y"]  # kept in the store by a prune


def test_access_config_validates(tmp_path: Path) -> None:
    assert load_config().access.default == "public" and load_config().access.principals is None
    assert make_config(tmp_path, access__default="deny").access.default_access == ()
    with pytest.raises(ConfigError, match="access.default"):
        make_config(tmp_path, access__default="open")
    with pytest.raises(ConfigError, match="access.principals"):
        make_config(tmp_path, access__principals=["hr", " "])


# --- the filter in the store, both adapters -----------------------------------------------------


@pytest.fixture(params=["edge", "qdrant-local"])
def access_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KnowledgeStore]:
    """Six chunks over two categories, each of another access."""
    if request.param == "edge":
        store: KnowledgeStore = QdrantEdgeStore(tmp_path / "edge", dimension=EMBEDDER.dimension)
    else:
        store = QdrantClientStore("knowledge", EMBEDDER.dimension, location=tmp_path / "local")
    access = [["hr"], ["public"], [], ["finance", "hr"], ["eng"], ["public"]]
    chunks = []
    for i, granted in enumerate(access):
        text = f"refund policy number {i} for the team"
        payload = {
            "evidence_key": evidence_key(f"doc{i}", 0),
            "doc_id": f"doc{i}",
            "chunk_index": 0,
            "content": text,
            "category": ["payments" if i % 2 else "people"],
            ACCESS_FIELD: granted,
        }
        sparse = bm25_encoder().embed_document(text)
        chunks.append(StoredChunk(EMBEDDER.embed_query(text), payload, sparse))
    store.write_documents(chunks)
    store.optimize()
    yield store
    store.close()


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
def test_every_query_of_a_search_carries_the_access_filter(access_store: KnowledgeStore, mode: str) -> None:
    text = "refund policy for the team"
    base = SearchRequest(
        text, EMBEDDER.embed_query(text), 10, mode=mode, sparse_vector=bm25_encoder().embed_query(text)
    )
    expected = {
        None: {f"doc{i}" for i in range(6)},
        ("public",): {"doc1", "doc5"},
        ("hr", "public"): {"doc0", "doc1", "doc3", "doc5"},
        ("eng", "finance", "public"): {"doc1", "doc3", "doc4", "doc5"},
    }
    requests = [replace(base, access=scope) for scope in expected]
    filtered = [replace(request, category="payments") for request in requests]
    answers = searched_hits(access_store, requests + filtered)  # one batch: companions, cosines, counts
    for scope, hits in zip(expected, answers[: len(expected)], strict=True):
        assert {hit.doc_id for hit in hits} == expected[scope], scope
        assert all(hit.dense_score is not None for hit in hits)
    for scope, hits in zip(expected, answers[len(expected) :], strict=True):
        odd = {doc for doc in expected[scope] if int(doc[-1]) % 2}
        assert {hit.doc_id for hit in hits} == odd, scope


def test_an_access_change_is_a_payload_update_seen_by_the_next_search(access_store: KnowledgeStore) -> None:
    text = "refund policy number 0 for the team"
    request = SearchRequest(text, EMBEDDER.embed_query(text), 10, access=AccessScope.of(["eng"]).filter)
    assert "doc0" not in {hit.doc_id for hit in searched(access_store, request)}
    access_store.set_access("doc0", ["eng"])
    assert "doc0" in {hit.doc_id for hit in searched(access_store, request)}
    assert access_store.documents()["doc0"].holds_access(["eng"])


def test_an_unrestricted_search_sends_the_same_queries_as_before_access_control() -> None:
    vector = EMBEDDER.embed_query("refund")
    sparse = bm25_encoder().embed_query("refund")
    for mode in ("dense", "sparse", "hybrid"):
        queries = engine_queries(SearchRequest("refund", vector, 5, mode=mode, sparse_vector=sparse))
        assert all(query.filter is None for query in queries)  # no condition at all, as before


# --- ingest: stored with every chunk, part of the version ---------------------------------------


def _payloads(store_path: Path) -> dict[str, list[Any]]:
    store = QdrantEdgeStore(store_path / "knowledge", create=False)
    try:
        records, _ = store._shard.scroll(qe.ScrollRequest(limit=100, with_payload=True))
    finally:
        store.close()
    by_doc: dict[str, list[Any]] = {}
    for record in records:
        by_doc.setdefault(record.payload["doc_id"], []).append(record.payload[ACCESS_FIELD])
    return by_doc


def test_ingest_stores_access_on_every_chunk_and_rewrites_it_when_it_changes(tmp_path: Path) -> None:
    root = write_markdown_corpus(tmp_path / "kb", SMALL_CORPUS)
    write_markdown(root, "hr/leave.md", HR_DOC, HR_BODY)
    config = make_config(tmp_path / "store", ingest__chunk_chars=100)
    ingest(root, config, embedder=EMBEDDER)
    access = _payloads(tmp_path / "store")
    assert access["hr-leave"] and all(a == ["hr", "managers"] for a in access["hr-leave"])
    assert all(a == ["public"] for doc, chunks in access.items() if doc != "hr-leave" for a in chunks)
    assert L0Index.load(l0_index_path(config)).documents["hr-leave"].access == ("hr", "managers")

    def sees(principals: list[str]) -> bool:
        with KnowledgeTool(config, embedder=EMBEDDER) as tool:
            return "hr-leave#chunk" in _json(tool.lookup(HR_QUERY, principals=principals))

    assert sees(["hr"]) and not sees(["contractor"])
    write_markdown(root, "hr/leave.md", {**HR_DOC, "access": ["contractor"]}, HR_BODY)  # frontmatter edit
    report = ingest(root, config, embedder=EMBEDDER)
    assert (report.updated, report.unchanged) == (1, 3)
    assert all(a == ["contractor"] for a in _payloads(tmp_path / "store")["hr-leave"])
    assert sees(["contractor"]) and not sees(["hr"])

    deny = make_config(tmp_path / "store", ingest__chunk_chars=100, access__default="deny")
    report = ingest(root, deny, embedder=EMBEDDER)  # the default changed: a payload update, no re-embedding
    assert (report.updated, report.chunks_written) == (3, 0)
    assert all(
        a == [] for doc, chunks in _payloads(tmp_path / "store").items() if doc != "hr-leave" for a in chunks
    )
    with KnowledgeTool(deny, embedder=EMBEDDER) as tool:
        assert tool.lookup("refund within 30 days", principals=["hr"]).evidence_status == "no_evidence"
        assert tool.lookup("refund within 30 days").evidence_status == "evidence"  # unrestricted


def test_a_narrowed_access_hides_the_hints_of_a_tool_sharing_the_ingests_store(tmp_path: Path) -> None:
    """An ingest in the same process, through the store object a serving tool holds, hands nothing
    over: the tool reads the L0 index again because its file changed."""
    root = write_markdown_corpus(tmp_path / "kb", SMALL_CORPUS)
    write_markdown(root, "hr/leave.md", {k: v for k, v in HR_DOC.items() if k != "access"}, HR_BODY)
    config = make_config(tmp_path / "store", ingest__chunk_chars=100)
    ingest(root, config, embedder=EMBEDDER)
    store = open_store(config, EMBEDDER.dimension, create=False)
    try:
        tool = KnowledgeTool(config, search_port=store, embedder=EMBEDDER)
        before = _json(tool.lookup(HR_QUERY, principals=["contractor"]))
        assert "hr-leave" in before and "Parental Leave Rules" in before  # public until narrowed
        write_markdown(root, "hr/leave.md", HR_DOC, HR_BODY)  # access: [hr, managers]
        ingest(root, config, embedder=EMBEDDER, store=store)
        after = _json(tool.lookup(HR_QUERY, principals=["contractor"]))
        assert [m for m in ("hr-leave", "Parental Leave Rules", "Leave Board") if m in after] == []
        assert "hr-leave" in _json(tool.lookup(HR_QUERY, principals=["hr"]))
    finally:
        store.close()


def test_a_jsonl_access_change_is_re_ingested_without_re_embedding(tmp_path: Path) -> None:
    docs = [Doc(0, ("refund", "payroll"), ("hr",), 1), Doc(1, ("refund", "deploy"), None, 1)]
    source = write_corpus(tmp_path / "corpus.jsonl", docs)
    config = make_config(tmp_path / "store")
    ingest(source, config, embedder=EMBEDDER)
    write_corpus(source, [Doc(0, ("refund", "payroll"), ("eng",), 1), docs[1]])
    report = ingest(source, config, embedder=EMBEDDER)
    assert (report.updated, report.unchanged, report.chunks_written) == (1, 1, 0)
    with KnowledgeTool(config, embedder=EMBEDDER) as tool:
        seen = _json(tool.lookup("refund payroll policy hook00", principals=["eng"]))
        assert "body00k" in seen and "d00x" in seen
        assert "d00x" not in _json(tool.lookup("refund payroll policy hook00", principals=["hr"]))


def test_a_store_from_before_access_control_is_closed_to_restricted_callers_until_ingested(
    tmp_path: Path,
) -> None:
    root = write_markdown_corpus(tmp_path / "kb", SMALL_CORPUS)
    config = make_config(tmp_path / "store")
    ingest(root, config, embedder=EMBEDDER)
    store = QdrantEdgeStore(config.store.path / config.store.collection, create=False)
    everything = qe.Filter(
        must=[qe.FieldCondition("doc_id", match=qe.MatchAny(["refunds", "kafka-runbook", "api-keys"]))]
    )
    store._shard.update(
        qe.UpdateOperation.delete_payload_by_filter(everything, [ACCESS_FIELD])
    )  # an old store
    store.close()
    query = "refund within 30 days"
    with KnowledgeTool(config, embedder=EMBEDDER) as tool:
        assert tool.lookup(query, principals=["hr"]).evidence_status == "no_evidence"  # fails closed
        assert tool.lookup(query).evidence_status == "evidence"  # unrestricted: as before
    report = ingest(root, config, embedder=EMBEDDER)
    assert (report.updated, report.chunks_written) == (3, 0)  # the access field set, nothing re-embedded
    with KnowledgeTool(config, embedder=EMBEDDER) as tool:
        assert tool.lookup(query, principals=["hr"]).evidence_status == "evidence"


# --- lookups: every part of the result ---------------------------------------------------------


@pytest.fixture(scope="module")
def hr_kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small corpus plus an HR document only hr and managers may see, ingested (small chunks,
    so the per-document cap and return_n cut)."""
    tmp = tmp_path_factory.mktemp("access-kb")
    root = write_markdown_corpus(tmp / "kb", SMALL_CORPUS)
    write_markdown(root, "hr/leave.md", HR_DOC, HR_BODY * 4)
    ingest(root, _hr_config(tmp), embedder=EMBEDDER)
    return tmp


def _hr_config(tmp: Path, **overrides: Any) -> Config:
    return make_config(tmp / "store", ingest__chunk_chars=150, context__budget_chars=300, **overrides)


def test_a_contractor_sees_nothing_of_the_hr_document_in_any_part_of_the_result(hr_kb: Path) -> None:
    config = _hr_config(hr_kb)
    recorder = InvocationRecorder(invocation_db_url(config))
    with AgentLookup(KnowledgeTool(config, embedder=EMBEDDER), recorder) as agent:
        hr = agent.call(HR_QUERY, "shared-session", principals=["hr"])
        contractor = agent.call(HR_QUERY, "shared-session", principals=["contractor"])
        rows = recorder.list("shared-session")
    # the HR caller gets the document in every part: hints, filter, evidence, cuts, pack, record
    seen = hr.model_dump(by_alias=True, mode="json")
    trace = seen["retrievalTrace"]
    assert trace["l0Hints"]["matchedDocIds"] == ["hr-leave"] and trace["categoryFilter"] == "hr"
    assert trace["accessFilter"] == ["hr", "public"]
    assert seen["evidenceBlocks"][0]["docId"] == "hr-leave"
    assert sum(trace["evidenceCuts"][k] for k in ("documentCap", "returnN")) > 0
    assert seen["completenessHint"].startswith("partial")
    assert seen["retrievedDomainsThisSession"] == ["hr"]
    # the contractor: no id, title, keyword, domain, entity, content or count of it anywhere
    hidden = [
        "hr-leave", "Parental Leave Rules", "Leave Board", "zebra-hr-7731", "hr/leave.md",
        # not its keywords: the query holds them; the hints below are empty
    ]  # fmt: skip
    not_seen = contractor.model_dump(by_alias=True, mode="json")
    serialized = _json(contractor) + json.dumps([row.to_json() for row in rows[1:]], default=str)
    assert [marker for marker in hidden if marker in serialized] == []
    trace = not_seen["retrievalTrace"]
    assert trace["l0Hints"] == {k: [] for k in trace["l0Hints"]} and trace["categoryFilter"] is None
    assert '"hr"' not in json.dumps(not_seen)  # its domain: not a hint, a filter, a session domain
    assert not_seen["retrievedDomainsThisSession"] == []  # the session id is shared, its domains are not
    assert rows[1].retrieval_details["access"] == ["contractor", "public"]


def test_counts_equal_those_of_a_store_without_the_invisible_document(hr_kb: Path, tmp_path: Path) -> None:
    root = write_markdown_corpus(tmp_path / "kb", SMALL_CORPUS)
    ingest(root, _hr_config(tmp_path, retrieval__mode="dense"), embedder=EMBEDDER)
    dense = _hr_config(hr_kb, retrieval__mode="dense")
    for query in ("refund within 30 days for parental leave", HR_QUERY, "API key rotation"):
        with KnowledgeTool(dense, embedder=EMBEDDER) as tool:
            restricted = tool.lookup(query, principals=["contractor"])
        with KnowledgeTool(_hr_config(tmp_path, retrieval__mode="dense"), embedder=EMBEDDER) as tool:
            alone = tool.lookup(query)
        assert comparable(restricted.model_dump(by_alias=True, mode="json")) == comparable(
            alone.model_dump(by_alias=True, mode="json")
        )


def test_with_no_access_fields_a_restricted_lookup_equals_an_unrestricted_one(tmp_path: Path) -> None:
    """A single-user store: every document public by default, so principals change nothing."""
    config = _hr_config(tmp_path)
    ingest(write_markdown_corpus(tmp_path / "kb", SMALL_CORPUS), config, embedder=EMBEDDER)
    with KnowledgeTool(config, embedder=EMBEDDER) as tool:
        for query in ("refund within 30 days", "kafka consumer lag", "rotate the API keys"):
            plain = comparable(tool.lookup(query).model_dump(by_alias=True, mode="json"))
            restricted = comparable(
                tool.lookup(query, principals=["anyone"]).model_dump(by_alias=True, mode="json")
            )
            assert plain == restricted
            assert plain["retrievalTrace"]["attempts"]  # it searched


def test_bad_principals_are_refused_as_invalid_input(hr_kb: Path) -> None:
    with KnowledgeTool(_hr_config(hr_kb), embedder=EMBEDDER) as tool:
        for bad in ([""], [3], {"hr": 1}, 5):
            result = tool.lookup(HR_QUERY, principals=bad)
            assert result.evidence_status == "invalid_input"
            assert "principals" in result.message
        one = tool.lookup(HR_QUERY, principals="hr")  # one string is one principal, not its letters
        assert one.retrieval_trace is not None and one.retrieval_trace.access_filter == ["hr", "public"]


def test_configured_principals_are_the_default_and_verify_answer_hides_invisible_keys(hr_kb: Path) -> None:
    config = _hr_config(hr_kb, access__principals=["contractor"])
    recorder = InvocationRecorder(invocation_db_url(config))
    with AgentLookup(KnowledgeTool(config, embedder=EMBEDDER), recorder) as agent:
        result = agent.call(HR_QUERY, "verify-session")
        assert result.retrieval_trace is not None
        assert result.retrieval_trace.access_filter == ["contractor", "public"]
        assert "hr-leave" not in _json(result)
        verdict = agent.verify_answer("Leave is 20 days [hr-leave#chunk-0].", "verify-session")
        hr = agent.call(HR_QUERY, "other-session", principals=["hr"])
        assert "hr-leave" in _json(hr)
        again = agent.verify_answer("Leave is 20 days [hr-leave#chunk-0].", "verify-session")
        public = agent.verify_answer("Refunds take 30 days [refunds#chunk-9].", "verify-session")
    statuses = {c.status for c in verdict.citations} | {c.status for c in again.citations}
    assert statuses == {"unknown_key"}  # as if it did not exist, even once another scope got it
    assert [c.status for c in public.citations] == ["not_returned"]  # a document it may see exists


def test_an_access_scope_is_taken_as_it_is_even_unrestricted_over_configured_principals(hr_kb: Path) -> None:
    """What ``serve`` passes for a token's caller: its :class:`AccessScope` itself, neither read
    as names nor replaced by ``access.principals`` (an unrestricted token on a server whose
    default caller is restricted sees every document)."""
    config = _hr_config(hr_kb, access__principals=["contractor"])
    recorder = InvocationRecorder(invocation_db_url(config))
    with AgentLookup(KnowledgeTool(config, embedder=EMBEDDER), recorder) as agent:
        default = agent.call(HR_QUERY, "scope-session")
        everything = agent.call(HR_QUERY, "scope-session", principals=UNRESTRICTED)
        hr = agent.call(HR_QUERY, "hr-session", principals=AccessScope.of(["hr"]))
        keys = [block.evidence_key for block in everything.evidence_blocks]
        key = next(key for key in keys if key.startswith("hr-leave#"))
        verdict = agent.verify_answer(f"Leave is 20 days [{key}].", "scope-session", principals=UNRESTRICTED)
    traces = [result.retrieval_trace for result in (default, everything, hr)]
    filters = [trace.access_filter for trace in traces if trace]
    assert filters == [["contractor", "public"], None, ["hr", "public"]]
    assert "hr-leave" not in _json(default) and "hr-leave" in _json(hr)
    assert [c.status for c in verdict.citations] == ["ok"]


def test_mcp_server_serves_its_configured_identity_through_the_sdk_client(hr_kb: Path) -> None:
    config = _hr_config(hr_kb, access__principals=["contractor"])

    async def calls() -> list[dict[str, Any]]:
        recorder = InvocationRecorder(invocation_db_url(config))
        with AgentLookup(KnowledgeTool(config, embedder=EMBEDDER), recorder) as agent:
            async with Client(build_server(agent)) as client:
                answers = [await client.call_tool(TOOL_NAME, {"query": q}) for q in (HR_QUERY, "refund")]
        return [answer.structured_content for answer in answers]

    for payload in anyio.run(calls):
        assert payload["retrievalTrace"]["accessFilter"] == ["contractor", "public"]
        assert "hr-leave" not in json.dumps(payload) and "zebra-hr-7731" not in json.dumps(payload)


@pytest.mark.slow  # a CLI process that loads the model
def test_mcp_stdio_server_with_a_principal_option(tmp_path: Path, embedder: Any) -> None:
    root = write_markdown_corpus(tmp_path / "kb", SMALL_CORPUS)
    write_markdown(root, "hr/leave.md", HR_DOC, HR_BODY)
    store = tmp_path / "store"
    ingest(root, make_config(store), embedder=embedder)

    async def call(principal: str) -> dict[str, Any]:
        args = ["mcp", "--set", f"store.path={store}", "--principal", principal]
        params = StdioServerParameters(command=str(LOOKUP_KNOWLEDGE), args=args)
        async with Client(params, read_timeout_seconds=180) as client:
            return (await client.call_tool(TOOL_NAME, {"query": HR_QUERY})).structured_content

    hr, contractor = anyio.run(call, "hr"), anyio.run(call, "contractor")
    assert hr["evidenceBlocks"][0]["docId"] == "hr-leave"
    assert "zebra-hr-7731" not in json.dumps(contractor) and "hr-leave" not in json.dumps(contractor)
    assert contractor["retrievalTrace"]["accessFilter"] == ["contractor", "public"]


def test_cli_query_takes_principals(hr_kb: Path) -> None:
    args = ["query", HR_QUERY, "--json", "--no-record", "--set", f"store.path={hr_kb / 'store'}"]
    hr = CliRunner().invoke(app, [*args, "-p", "hr"])
    contractor = CliRunner().invoke(app, [*args, "--principal", "contractor"])
    assert hr.exit_code == 0 and contractor.exit_code == 0, hr.output + contractor.output
    assert json.loads(hr.stdout)["retrievalTrace"]["accessFilter"] == ["hr", "public"]
    assert json.loads(contractor.stdout)["retrievalTrace"]["accessFilter"] == ["contractor", "public"]
    assert "hr-leave" in hr.stdout and "hr-leave" not in contractor.stdout


# --- the property: random access, principals and queries; no leak ------------------------------


@settings(
    max_examples=2,  # benchmarks/access_leaks.py runs 20,000 lookups
    deadline=None,
    phases=[Phase.explicit, Phase.generate],  # a seed shrinks to nothing simpler: no shrinking
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(seed=st.integers(0, 2**31), mode=st.sampled_from(["dense", "hybrid"]))
def test_no_lookup_leaks_an_invisible_document(
    tmp_path_factory: pytest.TempPathFactory, embedder: Embedder, seed: int, mode: str
) -> None:
    tmp = tmp_path_factory.mktemp("leaks")
    figures = check_lookups(tmp, seed, lookups=10, mode=mode, embedder=embedder, principal_sets=2)
    assert figures["failures"] == []
    assert (figures["lookups"], figures["leaks"], figures["compared"]) == (10, 0, 10)


def test_the_leak_check_finds_a_leak() -> None:
    """The check itself: a document's marker in the output is found; an unrestricted tool leaks."""
    doc = Doc(3, ("refund", "payroll"), ("hr",), 1)
    assert leaked_markers(json.dumps(doc.record()), [doc]) == doc.markers()
    assert not may_see(doc, [], "public") and may_see(doc, None, "deny") and may_see(doc, ["hr"], "deny")
