"""The multilingual leg (docs/multilingual.md): a question in German, Chinese or Japanese finds the
English page that answers it on a store with multilingual vectors; ``multilingual.search: off``
and English questions search as before; a store made without the vectors still answers."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as qe
from conftest import make_config, write_corpus
from dataflow_fixtures import make_hit, searched

from lookup_knowledge import KnowledgeTool, ingest
from lookup_knowledge.adapters.embedder import EmbedderError
from lookup_knowledge.adapters.multilingual import MAX_LINES, MultilingualEmbedder, language_of, prose_lines
from lookup_knowledge.adapters.payload import LANGUAGE_FIELD
from lookup_knowledge.adapters.qdrant_client_store import QdrantClientStore
from lookup_knowledge.adapters.qdrant_edge_store import QdrantEdgeStore
from lookup_knowledge.adapters.search import SearchHit, SearchRequest, StoredChunk
from lookup_knowledge.adapters.sparse import bm25_encoder
from lookup_knowledge.calibration import ProbeCalibration
from lookup_knowledge.config import RerankConfig
from lookup_knowledge.contract import L0Hints
from lookup_knowledge.dataflows.abstention import (
    AbstentionPolicy,
    line_top,
    multilingual_reason,
    own_language_top,
    probe_cosine,
)
from lookup_knowledge.dataflows.postprocessing import candidates_df, deduped_df, line_scores, screened_df
from lookup_knowledge.dataflows.result import LINE_LEAD
from lookup_knowledge.dataflows.retrieval import HybridFusion, SearchAttempt
from lookup_knowledge.extras import EXTRAS, MissingExtraError
from lookup_knowledge.stores import build_multilingual_embedder

PAGES = {
    "chmod": ("File permissions", "Change the access permissions of a file or directory: who may read, "
              "write or execute it. Give the owner write permission, or make a script executable."),
    "tar": ("Archives", "Compress a folder into an archive file, or extract the files of an archive. "
            "Create a gzipped tarball of a directory."),
    "ping": ("Network reachability", "Check whether a host on the network is reachable: send echo "
             "requests and report the round-trip time of each reply."),
    "df": ("Disk space", "Show how much free disk space each mounted filesystem has left, in human "
           "readable units."),
    "kill": ("Stopping processes", "Stop a running process by its process id, or send it another "
             "signal such as hang-up."),
    "git-commit": ("Recording changes", "Record the staged changes to the repository with a message "
                   "describing them."),
    "cp": ("Copying files", "Copy files and directories to another location, keeping their "
           "attributes when asked."),
    "ssh": ("Remote shells", "Log in to a remote machine over an encrypted connection and run "
            "commands there."),
}  # fmt: skip
QUESTIONS = {
    "de": ("Wie ändere ich die Zugriffsrechte einer Datei?", "chmod"),
    "zh": ("如何把文件夹压缩成归档文件？", "tar"),
    "ja": ("ネットワーク上のホストに到達できるか確認する", "ping"),
}
ENGLISH = "How do I check the free disk space of each filesystem?"


def _kb(root: Path) -> Path:
    docs = {
        f"{doc_id}.md": ({"id": doc_id, "title": title}, f"# {title}\n\n{body}\n")
        for doc_id, (title, body) in PAGES.items()
    }
    return write_corpus(root, docs)


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _kb(tmp_path_factory.mktemp("commands"))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, kb: Path, embedder) -> Path:
    """A store of the eight English pages, with multilingual vectors (the default)."""
    path = tmp_path_factory.mktemp("multilingual-store")
    ingest(kb, make_config(path), embedder=embedder)
    return path


@pytest.fixture(scope="module")
def old_store(tmp_path_factory: pytest.TempPathFactory, kb: Path, embedder) -> Path:
    """The same pages in a store made without multilingual vectors (as before them)."""
    path = tmp_path_factory.mktemp("old-store")
    ingest(kb, make_config(path, multilingual__vectors="off"), embedder=embedder)
    return path


def _tool(store_path: Path, embedder, **overrides) -> KnowledgeTool:
    return KnowledgeTool(make_config(store_path, **overrides), embedder=embedder)


def _top_document(result) -> str | None:
    entries = result.rerank_trace.entries if result.rerank_trace else []
    return entries[0].evidence_key.split("#")[0] if entries else None


def _node_names(result) -> set[str]:
    return {node.name for node in result.retrieval_trace.executed_nodes}


@pytest.mark.parametrize("language", sorted(QUESTIONS))
def test_a_question_in_another_language_finds_the_english_page(store: Path, embedder, language: str) -> None:
    question, page = QUESTIONS[language]
    with _tool(store, embedder) as tool:
        result = tool.lookup(question)
    assert result.found, result.retrieval_trace.evidence_verdict
    assert result.evidence_blocks[0].doc_id == page
    reasons = result.evidence_blocks[0].hit_reasons
    assert any(reason.startswith("vector:multilingual rank") for reason in reasons)
    verdict = result.retrieval_trace.evidence_verdict
    assert verdict.multilingual_top is not None and verdict.multilingual_top > 0.3


def test_a_page_in_a_language_outside_the_encoders_is_labelled_and_marked_as_such(
    tmp_path: Path, embedder
) -> None:
    # a Swedish page (once labelled German: the nearest of the encoder's languages) is shown as
    # Swedish in its block and marked in the pack for an English question
    swedish = (
        "# Filbehörigheter\n\nMed `chmod` ändrar du behörigheterna för en fil eller en katalog: vem "
        "som får läsa, skriva eller köra den. Ge ägaren skrivrättighet eller gör ett skript körbart.\n"
    )
    kb = write_corpus(tmp_path / "kb", {"chmod-sv.md": ({"id": "chmod-sv", "title": "chmod"}, swedish)})
    ingest(kb, make_config(tmp_path / "store"), embedder=embedder)
    with _tool(tmp_path / "store", embedder, abstention__enabled=False) as tool:
        result = tool.lookup("chmod file permissions")
    assert [block.language for block in result.evidence_blocks] == ["sv"]
    assert "[language: sv]" in result.context_pack.text


def test_a_refused_question_in_a_language_outside_the_encoders_is_told_to_ask_in_english(
    store: Path, embedder
) -> None:
    with _tool(store, embedder) as tool:
        greek = tool.lookup("Πώς αλλάζω τα δικαιώματα πρόσβασης ενός αρχείου;")
        german = tool.lookup("Wie wird das Wetter morgen in Berlin?")  # the encoder's: no such advice
    assert not greek.found and "reads as language 'el'" in greek.message
    assert "ask it again in English" in greek.message
    assert not german.found and "English" not in german.message


@pytest.mark.parametrize("language", sorted(QUESTIONS))
def test_with_the_leg_off_the_same_question_searches_as_before(store: Path, embedder, language: str) -> None:
    question, _ = QUESTIONS[language]
    with _tool(store, embedder, multilingual__search="off") as off:
        result = off.lookup(question)
    assert "multilingual_query_vector" not in _node_names(result)
    assert result.retrieval_trace.evidence_verdict.multilingual_top is None
    assert all(
        not reason.startswith("vector:multilingual")
        for block in result.evidence_blocks
        for reason in block.hit_reasons
    )


def test_an_english_question_is_answered_as_without_the_leg(store: Path, embedder) -> None:
    with _tool(store, embedder) as auto:
        off = auto.variant(make_config(store, multilingual__search="off"))
        with_leg, without = auto.lookup(ENGLISH), off.lookup(ENGLISH)
    assert with_leg.found and with_leg.evidence_blocks[0].doc_id == "df"
    assert with_leg.retrieval_trace.evidence_verdict.multilingual_top is None
    assert [(b.evidence_key, b.rerank_score) for b in with_leg.evidence_blocks] == [
        (b.evidence_key, b.rerank_score) for b in without.evidence_blocks
    ]
    assert with_leg.retrieval_trace.evidence_verdict == without.retrieval_trace.evidence_verdict


def test_always_searches_the_leg_for_english_questions_too(store: Path, embedder) -> None:
    with _tool(store, embedder, multilingual__search="always") as always:
        result = always.lookup(ENGLISH)
    assert result.evidence_blocks[0].doc_id == "df"
    assert result.retrieval_trace.evidence_verdict.multilingual_top is not None


def test_a_store_made_without_multilingual_vectors_still_answers(old_store: Path, embedder) -> None:
    question, _ = QUESTIONS["de"]
    opened = QdrantEdgeStore(old_store / "knowledge", create=False)
    assert not opened.multilingual_vectors
    opened.close()
    with _tool(old_store, embedder) as tool:
        result = tool.lookup(question)
        english = tool.lookup(ENGLISH)
    assert result.evidence_status != "retrieval_failed"
    assert result.retrieval_trace.evidence_verdict.multilingual_top is None  # the store left the leg out
    assert english.found and english.evidence_blocks[0].doc_id == "df"


def test_info_says_whether_the_store_has_multilingual_vectors(store: Path, old_store: Path, embedder) -> None:
    from lookup_knowledge.cli.info import describe

    assert describe(make_config(store))["store"]["multilingual_vectors"] is True
    assert describe(make_config(old_store))["store"]["multilingual_vectors"] is False


def test_ingest_into_an_old_store_says_it_writes_no_multilingual_vectors(
    tmp_path: Path, kb: Path, embedder, caplog: pytest.LogCaptureFixture
) -> None:
    ingest(kb, make_config(tmp_path, multilingual__vectors="off"), embedder=embedder)
    edited = dict(PAGES, ssh=("Remote shells", "Open an encrypted remote shell on another machine."))
    write_corpus(
        kb.parent / "edited", {f"{d}.md": ({"id": d, "title": t}, b) for d, (t, b) in edited.items()}
    )
    with caplog.at_level(logging.WARNING, logger="lookup_knowledge.ingest"):
        report = ingest(kb.parent / "edited", make_config(tmp_path), embedder=embedder)
    assert report.updated >= 1
    assert "made without multilingual vectors" in caplog.text


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("Wie ändere ich die Zugriffsrechte einer Datei?", "de"),
        ("如何把文件夹压缩成归档文件？", "zh"),
        ("ネットワーク上のホストに到達できるか確認する", "ja"),
        ("Показать текущую версию", "ru"),
        # languages outside the encoder's, named when the identifier is sure of them (before: the
        # nearest of the encoder's, or English)
        ("Hur ändrar jag behörigheterna för en fil?", "sv"),
        ("Як змінити права доступу до файлу?", "uk"),
        ("मैं किसी फ़ाइल की अनुमतियाँ कैसे बदलूँ?", "hi"),
        ("Πώς αλλάζω τα δικαιώματα ενός αρχείου;", "el"),
        ("How do I check the free disk space?", "en"),
        ("git status", "en"),  # a weak guess of another language is taken as English
        ("12345 ---", "en"),
        ("", "en"),
    ],
)
def test_language_of(text: str, language: str) -> None:
    assert language_of(text) == language


OFFICE = {
    "weekends": ("Weekends and holidays", "The office is closed on weekends and public holidays. Have a "
                 "nice weekend: nobody is expected to answer messages on Saturday or Sunday."),
    "expenses": ("Expenses", "Keep the receipt of every purchase you make for work and submit it within "
                 "thirty days to be reimbursed."),
    "parental-leave": ("Parental leave", "New parents, including adoptive parents, take twelve weeks of "
                       "paid leave after the birth or adoption of a child."),
}  # fmt: skip


@pytest.fixture(scope="module")
def office_store(tmp_path_factory: pytest.TempPathFactory, embedder) -> Path:
    """Three pages of a company handbook, in English, with multilingual vectors."""
    return _store_of(tmp_path_factory.mktemp("office"), OFFICE, embedder)


def _store_of(root: Path, pages: dict[str, tuple[str, str]], embedder) -> Path:
    """A store (multilingual vectors on) of ``pages`` (id -> title, body) written under ``root``."""
    docs = {f"{d}.md": ({"id": d, "title": t}, f"# {t}\n\n{b}\n") for d, (t, b) in pages.items()}
    ingest(write_corpus(root / "kb", docs), make_config(root / "store"), embedder=embedder)
    return root / "store"


def test_a_greeting_near_a_pages_words_reads_like_a_probe_and_is_refused(
    office_store: Path, embedder
) -> None:
    policy = AbstentionPolicy()
    with _tool(office_store, embedder) as tool:
        greeting = tool.lookup("Schönes Wochenende!")
        question = tool.lookup("Ist das Büro am Samstag geöffnet?")
    verdict = greeting.retrieval_trace.evidence_verdict
    assert verdict.multilingual_top >= policy.multilingual_bar  # the chunk's bar alone would pass it
    assert verdict.probe_cosine >= policy.multilingual_probe_bar
    assert verdict.probe_cosine >= max(verdict.multilingual_top, verdict.line_top or 0.0)
    assert not greeting.found and verdict.reason != "multilingual_match"
    assert question.found and question.evidence_blocks[0].doc_id == "weekends"
    assert question.retrieval_trace.evidence_verdict.probe_cosine < policy.multilingual_probe_bar


def test_the_multilingual_reason_refuses_a_question_that_reads_like_a_probe() -> None:
    policy = AbstentionPolicy(multilingual_bar=0.3, multilingual_line_bar=0.55, multilingual_probe_bar=0.45)

    def reason(line: float | None, probe: float | None) -> str:
        return multilingual_reason("no_shared_terms", 0.35, policy, line, probe_cosine=probe)

    assert reason(0.44, 0.6) == "no_shared_terms"  # nearer a probe than its evidence
    assert reason(0.62, 0.6) == "multilingual_match"  # a line nearer than the probe
    assert reason(0.40, 0.41) == "multilingual_match"  # under the probe bar: a question of one form
    assert reason(None, None) == "multilingual_match"
    assert multilingual_reason("plausible", 0.1, policy, None, probe_cosine=0.9) == "plausible"


def test_the_encoder_puts_a_translation_near_its_original() -> None:
    encoder = MultilingualEmbedder()
    rows = encoder.embed_documents(["Compress a folder into an archive file.", "Show the free disk space."])
    question = encoder.embed_query("如何把文件夹压缩成归档文件？")
    assert rows.shape == (2, 512) and question.shape == (512,)
    assert np.linalg.norm(rows, axis=1) == pytest.approx([1.0, 1.0], abs=1e-3)
    assert question @ rows[0] > question @ rows[1] + 0.1
    assert encoder.embed_documents([]).shape == (0, 512)


def test_the_multilingual_reason_passes_only_refused_questions_above_the_bar() -> None:
    policy = AbstentionPolicy(multilingual_bar=0.5)
    assert multilingual_reason("below_probe_null", 0.62, policy) == "multilingual_match"
    assert multilingual_reason("no_shared_terms", 0.62, policy) == "multilingual_match"
    assert multilingual_reason("below_probe_null", 0.41, policy) == "below_probe_null"
    assert multilingual_reason("below_probe_null", None, policy) == "below_probe_null"  # English: no leg
    assert multilingual_reason("plausible", 0.1, policy) == "plausible"
    assert multilingual_reason("no_candidates", 0.9, policy) == "no_candidates"


def test_one_returned_line_at_the_line_bar_passes_a_refused_question() -> None:
    policy = AbstentionPolicy(multilingual_bar=0.5, multilingual_line_bar=0.6)
    assert multilingual_reason("no_shared_terms", 0.41, policy, line_top=0.63) == "multilingual_match"
    assert multilingual_reason("no_shared_terms", 0.41, policy, line_top=0.58) == "no_shared_terms"
    assert multilingual_reason("no_shared_terms", None, policy, line_top=None) == "no_shared_terms"
    assert multilingual_reason("no_candidates", None, policy, line_top=0.9) == "no_candidates"
    assert line_top({"a#chunk-0": 0.4, "b#chunk-1": 0.7}) == 0.7
    assert line_top(None) is None and line_top({}) is None


def test_the_verdict_shows_the_best_line_it_read(store: Path, embedder) -> None:
    with _tool(store, embedder) as tool:
        german, english = tool.lookup(QUESTIONS["de"][0]), tool.lookup(ENGLISH)
    verdict = german.retrieval_trace.evidence_verdict
    assert verdict.line_top == pytest.approx(max(e.line_score for e in german.rerank_trace.entries))
    assert english.retrieval_trace.evidence_verdict.line_top is None


def test_search_on_needs_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXTRAS, "multilingual", ("no_such_encoder_module",))  # the fault: no extra
    assert build_multilingual_embedder(make_config(tmp_path)) is None  # auto: without it, off
    with pytest.raises(MissingExtraError, match="lookup-knowledge\\[multilingual\\]"):
        build_multilingual_embedder(make_config(tmp_path, multilingual__vectors="on"))


def _chunks(dimension: int = 4) -> list[StoredChunk]:
    """Three chunks whose multilingual vectors put the second nearest a query of (0, 1, 0, ...)."""
    rows = []
    for n, text in enumerate(["alpha apples", "beta bananas", "gamma grapes"]):
        dense = np.zeros(dimension, dtype=np.float32)
        dense[0] = 1.0
        dense[1] = 0.1 * n
        other = np.zeros(3, dtype=np.float32)
        other[n] = 1.0
        payload = {
            "doc_id": f"doc-{n}",
            "chunk_index": 0,
            "evidence_key": f"doc-{n}#chunk-0",
            "content": text,
        }
        rows.append(StoredChunk(dense, payload, bm25_encoder().embed_document(text), other))
    return rows


def _request(multilingual: list[float] | None) -> SearchRequest:
    return SearchRequest(
        "apples", [1.0, 0.0, 0.0, 0.0], 3, mode="hybrid", sparse_vector=bm25_encoder().embed_query("apples"),
        multilingual_vector=multilingual,
    )  # fmt: skip


@pytest.mark.parametrize("adapter", ["edge", "qdrant-client"])
def test_both_adapters_fuse_the_multilingual_leg_and_report_its_places(tmp_path: Path, adapter: str) -> None:
    if adapter == "edge":
        store = QdrantEdgeStore(tmp_path / "s", 4, multilingual_dimension=3)
    else:
        store = QdrantClientStore("c", 4, location=":memory:", multilingual_dimension=3)
    try:
        assert store.multilingual_vectors
        store.upsert(_chunks())
        hits = searched(store, _request([0.0, 1.0, 0.0]))
        by_doc = {hit.doc_id: hit for hit in hits}
        assert by_doc["doc-1"].multilingual_rank == 1
        assert by_doc["doc-1"].multilingual_score == pytest.approx(1.0, abs=1e-4)
        assert by_doc["doc-0"].multilingual_score == pytest.approx(0.0, abs=1e-4)
        assert all(hit.multilingual_score is None for hit in searched(store, _request(None)))
    finally:
        store.close()


def test_an_edge_store_without_the_vectors_searches_without_the_leg(tmp_path: Path) -> None:
    store = QdrantEdgeStore(tmp_path / "s", 4)
    store.upsert([StoredChunk(c.vector, c.payload, c.sparse_vector) for c in _chunks()])
    store.close()
    reopened = QdrantEdgeStore(tmp_path / "s", 4, multilingual_dimension=3)  # as an ingest that wants them
    try:
        assert not reopened.multilingual_vectors
        hits = searched(reopened, _request([0.0, 1.0, 0.0]))
        assert [hit.doc_id for hit in hits][0] == "doc-0" and all(h.multilingual_rank is None for h in hits)
    finally:
        reopened.close()


def test_an_edge_store_with_the_vectors_opens_for_a_writer_that_writes_none(tmp_path: Path) -> None:
    QdrantEdgeStore(tmp_path / "s", 4, multilingual_dimension=3).close()
    reopened = QdrantEdgeStore(tmp_path / "s", 4)  # an ingest with multilingual.vectors off
    try:
        assert reopened.multilingual_vectors
        reopened.upsert([StoredChunk(c.vector, c.payload, c.sparse_vector) for c in _chunks()])
        assert reopened.count() == 3
    finally:
        reopened.close()


class _RecordingEncoder(MultilingualEmbedder):
    """The multilingual encoder, noting the thread of each call (or failing, to inject a fault)."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.threads_seen: list[str] = []
        self.fail = fail

    def embed_documents(self, texts):
        self.threads_seen.append(threading.current_thread().name)
        if self.fail:
            raise EmbedderError("the multilingual encoder failed: RuntimeError: table gone")
        return super().embed_documents(texts)

    def embed_queries(self, texts):
        if self.fail:
            raise EmbedderError("the multilingual encoder failed: RuntimeError: table gone")
        return super().embed_queries(texts)


