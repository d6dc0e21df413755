"""The ``lookup-knowledge`` command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from lookup_knowledge.adapters.corpus import CorpusError
from lookup_knowledge.adapters.qdrant_edge_store import StoreUnavailableError
from lookup_knowledge.config import Config, ConfigError, load_config
from lookup_knowledge.ingest import IngestReport, ingest

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
    errors.print(f"[bold red]error:[/] {message}", highlight=False)
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
        console.print(f"[yellow]skipped[/] {skipped.path}: {skipped.reason}", highlight=False)


def main() -> None:
    app()
