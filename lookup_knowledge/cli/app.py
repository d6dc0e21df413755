"""The ``lookup-knowledge`` command line.

Each command imports what it needs when it runs: loading this module (``--help``, a mistyped
command) imports Typer and Rich only, and ``query`` never loads ingest, eval or render code.
"""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from lookup_knowledge.cli.eval import register as register_eval_commands
from lookup_knowledge.cli.help import Command, Group
from lookup_knowledge.cli.output import console, errors, facts_table, fail, note, print_json
from lookup_knowledge.cli.shell import register as register_shell_command
from lookup_knowledge.cli.wall import end_without_final_collection, seconds_since_start
from lookup_knowledge.progress import QUIET, ProgressReport, progress_to

if TYPE_CHECKING:
    from lookup_knowledge.adapters.embedder import Embedder
    from lookup_knowledge.adapters.recorder import Invocation, InvocationRecorder
    from lookup_knowledge.agent.lookup import AgentLookup
    from lookup_knowledge.agent.request import LookupRequest
    from lookup_knowledge.config import Config
    from lookup_knowledge.contract import LookupResult
    from lookup_knowledge.ingestion import IngestReport

app = typer.Typer(help="Evidence-first knowledge retrieval for LLM agents.", no_args_is_help=True, cls=Group)

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", metavar="FILE", help="YAML config file (default: the shipped one)."),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set", "-s", metavar="KEY=VALUE", help="Override a config key: dotted.key=value (repeatable)."
    ),
]


PrincipalOption = Annotated[
    list[str] | None,
    typer.Option(
        "--principal",
        "-p",
        metavar="NAME",
        help="A group or user the caller is (repeatable): only documents whose access names one of them "
        "or public are seen. Default: access.principals; without that key, unrestricted.",
    ),
]


@app.callback()
def _root() -> None:
    """Evidence-first knowledge retrieval for LLM agents."""
    end_without_final_collection()
    for stream in (sys.stdout, sys.stderr):  # text the locale cannot encode is escaped, not fatal
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def _config(config: Path | None, overrides: list[str] | None) -> Config:
    from lookup_knowledge.config import ConfigError, load_config

    try:
        return load_config(config, overrides or [])
    except ConfigError as exc:
        fail(str(exc))


@app.command("ingest", cls=Command)
def ingest_command(
    source: Annotated[
        Path,
        typer.Argument(
            metavar="SOURCE",
            help="A folder of Markdown (and, with the documents extra, PDF, DOCX, HTML, PPTX, XLSX) "
            "files, a .jsonl corpus or a BEIR folder.",
        ),
    ],
    config: ConfigOption = None,
    overrides: SetOption = None,
    prune: Annotated[
        bool, typer.Option("--prune", help="Remove stored documents no longer in SOURCE.")
    ] = False,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            help="Keep the store in sync with the SOURCE folder (pruning deletions) until Ctrl-C or SIGTERM.",
        ),
    ] = False,
    dask: Annotated[
        str | None,
        typer.Option(
            "--dask",
            metavar="ADDRESS",
            help="Embed the chunks on the Dask cluster of this scheduler (e.g. tcp://scheduler:8786); "
            "the store writes stay in this process.",
        ),
    ] = None,
) -> None:
    """Ingest a knowledge source into the configured store and L0 index."""
    from lookup_knowledge.adapters.corpus import CorpusError
    from lookup_knowledge.adapters.dask_cluster import ClusterUnavailableError
    from lookup_knowledge.adapters.embedder import EmbedderError
    from lookup_knowledge.adapters.errors import StoreError
    from lookup_knowledge.ingestion import ingest

    settings = _config(config, overrides)
    if watch:
        if dask:
            fail("--dask and --watch do not go together: a watch embeds each change in this process")
        _watch(source, settings)
        return
    progress = progress_to(errors)  # each phase's end; meanwhile a bar, or a line every few s in a log
    try:
        with _ingest_embedder(settings, dask) as embedder:
            report = ingest(source, settings, prune=prune, progress=progress, embedder=embedder)
    except (CorpusError, StoreError, ClusterUnavailableError) as exc:
        fail(str(exc))
    except EmbedderError as exc:  # what was written stays; the next run completes it
        fail(f"{exc}; documents written before the failure are kept, run ingest again", code=1)
    _print_ingest_report(report)
    _calibrate(settings, None if dask else embedder, progress)


