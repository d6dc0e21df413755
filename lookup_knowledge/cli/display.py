"""Readable terminal rendering of a :class:`LookupResult` (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from lookup_knowledge.contract import FallbackDecisionTrace, LookupResult


def print_result(console: Console, result: LookupResult) -> None:
    """Evidence table, fallback decision and packed context."""
    style = "green" if result.found else "yellow"
    console.print(f"[bold {style}]{result.evidence_status}[/] {escape(result.message)}", highlight=False)
    trace = result.retrieval_trace
    if trace is not None:
        hints = trace.l0_hints
        console.print(
            escape(
                f"L0 hints: domains={hints.domains} keywords={hints.matched_keywords} "
                f"entities={hints.entities} titles={hints.matched_titles}"
            ),
            highlight=False,
        )
        for attempt in trace.attempts:
            top = "-" if attempt.top_normalized_score is None else f"{attempt.top_normalized_score:.3f}"
            error = f" error={attempt.error}" if attempt.error else ""
            console.print(
                f"attempt {attempt.kind}{' (used)' if attempt.used else ''}: filter={attempt.filter} "
                f"hits={attempt.hit_count} "
                f"usable={attempt.usable_count} top={top}{error}",
                highlight=False,
            )
        console.print(
            f"fallback: {trace.fallback_reason or 'none (no retry)'}; layer {trace.retrieval_layer}",
            highlight=False,
        )
        if (decision := trace.fallback_decision) is not None and decision.score_ratio is not None:
            console.print(
                f"decision: {decision.fired} ({decision.rule} rule {decision.settings}); used "
                f"{decision.used}; top filtered/unfiltered {decision.filtered_top:.3f}/"
                f"{decision.unfiltered_top:.3f} = {decision.score_ratio:.3f}{_bm25_tops(decision)}; "
                f"overlap {decision.overlap:.2f}",
                highlight=False,
            )
    if not result.evidence_blocks:
        return
    table = Table(title="Evidence")
    for column in ("#", "evidence key", "source", "score", "rerank", "hit reasons"):
        table.add_column(column, overflow="fold")
    for block in result.evidence_blocks:
        table.add_row(
            str(block.rank),
            escape(block.evidence_key),
            escape(block.source or ""),
            f"{block.normalized_score:.3f}",
            f"{block.rerank_score:.3f}",
            escape(", ".join(block.hit_reasons)),
        )
    console.print(table)
    if result.context_pack is not None:
        summary = result.context_pack.summary
        title = f"Context pack ({summary.chars_used}/{summary.budget_chars} chars)"
        console.print(Panel(Text(result.context_pack.text), title=title), highlight=False)


def _bm25_tops(decision: FallbackDecisionTrace) -> str:
    """The BM25 comparison the decision also read (sparse, hybrid), or nothing."""
    if decision.sparse_score_ratio is None:
        return ""
    return (
        f"; BM25 top {decision.filtered_sparse_top or 0.0:.2f}/{decision.unfiltered_sparse_top:.2f} "
        f"= {decision.sparse_score_ratio:.3f}"
    )
