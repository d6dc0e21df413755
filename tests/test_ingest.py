"""Ingestion into the embedded Qdrant Edge store with the real model, and the ``ingest`` CLI."""

from __future__ import annotations

import copy
import importlib
import io
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import INGEST_PHASES, SMALL_CORPUS, make_config, without_progress, write_markdown
from dataflow_fixtures import searched
from hashing_embedder import HashingEmbedder
from rich.console import Console
from typer.testing import CliRunner

from lookup_knowledge import progress, sample_knowledge_base
from lookup_knowledge.adapters.corpus import read_corpus
from lookup_knowledge.adapters.l0_index import L0Index
from lookup_knowledge.adapters.payload import DOC_ID_FIELD, PAYLOAD_FIELDS, ChunkPayload, payload_field
from lookup_knowledge.adapters.qdrant_edge_store import QdrantEdgeStore
from lookup_knowledge.adapters.search import SearchHit, SearchRequest
from lookup_knowledge.chunking import chunk_document
from lookup_knowledge.cli.app import app
from lookup_knowledge.config import Config
from lookup_knowledge.ingestion import NO_TEXT, IngestReport, ingest, vector_source
from lookup_knowledge.stores import calibration_path, l0_index_path, open_store

SAMPLE_DOMAINS = {"customer-support", "data-platform", "infrastructure", "payments", "security"}


@contextmanager
def opened(config: Config, dimension: int = 384) -> Iterator[QdrantEdgeStore]:
    """The configured (already ingested) store, closed afterwards so ingest can reopen it."""
    store = open_store(config, dimension, create=False)
    try:
        yield store
    finally:
        store.close()


def stored_chunks(config: Config, embedder, doc_id: str) -> list[SearchHit]:
    """Every stored chunk of one document, by chunk index."""
    with opened(config) as store:
        query = embedder.embed_query("anything").tolist()
        hits = searched(store, SearchRequest("all", query, top_k=1000))
    return sorted((h for h in hits if h.doc_id == doc_id), key=lambda h: h.chunk_index)


# --- the sample knowledge base, ingested once per module ----------------------------------------


@dataclass
class SampleIngest:
    config: Config
    first: IngestReport
    second: IngestReport
    expected_chunks: int


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory, embedder) -> SampleIngest:
    config = make_config(tmp_path_factory.mktemp("sample-store"))
    source = sample_knowledge_base()
    expected = sum(
        len(chunk_document(doc, config.ingest.chunk_chars)) for doc in read_corpus(source).documents
    )
    first = ingest(source, config, embedder=embedder)
    second = ingest(source, config, embedder=embedder)
    return SampleIngest(config, first, second, expected)


def test_sample_kb_ingests_all_thirty_documents(sample: SampleIngest) -> None:
    assert sample.first.documents == 30
    assert sample.first.new == 30
    assert sample.first.updated == sample.first.unchanged == sample.first.pruned == 0
    assert sample.first.skipped == []


def test_sample_kb_points_equal_chunks(sample: SampleIngest) -> None:
    assert sample.first.chunks_written == sample.expected_chunks
    assert sample.first.points_in_store == sample.expected_chunks
    assert sample.expected_chunks > 30  # several documents are split into sections


def test_reingest_of_unchanged_source_writes_nothing(sample: SampleIngest) -> None:
    assert sample.second.documents == 30
    assert sample.second.unchanged == 30
    assert sample.second.new == sample.second.updated == 0
    assert sample.second.chunks_written == 0
    assert sample.second.points_in_store == sample.first.points_in_store


def test_report_names_its_source(sample: SampleIngest) -> None:
    assert sample.first.source == str(sample_knowledge_base())
    assert sample.first.seconds > 0


def test_store_holds_one_hash_per_document(sample: SampleIngest) -> None:
    with opened(sample.config) as store:
        hashes = store.documents()
        assert store.count() == sample.expected_chunks
    assert len(hashes) == 30
    assert "support-fapiao-requests-zh" in hashes
    assert "infrastructure/kafka-operations-runbook.md" in hashes  # no frontmatter id


