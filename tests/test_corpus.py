"""Corpus readers: markdown frontmatter, JSONL corpora, and bad input that is skipped, not fatal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import write_markdown

from lookup_knowledge import sample_knowledge_base
from lookup_knowledge.adapters.corpus import CorpusError, read_corpus
from lookup_knowledge.config import load_config


def docs_by_id(corpus) -> dict:
    return {doc.doc_id: doc for doc in corpus.documents}


def skipped_reasons(corpus) -> dict[str, str]:
    return {s.path: s.reason for s in corpus.skipped}


# --- markdown frontmatter -----------------------------------------------------------------------


def test_frontmatter_id_becomes_doc_id(tmp_path: Path) -> None:
    write_markdown(tmp_path, "a/refunds.md", {"id": "refund-policy", "title": "Refunds"}, "x")
    (doc,) = read_corpus(tmp_path).documents
    assert doc.doc_id == "refund-policy"
    assert doc.source == "a/refunds.md"


def test_relative_path_is_doc_id_without_frontmatter_id(tmp_path: Path) -> None:
    write_markdown(tmp_path, "team/ops/runbook.md", {"title": "Runbook"}, "x")
    (doc,) = read_corpus(tmp_path).documents
    assert doc.doc_id == "team/ops/runbook.md"


def test_numeric_id_is_read_as_text(tmp_path: Path) -> None:
    write_markdown(tmp_path, "a.md", {"id": 42, "title": "Answer"}, "x")
    assert read_corpus(tmp_path).documents[0].doc_id == "42"


def test_keywords_and_tags_are_merged(tmp_path: Path) -> None:
    write_markdown(tmp_path, "a.md", {"keywords": ["kafka", "lag"], "tags": ["ops"]}, "x")
    assert read_corpus(tmp_path).documents[0].keywords == ("kafka", "lag", "ops")


def test_string_or_list_fields_are_both_accepted(tmp_path: Path) -> None:
    write_markdown(tmp_path, "s.md", {"id": "s", "keywords": "refund", "entities": "Stripe"}, "x")
    write_markdown(tmp_path, "l.md", {"id": "l", "keywords": ["refund"], "entities": ["Stripe"]}, "x")
    docs = docs_by_id(read_corpus(tmp_path))
    assert docs["s"].keywords == docs["l"].keywords == ("refund",)
    assert docs["s"].entities == docs["l"].entities == ("Stripe",)


def test_domain_is_the_category(tmp_path: Path) -> None:
    write_markdown(tmp_path, "a.md", {"domain": "payments"}, "x")
    assert read_corpus(tmp_path).documents[0].categories == ("payments",)


def test_category_is_used_without_domain(tmp_path: Path) -> None:
    write_markdown(tmp_path, "a.md", {"category": ["security", "compliance"]}, "x")
    assert read_corpus(tmp_path).documents[0].categories == ("security", "compliance")


def test_domain_wins_over_category(tmp_path: Path) -> None:
    write_markdown(tmp_path, "a.md", {"domain": "payments", "category": "other"}, "x")
    assert read_corpus(tmp_path).documents[0].categories == ("payments",)


def test_blank_list_items_are_dropped(tmp_path: Path) -> None:
    write_markdown(tmp_path, "a.md", {"domain": [" ", "payments", None], "keywords": [""]}, "x")
    doc = read_corpus(tmp_path).documents[0]
    assert doc.categories == ("payments",)
    assert doc.keywords == ()


def test_description_and_doc_type_are_read(tmp_path: Path) -> None:
    write_markdown(tmp_path, "a.md", {"description": "About refunds.", "doc_type": "policy"}, "x")
    doc = read_corpus(tmp_path).documents[0]
    assert doc.description == "About refunds."
    assert doc.doc_type == "policy"


def test_title_falls_back_to_first_heading_then_file_stem(tmp_path: Path) -> None:
    write_markdown(tmp_path, "headed.md", None, "# Heading Title\n\ntext")
    write_markdown(tmp_path, "bare-file.md", None, "just text")
    docs = docs_by_id(read_corpus(tmp_path))
    assert docs["headed.md"].title == "Heading Title"
    assert docs["bare-file.md"].title == "bare-file"


def test_body_excludes_frontmatter(tmp_path: Path) -> None:
    write_markdown(tmp_path, "a.md", {"title": "T", "keywords": ["secretword"]}, "Body only.")
    doc = read_corpus(tmp_path).documents[0]
    assert doc.body.strip() == "Body only."
    assert doc.format == "markdown"


def test_utf8_bom_is_tolerated(tmp_path: Path) -> None:
    (tmp_path / "bom.md").write_bytes("\ufeff---\ntitle: Bom\n---\nbody\n".encode())
    assert read_corpus(tmp_path).documents[0].title == "Bom"


def test_non_markdown_files_are_ignored(tmp_path: Path) -> None:
    write_markdown(tmp_path, "a.md", {"title": "A"}, "x")
    (tmp_path / "notes.txt").write_text("not knowledge")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\x00\x00")
    corpus = read_corpus(tmp_path)
    assert [d.doc_id for d in corpus.documents] == ["a.md"]
    assert corpus.skipped == []


def test_sample_knowledge_base_reads_cleanly() -> None:
    corpus = read_corpus(sample_knowledge_base())
    assert len(corpus.documents) == 30
    assert corpus.skipped == []
    domains = {c for d in corpus.documents for c in d.categories}
    assert domains == {
        "customer-support",
        "data-platform",
        "infrastructure",
        "payments",
        "security",
    }
    chinese = next(d for d in corpus.documents if d.source.endswith("fapiao-requests-zh.md"))
    assert chinese.title == "中国客户发票申请流程"
    assert "发票" in chinese.keywords


# --- JSONL corpus -------------------------------------------------------------------------------


def write_jsonl(path: Path, lines: list[object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(x if isinstance(x, str) else json.dumps(x, ensure_ascii=False) for x in lines)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def test_jsonl_file_is_read_as_text_documents(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "docs.jsonl",
        [
            {"_id": "d1", "title": "Refunds", "text": "Refunds take 5 days.", "category": "pay"},
            {"_id": 2, "text": "No title here.", "keywords": ["k"]},
        ],
    )
    docs = docs_by_id(read_corpus(path))
    assert set(docs) == {"d1", "2"}
    assert docs["d1"].format == "text"
    assert docs["d1"].title == "Refunds"
    assert docs["d1"].body == "Refunds take 5 days."
    assert docs["d1"].categories == ("pay",)
    assert docs["2"].title == ""
    assert docs["2"].keywords == ("k",)


def test_beir_folder_with_corpus_jsonl_is_read(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "beir" / "corpus.jsonl", [{"_id": "x", "text": "hello"}])
    assert [d.doc_id for d in read_corpus(tmp_path / "beir").documents] == ["x"]


def test_bad_jsonl_lines_are_skipped_with_line_numbers(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "docs.jsonl",
        [
            {"_id": "ok", "text": "fine"},
            "{not json",
            "[1, 2]",
            {"_id": "notext"},
            {"text": "no id"},
            "",
            {"_id": "ok2", "text": "also fine"},
        ],
    )
    corpus = read_corpus(path)
    assert [d.doc_id for d in corpus.documents] == ["ok", "ok2"]
    reasons = skipped_reasons(corpus)
    assert set(reasons) == {"docs.jsonl:2", "docs.jsonl:3", "docs.jsonl:4", "docs.jsonl:5"}
    assert "invalid JSON" in reasons["docs.jsonl:2"]
    assert "not a JSON object" in reasons["docs.jsonl:3"]
    assert "missing _id or text" in reasons["docs.jsonl:4"]


def test_undecodable_jsonl_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_bytes(b'{"_id": "a", "text": "ok"}\n{"_id": "b", "text": "caf\xe9"}\n')
    corpus = read_corpus(path)
    assert [d.doc_id for d in corpus.documents] == ["a"]
    assert list(skipped_reasons(corpus)) == ["docs.jsonl:2"]


def test_duplicate_jsonl_ids_keep_the_first(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "docs.jsonl",
        [{"_id": "a", "text": "first"}, {"_id": "a", "text": "second"}],
    )
    corpus = read_corpus(path)
    assert [d.body for d in corpus.documents] == ["first"]
    assert "duplicate document id 'a'" in corpus.skipped[0].reason


# --- bad input ----------------------------------------------------------------------------------


def test_missing_folder_raises_corpus_error(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="not found"):
        read_corpus(tmp_path / "does-not-exist")


def test_empty_folder_raises_corpus_error(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="no markdown files"):
        read_corpus(tmp_path)


def test_folder_without_markdown_raises_corpus_error(tmp_path: Path) -> None:
    (tmp_path / "readme.txt").write_text("hello")
    with pytest.raises(CorpusError):
        read_corpus(tmp_path)


def test_unsupported_single_file_raises_corpus_error(tmp_path: Path) -> None:
    path = write_markdown(tmp_path, "one.md", {"title": "One"}, "x")
    with pytest.raises(CorpusError, match="unsupported source file"):
        read_corpus(path)


def test_broken_yaml_frontmatter_is_skipped_and_others_read(tmp_path: Path) -> None:
    write_markdown(tmp_path, "good.md", {"title": "Good"}, "fine")
    (tmp_path / "broken.md").write_text("---\ntitle: [unclosed\n---\nbody\n", encoding="utf-8")
    corpus = read_corpus(tmp_path)
    assert [d.doc_id for d in corpus.documents] == ["good.md"]
    assert "broken YAML frontmatter" in skipped_reasons(corpus)["broken.md"]


def test_binary_file_is_skipped(tmp_path: Path) -> None:
    write_markdown(tmp_path, "good.md", {"title": "Good"}, "fine")
    (tmp_path / "blob.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    corpus = read_corpus(tmp_path)
    assert [d.doc_id for d in corpus.documents] == ["good.md"]
    assert "binary" in skipped_reasons(corpus)["blob.md"]


def test_undecodable_bytes_are_skipped(tmp_path: Path) -> None:
    write_markdown(tmp_path, "good.md", {"title": "Good"}, "fine")
    (tmp_path / "latin1.md").write_bytes("# Café crème\n".encode("latin-1"))
    corpus = read_corpus(tmp_path)
    assert [d.doc_id for d in corpus.documents] == ["good.md"]
    assert "not valid UTF-8" in skipped_reasons(corpus)["latin1.md"]


def test_oversized_file_is_skipped_with_default_limit(tmp_path: Path) -> None:
    write_markdown(tmp_path, "good.md", {"title": "Good"}, "fine")
    (tmp_path / "huge.md").write_text("# Huge\n\n" + "a" * (5 * 1024 * 1024), encoding="utf-8")
    limit = load_config().ingest.max_file_bytes
    corpus = read_corpus(tmp_path, limit)
    assert [d.doc_id for d in corpus.documents] == ["good.md"]
    reason = skipped_reasons(corpus)["huge.md"]
    assert "too large" in reason
    assert "ingest.max_file_bytes" in reason


def test_size_limit_is_configurable(tmp_path: Path) -> None:
    write_markdown(tmp_path, "small.md", {"title": "Small"}, "x" * 500)
    assert read_corpus(tmp_path, 100).documents == []
    assert len(read_corpus(tmp_path, 10_000).documents) == 1


def test_duplicate_markdown_ids_keep_the_first_and_report_the_second(tmp_path: Path) -> None:
    write_markdown(tmp_path, "a.md", {"id": "same", "title": "First"}, "x")
    write_markdown(tmp_path, "b.md", {"id": "same", "title": "Second"}, "y")
    corpus = read_corpus(tmp_path)
    assert [d.title for d in corpus.documents] == ["First"]
    assert skipped_reasons(corpus) == {"b.md": "duplicate document id 'same'"}


def test_directory_named_like_markdown_is_not_a_document(tmp_path: Path) -> None:
    write_markdown(tmp_path, "good.md", {"title": "Good"}, "fine")
    (tmp_path / "archive.md").mkdir()
    write_markdown(tmp_path / "archive.md", "inner.md", {"title": "Inner"}, "inside")
    corpus = read_corpus(tmp_path)
    assert sorted(d.doc_id for d in corpus.documents) == ["archive.md/inner.md", "good.md"]
    assert corpus.skipped == []


def test_dangling_symlink_is_skipped_not_fatal(tmp_path: Path) -> None:
    write_markdown(tmp_path, "good.md", {"title": "Good"}, "fine")
    (tmp_path / "gone.md").symlink_to(tmp_path / "nowhere.md")
    corpus = read_corpus(tmp_path)
    assert [d.doc_id for d in corpus.documents] == ["good.md"]
    assert "unreadable" in skipped_reasons(corpus)["gone.md"]


def test_all_files_bad_gives_empty_corpus_with_reasons(tmp_path: Path) -> None:
    (tmp_path / "bad.md").write_bytes(b"\x00\x01")
    corpus = read_corpus(tmp_path)
    assert corpus.documents == []
    assert list(skipped_reasons(corpus)) == ["bad.md"]


# --- files outside the folder, headers that are not mappings, byte-order marks -------------------


def test_symlink_to_a_file_outside_the_folder_is_skipped(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    write_markdown(kb, "good.md", {"title": "Good"}, "fine")
    write_markdown(tmp_path, "secret.md", {"title": "Secret"}, "password=hunter2")
    (kb / "linked.md").symlink_to(tmp_path / "secret.md")
    corpus = read_corpus(kb)
    assert [d.doc_id for d in corpus.documents] == ["good.md"]
    assert "outside the knowledge-base folder" in skipped_reasons(corpus)["linked.md"]


def test_symlinked_folder_outside_the_root_is_skipped(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    write_markdown(kb, "good.md", {"title": "Good"}, "fine")
    write_markdown(tmp_path / "elsewhere", "other.md", {"title": "Other"}, "text")
    (kb / "elsewhere").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    corpus = read_corpus(kb)
    assert [d.doc_id for d in corpus.documents] == ["good.md"]
    assert all("outside" in s.reason for s in corpus.skipped)


def test_outside_files_are_read_when_allowed(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    write_markdown(tmp_path, "shared.md", {"id": "shared", "title": "Shared"}, "text")
    kb.mkdir()
    (kb / "shared.md").symlink_to(tmp_path / "shared.md")
    corpus = read_corpus(kb, allow_outside_root=True)
    assert [d.doc_id for d in corpus.documents] == ["shared"]


def test_symlink_inside_the_folder_is_read(tmp_path: Path) -> None:
    write_markdown(tmp_path, "real.md", {"id": "real", "title": "Real"}, "text")
    (tmp_path / "alias.md").symlink_to(tmp_path / "real.md")
    corpus = read_corpus(tmp_path)
    assert [d.doc_id for d in corpus.documents] == ["real"]  # the alias is a duplicate id
    assert "duplicate document id" in skipped_reasons(corpus)["real.md"]


@pytest.mark.parametrize(
    ("header", "kind"), [("- a\n- b", "list"), ("just a sentence", "str"), ("42", "int")]
)
def test_list_or_scalar_frontmatter_is_skipped_and_named(tmp_path: Path, header: str, kind: str) -> None:
    (tmp_path / "odd.md").write_text(f"---\n{header}\n---\n# Body\n", encoding="utf-8")
    corpus = read_corpus(tmp_path)
    assert corpus.documents == []
    assert skipped_reasons(corpus)["odd.md"] == f"frontmatter is a {kind}, not a mapping of fields"


def test_empty_frontmatter_is_no_metadata(tmp_path: Path) -> None:
    (tmp_path / "empty.md").write_text("---\n---\n# Heading\nbody\n", encoding="utf-8")
    (doc,) = read_corpus(tmp_path).documents
    assert (doc.doc_id, doc.title, doc.body) == ("empty.md", "Heading", "# Heading\nbody")


def test_jsonl_with_a_byte_order_mark_keeps_its_first_record(tmp_path: Path) -> None:
    lines = [json.dumps({"_id": "d1", "text": "first"}), json.dumps({"_id": "d2", "text": "second"})]
    (tmp_path / "c.jsonl").write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode())
    corpus = read_corpus(tmp_path / "c.jsonl")
    assert [d.doc_id for d in corpus.documents] == ["d1", "d2"]
    assert corpus.skipped == []


def test_skipped_files_name_the_source_their_document_has(tmp_path: Path) -> None:
    (tmp_path / "bad.md").write_bytes(b"\x00")
    (tmp_path / "c.jsonl").write_text('{"_id": "x"}\nnot json\n', encoding="utf-8")
    assert [s.doc_source for s in read_corpus(tmp_path).skipped] == ["bad.md"]
    assert [s.doc_source for s in read_corpus(tmp_path / "c.jsonl").skipped] == ["x", None]
