"""Chunking: heading breadcrumbs, numbering, code fences, size limits, empty documents, and
verbatim, located chunks (blocks never cut inside, small sections joined, clean breadcrumbs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from lookup_knowledge.adapters.corpus import SourceDocument, read_corpus
from lookup_knowledge.chunking import (
    HARD_CAP_FACTOR,
    MIN_CHUNK_CHARS,
    Chunk,
    SourceSpan,
    chunk_document,
    clean_heading,
    split_by_size,
)

FILLER = " It says enough about this topic to stand alone as a section of its own, with details."


def markdown_doc(body: str, title: str = "Runbook", **fields: object) -> SourceDocument:
    return SourceDocument(doc_id="doc", source="doc.md", title=title, body=body, format="markdown", **fields)


NESTED = f"""# Runbook

Intro paragraph.{FILLER}{FILLER}

## Failover

Promote the replica.{FILLER}{FILLER}

### Manual steps

Run the promote command by hand.{FILLER}{FILLER}

## Rollback

Demote the old primary.{FILLER}{FILLER}
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
    body = f"## Setup\n\nInstall the agent.{FILLER}{FILLER}\n\n## Usage\n\nRun it.{FILLER}{FILLER}\n"
    chunks = chunk_document(markdown_doc(body, title="Agent Guide"), max_chars=1000)
    assert [c.breadcrumb for c in chunks] == ["Agent Guide > Setup", "Agent Guide > Usage"]


def test_text_before_first_heading_gets_the_title_breadcrumb() -> None:
    body = f"Preamble text.{FILLER}{FILLER}\n\n## Section\n\nSection text.{FILLER}{FILLER}\n"
    chunks = chunk_document(markdown_doc(body, title="Doc"), max_chars=1000)
    assert chunks[0].breadcrumb == "Doc"
    assert chunks[0].content == f"Preamble text.{FILLER}{FILLER}"
    assert chunks[1].breadcrumb == "Doc > Section"


def test_heading_with_no_text_under_it_travels_with_the_next_section() -> None:
    body = f"# Doc\n\n## Empty\n\n## Full\n\nContent.{FILLER}{FILLER}\n"
    chunks = chunk_document(markdown_doc(body, title="Doc"), max_chars=1000)
    assert [c.breadcrumb for c in chunks] == ["Doc > Full"]
    assert chunks[0].content == body.rstrip()  # the headings stay in the excerpt


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
    body = f"# Runbook\n\n```\n# comment\n```\n{FILLER}{FILLER}\n\n## Next\n\nMore.{FILLER}{FILLER}\n"
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


@pytest.mark.parametrize(
    "body",
    ["", "   \n", "# Only A Heading\n", "# Redirect\n\n## Moved\n\n### Here", "Setext\n===\n\nTwo\n---"],
)
def test_a_document_with_no_text_but_headings_has_no_chunks(body: str) -> None:
    """A redirect page (frontmatter and a title) is no evidence: ingest skips it and says why."""
    assert chunk_document(markdown_doc(body, title="Billing policy", description="Moved."), 1000) == []


def has_text(chunk: Chunk) -> bool:
    """Whether the chunk holds a line that is not an ATX heading (the bodies below have no other kind)."""
    return any(line.strip() and not line.lstrip().startswith("#") for line in chunk.content.split("\n"))


def test_headings_with_no_text_under_them_go_with_the_next_text() -> None:
    upgrade = f"## Upgrade\n\nStop it.{FILLER}{FILLER}"
    body = f"# Guide\n\n## Install\n\n### Linux\n\nRun the installer.{FILLER}{FILLER}\n\n{upgrade}"
    chunks = chunk_document(markdown_doc(body, title="Guide"), max_chars=1000)
    assert [c.breadcrumb for c in chunks] == ["Guide > Install > Linux", "Guide > Upgrade"]
    assert chunks[0].content.startswith("# Guide\n\n## Install\n\n### Linux\n\nRun the installer.")
    assert chunks[0].heading_path == ("Guide", "Install", "Linux")


def test_a_run_of_empty_headings_never_stands_alone() -> None:
    """Twelve empty headings are longer than the smallest chunk; they still join text, before and after."""
    empty = "".join(f"## An empty heading number {n}\n\n" for n in range(12))
    body = f"Intro.{FILLER}{FILLER}\n\n{empty}## Filled\n\nText.{FILLER}{FILLER}\n\n{empty.strip()}"
    chunks = chunk_document(markdown_doc(body), max_chars=200)
    assert [c.breadcrumb for c in chunks] == ["Runbook", "Runbook > Filled"]
    assert all(has_text(c) for c in chunks)
    assert chunks[-1].content.endswith("## An empty heading number 11")  # the last text keeps the tail
    covered = "".join(c.content for c in chunks)
    assert "".join(covered.split()) == "".join(body.split())  # no text lost, none repeated