def test_stored_chunks_carry_evidence_payload(sample: SampleIngest, embedder) -> None:
    query = embedder.embed_query("kafka consumer lag alert").tolist()
    with opened(sample.config) as store:
        (hit,) = searched(store, SearchRequest("kafka", query, top_k=1))
    assert hit.doc_id == "infrastructure/kafka-operations-runbook.md"
    assert hit.payload["evidence_key"] == f"{hit.doc_id}#chunk-{hit.chunk_index}"
    assert hit.payload["title"] == "Kafka Operations Runbook"
    assert hit.payload["breadcrumb"].startswith("Kafka Operations Runbook")
    assert hit.payload["category"] == ["infrastructure"]
    assert hit.payload["doc_type"] == "runbook"
    assert "Kafka" in hit.payload["keywords"]


STORED_KEYS = {  # what every release since access control writes: a rename needs a re-ingest
    "evidence_key", "doc_id", "chunk_index", "content", "source", "title", "breadcrumb", "category",
    "keywords", "entities", "description", "doc_type", "doc_hash", "doc_chunks", "instruction_like_v1",
    "location", "heading_path", "ingested_at", "source_file", "access", "embedding_model", "language",
}  # fmt: skip  # embedding_model: since vectors are reused (a store without it embeds all again);
# language: since chunk languages (absent only when not detected: ingest adds it, docs/multilingual.md)


def test_every_stored_payload_has_exactly_the_schemas_keys(sample: SampleIngest, embedder) -> None:
    with opened(sample.config) as store:
        hits = searched(store, SearchRequest("all", embedder.embed_query("anything").tolist(), top_k=1000))
    assert len(hits) == sample.expected_chunks
    assert PAYLOAD_FIELDS == set(ChunkPayload.__annotations__) == STORED_KEYS
    assert all(set(hit.payload) == PAYLOAD_FIELDS for hit in hits)
    assert {hit.payload[DOC_ID_FIELD] for hit in hits} >= {"infrastructure/kafka-operations-runbook.md"}


def test_a_field_name_outside_the_schema_is_refused() -> None:
    with pytest.raises(TypeError, match="not a field of ChunkPayload"):
        payload_field("doc_title")


def test_every_stored_chunk_is_located_in_its_source_file(sample: SampleIngest, embedder) -> None:
    source, doc_id = sample_knowledge_base(), "infrastructure/kafka-operations-runbook.md"
    (doc,) = [d for d in read_corpus(source).documents if d.doc_id == doc_id]
    text = (source / doc.source).read_text(encoding="utf-8").replace("\r\n", "\n")
    chunks = stored_chunks(sample.config, embedder, doc_id)
    assert len(chunks) > 1
    for hit in chunks:
        location = hit.payload["location"]
        assert text[location["start_char"] : location["end_char"]] == hit.content
        assert location["start_line"] == text.count("\n", 0, location["start_char"]) + 1
        assert location["end_line"] == text.count("\n", 0, location["end_char"] - 1) + 1
        assert hit.payload["heading_path"][0] == "Kafka Operations Runbook"


def test_a_store_ingested_before_locations_still_serves(tmp_path: Path, embedder) -> None:
    from lookup_knowledge import KnowledgeTool
    from lookup_knowledge.adapters.search import StoredChunk, evidence_key
    from lookup_knowledge.adapters.sparse import bm25_encoder

    config = make_config(tmp_path / "store")
    text = "Rotate the API keys every ninety days and revoke the old key after the switch."
    payload = {  # a payload as ingest wrote it before chunk locations
        "evidence_key": evidence_key("keys", 0), "doc_id": "keys", "chunk_index": 0, "content": text,
        "source": "keys.md", "title": "Keys", "breadcrumb": "Keys", "category": [], "doc_hash": "old",
        "doc_chunks": 1,
    }  # fmt: skip
    store = open_store(config, embedder.dimension)
    try:
        dense, sparse = embedder.embed_documents([text])[0].tolist(), bm25_encoder().embed_document(text)
        store.write_documents([StoredChunk(dense, payload, sparse)])
    finally:
        store.close()
    with KnowledgeTool.from_config(config) as tool:
        result = tool.lookup("how often are API keys rotated")
    assert result.found, result.retrieval_trace.evidence_verdict
    assert result.evidence_blocks[0].location is None
    assert result.model_dump(by_alias=True, mode="json")["evidenceBlocks"][0]["location"] is None