def _calibrate(settings: Config, embedder: Embedder | None, progress: ProgressReport = QUIET) -> None:
    """The new store version's probe null, measured now and kept beside the store: the first
    lookup reads it instead of measuring (seconds on a large store). A store another process
    holds again (a server reopened it) is left to it: it is never asked to hand over a second
    time, and measures the null itself. ``embedder``: the ingest's, its model loaded already
    (``None``: a local one is built); ``progress``: where the "measuring" phase goes. A failure
    only warns."""
    from lookup_knowledge.adapters.errors import StoreLockedError
    from lookup_knowledge.agent.knowledge_tool import KnowledgeTool

    if not settings.l1.enabled:
        return
    note("measuring how the store answers questions it cannot answer (kept beside it) ...")
    unasked = settings.model_copy(update={"store": settings.store.model_copy(update={"lock_wait_s": 0.0})})
    try:
        with (
            progress.phase("measuring"),
            KnowledgeTool(unasked, embedder=embedder, require_store=True) as tool,
        ):
            tool.calibrate()
    except StoreLockedError:
        note("not measured: another process holds the store again; its first lookup measures it")
    except Exception as exc:  # noqa: BLE001 - the ingest is done; the first lookup measures instead
        note(f"not measured ({escape(str(exc))}); the first lookup measures it")


@contextmanager
def _ingest_embedder(settings: Config, dask: str | None) -> Iterator[Embedder]:
    """The embedder of ``ingest``: the cluster's behind ``--dask``, else this process's (its model
    loads at the first text it embeds; the probe null measured after the ingest reuses it)."""
    from lookup_knowledge.extras import MissingExtraError, require
    from lookup_knowledge.stores import build_cluster_embedder, build_embedder

    if dask is None:
        yield build_embedder(settings)
        return
    try:
        require("dask", "ingest --dask")
    except MissingExtraError as exc:
        fail(str(exc))
    from lookup_knowledge.adapters.dask_cluster import connect

    with connect(dask) as client:
        note(f"embedding on the Dask cluster at {escape(dask)} ({len(client.nthreads())} workers)")
        yield build_cluster_embedder(settings, client)


def _watch(source: Path, settings: Config) -> None:
    """``ingest --watch``: one line per ingest; the ingest in progress finishes before the exit."""
    import threading

    from lookup_knowledge.adapters.corpus import CorpusError
    from lookup_knowledge.adapters.embedder import EmbedderError
    from lookup_knowledge.adapters.errors import StoreError
    from lookup_knowledge.extras import MissingExtraError, require
    from lookup_knowledge.watch import stop_on_signals, watch_ingest

    try:
        require("watch", "ingest --watch")
    except MissingExtraError as exc:
        fail(str(exc))
    if not source.is_dir():
        fail(f"--watch needs a folder: {source}")

    def report_line(report: IngestReport) -> None:
        console.print(
            f"ingested {report.documents} documents: {report.new} new, {report.updated} updated, "
            f"{report.pruned} pruned, {report.chunks_written} chunks written "
            f"({report.chunks_embedded} embedded) in {report.seconds:.2f} s",
            highlight=False, markup=False,
        )  # fmt: skip

    def error_line(exc: Exception) -> None:
        errors.print(f"ingest failed, retried at the next change: {exc}", highlight=False, markup=False)

    with stop_on_signals(threading.Event()) as stop:
        console.print(f"watching {source} (Ctrl-C to stop)", highlight=False, markup=False)
        try:
            watch_ingest(source, settings, stop, report_line, on_error=error_line)
        except (CorpusError, StoreError, EmbedderError) as exc:  # the first sync failed
            fail(str(exc))
    console.print("stopped", highlight=False, markup=False)


