"""Evaluation outputs: ``results.parquet``, ``metrics.json`` and ``report.md`` with PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from lookup_knowledge.config import Config  # noqa: E402
from lookup_knowledge.eval.evaluation import METRIC_NAMES, EvalRun  # noqa: E402
from lookup_knowledge.frames import records  # noqa: E402

WORST_QUERIES = 10  # rows of the report's worst-queries table
WORST_LABELLED = 5  # query ids labelled on the per-query plot


def write_eval_outputs(
    run: EvalRun,
    out_dir: str | Path,
    title: str = "Evaluation",
    config: Config | None = None,
    comparison: str | None = None,
) -> list[Path]:
    """Write results, metrics, plots and the markdown report (with the configuration it ran
    with and a link to ``comparison``, a file in ``out_dir``, when given); returns the files."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run.results.to_parquet(out / "results.parquet", index=False)
    run.per_query.to_parquet(out / "per_query_metrics.parquet", index=False)
    metrics = {**run.metrics, "seconds": run.seconds, "queries_per_second": run.queries_per_second}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, ensure_ascii=False))
    plots = [
        _plot(out / "per_query_metrics.png", _per_query_distribution, run.per_query),
        _plot(out / "top_score_histogram.png", _top_score_histogram, run.results),
        _plot(out / "fallback_reasons.png", _fallback_reasons, run.results),
        _plot(out / "latency_histogram.png", _latency_histogram, run.results),
    ]
    report = out / "report.md"
    text = _markdown(title, metrics, [p.name for p in plots])
    text += _worst_queries(run) + _configuration(config, run.config_overrides)
    if comparison:
        text += f"\n## Comparison\n\nVariants against this baseline: [{comparison}]({comparison})\n"
    report.write_text(text, encoding="utf-8")
    return [out / "results.parquet", out / "metrics.json", report, *plots]


def _plot(path: Path, draw: Any, data: pd.DataFrame) -> Path:
    figure, axes = plt.subplots(figsize=(7, 4))
    draw(axes, data)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _per_query_distribution(axes: plt.Axes, per_query: pd.DataFrame) -> None:
    """Box plots per metric; the worst queries on nDCG@10 (below 1.0) are labelled with their ids."""
    columns = [name for name in ("ndcg@10", "recall@10", "mrr@10") if name in per_query]
    if per_query.empty:
        axes.text(0.5, 0.5, "no judged queries", ha="center")
        axes.set_title("Per-query metric distribution")
    else:
        axes.boxplot([per_query[c] for c in columns], tick_labels=columns)
        labels = worst_query_labels(per_query)
        for query_id, value, label_y in labels:
            axes.annotate(
                query_id, (1, value), xytext=(1.15, label_y), fontsize=7, va="center",
                arrowprops={"arrowstyle": "-", "color": "grey", "linewidth": 0.5},
            )  # fmt: skip
        which = "worst nDCG@10 query ids labelled" if labels else "every query scored nDCG@10 1.0"
        axes.set_title(f"Per-query metric distribution ({which})")
    axes.set_ylabel("score per query")
    axes.set_ylim(-0.05, 1.05)


def worst_query_labels(
    per_query: pd.DataFrame, count: int = WORST_LABELLED, gap: float = 0.06
) -> list[tuple[str, float, float]]:
    """The ``count`` lowest nDCG@10 queries below 1.0 as (query id, value, label height): the
    labels are spread at least ``gap`` apart and kept inside [0, 1], inside the axes."""
    worst = per_query[per_query["ndcg@10"] < 1.0].nsmallest(count, "ndcg@10")
    values = [float(v) for v in worst["ndcg@10"]]
    heights = [max(0.0, values[0])] if values else []
    for value in values[1:]:
        heights.append(max(value, heights[-1] + gap))
    top = 1.0
    for index in reversed(range(len(heights))):  # push down what the spread pushed past the top
        heights[index] = top = min(heights[index], top)
        top -= gap
    return list(zip(worst["query_id"].astype(str), values, heights, strict=True))


def _top_score_histogram(axes: plt.Axes, results: pd.DataFrame) -> None:
    judged = results.dropna(subset=["top_hit_relevant", "top_normalized_score"])
    for relevant, label in ((True, "top hit relevant"), (False, "top hit not relevant")):
        scores = judged[judged["top_hit_relevant"] == relevant]["top_normalized_score"]
        axes.hist(scores, bins=20, range=(0, 1), alpha=0.6, label=f"{label} ({len(scores)})")
    axes.set_title("Top normalized score (pick reference_threshold where the bars separate)")
    axes.set_xlabel("normalized score of the top evidence block")
    axes.set_ylabel("queries")
    axes.legend()


def _fallback_reasons(axes: plt.Axes, results: pd.DataFrame) -> None:
    counts = results["fallback_reason"].fillna("none (no retry)").value_counts()
    axes.barh(counts.index.tolist(), counts.to_numpy())
    axes.set_title("Fallback reasons")
    axes.set_xlabel("queries")


def _latency_histogram(axes: plt.Axes, results: pd.DataFrame) -> None:
    axes.hist(results["latency_ms"], bins=30)
    axes.set_title("Per-query DAG time (the batched query embedding excluded)")
    axes.set_xlabel("ms")
    axes.set_ylabel("queries")