def test_category_filter_works_on_ingested_data(sample: SampleIngest, embedder) -> None:
    query = embedder.embed_query("who handles invoices").tolist()
    with opened(sample.config) as store:
        hits = searched(store, SearchRequest("q", query, top_k=10, category="payments"))
    assert hits
    assert all(h.payload["category"] == ["payments"] for h in hits)


def test_l0_index_is_written_next_to_the_store(sample: SampleIngest) -> None:
    path = l0_index_path(sample.config)
    assert path.is_file()
    assert path.parent == sample.config.store.path
    assert path.name == "knowledge.l0.sqlite"


def test_l0_index_reloads_with_the_documents_domains(sample: SampleIngest) -> None:
    index = L0Index.load(l0_index_path(sample.config))
    assert len(index) == 30
    assert {d for doc in index.documents.values() for d in doc.domains} == SAMPLE_DOMAINS
    hints = index.match("我要开增值税专用发票")
    assert "support-fapiao-requests-zh" in hints.matched_doc_ids
    assert hints.domains == ["customer-support"]


# --- changes, pruning and bad files on a small corpus -------------------------------------------

THREE_SECTIONS = (
    "# Deploys\n\n## Build\n\n" + "Build the image. " * 40 + "\n\n"
    "## Release\n\n" + "Roll out gradually. " * 40 + "\n\n"
    "## Verify\n\n" + "Check the dashboards. " * 40 + "\n"
)


def test_changed_document_replaces_its_chunks(tmp_path: Path, embedder) -> None:
    source, config = tmp_path / "kb", make_config(tmp_path / "store")
    meta = {"id": "deploys", "title": "Deploys", "domain": "infrastructure"}
    write_markdown(source, "deploys.md", meta, THREE_SECTIONS)
    write_markdown(source, "other.md", {"id": "other", "title": "Other"}, "Unrelated text.")
    first = ingest(source, config, embedder=embedder)
    assert [h.chunk_index for h in stored_chunks(config, embedder, "deploys")] == [0, 1, 2]

    write_markdown(source, "deploys.md", meta, "# Deploys\n\nShip it.\n")
    second = ingest(source, config, embedder=embedder)

    assert (second.updated, second.unchanged, second.new) == (1, 1, 0)
    assert second.chunks_written == 1
    assert second.points_in_store == first.points_in_store - 2
    (chunk,) = stored_chunks(config, embedder, "deploys")
    assert chunk.chunk_index == 0
    assert "Ship it." in chunk.content


def test_an_edited_section_is_embedded_and_the_unchanged_ones_keep_their_vectors(
    tmp_path: Path, embedder
) -> None:
    source, config = tmp_path / "kb", make_config(tmp_path / "store")
    meta = {"id": "deploys", "title": "Deploys"}
    write_markdown(source, "deploys.md", meta, THREE_SECTIONS)
    assert ingest(source, config, embedder=embedder).chunks_embedded == 3
    with opened(config) as store:
        before = store.stored_vectors(["deploys"], vector_source(embedder))
    assert len(before) == 3

    edited = THREE_SECTIONS.replace("Roll out gradually. " * 40, "Roll out to one region first. " * 30)
    write_markdown(source, "deploys.md", meta, edited)
    report = ingest(source, config, embedder=embedder)
    assert (report.updated, report.chunks_written, report.chunks_embedded) == (1, 3, 1)
    with opened(config) as store:
        after = store.stored_vectors(["deploys"], vector_source(embedder))
    kept = before.keys() & after.keys()
    assert len(kept) == 2 and all(after[key] == pytest.approx(before[key], abs=1e-6) for key in kept)
    ((breadcrumb, content),) = after.keys() - kept
    assert "one region first" in content
    fresh = embedder.embed_documents([f"{breadcrumb}\n{content}"])[0]
    assert after[(breadcrumb, content)] == pytest.approx(fresh.tolist(), abs=1e-5)
    assert [h.chunk_index for h in stored_chunks(config, embedder, "deploys")] == [0, 1, 2]


