"""First contact with the command line: help names values by metavar, the human output shows the
whole verdict and fits an 80-column terminal without a word broken across lines, and loading the
CLI imports no heavy library (what a command needs loads when it runs)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from dataflow_fixtures import SampleKB, make_tool
from rich.console import Console
from typer.testing import CliRunner

from lookup_knowledge.adapters.embedder import Embedder
from lookup_knowledge.adapters.recorder import Invocation
from lookup_knowledge.cli.app import app
from lookup_knowledge.cli.display import invocations_table, print_result, verdict_line

CLI = Path(sys.executable).with_name("lookup-knowledge")
REFUND = "Who must approve a refund above 500 EUR?"
OFF_TOPIC = "What is the airspeed velocity of an unladen swallow?"
COMMANDS = [
    [], ["ingest"], ["query"], ["shell"], ["info"], ["invocations"], ["invocations", "show"], ["mcp"],
    ["verify"], ["render"], ["eval"], ["eval-queries"], ["review"],
]  # fmt: skip
TYPE_PLACEHOLDER = re.compile(r"<[a-z][\w\[\], |]*>|\{\w+\}")  # <bool>, <list[str]>, <int range>, {text}
RULE = re.compile(r"^[─━═╭╮╰╯│┃┏┓┗┛┡┩╇╈┳┻╋┼├┤┌┐└┘┬┴]+$")  # a table's or rule's drawing, not a word


def _render(renderable_or_print, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    renderable_or_print(console)
    return console.export_text()


def _words(text: str) -> Counter[str]:
    return Counter(word for word in text.split() if not RULE.match(word))


def _broken_words(narrow: str, wide: str) -> list[str]:
    """Words of the 80-column output that the unwrapped output does not hold: a word broken across
    lines (or cut short without an ellipsis)."""
    whole = _words(wide)
    cut = [w for w in _words(narrow) if w.endswith("…") and any(x.startswith(w[:-1]) for x in whole)]
    return sorted((_words(narrow) - whole) - Counter(cut))


def _fits(text: str, width: int = 80) -> None:
    too_long = [line for line in text.splitlines() if len(line.rstrip()) > width]
    assert not too_long, too_long


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "lookup-knowledge")
def test_help_names_values_not_python_types(command: list[str]) -> None:
    done = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "100"})
    assert done.exit_code == 0, done.output
    assert not TYPE_PLACEHOLDER.findall(done.output), done.output
    assert "``" not in done.output


def test_query_help_names_each_value() -> None:
    done = CliRunner().invoke(app, ["query", "--help"], env={"COLUMNS": "100"})
    usage = next(line for line in done.output.splitlines() if "Usage:" in line)
    assert usage.split()[-1] == "TEXT"
    for option, metavar in [("--set", "KEY=VALUE"), ("--config", "FILE"), ("--session", "ID")]:
        line = next(line for line in done.output.splitlines() if f" {option} " in line)
        assert metavar in line.split(), line
    json_line = next(line for line in done.output.splitlines() if " --json " in line)
    assert json_line.split()[2] == "Print", json_line  # a flag takes no value: nothing after it


def test_loading_the_cli_imports_no_heavy_library() -> None:
    heavy = ["pandas", "hamilton", "sqlalchemy", "numpy", "pydantic", "torch", "openvino", "yaml"]
    probe = f"import sys, lookup_knowledge.cli.app; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("query", [REFUND, "How do I handle a chargeback dispute?", OFF_TOPIC])
def test_a_result_fits_80_columns_without_a_broken_word(
    sample_kb: SampleKB, embedder: Embedder, query: str
) -> None:
    result = make_tool(sample_kb, embedder).lookup(query)
    narrow = _render(lambda console: print_result(console, result), 80)
    _fits(narrow)
    assert _broken_words(narrow, _render(lambda console: print_result(console, result), 1000)) == []
    assert "{'" not in narrow and "['" not in narrow  # no Python dict or list repr
    verdict = narrow.splitlines()[0]
    assert verdict.split() == [
        result.evidence_status, "·", "relevance", result.relevance_level, "·", "completeness",
        result.completeness_hint.partition(":")[0],
    ]  # fmt: skip
    assert _words(result.completeness_hint) <= _words(narrow)  # the hint in full


def test_the_verdict_line_names_status_level_and_hint(sample_kb: SampleKB, embedder: Embedder) -> None:
    result = make_tool(sample_kb, embedder).lookup(REFUND)
    line = _render(lambda console: console.print(verdict_line(result)), 80).rstrip("\n")
    assert "\n" not in line and len(line) <= 80
    assert result.found and line.startswith("evidence · relevance ")


def test_each_recorded_call_takes_two_lines_at_80_columns() -> None:
    rows = [
        Invocation(
            session_id=f"cli-{n:032x}", tool_name="lookup_knowledge", input=query, status=status,
            evidence_count=count, retrieval_layer="L0+L1", fallback_reason=reason, latency_ms=ms,
            retrieval_details={}, id=n, created_at=datetime(2026, 12, 6, 4, n, tzinfo=UTC),
        )
        for n, (query, status, count, reason, ms) in enumerate([
            (REFUND, "evidence", 3, None, 66.2),
            ("kafka consumer lag " * 8, "no_evidence", 0, "filtered_vector_no_evidence", 1234.0),
            ("a\nquery over\tlines", "retrieval_failed", 0, "filtered_vector_error", 0.0),
        ], start=1)
    ]  # fmt: skip
    title = "lookup_knowledge calls (sqlite:////tmp/somewhere/.lookup-knowledge/invocations.sqlite)"
    narrow = _render(lambda console: console.print(invocations_table(rows, title)), 80)
    _fits(narrow)
    assert _broken_words(narrow, _render(lambda c: c.print(invocations_table(rows, title)), 1000)) == []
    lines = [line for line in narrow.splitlines() if line.strip()]
    body = lines[next(i for i, line in enumerate(lines) if line.split()[0] == "1") :]  # after the title
    assert len(body) == 2 * len(rows)
    assert [line.split()[0] for line in body[::2]] == ["1", "2", "3"]
    assert body[1].split() == REFUND.split()


def _run(args: list[str], store: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The installed command in a terminal of 80 columns (what Rich reads from ``COLUMNS``)."""
    command = [str(CLI), *args, "--set", f"store.path={store}"]
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run(command, capture_output=True, text=True, env=env, input=stdin)


def test_query_at_80_columns_fits_and_says_where_the_time_went(sample_store: Path) -> None:
    done = _run(["query", REFUND], sample_store)
    assert done.returncode == 0, done.stderr
    _fits(done.stdout)
    _fits(done.stderr)
    assert done.stdout.startswith("evidence · relevance ")
    footer = " ".join(done.stderr.split())
    assert re.fullmatch(
        r"\d+\.\d s: start-up \d+\.\d s, model load \d+\.\d s, lookup \d+ ms; a `shell` starts once", footer
    ), done.stderr


def test_shell_info_and_invocations_fit_80_columns(sample_store: Path) -> None:
    shell = _run(["shell"], sample_store, stdin=f"{REFUND}\n:nonsense\n")
    assert shell.returncode == 0, shell.stderr
    info = _run(["info"], sample_store)
    assert info.returncode == 0, info.stderr
    listed = _run(["invocations"], sample_store)
    assert listed.returncode == 0, listed.stderr
    for output in (shell.stdout, shell.stderr, info.stdout, info.stderr, listed.stdout):
        _fits(output)
    assert REFUND in listed.stdout  # the shell's call, its query on a line of its own
    assert "ready in" in shell.stderr and "unknown command :nonsense" in shell.stderr
