"""``lookup-knowledge shell``: warm lookups from a terminal, one model load for many questions.

A ``query`` command is a fresh process: it loads the embedding model (seconds) before its lookup
(milliseconds). The shell loads it once, says how long that took, then answers each line typed
(or piped) as ``query`` would, in one session. Lines starting with ``:`` are commands.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from lookup_knowledge.cli.help import Command
from lookup_knowledge.cli.output import console, errors, fail, note
from lookup_knowledge.cli.wall import seconds_since_start

if TYPE_CHECKING:
    from lookup_knowledge.contract import LookupResult

HELP = "Type a question; :json toggles JSON output, :session shows the session id, :quit (or Ctrl-D) ends."
PROMPT = "lookup> "


def shell_command(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", metavar="FILE", help="YAML config file.")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option("--set", "-s", metavar="KEY=VALUE", help="Override a config key: dotted.key=value."),
    ] = None,
    session: Annotated[
        str | None, typer.Option("--session", metavar="ID", help="Session id (default: a new one).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print each result as contract JSON.")] = False,
    no_record: Annotated[bool, typer.Option("--no-record", help="Do not record the calls.")] = False,
) -> None:
    """Answer questions typed at a prompt (or piped, one per line) with the model loaded once."""
    from lookup_knowledge.adapters.errors import StoreError
    from lookup_knowledge.agent.lookup import AgentLookup, new_session_id
    from lookup_knowledge.config import ConfigError, load_config

    try:
        settings = load_config(config, overrides or [])
        agent = AgentLookup.from_config(settings, record=not no_record)
    except (ConfigError, StoreError) as exc:
        fail(str(exc), 2 if isinstance(exc, ConfigError) else 1)
    session = session or new_session_id("shell")
    with agent:
        start_up_s = seconds_since_start()
        cold_ms = agent.warm_up()
        errors.print(
            f"ready in {seconds_since_start():.1f} s: start-up {start_up_s:.1f} s, model load "
            f"{cold_ms / 1000:.1f} s; each lookup from here on is warm",
            highlight=False, markup=False,
        )  # fmt: skip
        errors.print(HELP, highlight=False, markup=False)
        for line in _lines():
            if line in {":quit", ":exit", ":q"}:
                break
            if line == ":json":
                as_json = not as_json
                note(f"JSON output {'on' if as_json else 'off'}")
            elif line == ":session":
                note(f"session {escape(session)}")
            elif line.startswith(":"):
                note(f"unknown command {escape(line)}")
                errors.print(HELP, highlight=False, markup=False)
            elif line:
                started = time.perf_counter()
                result = agent.call(line, session_id=session)
                _show(result, as_json, (time.perf_counter() - started) * 1000)


def _lines():
    """Lines from the prompt (with line editing on a terminal) or from piped input, until EOF."""
    interactive = sys.stdin.isatty()
    if interactive:
        import readline  # noqa: F401 - line editing and history for input()
    while True:
        try:
            line = input(PROMPT) if interactive else sys.stdin.readline()
        except (EOFError, KeyboardInterrupt):
            return
        if not interactive and line == "":
            return
        yield line.strip()


def _show(result: LookupResult, as_json: bool, took_ms: float) -> None:
    from lookup_knowledge.cli.display import print_result

    if as_json:
        console.print_json(result.model_dump_json(by_alias=True), ensure_ascii=False)
    else:
        print_result(console, result)
        note(f"lookup {took_ms:.0f} ms (warm)")


def register(app: typer.Typer) -> None:
    app.command("shell", cls=Command)(shell_command)
