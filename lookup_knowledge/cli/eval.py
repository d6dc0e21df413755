"""The ``eval`` and ``eval-queries`` commands (registered on the main CLI app); what they
need (pandas, the evaluation runner) loads when one runs, not with the CLI."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from lookup_knowledge.cli.help import Command
from lookup_knowledge.cli.output import console, fail, note

if TYPE_CHECKING:
    from lookup_knowledge.eval.evaluation import EvalRun


class CategoryPin(StrEnum):
    true = "true"
    wrong = "wrong"
    none = "none"


def eval_command(
    queries_file: Annotated[
        Path, typer.Argument(metavar="QUERIES", help="Eval query parquet (query_id, query, ...).")
    ],
    qrels: Annotated[
        Path | None, typer.Option("--qrels", metavar="FILE", help="BEIR qrels.tsv; wins over 'relevant'.")
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", "-c", metavar="FILE", help="YAML config file.")
    ] = None,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", "-s", metavar="KEY=VALUE", help="dotted.key=value")
    ] = None,
    out: Annotated[Path, typer.Option("--out", metavar="DIR", help="Output folder.")] = Path("eval-out"),
    compare: Annotated[
        list[str] | None,
        typer.Option(
            "--compare", metavar="NAME='--set K=V ...'", help="Variant NAME='--set k=v ...' (repeatable)."
        ),
    ] = None,
    variants_file: Annotated[
        Path | None, typer.Option("--variants", metavar="FILE", help="YAML list of variants.")
    ] = None,
    sweep: Annotated[
        str | None, typer.Option("--sweep", metavar="KEY=START:STOP:STEP", help="dotted.key=start:stop:step")
    ] = None,
    dask: Annotated[
        str | None,
        typer.Option("--dask", metavar="ADDRESS", help="Dask scheduler address: run query shards there."),
    ] = None,
) -> None:
    """Evaluate eval queries through the lookup DAG; write results, metrics and a report."""
    from lookup_knowledge.adapters.errors import StoreError
    from lookup_knowledge.config import ConfigError, load_config, parse_override
    from lookup_knowledge.eval.data import EvalDataError, load_eval_queries, load_qrels, relevance
    from lookup_knowledge.extras import MissingExtraError, require

    try:
        require("eval", "lookup-knowledge eval")
        if dask:
            require("dask", "lookup-knowledge eval --dask")
    except MissingExtraError as exc:
        fail(str(exc))
    from lookup_knowledge.agent.knowledge_tool import KnowledgeTool
    from lookup_knowledge.eval.compare import (
        comparison_markdown,
        comparison_table,
        ineffective_variants,
        load_variants,
        parse_compare,
        parse_sweep,
        plot_sweep,
        run_variants,
        variant_config,
    )
    from lookup_knowledge.eval.evaluation import filter_headline
    from lookup_knowledge.eval.report import write_eval_outputs

    try:
        base_overrides = dict(parse_override(o) for o in overrides or [])
        settings = load_config(config, base_overrides)
        queries = load_eval_queries(queries_file)
        judgments = load_qrels(qrels) if qrels else None
        variants = [parse_compare(spec) for spec in compare or []]
        variants += load_variants(variants_file) if variants_file else []
        swept = parse_sweep(sweep) if sweep else []
    except (ConfigError, EvalDataError) as exc:
        fail(str(exc))
    judgments = relevance(queries, judgments)
    if not judgments:
        console.print("[yellow]no relevance judgments: metrics other than rates are empty[/]")
    title = f"Evaluation of {queries_file.name}"
    if dask:
        run = _distributed(settings, queries, judgments, dask)
        _report(run, write_eval_outputs(run, out, title, settings))
        return
    try:
        tool = KnowledgeTool.from_config(settings)
    except StoreError as exc:
        fail(str(exc), code=1)
    with tool:
        run = _with_progress(tool, queries, judgments)
        headline = filter_headline(tool, queries, judgments, run)
        if headline:
            run.metrics["filter_headline"] = headline
        comparison = None
        if variants or swept:
            runs = run_variants(
                settings, base_overrides, config, variants + swept, queries, judgments, tool,
                on_variant=lambda name: console.print(f"variant {name} ...", highlight=False),
            )  # fmt: skip
            configs = {v.name: variant_config(config, base_overrides, v) for v in variants + swept}
            warnings = ineffective_variants(runs, variants + swept, configs)
            for warning in warnings:
                note(f"[yellow]warning:[/] {escape(warning)}")
            table = comparison_table(runs)
            out.mkdir(parents=True, exist_ok=True)
            table.to_csv(out / "comparison.csv", index=False)
            (out / "comparison.md").write_text(comparison_markdown(table, warnings), encoding="utf-8")
            console.print(comparison_markdown(table[table["metric"].isin(["ndcg@10", "fallback_rate"])]))
            if swept:
                console.print(f"wrote {plot_sweep(runs, swept, out / 'sweep.png')}")
            console.print(f"wrote {out / 'comparison.md'} and {out / 'comparison.csv'}")
            comparison = "comparison.md"
        _report(run, write_eval_outputs(run, out, title, settings, comparison))


def _with_progress(tool, queries, judgments) -> EvalRun:  # noqa: ANN001
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from lookup_knowledge.eval.evaluation import evaluate

    columns = (TextColumn("evaluating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, disable=not console.is_terminal, transient=True) as bar:
        task = bar.add_task("queries", total=len(queries))
        return evaluate(tool, queries, judgments, lambda n: bar.advance(task, n))


def _distributed(settings, queries, judgments, address: str) -> EvalRun:  # noqa: ANN001
    from lookup_knowledge.adapters.dask_cluster import ClusterUnavailableError, connect
    from lookup_knowledge.eval.evaluation import distributed_evaluate

    try:
        client = connect(address)
    except ClusterUnavailableError as exc:
        fail(str(exc))
    with client:
        return distributed_evaluate(settings, queries, judgments, client)


def _report(run: EvalRun, written: list[Path]) -> None:
    from rich.table import Table

    from lookup_knowledge.eval.evaluation import METRIC_NAMES
    from lookup_knowledge.eval.report import filter_headline_lines

    overall = run.metrics["overall"]
    table = Table(title=f"{overall['queries']} queries ({overall['judged_queries']} judged)")
    table.add_column("metric")
    table.add_column("value")
    for name in [*METRIC_NAMES, "found_rate", "no_evidence_rate", "fallback_rate"]:
        value = overall.get(name)
        table.add_row(name, "-" if value is None else f"{value:.4f}")
    table.add_row("queries/s", f"{run.queries_per_second:.1f}")
    console.print(table)
    for line in filter_headline_lines(run.metrics.get("filter_headline")):
        console.print(line.replace("**", ""), highlight=False)
    console.print(f"wrote {', '.join(str(p) for p in written[:3])} and {len(written) - 3} plots")


def eval_queries_command(
    corpus_dir: Annotated[
        Path, typer.Argument(metavar="BEIR_DIR", help="BEIR folder with queries.jsonl and qrels.tsv.")
    ],
    out: Annotated[Path, typer.Option("--out", metavar="FILE", help="Parquet file to write.")],
    qrels: Annotated[
        Path | None, typer.Option("--qrels", metavar="FILE", help="qrels.tsv (default: in the folder).")
    ] = None,
    categories: Annotated[
        CategoryPin,
        typer.Option(
            "--categories",
            metavar="|".join(CategoryPin),
            help="Pin each query's own category (true), another existing one (wrong), or none; "
            "true/wrong runs get the filter headline in the eval report.",
        ),
    ] = CategoryPin.none,
) -> None:
    """Convert a BEIR queries.jsonl (+ qrels) into an eval query parquet."""
    from lookup_knowledge.eval.data import EvalDataError, beir_to_parquet

    try:
        rows = beir_to_parquet(corpus_dir, out, qrels, categories.value)
    except (EvalDataError, json.JSONDecodeError, KeyError) as exc:
        fail(str(exc))
    console.print(f"wrote {rows} judged queries to {out}")


def register(app: typer.Typer) -> None:
    app.command("eval", cls=Command)(eval_command)
    app.command("eval-queries", cls=Command)(eval_queries_command)
