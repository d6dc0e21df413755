"""The ``lookup-knowledge`` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from lookup_knowledge.adapters.corpus import CorpusError
from lookup_knowledge.adapters.qdrant_edge_store import StoreUnavailableError
from lookup_knowledge.config import Config, ConfigError, load_config
from lookup_knowledge.display import print_result
from lookup_knowledge.eval_cli import register as register_eval_commands
from lookup_knowledge.ingest import IngestReport, ingest
from lookup_knowledge.render import render_execution, render_variants
from lookup_knowledge.tool import KnowledgeTool, query_problem

app = typer.Typer(help="Evidence-first knowledge retrieval for LLM agents.", no_args_is_help=True)
console = Console()
errors = Console(stderr=True)

ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", help="YAML config file (default: the shipped one).")
]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override a config key: dotted.key=value (repeatable)."),
]


@app.callback()
def _root() -> None:
    """Evidence-first knowledge retrieval for LLM agents."""


def _config(config: Path | None, overrides: list[str] | None) -> Config:
    try:
        return load_config(config, overrides or [])
    except ConfigError as exc:
        _fail(str(exc))


def _fail(message: str, code: int = 2) -> typer.Exit:
    errors.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@app.command("ingest")
def ingest_command(
    source: Annotated[Path, typer.Argument(help="Markdown folder, .jsonl corpus or BEIR folder.")],
    config: ConfigOption = None,
    overrides: SetOption = None,
    prune: Annotated[
        bool, typer.Option("--prune", help="Remove stored documents no longer in SOURCE.")
    ] = False,
) -> None:
    """Ingest a knowledge source into the configured store and L0 index."""
    settings = _config(config, overrides)
    try:
        report = ingest(source, settings, prune=prune, progress=console.is_terminal)
    except (CorpusError, StoreUnavailableError) as exc:
        _fail(str(exc))
    _print_ingest_report(report)


def _print_ingest_report(report: IngestReport) -> None:
    table = Table(title=f"Ingested {report.source}", show_header=False)
    for label, value in [
        ("documents", report.documents),
        ("new / updated / unchanged", f"{report.new} / {report.updated} / {report.unchanged}"),
        ("pruned", report.pruned),
        ("chunks written", report.chunks_written),
        ("points in store", report.points_in_store),
        ("skipped files", len(report.skipped)),
        ("seconds", f"{report.seconds:.1f}"),
    ]:
        table.add_row(label, str(value))
    console.print(table)
    for skipped in report.skipped:
        console.print(f"[yellow]skipped[/] {skipped.path}: {skipped.reason}", highlight=False, soft_wrap=True)


@app.command("query")
def query_command(
    text: Annotated[str, typer.Argument(help="The question to look up.")],
    config: ConfigOption = None,
    overrides: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly the contract JSON.")] = False,
    explain: Annotated[
        Path | None, typer.Option("--explain", help="Render the executed DAG path to FILE.png/.svg.")
    ] = None,
    session: Annotated[str | None, typer.Option("--session", help="Session id.")] = None,
) -> None:
    """Look up knowledge for a query and print the evidence, the fallback decision and the context."""
    settings = _config(config, overrides)
    problem = query_problem(text, settings.retrieval.max_query_chars)
    if problem is not None:
        _fail(f"invalid query: {problem}")
    try:
        tool = KnowledgeTool.from_config(settings)
    except StoreUnavailableError as exc:
        _fail(str(exc), code=1)
    with tool:
        result = tool.lookup(text, session_id=session)
        if explain is not None:
            written = render_execution(tool, result, tool.dataflow_inputs(text), explain)
            errors.print(f"executed path rendered to {written}")
    if as_json:
        sys.stdout.write(json.dumps(result.model_dump(by_alias=True, mode="json"), ensure_ascii=False))
        sys.stdout.write("\n")
    else:
        print_result(console, result)
    if result.evidence_status == "retrieval_failed":
        raise typer.Exit(1)


@app.command("render")
def render_command(
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = Path("visualizations"),
) -> None:
    """Render the lookup DAG and each config variant as SVG and PNG (offline, graphviz)."""
    for path in render_variants(out):
        console.print(f"wrote {path}")


def main() -> None:
    app()


register_eval_commands(app)
