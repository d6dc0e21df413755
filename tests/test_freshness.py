"""Freshness: blocks carry their ingest time and source version; a lookup marks changed sources stale."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SMALL_CORPUS, make_config, write_corpus

from lookup_knowledge import AgentLookup, KnowledgeTool, ingest, ingestion
from lookup_knowledge.adapters.embedder import SentenceTransformerEmbedder
from lookup_knowledge.adapters.payload import INGESTED_AT_FIELD, SOURCE_FILE_FIELD
from lookup_knowledge.adapters.recorder import InvocationRecorder
from lookup_knowledge.adapters.source_files import SourceFile, is_stale
from lookup_knowledge.agent.lookup import invocation_db_url
from lookup_knowledge.config import Config

REFUND_QUERY = "How many days do customers have to request a refund?"


def _agent(config: Config, embedder: SentenceTransformerEmbedder) -> AgentLookup:
    return AgentLookup(
        KnowledgeTool(config, embedder=embedder), InvocationRecorder(invocation_db_url(config))
    )


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "kb", SMALL_CORPUS)


@pytest.fixture
def agent(kb: Path, tmp_path: Path, embedder: SentenceTransformerEmbedder) -> Iterator[AgentLookup]:
    config = make_config(tmp_path / "store")
    ingest(kb, config, embedder=embedder)
    with _agent(config, embedder) as agent:
        yield agent


def _refund_blocks(agent: AgentLookup, session: str) -> list[Any]:
    result = agent.call(REFUND_QUERY, session)
    assert result.found, result.message
    return [b for b in result.evidence_blocks if b.doc_id == "refunds"]


def test_blocks_carry_their_ingest_time_and_source_version(agent: AgentLookup, kb: Path) -> None:
    result = agent.call(REFUND_QUERY, "fresh")
    block = result.evidence_blocks[0]
    assert block.source_path == str((kb / "payments/refunds.md").absolute())
    assert block.source_version == SourceFile.read(kb / "payments/refunds.md")[0].version
    assert block.ingested_at and block.ingested_at.endswith("+00:00")
    assert block.stale is False
    assert "Stale" not in result.message
    assert result.retrieval_trace is not None
    nodes = [n.name for n in result.retrieval_trace.executed_nodes]
    assert nodes.index("ranked_evidence_blocks") < nodes.index("evidence_blocks")


def test_a_lookup_after_an_edit_marks_only_that_source_stale_and_verify_says_so(
    agent: AgentLookup, kb: Path
) -> None:
    before = _refund_blocks(agent, "edit")
    answer = f"Refunds within 30 days [{before[0].evidence_key}]."
    assert agent.verify_answer(answer, "edit").verified
    source = kb / "payments/refunds.md"
    source.write_text(source.read_text() + "\nRefunds now take 14 days.\n")
    result = agent.call(REFUND_QUERY, "after-edit")
    stale = {b.doc_id: b.stale for b in result.evidence_blocks}
    assert stale["refunds"] is True
    assert all(not flag for doc, flag in stale.items() if doc != "refunds")
    assert "Stale: payments/refunds.md" in result.message
    verdict = agent.verify_answer(answer, "edit")  # the record of the lookup before the edit
    assert [c.status for c in verdict.citations] == ["stale"] and not verdict.verified


def test_a_vanished_source_is_stale(agent: AgentLookup, kb: Path) -> None:
    (kb / "payments/refunds.md").unlink()
    assert all(block.stale for block in _refund_blocks(agent, "gone"))


def test_a_touched_file_with_the_same_bytes_is_not_stale(tmp_path: Path) -> None:
    source = tmp_path / "a.md"
    source.write_text("# A\n\nsame text\n")
    stamp, _ = SourceFile.read(source)
    os.utime(source, ns=(stamp.mtime_ns + 5_000_000_000, stamp.mtime_ns + 5_000_000_000))
    assert not is_stale(stamp)  # the time differs, the hash does not
    source.write_text("# A\n\nsame size\n")
    assert is_stale(stamp)


def test_a_store_from_before_freshness_reads_null_and_is_not_re_embedded(
    kb: Path, tmp_path: Path, embedder: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_config(tmp_path / "old-store")
    payload = ingestion._payload

    def old_payload(pending: Any) -> dict[str, object]:  # what releases before freshness wrote
        fields = payload(pending)
        del fields[INGESTED_AT_FIELD], fields[SOURCE_FILE_FIELD]
        return fields

    monkeypatch.setattr(ingestion, "_payload", old_payload)
    ingest(kb, config, embedder=embedder)
    monkeypatch.undo()
    assert ingest(kb, config, embedder=embedder).chunks_written == 0  # unchanged: no re-embed
    with _agent(config, embedder) as agent:
        block = agent.call(REFUND_QUERY, "old").evidence_blocks[0]
    assert (block.ingested_at, block.source_path, block.source_version, block.stale) == (
        None,
        None,
        None,
        None,
    )


def test_a_byte_change_outside_the_document_rewrites_its_version(
    kb: Path, tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    config = make_config(tmp_path / "store")
    ingest(kb, config, embedder=embedder)
    source = kb / "security/keys.md"
    source.write_text(source.read_text().replace("---\n", "---\nowner: ops\n", 1))  # a field not read
    report = ingest(kb, config, embedder=embedder)
    assert (report.updated, report.unchanged) == (1, 2)
    with _agent(config, embedder) as agent:
        blocks = agent.call("How often must API keys be rotated?", "rot").evidence_blocks
    key_block = next(b for b in blocks if b.doc_id == "api-keys")
    assert key_block.stale is False and key_block.source_version == SourceFile.read(source)[0].version
