"""Prometheus metrics of ``serve`` (``prometheus-client``, one registry per app): requests by route
and status code, their latency, calls in flight, errors by kind, lookups by evidence status and
the store's size. Labels take only fixed values (route templates, codes, kinds): never a query,
a session, a token or a principal."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ServeMetrics:
    """The instruments, registered in :attr:`registry`."""

    def __init__(self, store_documents: Callable[[], float]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "lookup_knowledge_http_requests",
            "HTTP requests answered",
            ["route", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "lookup_knowledge_http_request_duration_seconds",
            "Time to answer an HTTP request (an MCP stream: until it closes)",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "lookup_knowledge_calls_in_flight", "Lookups and verifications running", registry=self.registry
        )
        self.errors = Counter(
            "lookup_knowledge_errors",
            "Requests and calls refused or failed, by kind",
            ["kind"],
            registry=self.registry,
        )
        self.lookups = Counter(
            "lookup_knowledge_lookups",
            "Lookups answered, by evidence status",
            ["status"],
            registry=self.registry,
        )
        self.documents = Gauge(
            "lookup_knowledge_store_documents", "Documents in the knowledge base", registry=self.registry
        )
        self.documents.set_function(store_documents)


class RequestMetrics:
    """ASGI middleware counting and timing every HTTP request by route (one of ``routes``, else
    ``other``: a client's paths never become labels) and status code."""

    def __init__(self, app: ASGIApp, metrics: ServeMetrics, routes: Collection[str]) -> None:
        self.app, self.metrics, self.routes = app, metrics, frozenset(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = scope["path"] if scope["path"] in self.routes else "other"
        code = 500  # what a request whose app raised before answering got from the server
        started = time.perf_counter()

        async def sent(message: Message) -> None:
            nonlocal code
            if message["type"] == "http.response.start":
                code = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            self.metrics.requests.labels(route, str(code)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - started)