def test_ingest_encodes_the_multilingual_vectors_beside_the_dense_encoder(
    tmp_path: Path, kb: Path, embedder
) -> None:
    encoder = _RecordingEncoder()
    report = ingest(kb, make_config(tmp_path), embedder=embedder, multilingual=encoder)
    assert report.chunks_written == len(PAGES)
    assert encoder.threads_seen and all(n.startswith("ingest-multilingual") for n in encoder.threads_seen)
    with _tool(tmp_path, embedder) as tool:  # the vectors written are the ones the leg searches
        question, page = QUESTIONS["de"]
        assert _top_document(tool.lookup(question)) == page


def test_a_failing_multilingual_encoder_stops_ingest_with_its_error_and_keeps_the_store(
    tmp_path: Path, kb: Path, embedder
) -> None:
    ingest(kb, make_config(tmp_path), embedder=embedder)
    edited = dict(PAGES, ssh=("Remote shells", "Open an encrypted remote shell on another machine."))
    write_corpus(
        kb.parent / "edited-fault", {f"{d}.md": ({"id": d, "title": t}, b) for d, (t, b) in edited.items()}
    )
    with pytest.raises(EmbedderError, match="multilingual encoder failed"):
        ingest(
            kb.parent / "edited-fault",
            make_config(tmp_path),
            embedder=embedder,
            multilingual=_RecordingEncoder(True),
        )
    with _tool(tmp_path, embedder) as tool:  # the store still answers from what it held
        question, page = QUESTIONS["de"]
        assert _top_document(tool.lookup(question)) == page