def _print_ingest_report(report: IngestReport) -> None:
    from lookup_knowledge.cli.display import markup_safe  # file names may hold terminal escapes

    rows = [
        ("documents", report.documents),
        ("new / updated / unchanged", f"{report.new} / {report.updated} / {report.unchanged}"),
        ("pruned", report.pruned),
        ("chunks written (embedded)", f"{report.chunks_written} ({report.chunks_embedded})"),
        *([("languages added (documents)", report.languages_added)] if report.languages_added else []),
        ("points in store", report.points_in_store),
        ("skipped files", len(report.skipped)),
        ("seconds", f"{report.seconds:.1f}"),
    ]
    console.print(facts_table(f"Ingested {markup_safe(str(report.source))}", rows))
    for skipped in report.skipped:
        line = f"[yellow]skipped[/] {markup_safe(str(skipped.path))}: {markup_safe(skipped.reason)}"
        console.print(line, highlight=False, soft_wrap=True)


@app.command("query", cls=Command)
def query_command(
    text: Annotated[str, typer.Argument(metavar="TEXT", help="The question to look up.")],
    config: ConfigOption = None,
    overrides: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly the contract JSON.")] = False,
    indent: Annotated[
        int | None,
        typer.Option(
            "--indent", min=0, metavar="N", help="JSON indent (default: 2 on a terminal, else one line)."
        ),
    ] = None,
    explain: Annotated[
        Path | None,
        typer.Option(
            "--explain", metavar="FILE", help="Draw the executed DAG path to FILE (.png, .svg or .dot)."
        ),
    ] = None,
    session: Annotated[
        str | None, typer.Option("--session", metavar="ID", help="Session id (default: a new one, cli-...).")
    ] = None,
    no_record: Annotated[
        bool, typer.Option("--no-record", help="Do not write this call to the tool_invocation table.")
    ] = False,
    principals: PrincipalOption = None,
) -> None:
    """Look up knowledge for a query and print the evidence, the fallback decision and the context."""
    from lookup_knowledge.adapters.errors import StoreError
    from lookup_knowledge.agent.failures import rejected_result, retrieval_failed_result
    from lookup_knowledge.agent.lookup import AgentLookup, new_session_id
    from lookup_knowledge.agent.request import RejectedRequest, RequestSettings, lookup_request

    if explain is not None and not explain.parent.is_dir():  # never created: may not be ours to make
        fail(f"--explain: the folder {explain.parent} does not exist")
    settings = _config(config, overrides)
    session = session or new_session_id("cli")  # recorded under an id of its own, never blank
    request = lookup_request(
        text, session, principals=principals, settings=RequestSettings.from_config(settings)
    )
    if isinstance(request, RejectedRequest):  # refused before the store opens
        rejected = rejected_result(request, [])
        if not no_record:
            _record_unrun(settings, request.session_id, rejected)
        if as_json:  # the agent's contract on stdout, as for an outage; the reason on stderr
            _print_lookup(rejected, as_json, indent)
        fail(f"invalid query: {request.problem}")
    try:
        agent = AgentLookup.from_config(settings, record=not no_record, require_store=True)  # fails fast
    except StoreError as exc:  # the agent's contract: a retrieval_failed result (exit code 1)
        failed = retrieval_failed_result(request.query, exc, [])
        if not no_record:
            _record_unrun(settings, request.session_id, failed)
        _print_lookup(failed, as_json, indent)
        raise typer.Exit(1) from None
    with agent:
        start_up_s = seconds_since_start()  # the interpreter, imports, config, opening the store
        cold_ms = agent.warm_up(principals, multilingual=False)  # a cold start, reported apart
        started = time.perf_counter()
        result = agent.run(request)
        took_ms = (time.perf_counter() - started) * 1000
        _print_lookup(result, as_json, indent)
        if explain is not None:
            _explain(agent, result, request, explain)
    if not as_json:  # the last line: the process's wall time up to here, the store closed
        errors.print(
            f"{seconds_since_start():.1f} s: start-up {start_up_s:.1f} s, model load "
            f"{cold_ms / 1000:.1f} s, lookup {took_ms:.0f} ms; a `shell` starts once",
            highlight=False, markup=False,
        )  # fmt: skip
    if result.evidence_status == "retrieval_failed":
        raise typer.Exit(1)


