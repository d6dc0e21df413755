"""Eval output folders (``lookup-knowledge eval --out``) as the review pages read them: found
under the configured folders, loaded back into :class:`EvalRun`, compared with the evaluation's
own :func:`~lookup_knowledge.eval.compare.comparison_table` (deltas and the paired t-test)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lookup_knowledge.adapters.search import AccessScope

if TYPE_CHECKING:
    import pandas as pd

    from lookup_knowledge.eval.evaluation import EvalRun

RUN_FILES = ("metrics.json", "results.parquet", "per_query_metrics.parquet")
HEADLINE_METRICS = ("ndcg@10", "recall@10", "mrr@10", "found_rate", "fallback_rate")
MOVED_MOST = 10  # rows of the "queries that moved most" table
_SLUG = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class RunFolder:
    """One eval output folder: its name in URLs (never a path taken from a request) and where it is."""

    name: str
    path: Path

    def metrics(self) -> dict[str, Any]:
        return json.loads((self.path / "metrics.json").read_text(encoding="utf-8"))

    def headline(self) -> dict[str, Any]:
        """The run's overall headline metrics (``None``: not measured, e.g. without judgments)."""
        overall = self.metrics().get("overall", {})
        return {"queries": overall.get("queries"), **{name: overall.get(name) for name in HEADLINE_METRICS}}

    def plots(self) -> list[str]:
        return sorted(path.name for path in self.path.glob("*.png"))

    def report(self) -> str | None:
        report = self.path / "report.md"
        return report.read_text(encoding="utf-8") if report.is_file() else None


def run_folders(roots: Iterable[Path]) -> dict[str, RunFolder]:
    """Every eval output folder at or one level under each root, by a unique URL name."""
    found: dict[str, RunFolder] = {}
    for root in roots:
        candidates = [root, *sorted(p for p in root.iterdir() if p.is_dir())] if root.is_dir() else []
        for path in candidates:
            if all((path / name).is_file() for name in RUN_FILES):
                name = base = _SLUG.sub("-", path.name).strip("-") or "run"
                number = 2
                while name in found:
                    name, number = f"{base}-{number}", number + 1
                found[name] = RunFolder(name, path)
    return found


def load_run(folder: RunFolder) -> EvalRun:
    """The :class:`EvalRun` its files hold."""
    import pandas as pd

    from lookup_knowledge.eval.evaluation import EvalRun

    metrics = folder.metrics()
    return EvalRun(
        results=pd.read_parquet(folder.path / "results.parquet"),
        per_query=pd.read_parquet(folder.path / "per_query_metrics.parquet"),
        metrics=metrics,
        seconds=float(metrics.get("seconds") or 0.0),
    )


def run_scopes(run: EvalRun) -> set[tuple[str, ...] | None]:
    """The access filters the run's lookups were made in (``None``: unrestricted)."""
    scopes: set[tuple[str, ...] | None] = set()
    for text in run.results.get("result_json", []):
        trace = json.loads(text).get("retrievalTrace") or {}
        access = trace.get("accessFilter")
        scopes.add(tuple(access) if isinstance(access, list) else None)
    return scopes


def may_review(reviewer: AccessScope, recorded: Sequence[str] | None) -> bool:
    """Whether a reviewer may see what a lookup made in the access filter ``recorded`` returned
    (``None``: unrestricted): an unrestricted reviewer sees all; a restricted one only lookups
    restricted to principals it holds itself, so every document they saw is one it may see."""
    if not reviewer.restricted:
        return True
    return recorded is not None and set(recorded) <= set(reviewer.filter or ())


@dataclass
class Comparison:
    """Two runs side by side: each metric with its delta and paired test, and per-query deltas."""

    table: list[dict[str, Any]]
    moved: list[dict[str, Any]]
    metric: str
    paired_queries: int


def compare_runs(a: EvalRun, b: EvalRun, b_name: str, metric: str = "ndcg@10") -> Comparison:
    """``b`` against ``a`` (the baseline): :func:`comparison_table`'s rows for ``b`` and the
    queries whose ``metric`` moved most, with their text."""
    from lookup_knowledge.eval.compare import BASELINE, comparison_table
    from lookup_knowledge.frames import records

    name = b_name if b_name != BASELINE else f"{b_name} (b)"
    table = comparison_table({BASELINE: a, name: b})
    base = table[table["variant"] == BASELINE]
    baseline = dict(zip(base["metric"], base["value"], strict=True))
    rows = [{**row, "baseline": baseline[row["metric"]]} for row in records(table[table["variant"] == name])]
    deltas = _query_deltas(a, b, metric)
    moved = deltas[deltas["delta"].abs() > 1e-12]
    return Comparison(rows, records(moved.head(MOVED_MOST)), metric, len(deltas))


def _query_deltas(a: EvalRun, b: EvalRun, metric: str) -> pd.DataFrame:
    if a.per_query.empty or b.per_query.empty or metric not in a.per_query:
        import pandas as pd

        return pd.DataFrame(columns=["query_id", "query", "a", "b", "delta"])
    paired = a.per_query[["query_id", metric]].merge(b.per_query[["query_id", metric]], on="query_id")
    paired.columns = ["query_id", "a", "b"]
    paired["delta"] = paired["b"] - paired["a"]
    text = a.results[["query_id", "query"]].drop_duplicates("query_id")
    paired = paired.merge(text, on="query_id", how="left")
    order = paired["delta"].abs().sort_values(ascending=False, kind="stable").index
    return paired.loc[order].reset_index(drop=True)