# -- a question asked across languages: each block read by its best line -------------------------

LINES_PAGE = (
    "# Archives\n\n"
    "> Pack and unpack archive files.\n> More information: <https://example.org/tar>.\n\n"
    "- Create an archive from a directory:\n\n`tar cf target.tar path/to/dir`\n\n"
    "- List the contents of an archive:\n\n`tar tf source.tar`\n\n"
    "```sh\ntar xf source.tar --wildcards '*.html'\n```\n"
)


def test_prose_lines_keep_the_breadcrumb_and_the_prose_not_code_or_links() -> None:
    assert prose_lines("tar", LINES_PAGE) == [
        "tar",
        "Archives",
        "Pack and unpack archive files.",
        "Create an archive from a directory:",
        "List the contents of an archive:",
    ]
    assert prose_lines("", "`only code`") == ["`only code`"]  # no prose: the text's opening
    assert len(prose_lines("t", "\n".join(f"- line {n}" for n in range(40)))) == MAX_LINES


@pytest.mark.parametrize("language", ["de", "zh"])
def test_a_question_across_languages_ranks_each_block_by_its_best_line(
    store: Path, embedder, language: str
) -> None:
    question, page = QUESTIONS[language]
    with _tool(store, embedder) as tool:
        result = tool.lookup(question)
    entries = result.rerank_trace.entries
    assert entries[0].evidence_key.split("#")[0] == page
    assert all(e.line_score is not None for e in entries)
    encoder, vector = MultilingualEmbedder(), MultilingualEmbedder().embed_query(question)
    for entry, block in zip(entries, result.evidence_blocks, strict=True):
        lines = prose_lines(block.breadcrumb or "", block.content)
        assert entry.line_score == pytest.approx(
            float(np.max(encoder.embed_documents(lines) @ vector)), abs=1e-3
        )
        boosts = sum(b.contribution for b in entry.boosts)
        basis = entry.line_score + RerankConfig().cross_language_rank * entry.rank_score
        assert entry.final_score == pytest.approx(basis + boosts, abs=1e-6)
    assert [e.final_score for e in entries] == sorted((e.final_score for e in entries), reverse=True)


