"""Hostile files in a knowledge folder: each is skipped (or read) with its reason, the rest ingest.

A YAML "billion laughs" header, recursive aliases, a symbolic-link loop, a file name that is
not UTF-8, an oversized JSONL record, lone surrogates in JSON: none aborts a read or an ingest.
"""

from __future__ import annotations

import itertools
import json
import os
import tracemalloc
from pathlib import Path

import pytest
from conftest import SMALL_CORPUS, make_config, write_corpus

from lookup_knowledge.adapters.corpus import MAX_ALIAS_EXPANSION, read_corpus
from lookup_knowledge.ingestion import ingest
from lookup_knowledge.stores import open_store

BAD_NAME = os.fsdecode(b"bad\xff\xfe.md")  # what os.listdir gives for these bytes


def billion_laughs(levels: int = 9) -> str:
    """The classic: each level is nine aliases of the one before; ``title`` expands 9**9 times."""
    names = "abcdefghijk"[:levels]
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"{cur}: &{cur} [{','.join([f'*{prev}'] * 9)}]" for prev, cur in itertools.pairwise(names)]
    return "---\n" + "\n".join([*lines, f"title: *{names[-1]}"]) + "\n---\n# Bomb\n\nbody\n"


def reasons(corpus_or_report) -> dict[str, str]:  # noqa: ANN001 - a Corpus or an IngestReport
    return {s.path: s.reason for s in corpus_or_report.skipped}


# --- YAML aliases -----------------------------------------------------------------------------


def test_billion_laughs_is_refused_unexpanded_in_little_memory(tmp_path: Path) -> None:
    (tmp_path / "bomb.md").write_text(billion_laughs(), encoding="utf-8")
    (tmp_path / "ok.md").write_text("# Fine\n\nbody\n", encoding="utf-8")
    tracemalloc.start()
    try:
        corpus = read_corpus(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20_000_000  # expanded, it is 3.4e9 characters: gigabytes (its time: a benchmark)
    assert "aliases expand it to 3,395,982,743 characters" in reasons(corpus)["bomb.md"]
    assert [d.doc_id for d in corpus.documents] == ["ok.md"]


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    (tmp_path / "loop.md").write_text("---\nkeywords: &k [a, *k]\n---\nbody\n", encoding="utf-8")
    assert "recursive alias" in reasons(read_corpus(tmp_path))["loop.md"]


def test_merge_keys_that_multiply_are_refused(tmp_path: Path) -> None:
    lines = ["a0: &a0 {" + ", ".join(f"k{i}: {'x' * 50}" for i in range(30)) + "}"]
    lines += [
        f"a{n}: &a{n} {{<<: [*a{n - 1}], m{n}: [*a{n - 1}, *a{n - 1}, *a{n - 1}]}}" for n in range(1, 12)
    ]
    (tmp_path / "merge.md").write_text("---\n" + "\n".join(lines) + "\n---\nbody\n", encoding="utf-8")
    assert "aliases expand it" in reasons(read_corpus(tmp_path))["merge.md"]


def test_ordinary_aliases_are_read(tmp_path: Path) -> None:
    header = "---\ntitle: Shared\nkeywords: &k [kafka, lag]\ntags: *k\n"
    (tmp_path / "a.md").write_text(header + "---\nbody\n", encoding="utf-8")
    (doc,) = read_corpus(tmp_path).documents
    assert doc.keywords == ("kafka", "lag", "kafka", "lag")


def test_alias_expansion_up_to_the_allowance_is_read(tmp_path: Path) -> None:
    item = "x" * 1000
    copies = MAX_ALIAS_EXPANSION // 1001 - 2  # just under the allowance
    header = f"---\nd: &d {item}\nkeywords: [{', '.join(['*d'] * copies)}]\n---\nbody\n"
    (tmp_path / "a.md").write_text(header, encoding="utf-8")
    (doc,) = read_corpus(tmp_path).documents
    assert len(doc.keywords) == copies


# --- symbolic links, file names ---------------------------------------------------------------


def test_a_symlink_loop_is_skipped_with_its_reason(tmp_path: Path) -> None:
    (tmp_path / "ok.md").write_text("# Ok\n\nbody\n", encoding="utf-8")
    (tmp_path / "a.md").symlink_to(tmp_path / "b.md")
    (tmp_path / "b.md").symlink_to(tmp_path / "a.md")
    (tmp_path / "self.md").symlink_to(tmp_path / "self.md")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "up").symlink_to(tmp_path, target_is_directory=True)  # a folder loop
    corpus = read_corpus(tmp_path)
    assert reasons(corpus) == dict.fromkeys(["a.md", "b.md", "self.md"], "unreadable: symbolic link loop")
    assert [d.doc_id for d in corpus.documents] == ["ok.md"]


