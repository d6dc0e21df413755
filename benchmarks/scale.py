"""The cost curve: lookups, eval, ingest writes, optimize, open time, disk and memory per store size.

    python benchmarks/scale.py [--sizes 10000 100000 1000000] [--queries 200] [--out FILE.json]

Real text: the SciFact abstracts (``../shared/data/scifact``), chunked as ingest chunks them and
embedded once (vectors cached under ``benchmarks/.cache/embeddings``). A store of N chunks holds
replicas of those chunks: replica r of a document is its own document (``<id>~r``, its own L0
entry), its dense vectors perturbed by small Gaussian noise (cosine to the original about 0.99)
and its BM25 vector missing one random term, with one of eight categories (by a hash of its id),
so that a pinned category filters an eighth of the store. Payloads are the ones ingest writes, through the
store port's ``write_documents``: the figure "write chunks/s" is ingest minus the model (the model's
own rate is measured once, on the base chunks, when they are not cached).

Per size, a fresh process (so RSS is the serving process's) opens the store with
``KnowledgeTool``, warms up, and runs the SciFact test claims: dense and hybrid lookups (p50,
p99), hybrid lookups with a pinned category (p50), and ``eval``'s batched path (queries/s).
Writes JSON and a plot (``docs/images/scale.png``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from corpora import DATA, CachedEmbedder
from doc_sections import replace_table

from lookup_knowledge import KnowledgeTool, load_config
from lookup_knowledge.adapters.corpus import read_corpus
from lookup_knowledge.adapters.l0_index import L0Document, L0Index
from lookup_knowledge.adapters.search import SparseVector, StoredChunk
from lookup_knowledge.adapters.sparse import bm25_encoder
from lookup_knowledge.chunking import chunk_document
from lookup_knowledge.config import Config
from lookup_knowledge.eval.batch import lookup_many
from lookup_knowledge.ingestion import (
    _payload,
    _PendingChunk,
    _sparse_text,
    document_access,
    document_hash,
    vector_source,
)
from lookup_knowledge.stores import build_embedder, l0_index_path, open_store

CATEGORIES = ("astronomy", "botany", "chemistry", "dentistry", "ecology", "forestry", "geology", "hydro")
NOISE = 0.004  # per-dimension Gaussian noise on unit vectors of 384 dims: cosine ~0.997 to the original
WRITE_GROUP = 2048
EDITED = 10  # documents given a new version after the build, before optimize is timed again
INGESTED_AT = "2026-12-02T00:00:00+00:00"
RESULTS = Path(__file__).parent / "results" / "scale.json"
PLOT = Path(__file__).parents[1] / "docs" / "images" / "scale.png"
CACHE = Path(__file__).parent / ".cache"


def _config(store: Path, *overrides: str) -> Config:
    return load_config(overrides=[f"store.path={store}", *overrides])


def base_chunks(config: Config) -> tuple[list[tuple[Any, Any]], np.ndarray, float | None]:
    """The SciFact chunks (document, chunk), their vectors and the model's chunks/s (None: cached)."""
    docs = read_corpus(DATA / "scifact").documents
    pairs = [(doc, chunk) for doc in docs for chunk in chunk_document(doc, config.ingest.chunk_chars)]
    embedder = CachedEmbedder(build_embedder(config), CACHE / "embeddings")
    texts = [chunk.embedding_text for _, chunk in pairs]
    cached = all(_cached(embedder, t) for t in texts[:50])
    started = time.perf_counter()
    vectors = embedder.embed_documents(texts)
    rate = None if cached else len(texts) / (time.perf_counter() - started)
    return pairs, np.asarray(vectors, dtype=np.float32), rate


def _cached(embedder: CachedEmbedder, text: str) -> bool:
    from corpora import _key

    return _key(text) in embedder._vectors


