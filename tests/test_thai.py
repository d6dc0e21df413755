"""Thai read by its words (docs/multilingual.md): BM25 indexes a Thai run as the words pythainlp's
segmenter cuts it into (real pythainlp, real engine), a question's terms are those words, and a
document's hash changes with it only where the document has Thai."""

from __future__ import annotations

import pytest
from conftest import make_config, write_corpus

import lookup_knowledge.adapters.sparse as sparse
from lookup_knowledge import KnowledgeTool, ingest, ingestion, load_config
from lookup_knowledge.adapters.sparse import Bm25Encoder, thai_spaced, thai_words
from lookup_knowledge.chunking import SourceDocument

pytest.importorskip("pythainlp", reason="the 'thai' extra")

QUESTION = "จะดูรายการคอนเทนเนอร์ที่กำลังทำงานอยู่ได้อย่างไร"  # how do I list the running containers?
PAGES = {
    "containers": ("คอนเทนเนอร์", "แสดงรายการคอนเทนเนอร์ Docker ที่กำลังทำงานอยู่ทั้งหมด พร้อมสถานะและพอร์ต"),
    "clipboard": ("คลิปบอร์ด", "คัดลอกข้อมูลจากอินพุตมาตรฐานไปยังคลิปบอร์ด แล้ววางในโปรแกรมอื่นได้"),
    "antivirus": ("ไวรัส", "สแกนหาไวรัสในไฟล์และโฟลเดอร์ แล้วอัปเดตฐานข้อมูลไวรัสทุกวัน"),
}  # fmt: skip


def test_a_thai_run_is_cut_into_its_words_without_stop_words() -> None:
    assert thai_words(QUESTION) == ["ดู", "รายการ", "คอนเทนเนอร์", "ทำงาน"]  # จะ, ที่, กำลัง, อยู่... dropped
    assert thai_words("docker ps") == []
    assert thai_spaced("ls -la") == "ls -la"  # no Thai: unchanged


def test_a_thai_questions_terms_are_its_words_and_a_page_holds_them() -> None:
    encoder = Bm25Encoder()
    terms = encoder.query_terms(f"docker {QUESTION}")
    assert set(terms) == {"docker", "ดู", "รายการ", "คอนเทนเนอร์", "ทำงาน"}
    page = encoder.embed_document(PAGES["containers"][1])
    assert set(encoder.matched_terms(terms, page.indices)) == {"docker", "รายการ", "คอนเทนเนอร์", "ทำงาน"}
    other = encoder.embed_document(PAGES["clipboard"][1])
    assert encoder.matched_terms(terms, other.indices) == []


def test_without_the_segmenter_thai_is_read_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sparse, "_thai_segmenter", lambda: None)
    assert thai_words(QUESTION) is None
    assert thai_spaced(QUESTION) == QUESTION
    assert "คอนเทนเนอร์" not in Bm25Encoder().query_terms(QUESTION)  # the engine's fragments


def test_only_a_document_with_thai_changes_its_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config()
    thai = SourceDocument("t", "t", "Thai", QUESTION, "text")
    english = SourceDocument("e", "e", "English", "List the running containers.", "text")
    words = [ingestion.document_hash(d, config, "m") for d in (thai, english)]
    monkeypatch.setattr(sparse, "_thai_segmenter", lambda: None)
    before = [ingestion.document_hash(d, config, "m") for d in (thai, english)]
    assert words[0] != before[0] and words[1] == before[1]


def test_a_thai_question_finds_the_thai_page_by_its_words(tmp_path, embedder) -> None:
    docs = {f"{d}.md": ({"id": d, "title": t}, f"# {t}\n\n{b}\n") for d, (t, b) in PAGES.items()}
    ingest(write_corpus(tmp_path / "kb", docs), make_config(tmp_path / "store"), embedder=embedder)
    with KnowledgeTool(make_config(tmp_path / "store", retrieval__mode="sparse"), embedder=embedder) as tool:
        result = tool.lookup(QUESTION)
    assert result.evidence_blocks[0].doc_id == "containers"
    assert "คอนเทนเนอร์" in result.retrieval_trace.evidence_verdict.matched_terms