def _depth_note(metrics: dict[str, Any]) -> list[str]:
    if "depth" not in metrics:
        return []
    return [
        f"Rankings are {metrics['depth']} evidence blocks deep (the deepest cutoff, recall@20, needs 20 "
        f"documents), whatever `return_n` is; `@return_n` measures score only the first "
        f"{metrics['return_n']} blocks (`return_n`), what the agent saw. `results.parquet` holds the "
        "deep rankings.",
        "",
    ]


def _markdown(title: str, metrics: dict[str, Any], plots: list[str]) -> str:
    overall = metrics["overall"]
    lines = [f"# {title}", "", *filter_headline_lines(metrics.get("filter_headline")), "| metric | value |"]
    lines.append("|---|---|")
    for name in [*METRIC_NAMES, "found_rate", "no_evidence_rate", "fallback_rate"]:
        lines.append(f"| {name} | {_fmt(overall.get(name))} |")
    lines += [
        f"| DAG time per query p50 / p95 (ms) | {_fmt(overall['latency_ms_p50'])} / "
        f"{_fmt(overall['latency_ms_p95'])} |",
        f"| queries/s, end to end (batched) | {_fmt(metrics['queries_per_second'])} |",
        "",
        "DAG time per query is the time of the lookup DAG's nodes for that query; the query "
        "embeddings are computed in one batch for all queries beforehand and are not included. "
        "Queries/s covers everything, the batched embedding included.",
        "",
        *_depth_note(metrics),
    ]
    if overall["fallback_rate_by_reason"]:
        lines += ["Fallback rate by reason:", ""]
        lines += [f"- {r}: {_fmt(v)}" for r, v in overall["fallback_rate_by_reason"].items()] + [""]
    if metrics["per_category"]:
        lines += ["## Per category", "", "| category | queries | ndcg@10 | recall@10 | fallback rate |"]
        lines += ["|---|---|---|---|---|"]
        for category, m in metrics["per_category"].items():
            lines.append(
                f"| {category} | {m['queries']} | {_fmt(m['ndcg@10'])} | {_fmt(m['recall@10'])} "
                f"| {_fmt(m['fallback_rate'])} |"
            )
        lines.append("")
    lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def _worst_queries(run: EvalRun) -> str:
    """The judged queries with the lowest nDCG@10, with their ids, text and what was returned."""
    if run.per_query.empty:
        return ""
    worst = run.per_query.nsmallest(WORST_QUERIES, "ndcg@10").merge(
        run.results[["query_id", "query", "fallback_reason", "doc_ids"]], on="query_id"
    )
    lines = ["", f"## Worst {len(worst)} queries by nDCG@10", ""]
    lines += ["| query id | nDCG@10 | query | fallback | top documents |", "|---|---|---|---|---|"]
    for row in records(worst):
        text = str(row["query"]).replace("|", "\\|")
        top = ", ".join(list(row["doc_ids"])[:3]).replace("|", "\\|")
        fallback = row["fallback_reason"] if isinstance(row["fallback_reason"], str) else "-"
        lines.append(f"| {row['query_id']} | {row['ndcg@10']:.4f} | {text} | {fallback} | {top} |")
    return "\n".join(lines) + "\n"


def _configuration(config: Config | None, overrides: dict[str, Any]) -> str:
    if config is None:
        return ""
    dumped = yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
    lines = ["", "## Configuration", ""]
    if overrides:
        lines += ["Overrides: " + ", ".join(f"`{k}={v}`" for k, v in overrides.items()), ""]
    return "\n".join([*lines, "```yaml", dumped.rstrip(), "```", ""])


def filter_headline_lines(headline: dict[str, Any] | None) -> list[str]:
    """The category-filter headline of a run with pinned true or wrong categories."""
    if not headline:
        return []
    lines = []
    if (wrong := headline.get("wrong_filter")) is not None:
        lines.append(_wrong_filter_line(wrong))
    if (right := headline.get("right_filter")) is not None:
        lines.append(_right_filter_line(right))
    return [*lines, ""]


def _wrong_filter_line(wrong: dict[str, Any]) -> str:
    scores = f"({_fmt(wrong['ndcg@10'])} vs {_fmt(wrong['unfiltered_ndcg@10'])})"
    lead = f"**Wrong category pinned ({wrong['queries']} queries): "
    if wrong["share_of_unfiltered_kept"] is None:
        return f"{lead}the unfiltered nDCG@10 is 0, so there is no share of it to keep** {scores}."
    kept = wrong["share_of_unfiltered_kept"]
    return f"{lead}the fallback keeps {kept:.1%} of the unfiltered nDCG@10** {scores}."


def _right_filter_line(right: dict[str, Any]) -> str:
    lead = f"**Right category pinned ({right['queries']} queries): "
    scores = (
        f"nDCG@10 {_fmt(right['ndcg@10'])}; unfiltered {_fmt(right['unfiltered_ndcg@10'])}, "
        f"pure filter {_fmt(right['pure_filter_ndcg@10'])}"
    )
    if right["share_of_filter_gain_kept"] is None:
        return (
            f"{lead}the pure filter does not beat unfiltered retrieval on these queries, so there is "
            f"no gain for the fallback to keep** ({scores})."
        )
    return f"{lead}keeps {right['share_of_filter_gain_kept']:.1%} of the pure filter's gain** ({scores})."


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)
