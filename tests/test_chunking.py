"""Chunking: heading breadcrumbs, numbering, code fences, size limits, empty documents."""

from __future__ import annotations

import pytest

from lookup_knowledge.adapters.corpus import SourceDocument
from lookup_knowledge.chunking import Chunk, chunk_document, split_by_size


def markdown_doc(body: str, title: str = "Runbook", **fields: object) -> SourceDocument:
    return SourceDocument(doc_id="doc", source="doc.md", title=title, body=body, format="markdown", **fields)


NESTED = """# Runbook

Intro paragraph.

## Failover

Promote the replica.

### Manual steps

Run the promote command by hand.

## Rollback

Demote the old primary.
"""


def test_headings_become_breadcrumbs() -> None:
    chunks = chunk_document(markdown_doc(NESTED), max_chars=1000)
    assert [c.breadcrumb for c in chunks] == [
        "Runbook",
        "Runbook > Failover",
        "Runbook > Failover > Manual steps",
        "Runbook > Rollback",
    ]


def test_sibling_heading_closes_deeper_levels() -> None:
    chunks = chunk_document(markdown_doc(NESTED), max_chars=1000)
    rollback = next(c for c in chunks if "Demote" in c.content)
    assert rollback.breadcrumb == "Runbook > Rollback"
    assert "Manual steps" not in rollback.breadcrumb


def test_each_section_holds_its_own_text() -> None:
    chunks = chunk_document(markdown_doc(NESTED), max_chars=1000)
    by_crumb = {c.breadcrumb: c.content for c in chunks}
    assert "Promote the replica." in by_crumb["Runbook > Failover"]
    assert "by hand" not in by_crumb["Runbook > Failover"]
    assert "by hand" in by_crumb["Runbook > Failover > Manual steps"]


def test_chunks_are_numbered_from_zero_without_gaps() -> None:
    chunks = chunk_document(markdown_doc(NESTED), max_chars=1000)
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
    assert len(chunks) == 4


def test_title_differing_from_first_heading_prefixes_breadcrumb() -> None:
    body = "## Setup\n\nInstall the agent.\n\n## Usage\n\nRun it.\n"
    chunks = chunk_document(markdown_doc(body, title="Agent Guide"), max_chars=1000)
    assert [c.breadcrumb for c in chunks] == ["Agent Guide > Setup", "Agent Guide > Usage"]


def test_text_before_first_heading_gets_the_title_breadcrumb() -> None:
    body = "Preamble text.\n\n## Section\n\nSection text.\n"
    chunks = chunk_document(markdown_doc(body, title="Doc"), max_chars=1000)
    assert chunks[0].breadcrumb == "Doc"
    assert chunks[0].content == "Preamble text."
    assert chunks[1].breadcrumb == "Doc > Section"


def test_heading_with_no_text_under_it_makes_no_chunk() -> None:
    body = "# Doc\n\n## Empty\n\n## Full\n\nContent.\n"
    chunks = chunk_document(markdown_doc(body, title="Doc"), max_chars=1000)
    assert [c.breadcrumb for c in chunks] == ["Doc > Full"]


@pytest.mark.parametrize("fence", ["```", "~~~"])
def test_hash_lines_inside_code_fences_are_not_headings(fence: str) -> None:
    body = (
        "# Runbook\n\n## Script\n\n"
        f"{fence}bash\n# stop the service\nsystemctl stop app\n## also a comment\n{fence}\n\n"
        "After the script.\n"
    )
    chunks = chunk_document(markdown_doc(body), max_chars=1000)
    assert [c.breadcrumb for c in chunks] == ["Runbook > Script"]
    assert "# stop the service" in chunks[0].content
    assert "After the script." in chunks[0].content


def test_heading_after_closed_fence_is_a_heading_again() -> None:
    body = "# Runbook\n\n```\n# comment\n```\n\n## Next\n\nMore.\n"
    chunks = chunk_document(markdown_doc(body), max_chars=1000)
    assert chunks[-1].breadcrumb == "Runbook > Next"


def test_hash_without_space_is_not_a_heading() -> None:
    body = "# Doc\n\n#hashtag is text\n"
    chunks = chunk_document(markdown_doc(body, title="Doc"), max_chars=1000)
    assert [c.breadcrumb for c in chunks] == ["Doc"]
    assert "#hashtag" in chunks[0].content