def _explain(agent: AgentLookup, result: LookupResult, request: LookupRequest, path: Path) -> None:
    """Draw the executed path after the result is printed; a drawing problem is one line, not a failure."""
    from lookup_knowledge.cli.render import GRAPHVIZ_HINT, render_execution

    inputs = agent.tool.dataflow_inputs(request.query, scope=request.scope)
    try:
        drawn = render_execution(agent.tool, result, inputs, path)
    except (ValueError, OSError) as exc:
        note(f"[yellow]executed path not drawn:[/] {escape(str(exc))}")
        return
    where = escape(str(drawn.written[0]))
    if drawn.images_skipped:
        note(f"Graphviz `dot` not found: wrote the DOT source to {where}; {GRAPHVIZ_HINT}")
    else:
        note(f"executed path drawn to {where}")


def _print_lookup(result: LookupResult, as_json: bool, indent: int | None = None) -> None:
    from lookup_knowledge.cli.display import print_result

    if as_json:
        print_json(result.model_dump(by_alias=True, mode="json"), indent)
    else:
        print_result(console, result)


def _record_unrun(settings: Config, session: str | None, result: LookupResult) -> None:
    """A call answered before the store opened (rejected, or the store unavailable) is still
    recorded; into the default SQLite file only where a knowledge store was ingested, so a
    mistyped ``store.path`` creates nothing."""
    from lookup_knowledge.adapters.l0_index import index_saved
    from lookup_knowledge.adapters.recorder import RecorderUnavailableError
    from lookup_knowledge.agent.invocation_row import invocation_row
    from lookup_knowledge.agent.lookup import build_recorder
    from lookup_knowledge.stores import l0_index_path

    if settings.recorder.url is None and not index_saved(l0_index_path(settings)):
        return
    recorder = build_recorder(settings)
    try:
        recorder.record(invocation_row(session, result, latency_ms=0.0))
    except RecorderUnavailableError as exc:
        note(f"[yellow]not recorded:[/] {escape(str(exc))}")
    finally:
        recorder.close()


