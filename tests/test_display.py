"""The CLI's result display: rows readable at 80 columns, and no terminal escapes from documents."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from conftest import write_markdown
from dataflow_fixtures import SampleKB, make_tool
from rich.console import Console

import lookup_knowledge.cli.app as cli_app
from lookup_knowledge import KnowledgeTool, ingest, load_config
from lookup_knowledge.adapters.embedder import Embedder
from lookup_knowledge.cli.display import evidence_table, print_result, terse_reasons, visible

TITLE_ESCAPE = "\x1b]0;pwned\x07"  # sets the terminal's window title
CLEAR_SCREEN = "\x1b[2J"


def _console(width: int = 80) -> Console:
    return Console(file=io.StringIO(), width=width, record=True, color_system=None)


def test_each_evidence_row_takes_at_most_three_lines_at_80_columns(
    sample_kb: SampleKB, embedder: Embedder
) -> None:
    result = make_tool(sample_kb, embedder).lookup("How do I handle a chargeback dispute?")
    console = _console()
    console.print(evidence_table(result.evidence_blocks))
    lines = console.export_text().rstrip().splitlines()
    body = lines[lines.index(next(line for line in lines if "───" in line)) + 1 :]
    starts = [i for i, line in enumerate(body) if line[:4].strip().isdigit()]
    assert len(starts) == len(result.evidence_blocks) == 5
    heights = [end - start for start, end in zip(starts, [*starts[1:], len(body)], strict=True)]
    assert max(heights) <= 3
    assert all(len(line) <= 80 for line in lines)


def test_hit_reasons_read_as_a_few_words() -> None:
    reasons = [
        "vector:filtered", "vector:dense rank 1", "vector:sparse rank 4 (chargeback, dispute)",
        "fused rank 1 (dbsf)", "exact_code:E4471", "l0_domain:payments", "l0_keyword:chargeback",
        "l0_keyword:dispute",
    ]  # fmt: skip
    assert terse_reasons(reasons) == "dense 1, bm25 4, fused 1, code E4471; L0 domain, keyword x2"
    assert terse_reasons(["vector:unfiltered"]) == ""


def test_control_characters_are_shown_as_escapes() -> None:
    assert (
        visible(f"a{TITLE_ESCAPE}b{CLEAR_SCREEN}\u202ec\nd\te")
        == "a\\x1b]0;pwned\\x07b\\x1b[2J\\u202ec\nd\te"
    )
    assert visible("清算 café") == "清算 café"


@pytest.fixture
def hostile_kb(tmp_path: Path) -> Path:
    """A knowledge folder whose file names and title carry terminal escape sequences."""
    root = tmp_path / "kb"
    body = "Rotate the signing keys of the escape service every ninety days."
    write_markdown(root, f"keys{TITLE_ESCAPE}.md", {"title": f"Key rotation{CLEAR_SCREEN}"}, body)
    outside = write_markdown(tmp_path / "elsewhere", "x.md", None, "outside the folder")
    (root / f"link{CLEAR_SCREEN}.md").symlink_to(outside)  # skipped: links outside the folder
    return root


def test_nothing_a_document_holds_reaches_the_terminal_raw(
    hostile_kb: Path, tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config(overrides={"store.path": str(tmp_path / "store")})
    report = ingest(hostile_kb, config, embedder=embedder)
    assert report.skipped, "the outside link is skipped and reported"
    console = _console(120)
    monkeypatch.setattr(cli_app, "console", console)
    cli_app._print_ingest_report(report)
    with KnowledgeTool(config, embedder=embedder) as tool:
        result = tool.lookup("how often are the escape service's signing keys rotated?")
    assert result.found
    print_result(console, result)
    printed = console.export_text()
    assert "\x1b" not in printed and "\x07" not in printed
    assert "keys\\x1b]0;pwned\\x07.md" in printed and "link\\x1b[2J.md" in printed
