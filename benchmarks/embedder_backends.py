"""Embedding backends side by side: query encode p50, document chunks/s and peak RSS vs torch.

Each measurement runs in a fresh process (so one runtime's threads cannot slow the next and
peak RSS belongs to one backend), and the backends alternate round after round, so every
backend sees the same machine load. Texts are SciFact's: the test queries, and the chunk texts
that ingest embeds (``chunk.embedding_text``, default chunking, in ingest's length order),
encoded through ``SentenceTransformerEmbedder`` exactly as lookups and ingest call it.

    python benchmarks/embedder_backends.py [--queries 100] [--chunks 256] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from doc_sections import replace_table
from rich.console import Console
from rich.table import Table

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"
VARIANTS = [("torch", "none"), ("onnx", "none"), ("onnx", "int8"), ("openvino", "none"), ("openvino", "int8")]


def variant_name(backend: str, quantize: str) -> str:
    return backend if quantize == "none" else f"{backend}-{quantize}"


def query_texts(limit: int) -> list[str]:
    judged = {line.split("\t")[0] for line in (DATA / "qrels.tsv").read_text().splitlines()[1:]}
    queries = [json.loads(line) for line in (DATA / "queries.jsonl").read_text().splitlines()]
    return [q["text"] for q in queries if q["_id"] in judged][:limit]


def chunk_texts(limit: int) -> list[str]:
    from lookup_knowledge.adapters.corpus import read_corpus
    from lookup_knowledge.chunking import chunk_document
    from lookup_knowledge.config import load_config

    chunk_chars = load_config().ingest.chunk_chars
    texts = []
    for doc in read_corpus(DATA).documents:
        texts.extend(chunk.embedding_text for chunk in chunk_document(doc, chunk_chars))
        if len(texts) >= limit:
            break
    return sorted(texts[:limit], key=len)  # ingest embeds in length order


def worker(path: str, backend: str, quantize: str, count: int) -> dict:
    """One process, one backend, one path: load, warm, time; report peak RSS."""
    from lookup_knowledge.adapters.embedder import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder(device="cpu", backend=backend, quantize=quantize)
    start = time.perf_counter()
    loaded = embedder.encoder(path)
    load_s = time.perf_counter() - start
    out: dict = {"load_s": load_s, "ran": variant_name(loaded.backend, loaded.quantize)}
    if path == "query":
        texts = query_texts(count)
        for text in texts:  # every length once: OpenVINO prepares its kernels per input shape
            embedder.embed_query(text)
        times = []
        for text in texts:
            start = time.perf_counter()
            embedder.embed_query(text)
            times.append((time.perf_counter() - start) * 1000)
        out["p50_ms"] = statistics.median(times)
    else:
        texts = chunk_texts(count)
        embedder.embed_documents(texts[-64:])
        start = time.perf_counter()
        embedder.embed_documents(texts)
        out["chunks_per_s"] = len(texts) / (time.perf_counter() - start)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def run_worker(path: str, backend: str, quantize: str, count: int) -> dict:
    command = [sys.executable, __file__, "--worker", path, backend, quantize, str(count)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--chunks", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/embedder_backends.json"))
    parser.add_argument("--worker", nargs=4, metavar=("PATH", "BACKEND", "QUANTIZE", "COUNT"))
    parser.add_argument("--doc", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument("--from-json", action="store_true", help="rewrite the doc's table from --out")
    args = parser.parse_args()
    if args.from_json:
        write_doc(args.doc, json.loads(args.out.read_text(encoding="utf-8")))
        return 0
    if args.worker:
        path, backend, quantize, count = args.worker
        print(json.dumps(worker(path, backend, quantize, int(count))))
        return 0
    if not DATA.is_dir():
        print(f"skipped: {DATA} not found (benchmark data lives in ../shared/data)")
        return 0
    console = Console()
    for backend, quantize in VARIANTS[1:]:  # export (and quantize) once, outside the timings
        run_worker("query", backend, quantize, 1)
    runs: dict[str, dict[str, list[dict]]] = {
        variant_name(*v): {"query": [], "document": []} for v in VARIANTS
    }
    loads = []
    for round_ in range(args.rounds):
        for path, count in (("query", args.queries), ("document", args.chunks)):
            for backend, quantize in VARIANTS:
                console.print(f"round {round_ + 1}: {path} {variant_name(backend, quantize)} ...")
                runs[variant_name(backend, quantize)][path].append(run_worker(path, backend, quantize, count))
                loads.append(os.getloadavg()[0])
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.with_suffix(".partial.json").write_text(json.dumps(runs, indent=2))

    def median(name: str, path: str, key: str) -> float:
        values = [r[key] for r in runs[name][path] if key in r]
        return statistics.median(values) if values else float("nan")

    summary = {}
    for name in runs:
        summary[name] = {
            "query_p50_ms": median(name, "query", "p50_ms"),
            "chunks_per_s": median(name, "document", "chunks_per_s"),
            "query_peak_rss_mb": median(name, "query", "peak_rss_mb"),
            "document_peak_rss_mb": median(name, "document", "peak_rss_mb"),
            "load_s": median(name, "query", "load_s"),
            "ran": sorted({r.get("ran", "error") for p in runs[name].values() for r in p}),
        }
    torch_ = summary["torch"]
    table = Table(title=f"Embedding backends, SciFact, median of {args.rounds} alternating rounds")
    for column in (
        "backend",
        "query p50 ms",
        "vs torch",
        "chunks/s",
        "vs torch",
        "RSS query MB",
        "RSS docs MB",
    ):
        table.add_column(column, justify="right")
    for name, s in summary.items():
        s["query_p50_vs_torch"] = s["query_p50_ms"] / torch_["query_p50_ms"]
        s["chunks_per_s_vs_torch"] = s["chunks_per_s"] / torch_["chunks_per_s"]
        table.add_row(
            name, f"{s['query_p50_ms']:.2f}", f"{s['query_p50_vs_torch']:.2f}x",
            f"{s['chunks_per_s']:.1f}", f"{s['chunks_per_s_vs_torch']:.2f}x",
            f"{s['query_peak_rss_mb']:.0f}", f"{s['document_peak_rss_mb']:.0f}",
        )  # fmt: skip
    console.print(table)
    console.print(
        f"1-minute load average during the run: {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "queries": args.queries,
                "chunks": args.chunks,
                "rounds": args.rounds,
                "summary": summary,
                "runs": runs,
                "load_average": loads,
                "machine": {
                    "python": sys.version.split()[0],
                    "platform": platform.platform(),
                    "cpus": os.cpu_count(),
                },
            },
            indent=2,
        )
    )
    console.print(f"wrote {args.out}")
    write_doc(args.doc, json.loads(args.out.read_text(encoding="utf-8")))
    console.print(f"wrote its table in {args.doc}")
    return 0


def markdown_table(results: dict) -> str:
    """The backends table of docs/benchmarks.md: medians per backend, torch's as the unit."""
    rows = [
        f"| backend ({results['queries']} queries, {results['chunks']} chunks, median of {results['rounds']} "
        "rounds) | query p50 ms | vs torch | chunks/s | vs torch | peak RSS, query process MB "
        "| peak RSS, document process MB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in results["summary"].items():
        rows.append(
            f"| {name} | {s['query_p50_ms']:.2f} | {s['query_p50_vs_torch']:.2f}x | {s['chunks_per_s']:.1f} "
            f"| {s['chunks_per_s_vs_torch']:.2f}x | {s['query_peak_rss_mb']:.0f} "
            f"| {s['document_peak_rss_mb']:.0f} |"
        )
    return "\n".join(rows)


def write_doc(doc: Path, results: dict) -> None:
    """This benchmark's table of ``doc`` rewritten whole from ``results``; the prose kept."""
    replace_table(doc, "embedder-backends", markdown_table(results))


if __name__ == "__main__":
    raise SystemExit(main())
