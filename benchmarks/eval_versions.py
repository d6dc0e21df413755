"""Eval throughput and lookup latency of several versions of the code side by side: each round,
``evaluate`` on the SciFact test queries and then a single ``lookup`` of each of them, in one warm
process per version, alternating round by round (the order rotated each round); medians and the
per-round ratios to the first version (queries/s of eval; lookup p50 ms).

    python benchmarks/eval_versions.py ad425bf WORKTREE [--rounds 15] [--data BEIR_DIR]

A version is a git revision or ``WORKTREE`` (the working tree as it is). Each is laid out as the
installed package maps it (``dataflows/``, ``adapters/`` and ``configs/`` under
``lookup_knowledge``) in a temporary folder that its process imports first, with the same
interpreter and dependencies; each ingests its own store (``benchmarks/.cache/versions/<name>``),
so it reads what its own code wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "scifact"
MAPPED = ("dataflows", "adapters", "configs")  # pyproject's package-dir: lookup_knowledge.<name>


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("versions", nargs="*", help="git revisions, or WORKTREE")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--cache", type=Path, default=ROOT / "benchmarks" / ".cache" / "versions")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "eval_versions.json")
    parser.add_argument("--worker", nargs=2, metavar=("DATA", "STORE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(Path(args.worker[0]), Path(args.worker[1]))
    if len(args.versions) < 2:
        parser.error("name two versions or more")
    if not args.data.is_dir():
        print(f"skipped: {args.data} not found (benchmark data lives in ../shared/data)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        workers = {name: start(name, laid_out(name, Path(tmp)), args) for name in args.versions}
        for name, process in workers.items():  # each ingested and warm before the first round
            if process.stdout.readline().strip() != "ready":
                raise SystemExit(f"{name}: the worker did not start")
        qps: dict[str, list[float]] = {name: [] for name in workers}
        p50: dict[str, list[float]] = {name: [] for name in workers}
        names = list(workers)
        for round_ in range(args.rounds):
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                workers[name].stdin.write("go\n")
                workers[name].stdin.flush()
                measured = json.loads(workers[name].stdout.readline())
                qps[name].append(measured["queries_per_second"])
                p50[name].append(measured["lookup_p50_ms"])
                print(f"round {round_} {name}: eval {qps[name][-1]:.1f} queries/s, ", end="")
                print(f"lookup p50 {p50[name][-1]:.2f} ms", flush=True)
        for process in workers.values():
            process.stdin.close()
            process.wait()
    first = names[0]
    summary = {
        "rounds": args.rounds,
        "load_average": os.getloadavg(),
        "queries_per_second": qps,
        "lookup_p50_ms": p50,
        "median": {name: statistics.median(values) for name, values in qps.items()},
        "lookup_p50_median_ms": {name: statistics.median(values) for name, values in p50.items()},
        "ratio_to_first": {
            name: {"eval": _ratios(qps[first], qps[name]), "lookup_p50": _ratios(p50[first], p50[name])}
            for name in names[1:]
        },
    }
    print(json.dumps(summary["median"], indent=1), json.dumps(summary["lookup_p50_median_ms"], indent=1))
    print(json.dumps(summary["ratio_to_first"], indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2))
    return 0


def _ratios(first: list[float], other: list[float]) -> dict[str, float]:
    """``other`` over ``first``: the ratio of their medians, and the median of the rounds' ratios."""
    return {
        "of_medians": statistics.median(other) / statistics.median(first),
        "median_per_round": statistics.median(b / a for a, b in zip(first, other, strict=True)),
    }


def laid_out(name: str, tmp: Path) -> Path:
    """The version's package as installed: ``lookup_knowledge`` with the mapped folders inside."""
    source = ROOT if name == "WORKTREE" else tmp / f"src-{name}"
    if name != "WORKTREE":
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", name], capture_output=True, check=True)
        with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
            tar.extractall(source, filter="data")
    package = tmp / f"pkg-{name}"
    skipped = shutil.ignore_patterns("__pycache__")
    shutil.copytree(source / "lookup_knowledge", package / "lookup_knowledge", ignore=skipped)
    for folder in MAPPED:
        shutil.copytree(source / folder, package / "lookup_knowledge" / folder, ignore=skipped)
    return package


def start(name: str, package: Path, args: argparse.Namespace) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(package)}
    store = args.cache / name
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(args.data), str(store)]
    return subprocess.Popen(  # cwd: a folder without a lookup_knowledge of its own
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=package
    )


def worker(data: Path, store: Path) -> int:
    """One version: ingest its store, warm up, then per line read one ``evaluate`` and a single
    lookup of each query, answered as a JSON line (queries/s, lookup p50 ms)."""
    from lookup_knowledge import KnowledgeTool, ingest, load_config
    from lookup_knowledge.eval.data import beir_to_parquet, load_eval_queries, load_qrels, relevance
    from lookup_knowledge.eval.evaluation import evaluate

    config = load_config(overrides=[f"store.path={store}"])
    ingest(data, config, progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        beir_to_parquet(data, Path(tmp) / "q.parquet")
        queries = load_eval_queries(Path(tmp) / "q.parquet")
    qrels = relevance(queries, load_qrels(data / "qrels.tsv"))
    with KnowledgeTool.from_config(config) as tool:
        evaluate(tool, queries, qrels)
        print("ready", flush=True)
        texts = list(queries["query"])
        for _ in sys.stdin:
            queries_per_second = evaluate(tool, queries, qrels).queries_per_second
            lookup_ms = []
            for text in texts:
                started = time.perf_counter()
                tool.lookup(text)
                lookup_ms.append((time.perf_counter() - started) * 1000)
            measured = {
                "queries_per_second": queries_per_second,
                "lookup_p50_ms": statistics.median(lookup_ms),
            }
            print(json.dumps(measured), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
