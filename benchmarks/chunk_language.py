"""How well ingest tells each chunk's language (docs/multilingual.md, "The language of a chunk").

    python benchmarks/chunk_language.py [--fastapi-git DIR] [--tldr-git DIR] [--tldr-pages 1000] [--cache DIR]
        [--out benchmarks/results/chunk_language.json] [--doc docs/multilingual.md]

Every page of a set is chunked as ingest chunks it (the default ``ingest.chunk_chars``) and each
chunk is given a language three ways: on its own with the question's rule (a guess under 50%
confidence is English: :func:`language_of`), by the rule ingest uses (a weak guess takes the
language most of the document's confident chunks are in: :func:`chunk_languages`), and by the
script alone (what ingest writes without the identifier: :func:`script_language`). A chunk is
right when the language is its page's. Sets:

- the sample knowledge base (29 English pages and one in Chinese);
- ``benchmarks/sets/cjk-zh`` and ``cjk-ja``: tldr-pages' Chinese and Japanese pages;
- a seeded sample of the English tldr pages of ``../shared/data/tldr-multilingual`` (when there);
- FastAPI's documentation in German, Spanish, French, Japanese, Korean, Portuguese, Russian and
  Chinese (``--fastapi-git``: a snapshot of github.com/fastapi/fastapi, read with ``git show``;
  when there): prose with many Python code blocks, whose identifiers read as English;
- short texts: the tldr-multilingual questions (one-line summaries and example descriptions in
  nine languages), the two of each page and language taken as one document of two chunks;
- tldr-pages in languages outside the encoder's (``--tldr-git``: a snapshot of
  github.com/tldr-pages/tldr; when there), 100 seeded pages of each: their chunks are right when
  named in their own language, not the nearest of the encoder's (Swedish, not German).

Prints the table, writes it to ``--out`` and to docs/multilingual.md between its markers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from doc_sections import machine_line, measured, replace_table
from rich.console import Console

from lookup_knowledge import load_config, sample_knowledge_base
from lookup_knowledge.adapters.corpus import SourceDocument, read_corpus
from lookup_knowledge.adapters.multilingual import (
    chunk_languages,
    confident_language,
    language_of,
    script_language,
)
from lookup_knowledge.chunking import chunk_document

SETS = Path(__file__).with_name("sets")
TLDR = Path(__file__).resolve().parents[2] / "shared" / "data" / "tldr-multilingual"
FASTAPI_GIT = Path("/work/.mirror/fastapi+fastapi/repo")
FASTAPI_LANGUAGES = ("de", "es", "fr", "ja", "ko", "pt", "ru", "zh")
TLDR_GIT = Path("/work/.mirror/tldr-pages+tldr/repo")
# tldr-pages' translations outside the encoder's languages (ISO 639-1 as the identifier names them)
OTHER_LANGUAGES = ("bg", "ca", "cs", "da", "el", "fa", "fi", "hi", "id", "ro", "sv", "uk")
SEED = 53
console = Console()

Document = tuple[str, list[str]]  # its language, its chunks' texts


def _chunked(folder: Path, language_of_page) -> Iterator[Document]:  # noqa: ANN001 - doc id -> language
    chunk_chars = load_config().ingest.chunk_chars
    for doc in read_corpus(folder).documents:
        yield language_of_page(doc.doc_id), [c.content for c in chunk_document(doc, chunk_chars)]


def _fastapi(git_dir: Path, cache: Path, language: str) -> list[Document]:
    folder = cache / f"fastapi-docs-{language}"
    if not folder.is_dir():
        listing = _git(git_dir, "ls-tree", "-r", "--name-only", f"HEAD:docs/{language}/docs").split()
        for page in (p for p in listing if p.endswith(".md")):
            target = folder / page
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(_git(git_dir, "show", f"HEAD:docs/{language}/docs/{page}"), encoding="utf-8")
    return list(_chunked(folder, lambda _: language))


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True, check=True
    ).stdout


def _tldr_other(git_dir: Path, language: str, pages: int = 100) -> list[Document]:
    """A seeded sample of tldr-pages' pages in ``language``, each chunked as ingest chunks it."""
    listing = _git(git_dir, "ls-tree", "-r", "--name-only", f"HEAD:pages.{language}").split()
    chosen = random.Random(SEED).sample(sorted(listing), min(pages, len(listing)))
    chunk_chars = load_config().ingest.chunk_chars
    documents = []
    for page in chosen:
        text = _git(git_dir, "show", f"HEAD:pages.{language}/{page}")
        doc = SourceDocument(page, page, page, text, "markdown")
        documents.append((language, [c.content for c in chunk_document(doc, chunk_chars)]))
    return documents