def test_a_file_name_that_is_not_utf8_gets_a_printable_escaped_id(tmp_path: Path) -> None:
    (tmp_path / BAD_NAME).write_text("Body text.\n", encoding="utf-8")
    (doc,) = read_corpus(tmp_path).documents
    assert doc.doc_id == doc.source == "bad\\xff\\xfe.md"
    assert doc.title == "bad\\xff\\xfe"
    assert doc.doc_id.isprintable()
    doc.doc_id.encode("utf-8")  # storable: no lone surrogates left


def test_a_folder_name_that_is_not_utf8_is_escaped_too(tmp_path: Path) -> None:
    folder = tmp_path / os.fsdecode(b"dir\x80")
    folder.mkdir()
    (folder / "a.md").write_text("Body.\n", encoding="utf-8")
    assert [d.doc_id for d in read_corpus(tmp_path).documents] == ["dir\\x80/a.md"]


# --- JSONL records ----------------------------------------------------------------------------


def test_an_oversized_jsonl_record_is_skipped_and_the_next_records_keep_their_numbers(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.jsonl"
    huge = json.dumps({"_id": "huge", "text": "word " * 500_000})  # 2.5 MB
    path.write_text(
        '{"_id": "a", "text": "alpha"}\n' + huge + '\n{"_id": "b", "text": "beta"}', encoding="utf-8"
    )
    corpus = read_corpus(path)
    assert [d.doc_id for d in corpus.documents] == ["a", "b"]  # "b" has no final newline
    ((where, reason),) = reasons(corpus).items()
    assert where == "c.jsonl:2"
    assert reason == f"record too large ({len(huge):,} bytes > ingest.max_record_bytes 2,000,000)"
    assert corpus.skipped[0].doc_source is None  # unknown: prune keeps every stored document


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_record_exactly_at_the_limit_is_read(tmp_path: Path, newline: str) -> None:
    record = json.dumps({"_id": "a", "text": "x"})
    path = tmp_path / "c.jsonl"
    path.write_bytes((record + newline + record.replace('"a"', '"b"') + "x" + newline).encode())
    corpus = read_corpus(path, max_record_bytes=len(record))
    assert [d.doc_id for d in corpus.documents] == ["a"]
    assert reasons(corpus) == {
        "c.jsonl:2": f"record too large ({len(record) + 1} bytes > ingest.max_record_bytes {len(record)})"
    }


def test_lone_surrogates_in_a_jsonl_record_are_escaped(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"_id": "id\\ud800", "title": "t\\udfff", "text": "body \\ud83d"}\n', encoding="utf-8")
    (doc,) = read_corpus(path).documents
    assert (doc.doc_id, doc.title, doc.body) == ("id\\ud800", "t\\udfff", "body \\ud83d")


def test_deeply_nested_json_is_skipped_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + '\n{"_id": "a", "text": "alpha"}\n', encoding="utf-8")
    corpus = read_corpus(path)
    assert [d.doc_id for d in corpus.documents] == ["a"]
    assert reasons(corpus)["c.jsonl:1"].startswith("invalid JSON")


# --- through ingest: the rest of the folder goes in, the summary names each skip ----------------


def test_ingest_skips_every_hostile_file_and_ingests_the_rest_twice_the_same(
    tmp_path: Path, embedder
) -> None:
    kb = write_corpus(tmp_path / "kb", SMALL_CORPUS)
    (kb / "bomb.md").write_text(billion_laughs(), encoding="utf-8")
    (kb / "loop.md").symlink_to(kb / "loop.md")
    (kb / BAD_NAME).write_text("# Odd name\n\nA document with an undecodable file name.\n", encoding="utf-8")
    config = make_config(tmp_path / "store")
    first = ingest(kb, config, embedder=embedder)
    assert reasons(first).keys() == {"bomb.md", "loop.md"}
    assert first.new == 4
    second = ingest(kb, config, embedder=embedder, prune=True)
    assert (second.new, second.updated, second.unchanged, second.pruned) == (0, 0, 4, 0)
    store = open_store(config, embedder.dimension, create=False)
    try:
        assert "bad\\xff\\xfe.md" in store.documents()
    finally:
        store.close()


def test_ingest_skips_an_oversized_jsonl_record_by_the_configured_limit(tmp_path: Path, embedder) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text(
        '{"_id": "a", "text": "alpha"}\n' + json.dumps({"_id": "big", "text": "y" * 5000}) + "\n",
        encoding="utf-8",
    )
    config = make_config(tmp_path / "store", ingest__max_record_bytes=1000)
    report = ingest(path, config, embedder=embedder)
    assert (report.new, report.chunks_written) == (1, 1)
    assert "ingest.max_record_bytes 1,000" in reasons(report)["corpus.jsonl:2"]