def test_another_model_embeds_every_chunk_again(tmp_path: Path, embedder) -> None:
    source, config = tmp_path / "kb", make_config(tmp_path / "store")
    write_markdown(source, "deploys.md", {"id": "deploys", "title": "Deploys"}, THREE_SECTIONS)
    ingest(source, config, embedder=embedder)
    renamed = copy.copy(embedder)  # the same loaded weights under another name
    renamed.model_name, renamed.encoder = "another-model", embedder.encoder
    report = ingest(source, config, embedder=renamed)
    assert (report.updated, report.chunks_written, report.chunks_embedded) == (1, 3, 3)


def test_metadata_change_counts_as_update_and_refreshes_l0(
    small_corpus: Path, tmp_path: Path, embedder
) -> None:
    config = make_config(tmp_path / "store")
    ingest(small_corpus, config, embedder=embedder)
    meta, body = SMALL_CORPUS["security/keys.md"]
    write_markdown(small_corpus, "security/keys.md", {**meta, "keywords": ["vault"]}, body)
    report = ingest(small_corpus, config, embedder=embedder)
    assert report.updated == 1
    assert L0Index.load(l0_index_path(config)).match("vault").matched_doc_ids == ["api-keys"]


def test_changed_chunk_size_reingests_every_document(small_corpus: Path, tmp_path: Path, embedder) -> None:
    store_path = tmp_path / "store"
    ingest(small_corpus, make_config(store_path), embedder=embedder)
    report = ingest(small_corpus, make_config(store_path, ingest__chunk_chars=200), embedder=embedder)
    assert report.updated == 3
    assert report.unchanged == 0


def test_prune_removes_a_deleted_documents_points_and_l0_entry(
    small_corpus: Path, tmp_path: Path, embedder
) -> None:
    config = make_config(tmp_path / "store")
    first = ingest(small_corpus, config, embedder=embedder)
    (small_corpus / "infrastructure" / "kafka.md").unlink()
    report = ingest(small_corpus, config, prune=True, embedder=embedder)
    assert report.pruned == 1
    assert report.documents == 2
    assert report.points_in_store == first.points_in_store - 1
    with opened(config) as store:
        assert "kafka-runbook" not in store.documents()
    index = L0Index.load(l0_index_path(config))
    assert "kafka-runbook" not in index.documents
    assert index.match("kafka").is_empty


def test_without_prune_a_deleted_document_stays(small_corpus: Path, tmp_path: Path, embedder) -> None:
    config = make_config(tmp_path / "store")
    first = ingest(small_corpus, config, embedder=embedder)
    (small_corpus / "infrastructure" / "kafka.md").unlink()
    report = ingest(small_corpus, config, embedder=embedder)
    assert report.pruned == 0
    assert report.points_in_store == first.points_in_store
    with opened(config) as store:
        assert "kafka-runbook" in store.documents()
    assert "kafka-runbook" in L0Index.load(l0_index_path(config)).documents


def test_bad_file_is_skipped_and_named_while_the_rest_ingest(
    small_corpus: Path, tmp_config: Config, embedder
) -> None:
    (small_corpus / "broken.md").write_text("---\ntitle: [oops\n---\nbody\n", encoding="utf-8")
    config = tmp_config
    report = ingest(small_corpus, config, embedder=embedder)
    assert report.documents == 3
    assert report.new == 3
    assert [s.path for s in report.skipped] == ["broken.md"]
    assert "broken YAML frontmatter" in report.skipped[0].reason
    with opened(config) as store:
        assert sorted(store.documents()) == ["api-keys", "kafka-runbook", "refunds"]