def test_an_english_question_or_the_rule_off_ranks_by_the_rank_score(store: Path, embedder) -> None:
    with _tool(store, embedder) as tool:
        english = tool.lookup(ENGLISH)
    with _tool(store, embedder, rerank__cross_language_lines=False) as tool:
        german = tool.lookup(QUESTIONS["de"][0])
    for result in (english, german):
        assert result.rerank_trace.entries
        assert all(e.line_score is None for e in result.rerank_trace.entries)
        for e in result.rerank_trace.entries:
            assert e.final_score == pytest.approx(e.rank_score + sum(b.contribution for b in e.boosts))


def test_a_question_in_the_blocks_own_language_is_not_read_by_lines(tmp_path: Path, embedder) -> None:
    german = {
        "rechte": ("Dateirechte", "Ändere die Zugriffsrechte einer Datei: wer sie lesen, schreiben "
                   "oder ausführen darf. Gib dem Besitzer Schreibrechte."),
        "archiv": ("Archive", "Packe einen Ordner in eine Archivdatei oder entpacke die Dateien "
                   "eines Archivs."),
    }  # fmt: skip
    kb = write_corpus(
        tmp_path / "kb",
        {f"{d}.md": ({"id": d, "title": t}, f"# {t}\n\n{b}\n") for d, (t, b) in german.items()},
    )
    ingest(kb, make_config(tmp_path / "store"), embedder=embedder)
    with _tool(tmp_path / "store", embedder) as tool:
        result = tool.lookup("Wie ändere ich die Zugriffsrechte einer Datei?")
    assert [b.language for b in result.evidence_blocks][:1] == ["de"]
    assert all(e.line_score is None for e in result.rerank_trace.entries)


