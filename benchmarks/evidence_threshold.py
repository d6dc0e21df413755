"""An absolute evidence threshold: real queries against generated garbage, on real corpora.

    python benchmarks/evidence_threshold.py [--cache benchmarks/.cache] [--thresholds 0,0.1,...]

``retrieval.min_evidence_score`` is the absolute floor on a hit's normalized score (for cosine
stores the similarity clipped to [0, 1]); a query whose every hit falls below it answers
``no_evidence``. This script measures what each value costs and buys. Every query (real or
garbage) is embedded as a lookup embeds it and searched unfiltered, ten wide, in each store:

* tuned on: SciFact (300 judged claims), classic-dev (judged queries of four collections) and
  hugo-docs (each page's frontmatter ``description`` as the query, the page as its answer;
  the description is not part of the indexed text);
* checked on: the classic + SciFact mix (``benchmarks/corpora.py``) and the bundled sample
  knowledge base with its 31 questions;
* stress test: the tuning queries cut to their first two words (terse, often meaningless).

Garbage: 100 seeded strings of each kind (random letters, random printable ASCII, keyboard mash,
pseudo-words, digits, random Unicode from eight scripts and symbol blocks), all of them queries
the input validation accepts. For each threshold: the share of real queries left with no
evidence, the share of their judged documents in the top ten kept, and the share of garbage
still answered with evidence. Writes benchmarks/results/evidence_threshold.json.
"""

from __future__ import annotations

import argparse
import json
import random
import string
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from lookup_knowledge import ingest, load_config, sample_knowledge_base
from lookup_knowledge.adapters.corpus import read_corpus
from lookup_knowledge.adapters.search import KnowledgeStore, SearchRequest
from lookup_knowledge.agent.request import LookupRequest, RequestSettings, lookup_request
from lookup_knowledge.stores import build_embedder, open_store

BENCHMARKS = Path(__file__).resolve().parent
DATA = BENCHMARKS.parents[1] / "shared" / "data"
DEPTH = 10
PER_KIND = 100
THRESHOLDS = "0,0.1,0.15,0.18,0.2,0.22,0.25,0.28,0.3"
console = Console()


@dataclass(frozen=True)
class QuerySet:
    """Queries against one store: real ones with the documents that answer them."""

    corpus: str
    role: str  # "tune", "check" or a stress test
    store: Path
    texts: list[str]
    relevant: list[set[str]]


# ------------------------------------------------------------------------------------ garbage
KEYBOARD_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm", "1234567890", "qazwsxedc", "poiuytrewq")
UNICODE_BLOCKS = (
    (0x4E00, 0x9FFF),  # CJK ideographs
    (0x0400, 0x04FF),  # Cyrillic
    (0x0370, 0x03FF),  # Greek
    (0x0600, 0x06FF),  # Arabic
    (0x0900, 0x097F),  # Devanagari
    (0x2200, 0x22FF),  # mathematical operators
    (0x2600, 0x26FF),  # miscellaneous symbols
    (0x1F300, 0x1F5FF),  # pictographs
)


def _letters(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase + "    ") for _ in range(rng.randint(6, 40))).strip()


def _printable(rng: random.Random) -> str:
    alphabet = string.ascii_letters + string.digits + string.punctuation
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(4, 30)))


def _mash(rng: random.Random) -> str:
    def run() -> str:
        row = rng.choice(KEYBOARD_ROWS)
        start = rng.randrange(len(row) - 2)
        return row[start : start + rng.randint(3, len(row) - start)] * rng.randint(1, 3)

    return " ".join(run() for _ in range(rng.randint(1, 3)))


def _pseudo_words(rng: random.Random) -> str:
    def word() -> str:
        syllables = rng.randint(1, 4)
        return "".join(rng.choice("bcdfghjklmnprstvwxz") + rng.choice("aeiou") for _ in range(syllables))

    return " ".join(word() for _ in range(rng.randint(1, 5)))


def _digits(rng: random.Random) -> str:
    return " ".join(str(rng.randrange(10 ** rng.randint(1, 9))) for _ in range(rng.randint(1, 4)))


def _unicode(rng: random.Random) -> str:
    low, high = rng.choice(UNICODE_BLOCKS)
    return "".join(chr(rng.randint(low, high)) for _ in range(rng.randint(2, 20)))