def build(store: Path, size: int, config: Config, pairs: list, vectors: np.ndarray) -> dict[str, float]:
    """Write ``size`` replicated chunks and their L0 entries; time the writes, optimize and open."""
    shutil.rmtree(store, ignore_errors=True)
    rng = np.random.default_rng(size)
    encoder = bm25_encoder()
    sparse = [encoder.embed_document(_sparse_text(_pending(doc, chunk, ""))) for doc, chunk in pairs]
    chunks_per_doc: dict[str, int] = {}
    for doc, _ in pairs:
        chunks_per_doc[doc.doc_id] = chunks_per_doc.get(doc.doc_id, 0) + 1
    written, write_s, l0_docs = 0, 0.0, []
    embedder = build_embedder(config)
    model, source = embedder.model_name, vector_source(embedder)
    handle = open_store(config, vectors.shape[1])
    try:
        replica = 0
        while written < size:
            batch: list[StoredChunk] = []
            take = min(len(pairs), size - written)
            noisy = vectors[:take] + rng.normal(0, NOISE, (take, vectors.shape[1])).astype(np.float32)
            noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
            seen: set[str] = set()
            for i in range(take):
                doc, chunk = pairs[i]
                copy_id = f"{doc.doc_id}~{replica}"
                category = CATEGORIES[zlib.crc32(copy_id.encode()) % len(CATEGORIES)]
                copy = replace(doc, doc_id=copy_id, categories=(category,))
                if copy.doc_id not in seen:
                    seen.add(copy.doc_id)
                    l0_docs.append(L0Document(copy.doc_id, copy.title, copy.keywords, copy.categories, ()))
                doc_hash = document_hash(copy, config, model)
                chunks = chunks_per_doc[doc.doc_id]
                access = document_access(copy, config)
                payload = _payload(_PendingChunk(copy, chunk, doc_hash, chunks, INGESTED_AT, access, source))
                batch.append(StoredChunk(noisy[i], payload, _perturbed(sparse[i], rng, replica)))
                if len(batch) >= WRITE_GROUP or i == take - 1:
                    started = time.perf_counter()
                    handle.write_documents(batch)
                    write_s += time.perf_counter() - started
                    batch = []
            written += take
            replica += 1
        started = time.perf_counter()
        handle.optimize()
        optimize_s = time.perf_counter() - started
        handle.write_documents(_edited(pairs, noisy, sparse, config, embedder))
        started = time.perf_counter()
        handle.optimize()  # what an ingest of a few changed documents runs after its writes
        update_optimize_s = time.perf_counter() - started
    finally:
        handle.close()
    started = time.perf_counter()
    L0Index(l0_docs).save(l0_index_path(config))
    l0_s = time.perf_counter() - started
    started = time.perf_counter()
    opened = open_store(config, vectors.shape[1], create=False)
    count = opened.count()
    open_s = time.perf_counter() - started
    opened.close()
    return {
        "chunks_stored": count,  # SciFact repeats a few chunk keys: a replica overwrites its twin
        "write_chunks_per_s": round(size / write_s, 1),
        "optimize_s": round(optimize_s, 2),
        "update_optimize_s": round(update_optimize_s, 3),  # after new versions of EDITED documents
        "l0_index_save_s": round(l0_s, 2),
        "store_open_s": round(open_s, 3),
        "disk_bytes_per_chunk": round(_bytes(store) / count, 1),
        "l0_index_bytes": l0_index_path(config).stat().st_size,
    }


def _edited(
    pairs: list, vectors: np.ndarray, sparse: list[SparseVector], config: Config, embedder: Any
) -> list[StoredChunk]:
    """New versions (another title) of the first :data:`EDITED` documents of replica 0."""
    edited: list[StoredChunk] = []
    doc_ids = list(dict.fromkeys(doc.doc_id for doc, _ in pairs[: len(vectors)]))[:EDITED]
    chunks = {doc_id: sum(doc.doc_id == doc_id for doc, _ in pairs) for doc_id in doc_ids}
    for i, (doc, chunk) in enumerate(pairs[: len(vectors)]):
        if doc.doc_id in chunks:
            copy = replace(doc, doc_id=f"{doc.doc_id}~0", title=f"{doc.title} (edited)")
            pending = _PendingChunk(
                copy,
                chunk,
                document_hash(copy, config, embedder.model_name),
                chunks[doc.doc_id],
                INGESTED_AT,
                (),
                vector_source(embedder),
            )
            edited.append(StoredChunk(vectors[i], _payload(pending), sparse[i]))
    return edited


def _pending(doc: Any, chunk: Any, doc_hash: str) -> _PendingChunk:
    return _PendingChunk(doc, chunk, doc_hash, 1, "", (), "")


def _perturbed(vector: SparseVector, rng: np.random.Generator, replica: int) -> SparseVector:
    """The BM25 vector with one random term dropped (replica 0: unchanged)."""
    if replica == 0 or len(vector.indices) < 2:
        return vector
    drop = int(rng.integers(len(vector.indices)))
    keep = [i for i in range(len(vector.indices)) if i != drop]
    return SparseVector(tuple(vector.indices[i] for i in keep), tuple(vector.values[i] for i in keep))


def _bytes(folder: Path) -> int:
    return sum(f.stat().st_blocks * 512 for f in folder.rglob("*") if f.is_file())


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 3)