GERMAN_NEIGHBOURS = {
    "kopieren": ("Dateien kopieren", "Kopiere eine Datei oder einen Ordner an einen anderen Ort; die "
                 "Datei behält ihren Namen."),
    "umbenennen": ("Dateien umbenennen", "Gib einer Datei einen neuen Namen oder verschiebe die Datei "
                   "in einen anderen Ordner."),
    "suchen": ("Dateien suchen", "Finde eine Datei nach ihrem Namen oder ihrer Größe in einem Ordner "
               "und seinen Unterordnern."),
}  # fmt: skip


@pytest.fixture(scope="module")
def two_language_store(tmp_path_factory: pytest.TempPathFactory, embedder) -> Path:
    """The eight English pages and three German ones on other file tasks, one store."""
    return _store_of(tmp_path_factory.mktemp("two-languages"), {**PAGES, **GERMAN_NEIGHBOURS}, embedder)


def test_a_store_in_two_languages_returns_the_answer_written_in_the_other_one(
    two_language_store: Path, embedder
) -> None:
    """The German pages hold the question's words ("Datei") and lie near it in its own language,
    so the three best candidates are theirs: the English permissions page, which answers, comes
    from the search over the chunks in other languages."""
    with _tool(two_language_store, embedder, retrieval__retrieve_k=3, retrieval__return_n=4) as tool:
        result = tool.lookup(QUESTIONS["de"][0])
    assert "chmod" in {block.doc_id for block in result.evidence_blocks}
    attempts = {a.kind: a for a in result.retrieval_trace.attempts}
    assert attempts["other_languages"].used and attempts["unfiltered"].used
    chmod = next(block for block in result.evidence_blocks if block.doc_id == "chmod")
    assert chmod.language == "en" and "vector:other_languages" in chmod.hit_reasons


