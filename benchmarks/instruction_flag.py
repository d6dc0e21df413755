"""How often the ``instructionLike`` flag fires where it should not, and misses where it should.

    .venv/bin/python benchmarks/instruction_flag.py [--out benchmarks/results/instruction_flag.json]

False flags: every chunk of the benchmark corpora in ../shared/data (SciFact, classic-dev,
hugo-docs) and of the sample knowledge base, chunked as ingest chunks them (default
``chunk_chars``), checked as a lookup checks a block (breadcrumb and content). None of them is
an injection, so each flagged chunk is a false flag; the flagged ones are listed for reading.
Misses: the texts in ``benchmarks/injection_texts.json``: the set the patterns were tuned on,
and a held-out set written after tuning (its miss rate is the honest one); the hard benign
texts there are false flags too. Also the cost per chunk.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from lookup_knowledge import load_config, sample_knowledge_base
from lookup_knowledge.adapters.corpus import read_corpus
from lookup_knowledge.chunking import chunk_document
from lookup_knowledge.instruction_flag import block_markers

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "shared" / "data"
TEXTS = HERE / "injection_texts.json"
CORPORA = {"scifact": DATA / "scifact", "classic-dev": DATA / "classic-dev", "hugo-docs": DATA / "hugo-docs"}


def corpus_rates(chunk_chars: int) -> list[dict]:
    """Per corpus: chunks, flagged chunks (all false flags), the rate, the cost per chunk."""
    rows = []
    sources = {name: path for name, path in CORPORA.items() if path.exists()}
    sources["sample-kb"] = sample_knowledge_base()
    for name, path in sources.items():
        chunks = [
            (doc.doc_id, chunk)
            for doc in read_corpus(path).documents
            for chunk in chunk_document(doc, chunk_chars)
        ]
        started = time.perf_counter()
        marked = [(doc_id, c, block_markers(c.breadcrumb, c.content)) for doc_id, c in chunks]
        seconds = time.perf_counter() - started
        flagged = [(doc_id, c, m) for doc_id, c, m in marked if m]
        rows.append({
            "corpus": name,
            "chunks": len(chunks),
            "flagged": len(flagged),
            "false_flag_rate": len(flagged) / max(1, len(chunks)),
            "us_per_chunk": 1e6 * seconds / max(1, len(chunks)),
            "examples": [
                {"doc_id": d, "chunk": c.chunk_index, "markers": m, "text": c.content[:200]}
                for d, c, m in flagged[:20]
            ],
        })  # fmt: skip
    return rows


def text_rates() -> list[dict]:
    """Per set of written texts: how many, how many flagged, the miss (or false-flag) rate."""
    sets = json.loads(TEXTS.read_text(encoding="utf-8"))
    rows = []
    for name, expected in (("injections", True), ("held_out", True), ("benign", False)):
        texts = sets[name]
        wrong = [t for t in texts if bool(block_markers(None, t["text"])) != expected]
        rows.append({
            "set": name,
            "texts": len(texts),
            "languages": sorted({t["lang"] for t in texts}),
            "kind": "miss" if expected else "false flag",
            "wrong": len(wrong),
            "rate": len(wrong) / len(texts),
            "wrong_texts": [t["text"] for t in wrong],
        })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "results" / "instruction_flag.json")
    args = parser.parse_args()
    chunk_chars = load_config().ingest.chunk_chars
    corpora, texts = corpus_rates(chunk_chars), text_rates()
    print(f"{'corpus':<12} {'chunks':>8} {'flagged':>8} {'false flags':>12} {'us/chunk':>9}")
    for row in corpora:
        print(
            f"{row['corpus']:<12} {row['chunks']:>8,} {row['flagged']:>8} "
            f"{row['false_flag_rate']:>12.4%} {row['us_per_chunk']:>9.1f}"
        )
    print(f"\n{'text set':<12} {'texts':>6} {'wrong':>6} {'rate':>8}  kind")
    for row in texts:
        print(f"{row['set']:<12} {row['texts']:>6} {row['wrong']:>6} {row['rate']:>8.1%}  {row['kind']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"chunk_chars": chunk_chars, "corpora": corpora, "texts": texts}, indent=2)
    )
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
