"""A lookup is one Hamilton run: graph and node hooks of any lifecycle adapter fire, the executed
nodes come from the run, and OpenTelemetry sees one span per lookup with a child per node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hamilton.lifecycle import GraphExecutionHook, NodeExecutionHook
from hamilton.lifecycle.base import BaseDoNodeExecute
from hamilton.node import DependencyType
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from lookup_knowledge import KnowledgeTool, load_config
from lookup_knowledge.adapters.embedder import Embedder
from lookup_knowledge.pipeline import lookup_driver

REFUND_QUERY = "Who must approve a refund above 500 EUR?"


class RunRecorder(GraphExecutionHook, NodeExecutionHook):
    """A user's own adapter: what Hamilton told it, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def run_before_graph_execution(self, *, run_id: str, **_: Any) -> None:
        self.events.append(("before_graph", run_id))

    def run_after_graph_execution(self, *, run_id: str, success: bool, **_: Any) -> None:
        self.events.append(("after_graph" if success else "graph_failed", run_id))

    def run_before_node_execution(self, *, node_name: str, **_: Any) -> None:
        self.events.append(("node", node_name))

    def run_after_node_execution(self, **_: Any) -> None:
        pass


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    """The process's tracer provider, exporting to memory (set once: OTel allows one provider)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    trace.set_tracer_provider(provider)
    return memory


def test_a_user_adapter_sees_each_lookup_as_one_run(sample_store: Path, embedder) -> None:
    recorder = RunRecorder()
    config = load_config(overrides={"store.path": str(sample_store)})
    with KnowledgeTool(config, embedder=embedder, adapters=[recorder]) as tool:
        first = tool.lookup(REFUND_QUERY)
        tool.lookup("kafka consumer lag")
    graph_events = [event for event in recorder.events if event[0] != "node"]
    assert [kind for kind, _ in graph_events] == ["before_graph", "after_graph"] * 2
    assert graph_events[0][1] == graph_events[1][1] != graph_events[2][1]  # one run id per lookup
    first_nodes = [name for kind, name in recorder.events[1 : recorder.events.index(graph_events[1])]]
    assert first_nodes == [node.name for node in first.retrieval_trace.executed_nodes]


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
def test_every_input_of_the_dag_is_one_the_tool_supplies(sample_store: Path, embedder, mode: str) -> None:
    """A public helper in a dataflow module becomes a node of its own, with inputs nobody passes
    (such a stray node once showed in every rendered DAG): each external input must be supplied."""
    config = load_config(overrides={"store.path": str(sample_store), "retrieval.mode": mode})
    with KnowledgeTool(config, embedder=embedder) as tool:
        supplied = set(tool.dataflow_inputs(REFUND_QUERY)) | set(tool.driver.graph.config)
        optional = {
            name
            for node in tool.driver.graph.nodes.values()
            for name, (_, kind) in node.input_types.items()
            if kind == DependencyType.OPTIONAL
        }
        external = {node.name for node in tool.driver.graph.nodes.values() if node.user_defined}
    assert external - supplied - optional == set()


def test_opentelemetry_span_tree_of_a_fallback_lookup(
    sample_store: Path, embedder, exporter: InMemorySpanExporter
) -> None:
    exporter.clear()
    config = load_config(overrides={"store.path": str(sample_store), "tracing.opentelemetry": True})
    with KnowledgeTool(config, embedder=embedder) as tool:
        result = tool.lookup(REFUND_QUERY, pinned_category="no-such-category")
    spans = exporter.get_finished_spans()
    (root,) = [span for span in spans if span.parent is None]
    children = [span for span in spans if span.parent is not None]
    assert root.name == "lookup_knowledge"
    assert {span.parent.span_id for span in children} == {root.context.span_id}
    assert [span.name for span in sorted(children, key=lambda s: s.start_time)] == [
        node.name for node in result.retrieval_trace.executed_nodes
    ]
    assert "unfiltered_hits" in {span.name for span in children}
    attributes = dict(root.attributes)
    assert attributes["lookup.query_length"] == len(REFUND_QUERY)
    assert "lookup.query" not in attributes  # the text only with tracing.include_query
    assert attributes["lookup.category_filter"] == "no-such-category"
    assert attributes["lookup.fallback_reason"] == "filtered_vector_no_evidence"
    assert attributes["lookup.evidence_status"] == "evidence"
    assert attributes["lookup.evidence_blocks"] == len(result.evidence_blocks) > 0
    assert attributes["lookup.searches"] == 2


def test_opentelemetry_carries_the_query_only_when_asked(
    sample_store: Path, embedder, exporter: InMemorySpanExporter
) -> None:
    exporter.clear()
    overrides = {
        "store.path": str(sample_store),
        "tracing.opentelemetry": True,
        "tracing.include_query": True,
    }
    with KnowledgeTool(load_config(overrides=overrides), embedder=embedder) as tool:
        tool.lookup(REFUND_QUERY)
    (root,) = [span for span in exporter.get_finished_spans() if span.parent is None]
    assert root.attributes["lookup.query"] == REFUND_QUERY


class ExplodingEmbedder(Embedder):
    """Fault injection: a defect (not a port failure) inside a node."""

    model_name = "exploding"
    dimension = 384

    def embed_query(self, text: str) -> Any:
        raise KeyError("a bug in a node")

    embed_documents = embed_queries = embed_query


def test_a_defect_in_a_node_is_logged_with_its_traceback_and_answered_as_a_result(
    sample_store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = load_config(overrides={"store.path": str(sample_store)})
    with KnowledgeTool(config, embedder=ExplodingEmbedder()) as tool:
        result = tool.lookup(REFUND_QUERY)
    assert result.evidence_status == "retrieval_failed" and not result.found
    (record,) = [r for r in caplog.records if r.name == "lookup_knowledge.agent.knowledge_tool"]
    assert record.levelname == "ERROR" and record.exc_info is not None
    assert record.exc_info[0] is KeyError


class NodeRunner(BaseDoNodeExecute):
    """An adapter that runs the nodes itself, as Hamilton's cache adapter does."""

    def do_node_execute(self, *, node_, kwargs: dict[str, Any], **_: Any) -> Any:
        return node_(**kwargs)


def test_an_adapter_that_runs_the_nodes_itself_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="adapter NodeRunner runs the nodes itself"):
        lookup_driver(load_config(), NodeRunner())