def test_the_answer_in_the_other_language_leads_when_it_means_the_question_better(
    two_language_store: Path, embedder
) -> None:
    """The German pages hold the question's words, so the first search ranks one of them first;
    the English permissions page lies nearer the question's meaning (a higher multilingual
    cosine than that first block's), so it leads."""
    with _tool(two_language_store, embedder) as tool:
        result = tool.lookup(QUESTIONS["de"][0])
    first = result.evidence_blocks[0]
    assert first.doc_id == "chmod" and "vector:other_languages" in first.hit_reasons
    assert any(reason.startswith("other_languages:first (multilingual") for reason in first.hit_reasons)
    attempts = {a.kind: a for a in result.retrieval_trace.attempts}
    assert attempts["unfiltered"].hit_keys[0].split("#")[0] in GERMAN_NEIGHBOURS


def test_a_page_in_the_questions_own_language_that_answers_keeps_the_lead(
    two_language_store: Path, embedder
) -> None:
    with _tool(two_language_store, embedder) as tool:
        result = tool.lookup("Wie kopiere ich eine Datei an einen anderen Ort?")
    assert result.evidence_blocks[0].doc_id == "kopieren"
    assert "other_languages" in {a.kind for a in result.retrieval_trace.attempts}
    reasons = [reason for block in result.evidence_blocks for reason in block.hit_reasons]
    assert not any(reason.startswith("other_languages:first") for reason in reasons)


