"""What every command prints with: stdout and stderr consoles, the error exit, a note on stderr,
a label/value table and JSON on stdout."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

console = Console()
errors = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """``error: <message>`` on stderr (the message escaped), then exit with ``code``."""
    errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def note(markup: str) -> None:
    """One line on stderr (markup from the caller; user text escaped by the caller)."""
    errors.print(markup, highlight=False, soft_wrap=True)


def facts_table(title: str, rows: Iterable[tuple[str, object]]) -> Table:
    """A two-column table without a header: each label beside its value (escaped, never markup)."""
    table = Table(title=title, show_header=False)
    for label, value in rows:
        table.add_row(label, escape(str(value)))
    return table


def print_json(data: object, indent: int | None = None) -> None:
    """JSON on stdout, indented on a terminal unless ``indent`` says otherwise, else one line;
    JSON's ``\\u`` escapes where stdout cannot encode all of Unicode (a non-UTF-8 locale,
    ``PYTHONIOENCODING=ascii``), which JSON readers decode the same."""
    if indent is None and sys.stdout.isatty():
        indent = 2
    utf = (sys.stdout.encoding or "").lower().replace("-", "").replace("_", "") in {"utf8", "utf8sig"}
    sys.stdout.write(json.dumps(data, ensure_ascii=not utf, indent=indent or None))
    sys.stdout.write("\n")
