"""The ``lookup-knowledge`` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.console import Console
from rich.json import JSON
from rich.table import Table

from lookup_knowledge.adapters.corpus import CorpusError
from lookup_knowledge.adapters.qdrant_edge_store import StoreUnavailableError
from lookup_knowledge.adapters.recorder import Invocation, InvocationRecorder, RecorderUnavailableError
from lookup_knowledge.agent import AgentLookup, invocation_db_url, invocation_row
from lookup_knowledge.config import Config, ConfigError, load_config
from lookup_knowledge.display import print_result
from lookup_knowledge.eval_cli import register as register_eval_commands
from lookup_knowledge.info import describe
from lookup_knowledge.ingest import IngestReport, ingest
from lookup_knowledge.render import render_execution, render_variants
from lookup_knowledge.tool import failure_result, query_problem

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
    no_record: Annotated[
        bool, typer.Option("--no-record", help="Do not write this call to the tool_invocation table.")
    ] = False,
) -> None:
    """Look up knowledge for a query and print the evidence, the fallback decision and the context."""
    settings = _config(config, overrides)
    problem = query_problem(text, settings.retrieval.max_query_chars)
    if problem is not None:
        if not no_record:
            _record_rejection(settings, text, session, problem)
        _fail(f"invalid query: {problem}")
    try:
        agent = AgentLookup.from_config(settings, record=not no_record)
    except StoreUnavailableError as exc:
        _fail(str(exc), code=1)
    with agent:
        result = agent.call(text, session_id=session)
        if explain is not None:
            inputs = agent.tool.dataflow_inputs(text)
            written = render_execution(agent.tool, result, inputs, explain)
            errors.print(f"executed path rendered to {written}")
    if as_json:
        sys.stdout.write(json.dumps(result.model_dump(by_alias=True, mode="json"), ensure_ascii=False))
        sys.stdout.write("\n")
    else:
        print_result(console, result)
    if result.evidence_status == "retrieval_failed":
        raise typer.Exit(1)


def _record_rejection(settings: Config, text: str, session: str | None, problem: str) -> None:
    """A query refused before the store opens is still recorded, as ``invalid_input``."""
    rejected = failure_result(text[:200], "invalid_input", f"Invalid query: {problem}.", [])
    recorder = InvocationRecorder(invocation_db_url(settings))
    try:
        recorder.record(invocation_row(text, session, rejected, latency_ms=0.0))
    except RecorderUnavailableError as exc:
        errors.print(f"[yellow]not recorded:[/] {exc}", highlight=False, soft_wrap=True)
    finally:
        recorder.close()


@app.command("info")
def info_command(
    config: ConfigOption = None,
    overrides: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the facts as JSON.")] = False,
) -> None:
    """Print the configuration in force, the store's size, the model, backends and device."""
    facts = describe(_config(config, overrides))
    if as_json:
        _print_json(facts)
        return
    table = Table(title="lookup-knowledge", show_header=False)
    for label, value in [
        ("model", facts["embedder"]["model"]),
        ("device", facts["embedder"]["device"]),
        ("query backend", facts["embedder"]["backends"]["query"]),
        ("document backend", facts["embedder"]["backends"]["document"]),
        ("dimension", facts["embedder"]["dimension"]),
        ("store", f"{facts['store']['backend']} at {facts['store']['location']}"),
        ("documents / chunks", f"{facts['store']['documents']} / {facts['store']['chunks']}"),
        ("store problem", facts["store"]["problem"] or "none"),
    ]:
        table.add_row(label, str(value))
    console.print(table)
    console.print("configuration in force:")
    console.print(yaml.safe_dump(facts["config"], sort_keys=False, allow_unicode=True), highlight=False)


@app.command("render")
def render_command(
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = Path("visualizations"),
) -> None:
    """Render the lookup DAG and each config variant as SVG and PNG (offline, graphviz)."""
    for path in render_variants(out):
        console.print(f"wrote {path}")


invocations_app = typer.Typer(
    help="List recorded lookup_knowledge calls (the tool_invocation table); `invocations show ID` prints one."
)
app.add_typer(invocations_app, name="invocations")