def test_embedding_text_leads_with_breadcrumb() -> None:
    chunk = Chunk(0, "Runbook > Failover", "Promote the replica.", SourceSpan(0, 20))
    assert chunk.embedding_text == "Runbook > Failover\nPromote the replica."
    assert Chunk(0, "", "bare", SourceSpan(0, 4)).embedding_text == "bare"


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


def test_a_moved_body_re_chunks_its_locations() -> None:
    from lookup_knowledge import ingestion, load_config

    doc = markdown_doc("Body text.")
    moved = markdown_doc("Body text.", body_offset=40, body_line=5)  # a longer frontmatter above it
    config = load_config()
    assert ingestion.document_hash(doc, config, "m") != ingestion.document_hash(moved, config, "m")


# --- verbatim, located chunks --------------------------------------------------------------------


def assert_located(chunk: Chunk, source: str) -> None:
    """The chunk is ``source[startChar:endChar]`` and its lines are those of that span."""
    location = chunk.location
    assert location is not None
    assert source[location.start_char : location.end_char] == chunk.content
    assert location.start_line == source.count("\n", 0, location.start_char) + 1
    assert location.end_line == source.count("\n", 0, location.end_char - 1) + 1


def fence_lines(text: str) -> int:
    return len(re.findall(r"^ {0,3}(?:```|~~~)", text, re.MULTILINE))


COMPOSE = """# Compose

The stack runs two services from one file; each keeps its own settings block.

```yaml
services:
  # service
  web:
    image: nginx
    ports:
      - "8080:80"
```

Indented lines keep their indentation in the evidence, so the YAML still parses.
"""


def test_indented_yaml_keeps_its_indentation() -> None:
    chunks = chunk_document(markdown_doc(COMPOSE, title="Compose"), max_chars=120)
    fence = next(c for c in chunks if "services:" in c.content)
    assert "\n  # service\n  web:\n    image: nginx" in fence.content
    assert fence_lines(fence.content) == 2  # the whole fence, though it is over max_chars
    for chunk in chunks:
        assert_located(chunk, COMPOSE)


def test_plain_text_split_keeps_indentation_inside_a_paragraph() -> None:
    text = "services:\n  web:\n    # service\n\n" + "next paragraph " * 10
    pieces = split_by_size(text, 60)
    assert pieces[0] == "services:\n  web:\n    # service"
    assert all(piece in text for piece in pieces)


def test_numbered_items_keep_their_text_with_their_marker() -> None:
    steps = "\n".join(f"{n}. Step {n} does one thing and then waits for the next step." for n in range(1, 31))
    body = f"# Guide\n\n## Steps\n\n{steps}\n"
    chunks = chunk_document(markdown_doc(body, title="Guide"), max_chars=300)
    assert len(chunks) > 3
    for chunk in chunks:
        assert_located(chunk, body)
        assert not re.search(r"^\d+\.\s*$", chunk.content, re.MULTILINE)  # no marker alone
    items = [line for c in chunks for line in c.content.splitlines() if re.match(r"\d+\. Step", line)]
    assert len(items) == 30


def test_a_table_is_never_cut_and_a_short_intro_goes_with_it() -> None:
    rows = "\n".join(f"| `setting_{n}` | what setting {n} does |" for n in range(40))
    intro = "# Config\n\n## Settings\n\nThe following settings are available:\n\n"
    body = f"{intro}| name | meaning |\n|---|---|\n{rows}\n"
    chunks = chunk_document(markdown_doc(body, title="Config"), max_chars=500)
    table = next(c for c in chunks if "setting_0" in c.content)
    assert "setting_39" in table.content  # the table whole, over max_chars
    assert "The following settings are available:" in table.content
    assert len(chunks) == 1
    assert_located(table, body)


def test_a_fenced_block_across_the_size_limit_stays_whole() -> None:
    code = "\n".join(f"line_{n} = {n}" for n in range(60))  # ~700 characters
    body = f"# Code\n\n{FILLER * 3}\n\n```python\n{code}\n```\n\n{FILLER * 3}\n"
    chunks = chunk_document(markdown_doc(body, title="Code"), max_chars=400)
    assert len(chunks) == 3
    holding = [c for c in chunks if "line_0" in c.content]
    assert len(holding) == 1 and "line_59 = 59\n```" in holding[0].content
    assert all(fence_lines(c.content) % 2 == 0 for c in chunks)
    for chunk in chunks:
        assert_located(chunk, body)


def test_a_block_beyond_the_hard_cap_is_cut_at_line_ends() -> None:
    code = "\n".join(f"value_{n} = {n}" for n in range(HARD_CAP_FACTOR * 20))
    body = f"# Big\n\n```\n{code}\n```\n"
    chunks = chunk_document(markdown_doc(body, title="Big"), max_chars=100)
    assert len(code) > HARD_CAP_FACTOR * 100
    assert len(chunks) > HARD_CAP_FACTOR
    assert all(len(c.content) <= 100 + MIN_CHUNK_CHARS for c in chunks)
    assert all(c.content.endswith(tuple("0123456789`")) for c in chunks)  # whole lines only
    for chunk in chunks:
        assert_located(chunk, body)


