"""Readable terminal rendering of a :class:`LookupResult` and of recorded calls (rich).

Every line fits an 80-column terminal without a word broken across lines: long lines wrap
between words, a table cell too long for its column ends in an ellipsis.
Everything printed from document data (file names, titles, frontmatter terms, content) goes
through :func:`visible`: a knowledge folder must not be able to drive the user's terminal.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from lookup_knowledge.adapters.recorder import Invocation
    from lookup_knowledge.contract import EvidenceBlock, LookupResult

_CONTROLS = {code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)] if chr(code) not in "\n\t"}
_BIDI = {code: f"\\u{code:04x}" for code in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]}
_ESCAPES = str.maketrans({**_CONTROLS, **_BIDI})  # C0/C1 controls (ESC, BEL, CR...), bidi overrides
_RANK_REASON = re.compile(r"^(?:vector:(dense|sparse) rank|fused rank) (\d+)")
_SIGNAL_NAMES = {"dense": "dense", "sparse": "bm25", None: "fused"}
_PACK_HEADER = r"(?m)^\[\d+\] .*$"  # a block's header line in the context pack: [1] key | source


def visible(text: str) -> str:
    """``text`` with terminal control characters shown as escapes (``\\x1b``), newlines kept."""
    return text.translate(_ESCAPES)


def markup_safe(text: str) -> str:
    """``text`` safe to embed in rich markup: no control characters, no markup tags."""
    return escape(visible(text))


def terse_reasons(hit_reasons: list[str]) -> str:
    """Hit reasons in a few words: each search's rank, exact codes, and the L0 hint kinds matched
    (``dense 1, bm25 4, fused 1; L0 domain, keyword x2``); the full list is in ``--json``."""
    ranks, hints = [], Counter()
    for reason in hit_reasons:
        if match := _RANK_REASON.match(reason):
            ranks.append(f"{_SIGNAL_NAMES[match[1]]} {match[2]}")
        elif reason.startswith("exact_code:"):
            ranks.append(f"code {reason.removeprefix('exact_code:')}")
        elif reason.startswith("l0_"):
            hints[reason.removeprefix("l0_").partition(":")[0]] += 1
        elif not reason.startswith("vector:"):  # vector:<search> is the same for every block
            ranks.append(reason)
    l0 = ", ".join(kind if n == 1 else f"{kind} x{n}" for kind, n in hints.items())
    return "; ".join(part for part in (", ".join(ranks), f"L0 {l0}" if l0 else "") if part)


def print_result(console: Console, result: LookupResult) -> None:
    """The verdict, the decision lines, the evidence table and the packed context."""
    console.print(verdict_line(result), highlight=False)
    console.print(markup_safe(result.message), highlight=False)
    console.print(markup_safe(result.completeness_hint), style="dim", highlight=False)
    _print_trace(console, result)
    if not result.evidence_blocks:
        return
    console.print(evidence_table(result.evidence_blocks))
    console.print(
        "[dim]matched: each search's rank, the L0 hints matched (--json: every hit reason)[/]",
        highlight=False,
    )
    if any(block.language not in (None, "en") for block in result.evidence_blocks):
        console.print("[dim]under #: the block's language where it is not English[/]", highlight=False)
    if result.context_pack is not None:  # unboxed: a line of the document keeps the full width
        summary = result.context_pack.summary
        console.print(Rule(f"Context pack ({summary.chars_used}/{summary.budget_chars} chars)"))
        pack = Text(visible(result.context_pack.text))
        pack.highlight_regex(_PACK_HEADER, "bold")
        console.print(pack, highlight=False)
        console.print(Rule())


def verdict_line(result: LookupResult) -> str:
    """The whole verdict in one short line of markup: evidence status, relevance level and the
    completeness hint's kind (``evidence · relevance high · completeness complete``)."""
    style = "green" if result.found else "yellow"
    kind = result.completeness_hint.partition(":")[0]
    return (
        f"[bold {style}]{result.evidence_status}[/] · relevance [bold]{result.relevance_level}[/] · "
        f"completeness [bold]{markup_safe(kind)}[/]"
    )