@app.command("verify", cls=Command)
def verify_command(
    answer_file: Annotated[
        Path | None, typer.Argument(metavar="FILE", help="The answer to check (default: stdin).")
    ] = None,
    session: Annotated[
        str, typer.Option("--session", metavar="ID", help="The session whose lookups it cites.")
    ] = "",
    config: ConfigOption = None,
    overrides: SetOption = None,
    check_uncited: Annotated[
        bool, typer.Option("--uncited", help="Also flag sentences without a citation.")
    ] = False,
    citation_pattern: Annotated[
        str | None,
        typer.Option(
            "--citation-pattern", metavar="REGEX", help="Regex with a `key` group (default: bare or \\[key])."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly the verdict JSON.")] = False,
) -> None:
    """Check an answer's citations and quotes against what the session's lookups returned.

    Exit 0 when verified, 1 when not.
    """
    from lookup_knowledge.adapters.l0_index import L0Index, L0IndexError
    from lookup_knowledge.adapters.recorder import RecorderUnavailableError
    from lookup_knowledge.agent.lookup import build_recorder, verify_in_session
    from lookup_knowledge.agent.verify import CITATION_PATTERN, MAX_ANSWER_CHARS
    from lookup_knowledge.stores import l0_index_path

    if not session:
        fail("--session is required: the session whose lookups the answer cites")
    try:  # one character past the limit at most: a huge file is never read whole
        if answer_file:
            with answer_file.open(encoding="utf-8") as source:
                answer = source.read(MAX_ANSWER_CHARS + 1)
        else:
            answer = sys.stdin.read(MAX_ANSWER_CHARS + 1)
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read the answer: {exc}")
    if len(answer) > MAX_ANSWER_CHARS:
        fail(f"the answer has more than {MAX_ANSWER_CHARS:,} characters, the most verify takes: split it")
    settings = _config(config, overrides)
    recorder = build_recorder(settings)
    try:
        doc_ids = L0Index.load(l0_index_path(settings)).documents
        pattern = citation_pattern or CITATION_PATTERN
        verdict = verify_in_session(
            answer, session, recorder, doc_ids, check_uncited=check_uncited, citation_pattern=pattern
        )
    except (RecorderUnavailableError, L0IndexError) as exc:
        fail(str(exc), code=2)
    finally:
        recorder.close()
    if as_json:
        print_json(verdict.model_dump(by_alias=True, mode="json"))
    else:
        for citation in verdict.citations:
            colour = "green" if citation.status == "ok" else "red"
            line = f"[{colour}]{citation.status}[/] {escape(citation.evidence_key)} {escape(citation.detail)}"
            console.print(line, highlight=False, soft_wrap=True)
        for sentence in verdict.uncited_sentences:
            console.print(f"[yellow]uncited[/] {escape(sentence)}", highlight=False, soft_wrap=True)
        console.print(escape(verdict.message), highlight=False, soft_wrap=True)
    if not verdict.verified:
        raise typer.Exit(1)


@app.command("info", cls=Command)
def info_command(
    config: ConfigOption = None,
    overrides: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the facts as JSON.")] = False,
) -> None:
    """Print the configuration in force, the store's size, the model, backends and device."""
    import yaml

    from lookup_knowledge.cli.info import describe

    facts = describe(_config(config, overrides))
    if as_json:
        print_json(facts)
        return
    rows = [
        ("model", facts["embedder"]["model"]),
        ("device", facts["embedder"]["device"]),
        ("query backend", facts["embedder"]["backends"]["query"]),
        ("document backend", facts["embedder"]["backends"]["document"]),
        ("dimension", facts["embedder"]["dimension"]),
        ("store", f"{facts['store']['backend']} at {facts['store']['location']}"),
        ("documents / chunks", f"{facts['store']['documents']} / {facts['store']['chunks']}"),
        ("multilingual vectors", "yes" if facts["store"]["multilingual_vectors"] else "no"),
        ("chunk languages", _languages_line(facts["store"]["chunk_languages"])),
        ("store problem", facts["store"]["problem"] or "none"),
    ]
    console.print(facts_table("lookup-knowledge", rows))
    console.print("configuration in force:")
    console.print(yaml.safe_dump(facts["config"], sort_keys=False, allow_unicode=True), highlight=False)


def _languages_line(counts: dict[str, int]) -> str:
    """``en 195, zh 8``: the stored chunks per language (``unknown``: stored without one)."""
    return ", ".join(f"{language} {n}" for language, n in counts.items()) or "none"


DIAGRAMS = Path("visualizations")


@app.command("render", cls=Command)
def render_command(
    out: Annotated[Path, typer.Option("--out", metavar="DIR", help="Output folder.")] = DIAGRAMS,
) -> None:
    """Write the lookup DAG and each config variant as DOT and Mermaid, plus SVG/PNG with Graphviz."""
    from lookup_knowledge.cli.render import GRAPHVIZ_HINT, render_variants

    try:
        report = render_variants(out)
    except OSError as exc:
        fail(f"cannot write diagrams to {out}: {exc}", code=1)
    for path in report.written:
        console.print(f"wrote {escape(str(path))}", highlight=False)
    if report.images_skipped:
        note(f"Graphviz `dot` not found: wrote DOT and Mermaid (.mmd) only; {GRAPHVIZ_HINT}")


invocations_app = typer.Typer(
    help="List recorded lookup_knowledge calls (the tool_invocation table); "
    "`invocations show ID` prints one.",
    cls=Group,
)
app.add_typer(invocations_app, name="invocations")


def _recorder(config: Path | None, overrides: list[str] | None) -> InvocationRecorder:
    from lookup_knowledge.agent.lookup import build_recorder

    return build_recorder(_config(config, overrides))


@invocations_app.callback(invoke_without_command=True)
def invocations_command(
    ctx: typer.Context,
    session: Annotated[
        str | None, typer.Option("--session", metavar="ID", help="Only this session's calls.")
    ] = None,
    last: Annotated[
        int, typer.Option("--last", min=1, metavar="N", help="How many of the newest calls.")
    ] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
    config: ConfigOption = None,
    overrides: SetOption = None,
) -> None:
    """List recorded lookup_knowledge calls, oldest first; `invocations show ID` prints one."""
    if ctx.invoked_subcommand is not None:
        return
    from lookup_knowledge.adapters.recorder import RecorderUnavailableError
    from lookup_knowledge.agent.request import session_key
    from lookup_knowledge.cli.display import invocations_table

    recorder = _recorder(config, overrides)
    try:
        rows = recorder.list(session_id=None if session is None else session_key(session), last=last)
    except RecorderUnavailableError as exc:
        fail(str(exc), code=1)
    finally:
        recorder.close()
    if as_json:
        print_json([row.to_json() for row in rows])
        return
    console.print(invocations_table(rows, f"lookup_knowledge calls ({recorder.url})"))


@invocations_app.command("show", cls=Command)
def invocation_show_command(
    invocation_id: Annotated[int, typer.Argument(metavar="ID", help="The call's id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the row as JSON.")] = False,
    config: ConfigOption = None,
    overrides: SetOption = None,
) -> None:
    """Print one recorded call with its retrieval details."""
    from lookup_knowledge.adapters.recorder import RecorderUnavailableError

    recorder = _recorder(config, overrides)
    try:
        row = recorder.get(invocation_id)
    except RecorderUnavailableError as exc:
        fail(str(exc), code=1)
    finally:
        recorder.close()
    if row is None:
        fail(f"no recorded call with id {invocation_id} in {recorder.url}", code=1)
    if as_json:
        print_json(row.to_json())
    else:
        _print_invocation(row)


def _print_invocation(row: Invocation) -> None:
    from rich.json import JSON

    rows = [
        ("created at", row.created_at.isoformat() if row.created_at else ""),
        ("session", row.session_id or ""),
        ("tool", row.tool_name),
        ("input", row.input),
        ("status", row.status),
        ("evidence blocks", row.evidence_count),
        ("retrieval layer", row.retrieval_layer or ""),
        ("fallback reason", row.fallback_reason or "none"),
        ("latency ms", f"{row.latency_ms:.1f}"),
    ]
    console.print(facts_table(f"lookup_knowledge call {row.id}", rows))
    console.print("retrieval_details:")
    console.print(JSON.from_data(row.retrieval_details, ensure_ascii=False))


@app.command("mcp", cls=Command)
def mcp_command(
    config: ConfigOption = None, overrides: SetOption = None, principals: PrincipalOption = None
) -> None:
    """Serve the lookup_knowledge tool over MCP (stdio).

    Each client connection is one session; every call has the server's identity (--principal,
    else access.principals).
    """
    from lookup_knowledge.adapters.errors import StoreError
    from lookup_knowledge.extras import MissingExtraError, require

    try:
        require("mcp", "lookup-knowledge mcp")
    except MissingExtraError as exc:
        fail(str(exc))
    from lookup_knowledge.agent.mcp_server import serve_stdio  # the MCP SDK loads only for this command
    from lookup_knowledge.agent.request import access_scope

    settings = _config(config, overrides)
    if access_scope(principals).sees_nothing:
        fail("--principal: each principal must be a nonblank name")
    try:
        serve_stdio(settings, principals)
    except StoreError as exc:
        fail(str(exc), code=1)


@app.command("serve", cls=Command)
def serve_command(
    config: ConfigOption = None,
    overrides: SetOption = None,
    host: Annotated[str | None, typer.Option(help="Address to listen on (default: serve.host).")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on (default: serve.port).")] = None,
    allow_unauthenticated: Annotated[
        bool, typer.Option(help="Listen on a non-loopback address without serve.tokens.")
    ] = False,
    evals: Annotated[
        list[Path] | None,
        typer.Option(
            "--evals", metavar="DIR", help="An eval output folder for the review pages (repeatable)."
        ),
    ] = None,
) -> None:
    """Serve many agents over HTTP: MCP (streamable HTTP) at /mcp and a JSON API at /v1.

    One process owns the store and the model. Each bearer token in serve.tokens is made its
    principals' caller (an unrestricted one sees every document); without tokens every call is
    access.principals' and only loopback is served.
    SIGTERM lets the calls in flight finish, then closes the store.
    """
    from lookup_knowledge.adapters.errors import StoreError
    from lookup_knowledge.extras import MissingExtraError, require

    try:
        require("serve", "lookup-knowledge serve")
    except MissingExtraError as exc:
        fail(str(exc))
    from lookup_knowledge.serve.app import serve_http  # the web stack loads only for this command

    settings = _config(config, overrides)
    try:
        serve_http(
            settings,
            host or settings.serve.host,
            settings.serve.port if port is None else port,
            allow_unauthenticated=allow_unauthenticated,
            eval_dirs=evals or [],
            on_start=lambda line: typer.echo(line, err=True),
        )
    except ValueError as exc:
        fail(str(exc))
    except StoreError as exc:
        fail(str(exc), code=1)


@app.command("token", cls=Command)
def token_command(
    name: Annotated[str, typer.Argument(help="The token's name (logged; e.g. the team or agent).")],
    principals: Annotated[
        list[str] | None,
        typer.Option("--principal", "-p", metavar="NAME", help="A principal of its calls (repeatable)."),
    ] = None,
    unrestricted: Annotated[
        bool,
        typer.Option(
            "--unrestricted",
            help="Its calls see every document, and its reviewer every call and eval run (an admin's); "
            "instead of --principal.",
        ),
    ] = False,
) -> None:
    """Make a bearer token for serve: prints the token (give it to the client) and the
    serve.tokens entry to add to the config (its hash: the token itself is kept nowhere)."""
    import yaml

    from lookup_knowledge.config import TokenConfig
    from lookup_knowledge.serve.tokens import new_token

    if unrestricted == bool(principals):
        fail("name the token's principals (--principal NAME, repeatable) or pass --unrestricted: one of them")
    token, entry = new_token(name, principals or (), unrestricted=unrestricted)
    try:
        TokenConfig(**entry)
    except ValueError as exc:
        fail(f"not a valid token entry: {exc}")
    typer.echo(f"token: {token}")
    typer.echo("serve.tokens entry:")
    typer.echo(yaml.safe_dump([entry], sort_keys=False).rstrip())


@app.command("review", cls=Command)
def review_command(
    config: ConfigOption = None,
    overrides: SetOption = None,
    principals: PrincipalOption = None,
    evals: Annotated[
        list[Path] | None,
        typer.Option(
            "--evals", metavar="DIR", help="An eval output folder, or a folder of them (repeatable)."
        ),
    ] = None,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="The loopback port.")] = 8766,
) -> None:
    """Serve the read-only review pages (Ask, the path, Records, Eval runs) on 127.0.0.1.

    Every page is seen as one reviewer (--principal, else access.principals): loopback only.
    """
    from lookup_knowledge.adapters.errors import StoreError
    from lookup_knowledge.extras import MissingExtraError, require

    try:
        require("review", "lookup-knowledge review")
    except MissingExtraError as exc:
        fail(str(exc))
    import uvicorn

    from lookup_knowledge.agent.knowledge_tool import KnowledgeTool
    from lookup_knowledge.agent.lookup import build_recorder
    from lookup_knowledge.agent.request import RequestSettings, access_scope
    from lookup_knowledge.review import review_app

    settings = _config(config, overrides)
    scope = access_scope(principals, RequestSettings.from_config(settings))
    if scope.sees_nothing:
        fail("--principal: each principal must be a nonblank name")
    try:
        tool = KnowledgeTool.from_config(settings)
    except StoreError as exc:
        fail(str(exc), code=1)
    recorder = build_recorder(settings)
    pages = review_app(lambda: tool, recorder, evals or [], lambda _request: scope, token_sign_in=False)
    server = uvicorn.Server(uvicorn.Config(pages, host="127.0.0.1", port=port, log_level="warning"))
    note(f"review pages on http://127.0.0.1:{port}/ (Ctrl-C to stop)")
    try:
        server.run()
    finally:
        tool.close()
        recorder.close()


def main() -> None:
    app()


register_eval_commands(app)
register_shell_command(app)
