"""Ids that reach an agent's screen: control and bidirectional characters escaped, length bounded.

A file name or an id with ESC/OSC sequences or U+202E reached ``docId``, ``source`` and
``evidenceKey`` raw (an agent host printing a key ran them); a NUL in a JSONL ``_id`` was kept; a
10 MB frontmatter ``id`` became a 10 MB key and took ingest past 2 GB.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_config

from lookup_knowledge import KnowledgeTool, ingest
from lookup_knowledge.adapters.corpus import read_corpus
from lookup_knowledge.adapters.text import MAX_ID_CHARS, printable_id

# what must never reach an id, a key or a source: C0, DEL, C1 and the bidirectional controls
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
TESTS = Path(__file__).resolve().parents[1]


def _hostile_folder(root: Path) -> Path:
    kb = root / "kb"
    kb.mkdir()
    (kb / "\x1b[31mred.md").write_text(
        "# Red\nRefunds above 500 EUR need a finance lead.\n", encoding="utf-8"
    )
    (kb / "invoice\u202egpj.md").write_text("# Invoice\nInvoices go out monthly.\n", encoding="utf-8")
    header = '---\nid: "a\\x00b\\u202ec\\u2066d\\x85e"\n---\n'
    (kb / "nul.md").write_text(header + "# Null\nThe billing cycle ends monthly.\n", encoding="utf-8")
    (kb / "plain.md").write_text("# Plain\nPlain text about kafka lag.\n", encoding="utf-8")
    return kb


def test_control_and_bidi_characters_in_ids_are_written_as_escapes(tmp_path: Path) -> None:
    corpus = read_corpus(_hostile_folder(tmp_path))
    assert sorted((d.doc_id, d.source) for d in corpus.documents) == [
        ("\\x1b[31mred.md", "\\x1b[31mred.md"),
        ("a\\x00b\\u202ec\\u2066d\\x85e", "nul.md"),
        ("invoice\\u202egpj.md", "invoice\\u202egpj.md"),
        ("plain.md", "plain.md"),
    ]
    assert corpus.skipped == []  # nothing else is lost


def test_a_nul_or_escape_in_a_jsonl_id_and_source_is_escaped(tmp_path: Path) -> None:
    records = [
        {"_id": "j\x00x\x1b]8;;\x07", "text": "Billing runs monthly.", "source": "s\x9brc\u200f"},
        {"_id": "plain", "text": "Plain text."},
    ]
    corpus_file = tmp_path / "corpus.jsonl"
    corpus_file.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    corpus = read_corpus(corpus_file)
    assert [(d.doc_id, d.source) for d in corpus.documents] == [
        ("j\\x00x\\x1b]8;;\\x07", "s\\x9brc\\u200f"),
        ("plain", "plain"),
    ]


def test_the_escape_is_stable_and_leaves_other_text_alone() -> None:
    text = "Résumé – 日本語 ✓ tab\there"
    assert printable_id(text) == "Résumé – 日本語 ✓ tab\\x09here"
    assert printable_id(printable_id(text)) == printable_id(text)  # an escaped id stays as it is
    assert not CONTROLS.search(printable_id("".join(map(chr, range(0x2100)))))


def test_no_result_carries_a_control_character_in_an_id_key_or_source(tmp_path: Path, embedder) -> None:
    config = make_config(tmp_path / "store")
    report = ingest(_hostile_folder(tmp_path), config, embedder=embedder)
    assert report.skipped == []
    with KnowledgeTool(config, embedder=embedder) as tool:
        for query in ("refunds above 500 EUR finance lead", "invoices monthly", "billing cycle monthly"):
            result = tool.lookup(query).model_dump(by_alias=True, mode="json")
            assert result["evidenceBlocks"], query
            for block in result["evidenceBlocks"]:
                for field in ("docId", "evidenceKey", "source", "sourcePath"):
                    assert not CONTROLS.search(block[field] or ""), (field, block[field])


def test_an_id_over_the_limit_skips_its_document_with_the_reason(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "at-limit.md").write_text(f"---\nid: {'a' * MAX_ID_CHARS}\n---\n# A\nText.\n", encoding="utf-8")
    (kb / "over.md").write_text(f"---\nid: {'b' * (MAX_ID_CHARS + 1)}\n---\n# B\nText.\n", encoding="utf-8")
    corpus = read_corpus(kb)
    assert [d.doc_id for d in corpus.documents] == ["a" * MAX_ID_CHARS]
    [skipped] = corpus.skipped
    assert (skipped.path, skipped.reason) == ("over.md", "document id too long (1,025 characters > 1,024)")
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(json.dumps({"_id": "c" * 5000, "text": "x", "source": "s"}) + "\n", encoding="utf-8")
    corpus = read_corpus(jsonl)
    assert corpus.documents == []
    assert [(s.path, s.reason) for s in corpus.skipped] == [
        ("c.jsonl:1", "document id too long (5,000 characters > 1,024)")
    ]


HUGE_ID_INGEST = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))  # 3 GB of address space at most
sys.path.insert(0, sys.argv[3])
from hashing_embedder import HashingEmbedder
from lookup_knowledge import ingest, load_config
config = load_config(overrides={"store.path": sys.argv[2], "ingest.max_file_bytes": 50_000_000})
report = ingest(sys.argv[1], config, embedder=HashingEmbedder())
print(report.documents, [(s.path, s.reason) for s in report.skipped])
"""


@pytest.mark.slow
def test_a_file_with_a_ten_megabyte_id_ingests_under_a_3_gb_cap(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "huge.md").write_text(
        "---\nid: " + "x" * 10_000_000 + "\n---\n# Huge\nRefunds.\n", encoding="utf-8"
    )
    (kb / "fine.md").write_text("# Fine\nRefunds need approval.\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", HUGE_ID_INGEST, str(kb), str(tmp_path / "store"), str(TESTS)],
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "1 [('huge.md', 'document id too long (10,000,000 characters > 1,024)')]"
