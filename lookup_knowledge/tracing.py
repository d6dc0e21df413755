"""OpenTelemetry spans for lookups: one span per lookup, a child span per executed DAG node.

Enabled by ``tracing.opentelemetry: true``. Spans go to the globally configured tracer provider,
so exporters are set up the standard OpenTelemetry way (the SDK, or ``opentelemetry-instrument``
with the ``OTEL_*`` environment variables); without an SDK the API records nothing. The query's
text is an attribute only with ``tracing.include_query: true``; its length always is.
"""

from __future__ import annotations

import threading
from typing import Any

from hamilton.lifecycle import GraphExecutionHook, NodeExecutionHook
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from lookup_knowledge.contract import LookupResult

TRACER_NAME = "lookup_knowledge"
LOOKUP_SPAN = "lookup_knowledge"


class LookupSpans(GraphExecutionHook, NodeExecutionHook):
    """A Hamilton lifecycle adapter that emits the span tree of each lookup on its thread."""

    def __init__(self, include_query: bool = False, tracer: trace.Tracer | None = None) -> None:
        self.include_query = include_query
        self.tracer = tracer or trace.get_tracer(TRACER_NAME)
        self._local = threading.local()

    def run_before_graph_execution(self, *, inputs: dict[str, Any], run_id: str, **_: Any) -> None:
        query = str(inputs.get("query", ""))
        attributes: dict[str, Any] = {"lookup.query_length": len(query), "hamilton.run_id": run_id}
        if self.include_query:
            attributes["lookup.query"] = query
        root = self.tracer.start_span(LOOKUP_SPAN, attributes=attributes)
        self._local.root, self._local.context = root, trace.set_span_in_context(root)

    def run_before_node_execution(self, *, node_name: str, **_: Any) -> None:
        self._local.node = self.tracer.start_span(node_name, context=self._local.context)

    def run_after_node_execution(self, *, success: bool, error: Exception | None, **_: Any) -> None:
        _end(self._local.node, success, error)

    def run_after_graph_execution(
        self, *, success: bool, error: Exception | None, results: Any, **_: Any
    ) -> None:
        root: Span = self._local.root
        if isinstance(results, LookupResult):
            root.set_attributes(result_attributes(results))
        _end(root, success, error)


def result_attributes(result: LookupResult) -> dict[str, Any]:
    """What a lookup decided, as span attributes (no content, no query text)."""
    trace_ = result.retrieval_trace
    attributes: dict[str, Any] = {
        "lookup.evidence_status": result.evidence_status,
        "lookup.evidence_blocks": len(result.evidence_blocks),
        "lookup.relevance_level": result.relevance_level,
    }
    if trace_ is not None:
        attributes["lookup.category_filter"] = trace_.category_filter or ""
        attributes["lookup.fallback_reason"] = trace_.fallback_reason or ""
        attributes["lookup.searches"] = len(trace_.attempts)
        attributes["lookup.hits"] = sum(attempt.hit_count for attempt in trace_.attempts)
    return attributes


def _end(span: Span, success: bool, error: Exception | None) -> None:
    if not success:
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
    span.end()