def test_a_page_with_no_body_text_is_skipped_with_its_reason_and_its_old_version_removed(
    small_corpus: Path, tmp_path: Path
) -> None:
    """A redirect page (frontmatter and a title) is no evidence: no title-only chunk stands for it."""
    billing = {"id": "billing", "title": "Billing policy", "description": "How invoices are billed."}
    write_markdown(small_corpus, "billing.md", billing, "Invoices go out monthly. " * 12)
    config, embedder = make_config(tmp_path / "store"), HashingEmbedder()
    ingest(small_corpus, config, embedder=embedder)
    write_markdown(small_corpus, "billing.md", {**billing, "aliases": ["/billing/"]}, "")  # now a redirect
    write_markdown(small_corpus, "moved.md", {"title": "Moved"}, "# Moved\n\n## See the new page\n")
    report = ingest(small_corpus, config, embedder=embedder)
    skipped = sorted((s.path, s.reason) for s in report.skipped)
    assert skipped == [("billing.md", NO_TEXT), ("moved.md", NO_TEXT)]
    assert (report.documents, report.unchanged, report.pruned) == (3, 3, 1)  # billing's old version went
    with opened(config) as store:
        assert sorted(store.documents()) == ["api-keys", "kafka-runbook", "refunds"]
        hits = searched(
            store, SearchRequest("all", embedder.embed_query("billing policy").tolist(), top_k=100)
        )
    assert len(hits) == report.points_in_store
    assert all(hit.payload["location"] and hit.content.strip() != hit.payload["title"] for hit in hits)
    assert "billing" not in L0Index.load(l0_index_path(config)).documents


def test_ingest_into_a_given_store_leaves_it_open(small_corpus: Path, tmp_path: Path, embedder) -> None:
    config = make_config(tmp_path / "store")
    store = QdrantEdgeStore(tmp_path / "own-store", embedder.dimension)
    try:
        report = ingest(small_corpus, config, embedder=embedder, store=store)
        assert store.count() == report.points_in_store == report.chunks_written
    finally:
        store.close()


# --- the CLI ------------------------------------------------------------------------------------


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_cli_ingest_prints_summary_with_skipped_reason(
    runner: CliRunner, small_corpus: Path, tmp_path: Path, embedder
) -> None:
    (small_corpus / "broken.md").write_text("---\ntitle: [oops\n---\nbody\n", encoding="utf-8")
    store_path = tmp_path / "store"
    result = runner.invoke(app, ["ingest", str(small_corpus), "--set", f"store.path={store_path}"])
    assert result.exit_code == 0, result.output
    assert "documents" in result.output
    assert "chunks written" in result.output
    assert "skipped broken.md: broken YAML frontmatter" in result.output
    assert (store_path / "knowledge").is_dir()
    assert l0_index_path(make_config(store_path)).is_file()
    # the new store version's probe null, measured and kept: the first lookup reads it
    kept = json.loads(calibration_path(make_config(store_path)).read_text(encoding="utf-8"))
    stat = l0_index_path(make_config(store_path)).stat()
    assert kept["version"] == [stat.st_ino, stat.st_size, stat.st_mtime_ns] and kept["nulls"]