GARBAGE_KINDS = {
    "random letters": _letters,
    "random printable": _printable,
    "keyboard mash": _mash,
    "pseudo-words": _pseudo_words,
    "digits": _digits,
    "random Unicode": _unicode,
}


def garbage(seed: int = 14, per_kind: int = PER_KIND) -> dict[str, list[str]]:
    """``per_kind`` accepted garbage queries of each kind, seeded."""
    rng = random.Random(seed)
    kinds: dict[str, list[str]] = {}
    for kind, make in GARBAGE_KINDS.items():
        texts: list[str] = []
        while len(texts) < per_kind:
            text = make(rng)
            if (
                isinstance(lookup_request(text, settings=RequestSettings(2000)), LookupRequest)
                and text not in texts
            ):
                texts.append(text)
        kinds[kind] = texts
    return kinds


# ------------------------------------------------------------------------------ real queries
def beir_set(name: str, folder: Path, store: Path, role: str, prefix: str = "") -> QuerySet:
    qrels: dict[str, set[str]] = {}
    for line in (folder / "qrels.tsv").read_text().splitlines()[1:]:
        query_id, doc_id, score = line.split("\t")
        if int(score) > 0:
            qrels.setdefault(query_id, set()).add(prefix + doc_id)
    texts, relevant = [], []
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["_id"] in qrels:
            texts.append(record["text"])
            relevant.append(qrels[record["_id"]])
    return QuerySet(name, role, store, texts, relevant)


def described_pages(name: str, folder: Path, store: Path) -> QuerySet:
    """Each page with a frontmatter description: the description as the query, the page as its answer."""
    pages = [doc for doc in read_corpus(folder).documents if doc.description]
    return QuerySet(name, "tune", store, [d.description for d in pages], [{d.doc_id} for d in pages])


def first_words(query_set: QuerySet, n: int = 2) -> QuerySet:
    """A stress test: each query cut to its first ``n`` words (terse, often meaningless)."""
    texts = [" ".join(text.split()[:n]) for text in query_set.texts]
    return QuerySet(query_set.corpus, f"first {n} words", query_set.store, texts, query_set.relevant)


def query_sets(cache: Path) -> Iterator[QuerySet]:
    from corpora import classic_scifact_mix  # benchmarks/ is on sys.path when run as a script

    tuning = [
        beir_set("scifact", DATA / "scifact", cache / "scifact", "tune"),
        beir_set("classic-dev", DATA / "classic-dev", cache / "classic-dev", "tune"),
        described_pages("hugo-docs", DATA / "hugo-docs", cache / "hugo-docs"),
    ]
    yield from tuning
    yield from map(first_words, tuning)
    mix = classic_scifact_mix(cache)
    yield beir_set("classic+scifact mix", mix, cache / "mix-classic-scifact-store", "check")
    sample_eval = Path(sample_knowledge_base()).with_name("sample-eval")
    yield beir_set("sample-kb", sample_eval, cache / "sample-kb", "check")


def _source_of(name: str, cache: Path) -> Path:
    folders = {
        "classic+scifact mix": cache / "mix-classic-scifact",
        "sample-kb": Path(sample_knowledge_base()),
    }
    return folders.get(name, DATA / name)


# ------------------------------------------------------------------------------- measuring
def top_hits(store: KnowledgeStore, vectors: np.ndarray, texts: list[str]) -> list[list[tuple[str, float]]]:
    """(doc_id, normalized score) of the ``DEPTH`` best hits of each query, best first."""
    found = []
    for text, vector in zip(texts, vectors, strict=True):
        hits = store.search(SearchRequest(text, vector, DEPTH)).hits  # dense: the engine's order
        found.append([(hit.doc_id or "", hit.normalized_score) for hit in hits])
    return found


def _top(hits: list[tuple[str, float]]) -> float:
    return hits[0][1] if hits else 0.0


