"""What the relative evidence floor costs: nDCG@10 at depth 10 per floor value, on real data.

    python benchmarks/evidence_floor.py [--cache benchmarks/.cache] [--floors 0,0.4,0.5,0.6,0.7]

A hit whose normalized score is below ``retrieval.relative_evidence_floor`` times the query's best
is not evidence. The floor must cost no ranking quality: this script evaluates SciFact (test
split) and classic-dev with ``return_n`` 10 (so nDCG@10 sees ten documents) for each floor, on
stores ingested with the default configuration (cached, shared with benchmarks/quality.py), and
reports nDCG@10, recall@10, the mean number of evidence blocks and the share of "complete"
completeness hints. Writes benchmarks/results/evidence_floor.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lookup_knowledge import KnowledgeTool, ingest, load_config
from lookup_knowledge.eval_data import beir_to_parquet, load_eval_queries, relevance
from lookup_knowledge.evaluation import evaluate

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DATASETS = ("scifact", "classic-dev")
console = Console()


def queries_of(name: str):  # noqa: ANN201 - a DataFrame
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "queries.parquet"
        beir_to_parquet(DATA / name, path)
        return load_eval_queries(path)


def measure(name: str, cache: Path, floors: list[float]) -> list[dict]:
    store = {"store.path": str(cache / name)}
    config = load_config(overrides=store)
    report = ingest(DATA / name, config, progress=console.is_terminal)
    console.print(f"{name}: {report.documents} documents, {report.points_in_store} chunks in {cache / name}")
    queries = queries_of(name)
    judgments = relevance(queries)
    rows = []
    with KnowledgeTool.from_config(config) as base:
        for floor in floors:
            overrides = {**store, "retrieval.return_n": 10, "retrieval.relative_evidence_floor": floor}
            tool = KnowledgeTool(
                load_config(overrides=overrides),
                search_port=base.search_port,
                embedder=base.embedder,
                l0_index=base.l0_index,
            )
            run = evaluate(tool, queries, judgments)
            overall = run.metrics["overall"]
            blocks = run.results["evidence_keys"].map(len)
            hints = run.results["result_json"].map(lambda j: json.loads(j)["completenessHint"])
            rows.append({
                "dataset": name, "floor": floor, "queries": overall["judged_queries"],
                "ndcg@10": overall["ndcg@10"], "recall@10": overall["recall@10"],
                "mean_blocks": float(blocks.mean()),
                "complete_share": float(hints.str.startswith("complete").mean()),
            })  # fmt: skip
    return rows


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--floors", default="0,0.4,0.5,0.6,0.7")
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/evidence_floor.json"))
    args = parser.parse_args()
    if not DATA.is_dir():
        console.print(f"no benchmark data at {DATA}: nothing to measure")
        return
    floors = [float(f) for f in args.floors.split(",")]
    rows = [row for name in args.datasets.split(",") for row in measure(name, args.cache, floors)]
    table = Table(title="Relative evidence floor (return_n 10, nDCG@10 at depth 10)")
    for column in rows[0]:
        table.add_column(column)
    for row in rows:
        table.add_row(*(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row.values()))
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2))
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