def _recorder(config: Path | None, overrides: list[str] | None) -> InvocationRecorder:
    return InvocationRecorder(invocation_db_url(_config(config, overrides)))


@invocations_app.callback(invoke_without_command=True)
def invocations_command(
    ctx: typer.Context,
    session: Annotated[str | None, typer.Option("--session", help="Only this session's calls.")] = None,
    last: Annotated[int, typer.Option("--last", min=1, help="How many of the newest calls.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
    config: ConfigOption = None,
    overrides: SetOption = None,
) -> None:
    """List recorded lookup_knowledge calls, oldest first; `invocations show ID` prints one."""
    if ctx.invoked_subcommand is not None:
        return
    recorder = _recorder(config, overrides)
    try:
        rows = recorder.list(session_id=session, last=last)
    except RecorderUnavailableError as exc:
        _fail(str(exc), code=1)
    finally:
        recorder.close()
    if as_json:
        _print_json([row.to_json() for row in rows])
        return
    table = Table(title=f"lookup_knowledge calls ({recorder.url})")
    table.add_column("id", no_wrap=True)
    table.add_column("time (UTC)")
    table.add_column("session", overflow="fold")
    table.add_column("status", overflow="fold")
    table.add_column("blocks", justify="right")
    table.add_column("layer / retry")
    table.add_column("ms", justify="right")
    table.add_column("query", overflow="fold", ratio=1)
    for row in rows:
        retry = row.fallback_reason.removeprefix("filtered_vector_") if row.fallback_reason else ""
        table.add_row(
            str(row.id),
            f"{row.created_at:%m-%d %H:%M:%S}" if row.created_at else "",
            row.session_id or "",
            row.status,
            str(row.evidence_count),
            "\n".join(filter(None, [row.retrieval_layer, retry])),
            f"{row.latency_ms:.0f}",
            row.input if len(row.input) <= 80 else row.input[:79] + "…",
        )
    console.print(table)


@invocations_app.command("show")
def invocation_show_command(
    invocation_id: Annotated[int, typer.Argument(metavar="ID", help="The call's id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the row as JSON.")] = False,
    config: ConfigOption = None,
    overrides: SetOption = None,
) -> None:
    """Print one recorded call with its retrieval details."""
    recorder = _recorder(config, overrides)
    try:
        row = recorder.get(invocation_id)
    except RecorderUnavailableError as exc:
        _fail(str(exc), code=1)
    finally:
        recorder.close()
    if row is None:
        _fail(f"no recorded call with id {invocation_id} in {recorder.url}", code=1)
    if as_json:
        _print_json(row.to_json())
    else:
        _print_invocation(row)


def _print_invocation(row: Invocation) -> None:
    table = Table(title=f"lookup_knowledge call {row.id}", show_header=False)
    for label, value in [
        ("created at", row.created_at.isoformat() if row.created_at else ""),
        ("session", row.session_id or ""),
        ("tool", row.tool_name),
        ("input", row.input),
        ("status", row.status),
        ("evidence blocks", row.evidence_count),
        ("retrieval layer", row.retrieval_layer or ""),
        ("fallback reason", row.fallback_reason or "none"),
        ("latency ms", f"{row.latency_ms:.1f}"),
    ]:
        table.add_row(label, str(value))
    console.print(table)
    console.print("retrieval_details:")
    console.print(JSON.from_data(row.retrieval_details, ensure_ascii=False))


def _print_json(data: object) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False))
    sys.stdout.write("\n")


@app.command("mcp")
def mcp_command(config: ConfigOption = None, overrides: SetOption = None) -> None:
    """Serve the lookup_knowledge tool over MCP (stdio); each client connection is one session."""
    from lookup_knowledge.mcp_server import serve_stdio  # the MCP SDK loads only for this command

    settings = _config(config, overrides)
    try:
        serve_stdio(settings)
    except StoreUnavailableError as exc:
        _fail(str(exc), code=1)


def main() -> None:
    app()


register_eval_commands(app)