def serve(store: Path, queries: int, chunks: int) -> dict[str, Any]:
    """Run in a fresh process: lookups, a pinned category and eval on the store at ``store``."""
    claims = [json.loads(line)["text"] for line in (DATA / "scifact" / "queries.jsonl").open()][:queries]
    figures: dict[str, Any] = {}
    config = _config(store)
    embedder = build_embedder(config)
    embedder.embed_query("warm up the model before the baseline")
    baseline = _rss_mb()
    for mode in ("dense", "hybrid"):
        with KnowledgeTool(_config(store, f"retrieval.mode={mode}"), embedder=embedder) as tool:
            tool.lookup("warm-up")
            times = []
            for claim in claims:
                started = time.perf_counter()
                tool.lookup(claim)
                times.append((time.perf_counter() - started) * 1000)
            figures[f"{mode}_p50_ms"] = _percentile(times, 0.5)
            figures[f"{mode}_p99_ms"] = _percentile(times, 0.99)
            if mode == "hybrid":
                pinned = []
                for number, claim in enumerate(claims):
                    started = time.perf_counter()
                    tool.lookup(claim, pinned_category=CATEGORIES[number % 8])
                    pinned.append((time.perf_counter() - started) * 1000)
                figures["filtered_p50_ms"] = _percentile(pinned, 0.5)
                started = time.perf_counter()
                lookup_many(tool, claims)
                figures["eval_queries_per_s"] = round(len(claims) / (time.perf_counter() - started), 1)
                figures["rss_mb"] = round(_rss_mb(), 1)
                figures["rss_bytes_per_chunk"] = round((_rss_mb() - baseline) * 2**20 / chunks, 1)
    figures["rss_baseline_mb"] = round(baseline, 1)
    return figures


CURVES = [
    ("hybrid_p50_ms", "hybrid p50"),
    ("hybrid_p99_ms", "hybrid p99"),
    ("dense_p50_ms", "dense p50"),
    ("filtered_p50_ms", "pinned category p50"),
]
TABLE = ["chunks", "dense_p50_ms", "hybrid_p50_ms", "hybrid_p99_ms", "filtered_p50_ms", "eval_queries_per_s",
         "write_chunks_per_s", "optimize_s", "update_optimize_s", "store_open_s", "disk_bytes_per_chunk",
         "rss_mb"]  # fmt: skip


def plot(rows: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["chunks"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in CURVES:
        ax.plot(sizes, [r[key] for r in rows], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("chunks in the store")
    ax.set_ylabel("lookup latency (ms)")
    ax.set_title("Lookup latency by store size (SciFact replicas)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--stores", type=Path, default=CACHE / "scale")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)  # the per-size child process
    parser.add_argument("--chunks", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--doc", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument("--from-json", action="store_true", help="rewrite the doc's table from --out")
    args = parser.parse_args()
    if args.from_json:
        write_doc(args.doc, json.loads(args.out.read_text(encoding="utf-8")))
        return 0
    if args.serve:
        print(json.dumps(serve(args.serve, args.queries, args.chunks)))
        return 0
    if not (DATA / "scifact").is_dir():
        print(f"skipped: {DATA / 'scifact'} not found (benchmark data lives in ../shared/data)")
        return 0
    config = _config(args.stores / "base")
    pairs, vectors, model_rate = base_chunks(config)
    rows = []
    for size in args.sizes:
        store = args.stores / f"chunks-{size}"
        row: dict[str, Any] = {"chunks": size, **build(store, size, _config(store), pairs, vectors)}
        command = [sys.executable, __file__, "--serve", str(store), "--queries", str(args.queries)]
        child = subprocess.run([*command, "--chunks", str(size)], check=True, capture_output=True, text=True)
        row.update(json.loads(child.stdout.strip().splitlines()[-1]))
        rows.append(row)
        print(json.dumps(row), flush=True)
    figures = {
        "base_chunks": len(pairs),
        "model_chunks_per_s": round(model_rate, 1) if model_rate else None,
        "sizes": rows,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared), load {os.getloadavg()[0]:.1f}",
        "date": time.strftime("%Y-%m-%d"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    plot(rows, PLOT)
    print(" | ".join(TABLE))
    for row in rows:
        print(" | ".join(str(row.get(k)) for k in TABLE))
    print(f"base chunks {len(pairs)}; model {figures['model_chunks_per_s']} chunks/s")
    write_doc(args.doc, figures)
    return 0


HEADERS = {
    "chunks": "chunks", "dense_p50_ms": "dense p50 ms", "hybrid_p50_ms": "hybrid p50 ms",
    "hybrid_p99_ms": "hybrid p99 ms", "filtered_p50_ms": "pinned category p50 ms",
    "eval_queries_per_s": "eval q/s", "write_chunks_per_s": "writes chunks/s", "optimize_s": "optimize s",
    "update_optimize_s": "optimize after 10 edits s", "store_open_s": "open s",
    "disk_bytes_per_chunk": "disk B/chunk", "rss_mb": "serving RSS MB",
}  # fmt: skip


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}" if value >= 10 else f"{value:.3g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def markdown_table(figures: dict[str, Any]) -> str:
    """The cost-curve table of docs/benchmarks.md, a row per store size."""
    rows = ["| " + " | ".join(HEADERS[k] for k in TABLE) + " |", "|" + "---:|" * len(TABLE)]
    rows += ["| " + " | ".join(_cell(row.get(k, "-")) for k in TABLE) + " |" for row in figures["sizes"]]
    return "\n".join(rows)


def write_doc(doc: Path, figures: dict[str, Any]) -> None:
    """This benchmark's table of ``doc`` rewritten whole from ``figures``; the prose kept."""
    replace_table(doc, "scale", markdown_table(figures))


if __name__ == "__main__":
    raise SystemExit(main())