def test_with_other_languages_off_the_question_searches_once(two_language_store: Path, embedder) -> None:
    overrides = {"retrieval__retrieve_k": 3, "retrieval__return_n": 4, "multilingual__other_languages": False}
    with _tool(two_language_store, embedder, **overrides) as tool:
        result = tool.lookup(QUESTIONS["de"][0])
    assert [a.kind for a in result.retrieval_trace.attempts] == ["unfiltered"]
    assert "chmod" not in {block.doc_id for block in result.evidence_blocks}


def test_a_question_on_pages_in_other_languages_only_runs_one_search(store: Path, embedder) -> None:
    with _tool(store, embedder) as tool:
        result = tool.lookup(QUESTIONS["zh"][0])
    assert [a.kind for a in result.retrieval_trace.attempts] == ["unfiltered"]


@pytest.mark.parametrize("adapter", ["edge", "qdrant-client"])
def test_both_adapters_leave_out_the_chunks_in_the_language_a_request_excludes(
    tmp_path: Path, adapter: str
) -> None:
    if adapter == "edge":
        store = QdrantEdgeStore(tmp_path / "s", 4, multilingual_dimension=3)
    else:
        store = QdrantClientStore("c", 4, location=":memory:", multilingual_dimension=3)
    chunks = _chunks()
    for chunk, language in zip(chunks, ["de", "en", None], strict=True):
        if language:
            chunk.payload[LANGUAGE_FIELD] = language
    try:
        store.upsert(chunks)
        request = _request([0.0, 1.0, 0.0])
        assert {hit.doc_id for hit in searched(store, request)} == {"doc-0", "doc-1", "doc-2"}
        others = searched(store, replace(request, other_languages_than="de"))
        assert {hit.doc_id for hit in others} == {"doc-1", "doc-2"}  # a chunk of no language is kept
    finally:
        store.close()


def test_an_edge_store_made_before_the_language_index_gains_it_when_opened(tmp_path: Path) -> None:
    """Without it a search that leaves out one language reads every chunk's payload."""
    store = QdrantEdgeStore(tmp_path / "s", 4, multilingual_dimension=3)
    store.upsert(_chunks())
    store._shard.update(qe.UpdateOperation.delete_field_index(LANGUAGE_FIELD))  # as a store made before it
    assert LANGUAGE_FIELD not in store._shard.info().payload_schema
    store.close()
    reopened = QdrantEdgeStore(tmp_path / "s", 4, multilingual_dimension=3)
    try:
        assert LANGUAGE_FIELD in reopened._shard.info().payload_schema
        assert len(searched(reopened, replace(_request([0.0, 1.0, 0.0]), other_languages_than="de"))) == 3
    finally:
        reopened.close()


def test_a_failing_encoder_leaves_the_blocks_their_rank_scores() -> None:
    hits = [
        make_hit(doc, 0, 0.9 - n / 10, content=body, payload={"language": "en"})
        for n, (doc, (_, body)) in enumerate(PAGES.items())
    ]
    attempt = SearchAttempt("unfiltered", None, 20, hits, hits)
    candidates = candidates_df([attempt], L0Hints(), "dense", HybridFusion())
    deduped = deduped_df(screened_df(candidates, 2, 5, 0.0))
    vector = MultilingualEmbedder().embed_query(QUESTIONS["de"][0])
    weights = RerankConfig()
    assert line_scores(deduped, "de", weights, vector, MultilingualEmbedder()) is not None
    assert line_scores(deduped, "de", weights, vector, _RecordingEncoder(fail=True)) is None
    english = line_scores(deduped, "en", weights, vector, MultilingualEmbedder())
    assert english is None  # a question in the blocks' own language


def test_a_failing_encoder_reads_no_probe_cosine() -> None:
    vector = MultilingualEmbedder().embed_query("Schönes Wochenende!")
    read = probe_cosine(ProbeCalibration(), vector, MultilingualEmbedder())
    assert read is not None and read >= AbstentionPolicy().multilingual_probe_bar
    assert probe_cosine(ProbeCalibration(), vector, _RecordingEncoder(fail=True)) is None
    assert probe_cosine(ProbeCalibration(), None, MultilingualEmbedder()) is None  # the leg did not run


# --- a question on pages in its own language ---------------------------------------------------

