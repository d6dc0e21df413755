"""DAG diagrams: DOT and Mermaid source in pure Python; PNG/SVG when Graphviz's ``dot`` is installed.

The source formats need no system binary, so a fresh machine can always write (and review) the
DAG; images are an extra that needs the ``dot`` program from Graphviz.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import graphviz

from lookup_knowledge.contract import AttemptTrace, LookupResult, NodeTiming
from lookup_knowledge.pipeline import FINAL_NODE, VARIANTS, build_driver

SOURCE_FORMATS = ("dot", "mmd")
IMAGE_FORMATS = ("svg", "png")
GRAPHVIZ_HINT = "for PNG/SVG install Graphviz (apt install graphviz, brew install graphviz)"
_CONFIG_LABEL = re.compile(r"<b>(\w+): ([\w, ]+)</b>")
_DOT_NODE = re.compile(r'^\s*"?([\w.]+)"?\s*\[', re.MULTILINE)
_DOT_EDGE = re.compile(r'^\s*"?([\w.]+)"?\s*->\s*"?([\w.]+)"?', re.MULTILINE)
_DOT_LABEL_END = re.compile(r"^(\t(\w+) \[label=<.*</i>)>")  # a node's HTML label up to its type
_INPUT_ROWS = re.compile(r"(<table[^>]*>)((?:<tr>.*?</tr>)+)(</table>)")  # a node's inputs, one row each
_ROW = re.compile(r"<tr>.*?</tr>")
_DOT_NOT_NODES = {"graph", "node", "edge", "config", "input", "function"}  # attributes, legend


@dataclass
class RenderReport:
    """Files written by a render, and whether images were skipped for want of ``dot``."""

    written: list[Path] = field(default_factory=list)
    images_skipped: bool = False


def has_graphviz() -> bool:
    """Whether Graphviz's ``dot`` program is on the PATH (needed for PNG/SVG only)."""
    return shutil.which("dot") is not None


def variant_graph(variant: str) -> graphviz.Digraph:
    """The full DAG of one config variant (``default``, ``l1_disabled``, ``l0_disabled``).

    Hamilton labels a ``@config.when`` node with the config key alone (``retrieval_attempts:
    l1_enabled`` even where the variant has ``l1_enabled=False``); the label says the value.
    """
    settings = VARIANTS[variant]
    graph = build_driver(settings).display_all_functions(orient="TB", show_legend=True)
    graph.body = _in_stable_order(
        [_CONFIG_LABEL.sub(lambda m: _config_label(m, settings), line) for line in graph.body]
    )
    graph.attr(label=f"lookup DAG: {variant}", labelloc="t", fontname="Helvetica")
    return graph


def _in_stable_order(body: list[str]) -> list[str]:
    """The DOT statements with the nodes by name, then the edges, then the legend and the rest as
    drawn: Hamilton lists nodes in set order, which differs from process to process, so a
    re-render of an unchanged DAG rewrote every committed diagram (an inputs table's rows too)."""
    legend = next((i for i, line in enumerate(body) if line.lstrip().startswith("subgraph")), len(body))
    statements = [_INPUT_ROWS.sub(_sorted_rows, line) for line in body[:legend]]
    edges = sorted(line for line in statements if " -> " in line)
    nodes = sorted(line for line in statements if " -> " not in line)
    return [*nodes, *edges, *body[legend:]]


def _sorted_rows(table: re.Match[str]) -> str:
    return table[1] + "".join(sorted(_ROW.findall(table[2]))) + table[3]


def _config_label(match: re.Match[str], settings: dict[str, bool]) -> str:
    condition = ", ".join(f"{key.strip()}={settings.get(key.strip())}" for key in match[2].split(","))
    return f"<b>{match[1]}</b><br /><i>when {condition}</i>"


def mermaid_source(variant: str) -> str:
    """The DAG of one variant as a Mermaid flowchart (renders in GitHub/GitLab pull requests)."""
    variables = build_driver(VARIANTS[variant]).list_available_variables()
    lines = ["flowchart TB", f"  %% lookup DAG: {variant}"]
    for var in sorted(variables, key=lambda v: v.name):
        if var.is_external_input and var.name in VARIANTS[variant]:
            continue  # config switches are shown on the nodes they select, not as inputs
        shape = f'[/"{var.name}"/]' if var.is_external_input else f'("{var.name}")'
        lines.append(f"  {var.name}{shape}")
    for var in sorted(variables, key=lambda v: v.name):
        for dependency in sorted(var.required_dependencies):
            lines.append(f"  {dependency} --> {var.name}")
        for dependency in sorted(var.optional_dependencies):
            lines.append(f"  {dependency} -.-> {var.name}")
    return "\n".join(lines) + "\n"