def test_a_tiny_last_section_joins_the_section_before_it() -> None:
    use = f"## Use\n\nUse it like this.{FILLER}{FILLER}"
    body = f"# Guide\n\n{use}\n\n## Next steps\n\n- [Install](install.md)\n"
    chunks = chunk_document(markdown_doc(body, title="Guide"), max_chars=1000)
    assert len(chunks) == 1
    assert chunks[0].breadcrumb == "Guide > Use"
    assert chunks[0].content.endswith("- [Install](install.md)")
    assert_located(chunks[0], body)


def test_a_tiny_section_between_two_large_ones_joins_one_neighbour() -> None:
    big = FILLER * 4
    body = f"# A\n\n{big}\n\n## Intro\n\nShort.\n\n### Detail\n\n{big}\n"
    chunks = chunk_document(markdown_doc(body, title="A"), max_chars=1000)
    assert len(chunks) == 2
    assert chunks[1].content.startswith("## Intro\n\nShort.\n\n### Detail")  # forward: it introduces
    assert chunks[1].breadcrumb == "A > Intro > Detail"
    assert all(len(c.content) >= MIN_CHUNK_CHARS for c in chunks)


@pytest.mark.parametrize(
    ("heading", "clean"),
    [
        ("Setting up certificates {#setting-up-certificates}", "Setting up certificates"),
        ("Use of `ref` and `relref`", "Use of ref and relref"),
        ("The [**bold** link](https://x.org) &amp; more", "The bold link & more"),
        ("New {{< new-in 0.120 >}} feature", "New feature"),
        (".RelatedTo KEYVALS [KEYVALS2 ...]", ".RelatedTo KEYVALS [KEYVALS2 ...]"),
    ],
)
def test_heading_text_is_clean(heading: str, clean: str) -> None:
    assert clean_heading(heading) == clean


def test_breadcrumbs_and_heading_paths_drop_anchors() -> None:
    body = f"# Bundles {{#bundles}}\n\n## Leaf `bundles` {{#leaf-bundles}}\n\nText.{FILLER}{FILLER}\n"
    chunks = chunk_document(markdown_doc(body, title="Bundles"), max_chars=1000)
    assert chunks[0].breadcrumb == "Bundles > Leaf bundles"
    assert chunks[0].heading_path == ("Bundles", "Leaf bundles")


def test_text_record_chunks_locate_a_span_of_the_record() -> None:
    text = "  First paragraph.\n\n" + " ".join(f"Sentence {n} of the record." for n in range(80))
    chunks = chunk_document(SourceDocument("r", "r", "Record", text, "text"), max_chars=400)
    assert len(chunks) > 3
    for chunk in chunks:
        assert chunk.location is not None and chunk.location.start_line is None
        assert text[chunk.location.start_char : chunk.location.end_char] == chunk.content


def test_chunks_of_a_read_file_locate_its_lines(tmp_path: Path) -> None:
    page = (
        "---\r\ntitle: Page\r\nweight: 3\r\n---\r\n\r\n# Page\r\n\r\n"
        + f"Some text.{FILLER}{FILLER}\r\n" * 12
    )
    (tmp_path / "page.md").write_bytes(page.encode())
    doc = read_corpus(tmp_path).documents[0]
    source = page.replace("\r\n", "\n")
    chunks = chunk_document(doc, max_chars=600)
    assert len(chunks) > 1
    assert chunks[0].location is not None and chunks[0].location.start_line == 6
    for chunk in chunks:
        assert_located(chunk, source)


_LINE = st.sampled_from([
    "Plain words here.", "A sentence. Another one!", "    indented code", "  - nested item",
    "- item one", "1. first", "10) tenth", "| a | b |", "|---|---|", "> quoted", "***",
    "```", "```yaml", "~~~", "key:", "  child: value", "# Title", "## Section {#sec}",
    "### Sub `code`", "Setext", "===", "<div>", "</div>", "[ref]: http://example.org", "", "",
    "\tTabbed line", "Ünïcödé 中文句子。第二句。", "x" * 90,
])  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(_LINE, min_size=0, max_size=60), max_chars=st.integers(40, 400))
def test_every_chunk_is_a_located_verbatim_excerpt(lines: list[str], max_chars: int) -> None:
    body = "\n".join(lines).strip()
    chunks = chunk_document(markdown_doc(body, title="Doc"), max_chars=max_chars)
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
    if not chunks:  # no text but headings (a link reference definition under one is no text either)
        tokens = MarkdownIt("commonmark").enable("table").parse(body)
        assert {token.type for token in tokens if token.level == 0} <= {"heading_open", "heading_close"}
        return
    for chunk in chunks:
        assert_located(chunk, body)
    starts = [c.location.start_char for c in chunks]
    assert starts == sorted(starts)  # in document order, never overlapping
    assert all(a.location.end_char <= b.location.start_char for a, b in zip(chunks, chunks[1:], strict=False))
    covered = "".join(body[c.location.start_char : c.location.end_char] for c in chunks)
    assert "".join(covered.split()) == "".join(body.split())  # no text lost, none repeated