def _tldr_english(pages: int) -> list[Document]:
    documents = list(_chunked(TLDR / "kb-en", lambda _: "en"))
    return random.Random(SEED).sample(documents, min(pages, len(documents)))


def _short_texts() -> dict[str, list[Document]]:
    """The tldr-multilingual questions of each language, a page's two as one document."""
    pages: dict[tuple[str, str], list[str]] = defaultdict(list)
    for line in (TLDR / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        language = row["lang"].split("_")[0]
        pages[language, row["_id"].split("-", 2)[2]].append(row["text"])
    sets: dict[str, list[Document]] = defaultdict(list)
    for (language, _), texts in sorted(pages.items()):
        sets[f"tldr questions, {language}"].append((language, texts))
    return dict(sets)


def measure(documents: list[Document]) -> dict[str, Any]:
    """How many chunks each rule labels with their page's language, and the time per chunk."""
    chunks = [(language, text) for language, texts in documents for text in texts]
    started = time.perf_counter()
    labelled = [label for _, texts in documents for label in chunk_languages(texts)]
    seconds = time.perf_counter() - started
    truth = [language for language, _ in chunks]
    return {
        "documents": len(documents),
        "chunks": len(chunks),
        "weak": sum(confident_language(text) is None for _, text in chunks),
        "alone_right": sum(language_of(text) == want for want, text in chunks),
        "document_right": sum(label == want for label, want in zip(labelled, truth, strict=True)),
        "document_en": sum(label == "en" != want for label, want in zip(labelled, truth, strict=True)),
        "script_right": sum(script_language(text) == want for want, text in chunks),
        "ms_per_chunk": 1000 * seconds / max(1, len(chunks)),
    }


def _share(n: int, of: int) -> str:
    return f"{100 * n / of:.1f}%" if of else "-"


def table(results: dict[str, dict[str, Any]], ran: dict[str, Any]) -> str:
    lines = [
        machine_line(ran, "chunk_language.py"),
        "",
        "| set | documents | chunks | weak guesses | right, on its own (weak: en) | right, document's "
        "majority (ingest) | taken for en | right, script only (no identifier) | ms per chunk |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        n = r["chunks"]
        shares = [_share(r[key], n) for key in ("weak", "alone_right", "document_right", "document_en")]
        lines.append(
            f"| {name} | {r['documents']:,} | {n:,} | {' | '.join(shares)} | "
            f"{_share(r['script_right'], n)} | {r['ms_per_chunk']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--fastapi-git", type=Path, default=FASTAPI_GIT)
    parser.add_argument("--tldr-git", type=Path, default=TLDR_GIT)
    parser.add_argument("--tldr-pages", type=int, default=1000, help="English tldr pages sampled")
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/chunk_language.json"))
    parser.add_argument("--doc", type=Path, default=Path("docs/multilingual.md"))
    args = parser.parse_args()
    ran = measured(os.getloadavg()[0])
    sets: dict[str, list[Document]] = {
        "sample knowledge base": list(
            _chunked(sample_knowledge_base(), lambda doc_id: "zh" if doc_id.endswith("-zh") else "en")
        ),
        "tldr pages, zh (cjk-zh)": list(_chunked(SETS / "cjk-zh" / "pages", lambda _: "zh")),
        "tldr pages, ja (cjk-ja)": list(_chunked(SETS / "cjk-ja" / "pages", lambda _: "ja")),
    }
    if TLDR.is_dir():
        sets[f"tldr pages, en ({args.tldr_pages:,} sampled)"] = _tldr_english(args.tldr_pages)
    if args.fastapi_git.is_dir():
        for language in FASTAPI_LANGUAGES:
            sets[f"FastAPI docs, {language}"] = _fastapi(args.fastapi_git, args.cache, language)
    if TLDR.is_dir():
        sets |= _short_texts()
    if args.tldr_git.is_dir():
        for language in OTHER_LANGUAGES:
            sets[f"tldr pages, {language} (not the encoder's)"] = _tldr_other(args.tldr_git, language)
    language_of("warm-up")  # the identifier loads once per process (about 1.6 s), not in a set's time
    results = {name: measure(documents) for name, documents in sets.items()}
    text = table(results, ran)
    console.print(text, highlight=False, markup=False, soft_wrap=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"ran": ran, "sets": results}, indent=2), encoding="utf-8")
    replace_table(args.doc, "chunk-language", text)
    console.print(f"wrote {args.out} and the table of {args.doc}")


if __name__ == "__main__":
    main()