def render_variants(out_dir: str | Path, images: bool | None = None) -> RenderReport:
    """Write each variant's DAG as DOT and Mermaid, plus SVG and PNG when ``dot`` is installed."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    images = has_graphviz() if images is None else images
    report = RenderReport(images_skipped=not images)
    for variant in VARIANTS:
        graph = variant_graph(variant)
        stem = out / f"lookup_dag_{variant}"
        report.written.append(_write(stem.with_suffix(".dot"), graph.source))
        report.written.append(_write(stem.with_suffix(".mmd"), mermaid_source(variant)))
        for fmt in IMAGE_FORMATS if images else ():
            path = stem.with_suffix(f".{fmt}")
            path.write_bytes(graph.pipe(format=fmt))
            report.written.append(path)
    return report


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def dot_node_edge_set(source: str) -> tuple[set[str], set[tuple[str, str]]]:
    """Node names and edges read from DOT source (to check that committed diagrams are current)."""
    nodes = {name for name in _DOT_NODE.findall(source) if name not in _DOT_NOT_NODES}
    return nodes, set(_DOT_EDGE.findall(source))


def execution_graph(tool: Any, result: LookupResult, inputs: dict[str, Any]) -> graphviz.Digraph:
    """The DAG path a query executed, titled with the query, filter and fallback decision; each
    node that ran shows its wall time under its type, and ``unfiltered_hits`` what became of it."""
    trace = result.retrieval_trace
    return path_graph(
        tool,
        inputs,
        execution_title(result.query, trace.category_filter if trace else None,
                        trace.fallback_reason if trace else None, result.evidence_status),
        trace.executed_nodes if trace else [],
        trace.attempts if trace else [],
        trace.fallback_reason if trace else None,
    )  # fmt: skip


def path_graph(
    tool: Any,
    inputs: dict[str, Any],
    title: str,
    executed_nodes: Sequence[NodeTiming],
    attempts: Sequence[AttemptTrace],
    fallback_reason: str | None,
) -> graphviz.Digraph:
    """The DAG path of a lookup from its parts (a live result's trace, or a recorded call's):
    each node that ran shows its wall time under its type and is drawn bold, and
    ``unfiltered_hits`` what became of the unfiltered search."""
    graph = tool.driver.visualize_execution([FINAL_NODE], inputs=inputs, orient="TB", bypass_validation=True)
    ran = {timing.name: timing.ms for timing in executed_nodes}
    graph.body = [_with_time(line, ran) for line in _in_stable_order(graph.body)]
    if "unfiltered_hits" in ran:
        graph.node(
            "unfiltered_hits", **_unfiltered_hits_node(attempts, fallback_reason, ran["unfiltered_hits"])
        )
    graph.attr(label=title, labelloc="t", fontname="Helvetica")
    return graph


def _with_time(line: str, ran: dict[str, float]) -> str:
    """A node's DOT line with its wall time added under its type (not beside it, where an
    ``xlabel`` lands on the edges), and a bold outline: it ran."""
    match = _DOT_LABEL_END.match(line)
    if match is None or match[2] not in ran:
        return line
    rest = line[match.end(1) :]
    if rest.rstrip().endswith("]"):
        rest = rest.rstrip()[:-1] + " penwidth=2.5]" + line[len(line.rstrip()) :]
    return f"{match[1]}<br />{ran[match[2]]:.2f} ms{rest}"


def _unfiltered_hits_node(
    attempts: Sequence[AttemptTrace], fallback_reason: str | None, ms: float
) -> dict[str, str]:
    """What became of the unfiltered search: its hits used (the fallback), run as the relative
    rule's companion and not used, or not run at all."""
    searched = [attempt for attempt in attempts[1:] if attempt.kind == "unfiltered"]
    if searched and searched[0].used:
        state, style = f"used: fallback ({fallback_reason})", {"fillcolor": "orange"}
    elif searched:
        state, style = (
            "companion: ran, not used",
            {"fillcolor": "lightgrey", "style": "rounded,filled,dashed"},
        )
    else:
        state, style = "no unfiltered search", {"fillcolor": "white", "style": "rounded,filled,dashed"}
    return {
        "label": f"<<b>unfiltered_hits</b><br /><br /><i>{state}</i><br />{ms:.2f} ms>",
        "penwidth": "2.5",
        **style,
    }


def execution_title(query: str, category: str | None, fallback: str | None, status: str) -> str:
    """The drawing's title: the query (cut at 80 characters), its filter, fallback and status."""
    query = query if len(query) <= 80 else query[:79] + "…"
    return (
        f"query: {query}\nfilter: {category or 'none'} | fallback: {fallback or 'none'} | {status}\n"
        "each node: its wall time in this lookup, under its type (bold: it ran)"
    )


def render_execution(
    tool: Any, result: LookupResult, inputs: dict[str, Any], path: str | Path
) -> RenderReport:
    """Write the executed path to ``path`` in the format its suffix names (``.png``, ``.svg``, ...;
    ``.dot`` for the source). Without ``dot`` an image request writes the DOT source beside it.
    The folder must exist: it is never created."""
    path = Path(path)
    if not path.parent.is_dir():
        raise ValueError(f"the folder {path.parent} does not exist")
    graph = execution_graph(tool, result, inputs)
    fmt = path.suffix.lstrip(".").lower() or "png"
    if fmt not in graphviz.FORMATS:
        raise ValueError(f"cannot draw {path.name}: use .png, .svg, .pdf or .dot")
    if fmt in {"dot", "gv"}:
        return RenderReport([_write(path, graph.source)])
    if not has_graphviz():
        return RenderReport([_write(path.with_suffix(".dot"), graph.source)], images_skipped=True)
    path.write_bytes(graph.pipe(format=fmt))
    return RenderReport([path])