TIENDA = {
    "devoluciones": ("Devoluciones", "Puedes devolver cualquier producto en un plazo de treinta días desde "
                     "la compra. Guarda el ticket y lleva el producto a la tienda o envíalo por correo."),
    "envios": ("Envíos", "Los pedidos se envían en un plazo de dos días laborables. El envío es gratuito "
               "para los pedidos de más de cincuenta euros dentro de la península."),
    "pagos": ("Formas de pago", "Aceptamos tarjeta de crédito, transferencia bancaria y pago contra "
              "reembolso. Las facturas se envían por correo electrónico cuando se paga el pedido."),
    "contacto": ("Contacto", "¡Muchas gracias por escribirnos! Respondemos a todos los mensajes en un "
                 "plazo de un día laborable, de lunes a viernes."),
}  # fmt: skip


@pytest.fixture(scope="module")
def spanish_store(tmp_path_factory: pytest.TempPathFactory, embedder) -> Path:
    """Four pages of a shop's help centre, in Spanish, with multilingual vectors."""
    return _store_of(tmp_path_factory.mktemp("tienda"), TIENDA, embedder)


def test_a_question_on_pages_in_its_own_language_is_read_for_its_meaning(
    spanish_store: Path, embedder
) -> None:
    policy = AbstentionPolicy()
    with _tool(spanish_store, embedder) as tool:
        question = tool.lookup("¿Cuántos días tengo para devolver un producto?")
        thanks = tool.lookup("¡Muchas gracias por todo!")
    asked = question.retrieval_trace.evidence_verdict
    assert question.found and question.evidence_blocks[0].doc_id == "devoluciones"
    assert question.evidence_blocks[0].language == "es"
    assert asked.own_language_top >= policy.own_language_floor
    verdict = thanks.retrieval_trace.evidence_verdict  # the contact page holds its words
    assert not thanks.found and verdict.reason == "below_multilingual_floor"
    assert verdict.probe_cosine >= max(policy.multilingual_probe_bar, verdict.own_language_top)


def test_a_question_across_languages_shows_what_its_level_read(store: Path, embedder) -> None:
    with _tool(store, embedder) as tool:
        german, english = tool.lookup(QUESTIONS["de"][0]), tool.lookup(ENGLISH)
    verdict = german.retrieval_trace.evidence_verdict
    assert german.evidence_blocks[0].doc_id == "chmod"
    assert verdict.top_multilingual_rank == 1 and verdict.top_line_lead is not None
    lines = {e.evidence_key: e.line_score for e in german.rerank_trace.entries}
    keys = [b.evidence_key for b in german.evidence_blocks]
    assert verdict.top_line_lead == pytest.approx(lines[keys[0]] - max(lines[k] for k in keys[1:]))
    assert verdict.top_line_lead >= LINE_LEAD and german.relevance_level == "high"  # places alone: low
    assert verdict.top_sparse_rank is None
    assert english.retrieval_trace.evidence_verdict.top_line_lead is None


def test_an_english_question_or_one_across_languages_reads_no_own_language_cosine(
    store: Path, embedder
) -> None:
    with _tool(store, embedder) as tool:
        english, german = tool.lookup(ENGLISH), tool.lookup(QUESTIONS["de"][0])
    assert english.retrieval_trace.evidence_verdict.own_language_top is None
    assert german.found and german.retrieval_trace.evidence_verdict.own_language_top is None  # English pages


def _hit(language: str | None, multilingual: float) -> SearchHit:
    payload = {LANGUAGE_FIELD: language} if language else {}
    return SearchHit("p", "text", 0.5, 0.2, payload, multilingual_score=multilingual)


def test_the_own_language_cosine_reads_the_hits_in_the_questions_language() -> None:
    hits = [_hit("es", 0.31), _hit("en", 0.52), _hit(None, 0.6), _hit("es", 0.12)]
    assert own_language_top(hits, "es", "alphabetic") == pytest.approx(0.31)
    assert own_language_top(hits, "de", "alphabetic") is None  # no hit in German
    assert own_language_top(hits[1:], "es", "alphabetic") is None  # its best hit is English
    assert own_language_top([], "es", "alphabetic") is None
    assert own_language_top(hits, "en", "alphabetic") is None
    assert own_language_top(hits, "zh", "cjk") is None  # the CJK rules read a CJK question


def test_the_own_language_rule_keeps_only_readings_the_meaning_agrees_with() -> None:
    policy = AbstentionPolicy(own_language_floor=0.2, multilingual_probe_bar=0.45)
    assert policy.own_language_meaning("plausible", 0.35, 0.3) == "plausible"
    assert policy.own_language_meaning("informative_terms", 0.15, None) == "below_multilingual_floor"
    assert policy.own_language_meaning("plausible", 0.3, 0.8) == "below_multilingual_floor"  # a probe nearer
    assert policy.own_language_meaning("plausible", 0.5, 0.48) == "plausible"  # its evidence nearer
    assert policy.own_language_meaning("plausible", None, 0.9) == "plausible"  # not read
    assert policy.own_language_meaning("exact_code", 0.05, None) == "exact_code"
    assert policy.own_language_meaning("below_probe_null", 0.05, None) == "below_probe_null"