def test_long_section_is_split_within_chunk_chars() -> None:
    paragraphs = "\n\n".join(f"Paragraph {i} " + "word " * 40 for i in range(30))
    chunks = chunk_document(markdown_doc(f"# Runbook\n\n## Big\n\n{paragraphs}\n"), max_chars=300)
    assert len(chunks) > 5
    assert all(len(c.content) <= 300 for c in chunks)
    assert {c.breadcrumb for c in chunks} == {"Runbook > Big"}
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))


def test_size_split_keeps_every_word() -> None:
    words = [f"w{i}" for i in range(2000)]
    text = " ".join(f"{w}." for w in words)
    pieces = list(split_by_size(text, 120))
    assert all(len(p) <= 120 for p in pieces)
    joined = " ".join(pieces)
    assert all(f"{w}." in joined for w in words)


def test_unbroken_text_is_hard_cut_within_limit() -> None:
    pieces = list(split_by_size("x" * 1050, 100))
    assert all(len(p) <= 100 for p in pieces)
    assert "".join(pieces) == "x" * 1050


def test_small_paragraphs_are_packed_together() -> None:
    pieces = list(split_by_size("one\n\ntwo\n\nthree", 1000))
    assert pieces == ["one\n\ntwo\n\nthree"]


def test_chinese_sentences_split_on_full_stop() -> None:
    text = "。".join("发票申请流程说明" * 3 for _ in range(20)) + "。"
    pieces = list(split_by_size(text, 100))
    assert len(pieces) > 1
    assert all(len(p) <= 100 for p in pieces)


def test_text_document_is_one_section_titled_by_document() -> None:
    doc = SourceDocument("d", "d", "Plain", "# not a heading here\n\nbody", "text")
    chunks = chunk_document(doc, max_chars=1000)
    assert [c.breadcrumb for c in chunks] == ["Plain"]


def test_document_without_body_still_yields_one_chunk() -> None:
    chunks = chunk_document(markdown_doc("", title="Empty Doc"), max_chars=1000)
    assert len(chunks) == 1
    assert chunks[0].chunk_index == 0
    assert chunks[0].content == "Empty Doc"


def test_document_without_body_uses_its_description() -> None:
    doc = markdown_doc("   \n", title="Empty Doc", description="What this covers.")
    chunks = chunk_document(doc, max_chars=1000)
    assert [c.content for c in chunks] == ["What this covers."]


def test_heading_only_document_still_yields_one_chunk() -> None:
    chunks = chunk_document(markdown_doc("# Only A Heading\n", title="Only A Heading"), 1000)
    assert len(chunks) == 1


def test_embedding_text_leads_with_breadcrumb() -> None:
    chunk = Chunk(0, "Runbook > Failover", "Promote the replica.")
    assert chunk.embedding_text == "Runbook > Failover\nPromote the replica."
    assert Chunk(0, "", "bare").embedding_text == "bare"


def test_pieces_are_even_in_size_with_no_short_tail() -> None:
    sentences = [f"Sentence {i} says something about the topic at hand." for i in range(26)]
    text = " ".join(sentences)  # ~1,400 characters, one paragraph
    pieces = split_by_size(text, 1000)
    assert len(pieces) == 2  # as few as packing up to 1,000 characters needs
    assert all(len(p) <= 1000 for p in pieces)
    assert abs(len(pieces[0]) - len(pieces[1])) <= len(sentences[0]) + 2  # not 1,000 + 400
    assert " ".join(p.replace("\n\n", " ") for p in pieces) == text  # every sentence, in order


def test_even_split_never_needs_more_pieces_than_packing_full() -> None:
    for n in range(1, 60):
        text = "\n\n".join(f"Paragraph {i}" + " word" * (i % 7 * 9 + 3) for i in range(n))
        for size in (300, 650, 1000):  # every paragraph (at most 297 characters) fits
            pieces = split_by_size(text, size)
            full, buffer = 0, ""
            for unit in text.split("\n\n"):  # every paragraph fits: the plain greedy count
                if buffer and len(buffer) + 2 + len(unit) > size:
                    full, buffer = full + 1, ""
                buffer = f"{buffer}\n\n{unit}" if buffer else unit
            assert len(pieces) == full + 1
            assert all(len(p) <= size for p in pieces)
            assert "\n\n".join(pieces) == text


def test_a_change_of_chunking_re_chunks_on_the_next_ingest(monkeypatch: pytest.MonkeyPatch) -> None:
    from lookup_knowledge import ingestion, load_config

    doc = SourceDocument("d", "d", "Plain", "body", "text")
    before = ingestion.document_hash(doc, load_config(), "model")
    monkeypatch.setattr(ingestion, "CHUNKING", "another")
    assert ingestion.document_hash(doc, load_config(), "model") != before
