"""Offline DAG diagrams (graphviz): every config variant, and one query's executed path."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import graphviz

from lookup_knowledge.contract import LookupResult
from lookup_knowledge.pipeline import FINAL_NODE, VARIANTS, build_driver

FORMATS = ("svg", "png")
_SVG_TITLE = re.compile(r"<title>(.*?)</title>")


def variant_graph(variant: str) -> graphviz.Digraph:
    """The full DAG of one config variant (``default``, ``l1_disabled``, ``l0_disabled``)."""
    return build_driver(VARIANTS[variant]).display_all_functions(orient="TB", show_legend=True)


def render_variants(out_dir: str | Path) -> list[Path]:
    """Write each variant's DAG as SVG and PNG into ``out_dir``; returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for variant in VARIANTS:
        graph = variant_graph(variant)
        for fmt in FORMATS:
            path = out / f"lookup_dag_{variant}.{fmt}"
            path.write_bytes(graph.pipe(format=fmt))
            written.append(path)
    return written


def svg_node_edge_set(svg: str) -> tuple[set[str], set[tuple[str, str]]]:
    """Node names and edges read back from a graphviz SVG (for checking diagrams are current)."""
    nodes: set[str] = set()
    edges: set[tuple[str, str]] = set()
    for title in _SVG_TITLE.findall(svg):
        title = title.replace("&#45;", "-").replace("&gt;", ">").replace("&amp;", "&")
        if "->" in title:
            source, target = title.split("->", 1)
            edges.add((source, target))
        elif title not in {"%3", "G"} and not title.startswith("cluster"):
            nodes.add(title)
    return nodes, edges


def render_execution(tool: Any, result: LookupResult, inputs: dict[str, Any], path: str | Path) -> Path:
    """Render the DAG path a query executed, marking whether the fallback branch ran."""
    graph = tool.driver.visualize_execution([FINAL_NODE], inputs=inputs, orient="TB", bypass_validation=True)
    trace = result.retrieval_trace
    ran = {timing.name: timing.ms for timing in trace.executed_nodes} if trace else {}
    for name, ms in ran.items():
        graph.node(name, xlabel=f"{ms:.2f} ms", color="darkgreen", penwidth="2")
    if trace is not None and len(trace.attempts) > 1:
        label = f"unfiltered_hits\nRETRY: {trace.fallback_reason}"
        graph.node("unfiltered_hits", label=label, fillcolor="orange", style="filled")
    elif "unfiltered_hits" in ran:
        label = "unfiltered_hits\n(no retry)"
        graph.node("unfiltered_hits", label=label, style="dashed", color="gray", fontcolor="gray")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = path.suffix.lstrip(".") or "png"
    path.write_bytes(graph.pipe(format=fmt))
    return path