def evidence_table(blocks: list[EvidenceBlock]) -> Table:
    """One row per block, three lines at most at 80 columns: the evidence key, the source where
    the key does not name it, and the terse hit reasons under it; the rank, and under it the
    block's language when it is known and not English; the scores beside."""
    table = Table(title="Evidence", box=box.SIMPLE_HEAD)
    table.add_column("#", no_wrap=True)
    table.add_column("evidence key / source / matched", overflow="fold")
    table.add_column("score", no_wrap=True)
    table.add_column("rerank", no_wrap=True)
    for block in blocks:
        cell = Text(visible(block.evidence_key))
        if block.source and not block.evidence_key.startswith(block.source):
            cell.append(f"\n{visible(block.source)}", style="dim")
        if reasons := terse_reasons(block.hit_reasons):
            cell.append(f"\n{visible(reasons)}", style="italic")
        rank = Text(str(block.rank))
        if block.language not in (None, "en"):
            rank.append(f"\n{visible(block.language)}", style="dim")
        table.add_row(rank, cell, f"{block.normalized_score:.3f}", f"{block.rerank_score:.3f}")
    return table


def _print_trace(console: Console, result: LookupResult) -> None:
    trace = result.retrieval_trace
    if trace is None:
        return
    hints = trace.l0_hints
    named = {
        "domains": hints.domains, "keywords": hints.matched_keywords, "entities": hints.entities,
        "titles": hints.matched_titles,
    }  # fmt: skip
    matched = "; ".join(f"{kind} {', '.join(values)}" for kind, values in named.items() if values)
    console.print(markup_safe(f"L0 hints: {matched or 'none'}"), highlight=False)
    for attempt in trace.attempts:
        top = "-" if attempt.top_normalized_score is None else f"{attempt.top_normalized_score:.3f}"
        error = f" error={attempt.error}" if attempt.error else ""
        line = (
            f"attempt {attempt.kind}{' (used)' if attempt.used else ''}: filter={attempt.filter} "
            f"hits={attempt.hit_count} usable={attempt.usable_count} top={top}{error}"
        )
        console.print(markup_safe(line), highlight=False)
    console.print(
        f"fallback: {trace.fallback_reason or 'none (no retry)'}; layer {trace.retrieval_layer}",
        highlight=False,
    )
    if (decision := trace.fallback_decision) is not None and decision.score_ratio is not None:
        settings = ", ".join(f"{name} {value:g}" for name, value in decision.settings.items())
        lines = [
            f"decision: {decision.fired}; used {decision.used}",
            f"  {decision.rule} rule: {settings}",
            f"  top filtered/unfiltered {decision.filtered_top:.3f}/{decision.unfiltered_top:.3f} = "
            f"{decision.score_ratio:.3f}; overlap {decision.overlap:.2f}",
        ]
        if decision.sparse_score_ratio is not None:  # the BM25 comparison the rule also read
            lines.append(
                f"  BM25 top filtered/unfiltered {decision.filtered_sparse_top or 0.0:.2f}/"
                f"{decision.unfiltered_sparse_top:.2f} = {decision.sparse_score_ratio:.3f}"
            )
        console.print("\n".join(lines), highlight=False)


def invocations_table(rows: Sequence[Invocation], title: str) -> Table:
    """Recorded calls, two lines each: when, the outcome (status, blocks, layer and the retry's
    reason, latency) and the session, then the query; a line too long ends in an ellipsis."""
    table = Table.grid(padding=(0, 1), expand=True)
    table.title = Text(title)  # a URL, never markup
    table.add_column("id", justify="right", no_wrap=True)
    table.add_column("call", ratio=1, no_wrap=True, overflow="ellipsis")
    for row in rows:
        style = "green" if row.status == "evidence" else "yellow"
        retry = (
            f" retry {row.fallback_reason.removeprefix('filtered_vector_')}" if row.fallback_reason else ""
        )
        when = f"{row.created_at:%m-%d %H:%M:%S}  " if row.created_at else ""
        call = Text.assemble(
            when, (row.status, style),
            f" {row.evidence_count} blocks  {row.retrieval_layer or '-'}{retry}  {row.latency_ms:4.0f} ms  ",
            (visible(row.session_id or ""), "dim"), "\n", " ".join(visible(row.input).split()),
        )  # fmt: skip
        table.add_row(str(row.id), call)
    return table
