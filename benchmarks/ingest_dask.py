"""Ingest throughput in this process against ``ingest --dask`` on a local Dask cluster.

The same slice of a BEIR corpus (the first ``--limit`` documents of SciFact by default) is
ingested into a fresh store (default configuration apart from ``store.path``) by:

* ``plain``: ``ingest(source, config)`` with the configured embedder, loaded and warmed first;
* ``dask``: ``ingest(source, config, embedder=build_cluster_embedder(config, client))`` on a
  ``LocalCluster`` of ``--workers`` worker processes with one thread each, every worker's model
  loaded and warmed first (``Client.run``).

The two alternate per round; chunks/s of each run and the median are reported. On one small
machine the cluster's workers share its cores with the writing process, so this measures the
cost of the distribution (serialization, scheduling, per-worker models), not a speed-up.

Run from the repository root::

    python benchmarks/ingest_dask.py                      # scifact, first 1,000 documents, 2 workers
    python benchmarks/ingest_dask.py --limit 200 --rounds 1 --out /tmp/ingest_dask.json

Data comes from ``../shared/data``; without it the script says so and exits 0.
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
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lookup_knowledge import ingest, load_config
from lookup_knowledge.adapters.embedder import Embedder
from lookup_knowledge.config import Config
from lookup_knowledge.stores import build_cluster_embedder, build_embedder

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data"
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "ingest_dask.json"

console = Console()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    corpus = args.data_dir / args.dataset / "corpus.jsonl"
    if not corpus.is_file():
        console.print(f"[yellow]skipped:[/] {corpus} not found")
        return 0
    from dask.distributed import Client, LocalCluster

    work = Path(tempfile.mkdtemp(prefix="ingest-dask-"))
    try:
        source = _slice(corpus, work / "corpus.jsonl", args.limit)
        config = load_config(overrides={"store.path": str(work / "store")})
        runs: list[dict[str, Any]] = []
        load_start = os.getloadavg()
        local = _warmed(build_embedder(config))
        with (
            LocalCluster(
                n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=":0"
            ) as cluster,
            Client(cluster) as client,
        ):
            client.run(_warm_worker, config)  # every worker loads its model before the timing
            remote = build_cluster_embedder(config, client)
            for round_ in range(args.rounds):
                for mode, embedder in (("plain", local), ("dask", remote)):
                    runs.append(_timed(mode, round_, source, config, embedder, work))
        result = _summary(args, runs, load_start)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _print(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    console.print(f"wrote {args.out}")
    return 0


def _slice(corpus: Path, out: Path, limit: int) -> Path:
    with corpus.open(encoding="utf-8") as lines, out.open("w", encoding="utf-8") as sliced:
        for number, line in enumerate(lines):
            if number == limit:
                break
            sliced.write(line)
    return out


def _warmed(embedder: Embedder) -> Embedder:
    embedder.embed_documents(["a warm-up passage"])
    return embedder


def _warm_worker(config: Config) -> None:
    _warmed(build_embedder(config))


def _timed(mode: str, round_: int, source: Path, config: Config, embedder: Embedder, work: Path) -> dict:
    store = work / f"store-{mode}-{round_}"
    fresh = config.model_copy(update={"store": config.store.model_copy(update={"path": store})})
    load_before, started = os.getloadavg()[0], time.perf_counter()
    report = ingest(source, fresh, embedder=embedder)
    seconds = time.perf_counter() - started
    shutil.rmtree(store, ignore_errors=True)
    console.print(f"{mode} round {round_ + 1}: {report.chunks_written} chunks in {seconds:.1f} s")
    return {
        "mode": mode,
        "round": round_ + 1,
        "documents": report.documents,
        "chunks": report.chunks_written,
        "seconds": round(seconds, 3),
        "chunks_per_s": round(report.chunks_written / seconds, 2),
        "load_average_before": round(load_before, 2),
    }


def _summary(args: argparse.Namespace, runs: list[dict[str, Any]], load_start: tuple[float, ...]) -> dict:
    def median(mode: str, key: str) -> float:
        return statistics.median(run[key] for run in runs if run["mode"] == mode)

    plain, dask = median("plain", "chunks_per_s"), median("dask", "chunks_per_s")
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="minutes"),
        "dataset": args.dataset,
        "limit": args.limit,
        "workers": args.workers,
        "rounds": args.rounds,
        "machine": {
            "cpu": _cpu_name(),
            "cores": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "load_average_start": [round(x, 2) for x in load_start],
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
        },
        "plain_chunks_per_s": plain,
        "dask_chunks_per_s": dask,
        "dask_over_plain": round(dask / plain, 3),
        "runs": runs,
    }


def _cpu_name() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return platform.processor()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")


def _print(result: dict[str, Any]) -> None:
    table = Table(title=f"ingest of {result['dataset']}, first {result['limit']} documents")
    for column in ("mode", "round", "chunks", "seconds", "chunks/s", "load before"):
        table.add_column(column)
    for r in result["runs"]:
        table.add_row(
            r["mode"], str(r["round"]), str(r["chunks"]), f"{r['seconds']:.1f}", f"{r['chunks_per_s']:.1f}",
            f"{r['load_average_before']:.2f}",
        )  # fmt: skip
    console.print(table)
    console.print(
        f"median chunks/s: plain {result['plain_chunks_per_s']:.1f}, dask ({result['workers']} worker "
        f"processes) {result['dask_chunks_per_s']:.1f}: {result['dask_over_plain']:.2f}x"
    )


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--limit", type=int, default=1000, help="first N documents of the corpus")
    parser.add_argument("--workers", type=int, default=2, help="worker processes, one thread each")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    return parser.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(main())