def summarize(real: QuerySet, real_hits, garbage_hits, thresholds: list[float]) -> list[dict]:
    rows = []
    judged_in_top = [{d for d, _ in hits} & rel for hits, rel in zip(real_hits, real.relevant, strict=True)]
    judged_total = sum(len(found) for found in judged_in_top) or 1
    for t in thresholds:
        empty = sum(_top(hits) < t for hits in real_hits)
        kept_judged = sum(
            len({d for d, s in hits if s >= t} & rel)
            for hits, rel in zip(real_hits, real.relevant, strict=True)
        )
        answered = {kind: sum(_top(h) >= t for h in hits) for kind, hits in garbage_hits.items()}
        garbage_total = sum(len(h) for h in garbage_hits.values())
        rows.append({
            "corpus": real.corpus, "role": real.role, "threshold": t, "real_queries": len(real.texts),
            "real_no_evidence": empty, "real_no_evidence_share": empty / len(real.texts),
            "judged_in_top10_kept_share": kept_judged / judged_total,
            "garbage_queries": garbage_total, "garbage_answered": sum(answered.values()),
            "garbage_answered_share": sum(answered.values()) / garbage_total,
            "garbage_answered_by_kind": answered,
        })  # fmt: skip
    return rows


def distribution(scores: list[float]) -> dict[str, float]:
    values = np.array(scores)
    quantiles = {f"p{q}": float(np.percentile(values, q)) for q in (0, 1, 5, 50, 95, 99, 100)}
    return {"n": len(scores), **quantiles}


def measure(query_set: QuerySet, kinds: dict[str, list[str]], thresholds: list[float], embedder) -> dict:
    config = load_config(overrides={"store.path": str(query_set.store)})
    if not (query_set.store / config.store.collection).exists() or query_set.corpus == "sample-kb":
        ingest(_source_of(query_set.corpus, query_set.store.parent), config, progress=console.is_terminal)
    store = open_store(config, create=False)
    try:
        real_hits = top_hits(store, embedder.embed_queries(query_set.texts), query_set.texts)
        garbage_hits = {
            kind: top_hits(store, embedder.embed_queries(texts), texts) for kind, texts in kinds.items()
        }
    finally:
        store.close()
    return {
        "corpus": query_set.corpus,
        "role": query_set.role,
        "real_top_score": distribution([_top(h) for h in real_hits]),
        "garbage_top_score": {
            kind: distribution([_top(h) for h in hits]) for kind, hits in garbage_hits.items()
        },
        "rows": summarize(query_set, real_hits, garbage_hits, thresholds),
    }


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--cache", type=Path, default=BENCHMARKS / ".cache")
    parser.add_argument("--thresholds", default=THRESHOLDS)
    parser.add_argument("--out", type=Path, default=BENCHMARKS / "results" / "evidence_threshold.json")
    args = parser.parse_args()
    if not DATA.is_dir():
        console.print(f"no benchmark data at {DATA}: nothing to measure")
        return
    thresholds = [float(t) for t in args.thresholds.split(",")]
    kinds = garbage()
    embedder = build_embedder(load_config())
    results = [measure(qs, kinds, thresholds, embedder) for qs in query_sets(args.cache)]
    print_tables(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"garbage_examples": {k: v[:5] for k, v in kinds.items()}, "corpora": results}, indent=2)
    )
    console.print(f"wrote {args.out}")


def print_tables(results: list[dict]) -> None:
    scores = Table(title="Top normalized score per query (percentiles)")
    for column in ("corpus", "queries", "n", "p0", "p1", "p5", "p50", "p95", "p100"):
        scores.add_column(column)
    for result in results:
        named = [("real", result["real_top_score"])] + list(result["garbage_top_score"].items())
        for label, d in named:
            cells = [f"{d[k]:.3f}" for k in ("p0", "p1", "p5", "p50", "p95", "p100")]
            scores.add_row(f"{result['corpus']} ({result['role']})", label, str(d["n"]), *cells)
    console.print(scores)
    table = Table(title=f"min_evidence_score: real queries left empty vs garbage answered (top {DEPTH})")
    for column in ("corpus", "role", "threshold", "real empty", "judged kept", "garbage answered"):
        table.add_column(column)
    for result in results:
        for r in result["rows"]:
            table.add_row(
                r["corpus"], r["role"], f"{r['threshold']:g}",
                f"{r['real_no_evidence']}/{r['real_queries']} ({r['real_no_evidence_share']:.1%})",
                f"{r['judged_in_top10_kept_share']:.1%}",
                f"{r['garbage_answered']}/{r['garbage_queries']} ({r['garbage_answered_share']:.1%})",
            )  # fmt: skip
    console.print(table)


if __name__ == "__main__":
    main()