def test_cli_ingest_leaves_the_probe_null_to_a_process_that_holds_the_store_again(
    small_corpus: Path, tmp_path: Path, embedder, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that reopened the store after the ingest is not asked to hand it over again."""
    from lookup_knowledge.cli.app import _calibrate

    config = make_config(tmp_path / "store")
    ingest(small_corpus, config, embedder=embedder)
    held = open_store(config, embedder.dimension)
    try:
        _calibrate(config, embedder)
    finally:
        held.close()
    assert "another process holds the store again" in capsys.readouterr().err
    assert not calibration_path(config).exists()


def test_cli_ingest_into_a_log_prints_plain_progress_lines_and_each_phases_end(
    runner: CliRunner, small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Output that is not a terminal (CliRunner's streams are not) gets plain lines: each phase's
    end, and meanwhile its status every LINE_INTERVAL_S (made small here, so some may come)."""
    monkeypatch.setattr(progress, "LINE_INTERVAL_S", 0.05)
    result = runner.invoke(app, ["ingest", str(small_corpus), "--set", f"store.path={tmp_path / 's'}"])
    assert result.exit_code == 0, result.output
    ends = [line.split(":")[0] for line in result.stderr.splitlines() if ": done" in line]
    assert ends == list(INGEST_PHASES)
    assert "embedding and writing: done, 4 chunks in " in result.stderr  # refunds: two
    assert without_progress(result.stderr).splitlines() == [
        "measuring how the store answers questions it cannot answer (kept beside it) ..."
    ]
    assert "\x1b[" not in result.stderr  # no terminal control codes in a log


def test_ingest_tells_its_phases_only_when_asked(
    small_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_markdown(small_corpus, "moved.md", {"title": "Moved"}, "")
    ingest(small_corpus, make_config(tmp_path / "quiet"), embedder=HashingEmbedder())
    assert capsys.readouterr() == ("", "")  # the library's default: silent
    out = io.StringIO()
    told = progress.LineReport(Console(file=out), interval=3600)
    ingest(small_corpus, make_config(tmp_path / "told"), embedder=HashingEmbedder(), progress=told)
    ends = [  # each line: its beginning and its ending (between them, durations)
        ("reading: done, 4 files in ", "; 4 documents, 0 skipped"),
        ("opening the store and the model: done in ", " s"),
        ("chunking: done, 4 documents in ", "; 4 chunks, 1 without text (skipped)"),
        ("embedding and writing: done, 4 chunks in ", " of it"),
        ("indexing: done in ", " s"),
    ]
    lines = out.getvalue().splitlines()
    assert len(lines) == len(ends), lines
    for line, (start, end) in zip(lines, ends, strict=True):
        assert line.startswith(start) and line.endswith(end), line


def test_cli_missing_folder_exits_2_with_one_line_error(runner: CliRunner, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    result = runner.invoke(app, ["ingest", str(missing), "--set", f"store.path={tmp_path}"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1
    assert lines[0].startswith("error:")
    assert "source not found" in lines[0]


def test_cli_invalid_override_exits_2_naming_the_key(runner: CliRunner, small_corpus: Path) -> None:
    result = runner.invoke(app, ["ingest", str(small_corpus), "--set", "retrieval.return_n=0"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "retrieval.return_n" in result.stderr


def test_cli_locked_store_exits_2_with_clear_error(
    runner: CliRunner, small_corpus: Path, tmp_path: Path, embedder
) -> None:
    config = make_config(tmp_path)
    holder = open_store(config, embedder.dimension)
    try:
        result = runner.invoke(app, ["ingest", str(small_corpus), "--set", f"store.path={tmp_path}"])
    finally:
        holder.close()
    assert result.exit_code == 2
    assert "cannot open knowledge store" in result.stderr
    assert "locked" in result.stderr
    assert "Traceback" not in result.output


def test_cli_missing_config_file_exits_2(runner: CliRunner, small_corpus: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["ingest", str(small_corpus), "--config", str(tmp_path / "none.yaml")])
    assert result.exit_code == 2
    assert "config file not found" in result.stderr
    assert "Traceback" not in result.output


# --- atomic per document, prune, files outside the folder -----------------------------------------


def test_prune_keeps_a_document_whose_file_was_unreadable_this_run(
    small_corpus: Path, tmp_path: Path, embedder
) -> None:
    config = make_config(tmp_path / "store")
    first = ingest(small_corpus, config, embedder=embedder)
    (small_corpus / "infrastructure" / "kafka.md").write_bytes(b"\xff\xfe not utf-8")
    report = ingest(small_corpus, config, prune=True, embedder=embedder)
    assert [s.path for s in report.skipped] == ["infrastructure/kafka.md"]
    assert report.pruned == 0
    assert report.points_in_store == first.points_in_store
    with opened(config) as store:
        assert "kafka-runbook" in store.documents()


def test_prune_removes_nothing_when_a_jsonl_record_is_unreadable(tmp_path: Path, embedder) -> None:
    config = make_config(tmp_path / "store")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "a", "text": "alpha"}\n{"_id": "b", "text": "beta"}\n', encoding="utf-8")
    ingest(corpus, config, embedder=embedder)
    corpus.write_text('{"_id": "a", "text": "alpha"}\n{"_id": "b", "text": "be\n', encoding="utf-8")
    report = ingest(corpus, config, prune=True, embedder=embedder)
    assert report.pruned == 0
    with opened(config) as store:
        assert sorted(store.documents()) == ["a", "b"]


def test_a_file_linked_from_outside_the_folder_is_not_ingested(tmp_path: Path, embedder) -> None:
    kb = tmp_path / "kb"
    write_markdown(kb, "good.md", {"id": "good", "title": "Good"}, "Rotate keys every 90 days.")
    write_markdown(tmp_path, "passwd.md", {"id": "passwd", "title": "Secrets"}, "root:x:0:0")
    (kb / "passwd.md").symlink_to(tmp_path / "passwd.md")
    config = make_config(tmp_path / "store")
    report = ingest(kb, config, embedder=embedder)
    assert report.documents == 1
    assert "outside the knowledge-base folder" in report.skipped[0].reason
    with opened(config) as store:
        assert sorted(store.documents()) == ["good"]


class _FailingEmbedder:
    """The real embedder, failing on its ``fail_at``-th call (a crash in the middle of ingest);
    ``off_cpu``: as ingest sees one on a GPU, whose next group embeds while this one is written."""

    def __init__(self, embedder, fail_at: int, off_cpu: bool = False) -> None:
        self._embedder, self._calls, self._fail_at = embedder, 0, fail_at
        self.dimension, self.model_name = embedder.dimension, embedder.model_name
        self.encodes_off_cpu = off_cpu

    def embed_documents(self, texts):
        self._calls += 1
        if self._calls == self._fail_at:
            raise RuntimeError("killed")
        return self._embedder.embed_documents(texts)


@pytest.mark.parametrize("off_cpu", [False, True], ids=["cpu", "gpu"])
def test_an_interrupted_update_keeps_old_versions_whole_and_the_rerun_completes_it(
    tmp_path: Path, embedder, monkeypatch: pytest.MonkeyPatch, off_cpu: bool
) -> None:
    monkeypatch.setattr(importlib.import_module("lookup_knowledge.ingestion"), "EMBED_GROUP", 3)
    kb = tmp_path / "kb"
    for n in range(6):
        write_markdown(
            kb, f"d{n}.md", {"id": f"d{n}"}, "\n\n".join(f"## S{i}\n" + "old " * 40 for i in range(3))
        )
    config = make_config(tmp_path / "store", ingest__chunk_chars=200)
    ingest(kb, config, embedder=embedder)
    for n in range(6):
        write_markdown(
            kb, f"d{n}.md", {"id": f"d{n}"}, "\n\n".join(f"## S{i}\n" + "new " * 40 for i in range(2))
        )
    with pytest.raises(RuntimeError, match="killed"):
        ingest(kb, config, embedder=_FailingEmbedder(embedder, fail_at=3, off_cpu=off_cpu))
    with opened(config) as store:
        documents = store.documents()
    assert all(True in doc.versions.values() for doc in documents.values())  # a whole version each
    assert sum(len(doc.versions) == 1 for doc in documents.values()) >= 2  # some done, some not
    report = ingest(kb, config, embedder=embedder)
    assert report.unchanged + report.updated == 6
    assert report.updated > 0
    with opened(config) as store:
        assert all(
            len(doc.versions) == 1 and True in doc.versions.values() for doc in store.documents().values()
        )
    assert [h.content.count("new") for h in stored_chunks(config, embedder, "d0")] == [40, 40]


def test_a_document_with_a_chunk_missing_is_rewritten(small_corpus: Path, tmp_path: Path, embedder) -> None:
    config = make_config(tmp_path / "store", ingest__chunk_chars=100)
    first = ingest(small_corpus, config, embedder=embedder)
    refunds = stored_chunks(config, embedder, "refunds")
    assert len(refunds) >= 2
    with opened(config) as store:  # lose chunk 1 as a torn write would
        store.delete_other_chunks({"refunds": [h.point_id for h in refunds if h.chunk_index != 1]})
    report = ingest(small_corpus, config, embedder=embedder)
    assert (report.updated, report.unchanged) == (1, 2)
    assert report.points_in_store == first.points_in_store
    assert [h.chunk_index for h in stored_chunks(config, embedder, "refunds")] == list(range(len(refunds)))


class _OnAGpu:
    """The real embedder as ingest sees one on a GPU (``encodes_off_cpu``): every call after the
    first waits for a group's write to begin (up to 60 s: a hang guard, not a speed limit) and
    records whether one did."""

    encodes_off_cpu = True

    def __init__(self, embedder, written: threading.Event) -> None:
        self._embedder, self._written = embedder, written
        self.dimension, self.model_name = embedder.dimension, embedder.model_name
        self.waits: list[bool] = []  # per call after the first: whether a group was written meanwhile
        self._calls = 0

    def embed_documents(self, texts):
        self._calls += 1
        if self._calls > 1:
            self.waits.append(self._written.wait(60))
        return self._embedder.embed_documents(texts)


def _stored_vectors(config: Config, embedder) -> dict:
    """Every stored document's chunk vectors, by (breadcrumb, content)."""
    with opened(config) as store:
        return {
            doc_id: store.stored_vectors([doc_id], vector_source(embedder)) for doc_id in store.documents()
        }


def test_on_a_gpu_the_next_group_embeds_while_this_one_is_written_and_the_store_is_the_same(
    tmp_path: Path, embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingestion = importlib.import_module("lookup_knowledge.ingestion")
    monkeypatch.setattr(ingestion, "EMBED_GROUP", 2)
    kb = tmp_path / "kb"
    for n in range(5):
        write_markdown(kb, f"d{n}.md", {"id": f"d{n}"}, f"## Part {n}\n" + f"topic{n} words " * 30)
    written = threading.Event()
    write = ingestion.KnowledgeStore.write_documents

    def recorded(store, chunks):
        write(store, chunks)
        written.set()

    monkeypatch.setattr(ingestion.KnowledgeStore, "write_documents", recorded)
    gpu = _OnAGpu(embedder, written)
    report = ingest(kb, make_config(tmp_path / "gpu", ingest__chunk_chars=200), embedder=gpu)
    assert len(gpu.waits) >= 2 and all(gpu.waits)  # each later group embedded after a write began
    cpu = ingest(kb, make_config(tmp_path / "cpu", ingest__chunk_chars=200), embedder=embedder)
    assert (report.chunks_written, report.chunks_embedded) == (cpu.chunks_written, cpu.chunks_embedded)
    on_gpu = _stored_vectors(make_config(tmp_path / "gpu"), embedder)
    on_cpu = _stored_vectors(make_config(tmp_path / "cpu"), embedder)
    assert on_gpu.keys() == on_cpu.keys() and len(on_gpu) == 5
    for doc_id, vectors in on_cpu.items():
        assert on_gpu[doc_id].keys() == vectors.keys()
        for key, vector in vectors.items():
            assert np.allclose(on_gpu[doc_id][key], vector, atol=1e-6)
