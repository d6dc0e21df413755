"""The ASGI app of ``lookup-knowledge serve``: one process, one store, one model, many agents.

- ``/mcp``: the ``lookup_knowledge`` and ``verify_answer`` tools over MCP streamable HTTP (the SDK's
  own transport; the same tools, schemas and results as ``lookup-knowledge mcp``); a client's MCP
  session is its lookup session (``retrievedDomainsThisSession``, ``verify_answer``'s scope).
- ``POST /v1/lookup``, ``POST /v1/verify``: the same calls as JSON; ``GET /healthz``, ``GET /readyz``,
  ``GET /metrics`` (Prometheus), ``GET /openapi.json``.

A request's access scope comes from its bearer token only (:mod:`.tokens`): its principals', or
every document for an ``unrestricted`` token; without tokens every call is made as
``access.principals`` and the server listens on loopback only.

>>> app = serve_app(config, AgentLookup.from_config(config))  # doctest: +SKIP
>>> uvicorn.run(app, host="127.0.0.1", port=8765)  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import uvicorn
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.types import CallToolResult
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.json_schema import models_json_schema
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from lookup_knowledge.adapters.recorder import RecorderUnavailableError
from lookup_knowledge.adapters.search import AccessScope
from lookup_knowledge.agent.lookup import AgentLookup
from lookup_knowledge.agent.mcp_server import (
    CappedLogText,
    lookup_tool_result,
    tool_error,
    tool_server,
    verify_tool_result,
)
from lookup_knowledge.agent.tool_definition import LookupArguments, VerifyArguments
from lookup_knowledge.agent.verify import AnswerTooLongError, AnswerVerdict
from lookup_knowledge.config import Config, ServeConfig
from lookup_knowledge.contract import LookupResult
from lookup_knowledge.extras import missing_modules
from lookup_knowledge.serve.limits import Admission, BodyLimits, Busy, TimedOut
from lookup_knowledge.serve.metrics import RequestMetrics, ServeMetrics
from lookup_knowledge.serve.tokens import ANONYMOUS, Caller, TokenTable, caller_of

logger = logging.getLogger(__name__)

LOOPBACK = ("127.0.0.1", "localhost", "::1")
SESSION_META_KEY = "lookup-knowledge/session"  # an MCP call's _meta key naming its session
ROUTES = ("/mcp", "/v1/lookup", "/v1/verify", "/healthz", "/readyz", "/metrics", "/openapi.json")
ErrorKind = Literal[
    "invalid_token", "bad_json", "invalid_request", "invalid_input", "answer_too_long", "too_large",
    "body_timeout", "busy", "timeout", "retrieval_failed", "recorder_unavailable", "not_found",
    "method_not_allowed", "internal",
]  # fmt: skip


class LookupBody(LookupArguments):
    """``POST /v1/lookup``: the tool's arguments and, optionally, the session the call belongs to."""

    session: str | None = Field(default=None, description="Calls naming one session share its domains.")


class VerifyBody(VerifyArguments):
    """``POST /v1/verify``: the tool's arguments and the session whose lookups the answer cites."""

    session: str = Field(description="The session of the lookups the answer cites.")


class ApiError(BaseModel):
    """Every JSON error (the shape of the MCP SDK's 401)."""

    model_config = ConfigDict(extra="forbid")

    error: ErrorKind
    error_description: str


class Refused(Exception):
    """A request answered with an :class:`ApiError`."""

    def __init__(self, status: int, kind: ErrorKind, description: str) -> None:
        super().__init__(description)
        self.status, self.kind, self.description = status, kind, description


class Service:
    """The calls both the JSON API and the MCP tools make: on the shared :class:`AgentLookup`,
    through one :class:`Admission` (bound, deadline), counted in the metrics."""

    def __init__(self, agent: AgentLookup, settings: ServeConfig) -> None:
        self.agent, self.settings = agent, settings
        self.metrics = ServeMetrics(lambda: len(agent.tool.l0_index.documents))
        self.admission = Admission(
            settings.max_in_flight, settings.request_timeout_s, self.metrics.in_flight.set
        )
        self.ready = False  # the warm-up finished with the model loaded and the store answering
        self.last_failure: str | None = None  # the store or model failure of the last lookup

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` admitted (a refusal counted as its kind and raised)."""
        try:
            return await self.admission.run(fn, *args)
        except Busy:
            self.metrics.errors.labels("busy").inc()
            raise
        except TimedOut:
            self.metrics.errors.labels("timeout").inc()
            raise

    async def lookup(self, query: Any, session: str | None, caller: Caller) -> LookupResult:
        result: LookupResult = await self.call(
            functools.partial(self.agent.call, principals=caller.scope), query, session
        )
        self.metrics.lookups.labels(result.evidence_status).inc()
        if result.evidence_status in ("invalid_input", "retrieval_failed"):
            self.metrics.errors.labels(result.evidence_status).inc()
        self.last_failure = result.message if result.evidence_status == "retrieval_failed" else None
        return result

    def verify(self, answer: str, session: str, caller: Caller, check_uncited: bool) -> AnswerVerdict:
        return self.agent.verify_answer(answer, session, check_uncited=check_uncited, principals=caller.scope)

    def refusal(self, exc: Busy | TimedOut) -> str:
        """What a refused call is told (the MCP tool error; the JSON API's description)."""
        wait = f"retry after {self.settings.retry_after_s} s"
        if isinstance(exc, Busy):
            return f"The server is busy ({self.settings.max_in_flight} calls in flight); {wait}."
        return f"The call did not finish within {self.settings.request_timeout_s:g} s; {wait}."

    def warm_up(self, scopes: Sequence[AccessScope | None]) -> None:
        """Load the model and measure the store's probe null for each caller's scope (``None``:
        ``access.principals``'), then say whether the store answers (:attr:`ready`)."""
        scopes = list(scopes) or [None]
        self.agent.warm_up(scopes[0])
        for scope in scopes:  # each scope's probe null measured now, not at its first call
            check = self.agent.tool.lookup("warm-up lookup of the knowledge base", principals=scope)
        self.last_failure = check.message if check.evidence_status == "retrieval_failed" else None
        self.ready = True


def build_app(
    agent: AgentLookup,
    settings: ServeConfig,
    *,
    host: str = "127.0.0.1",
    warm_up: bool = True,
    routes: Sequence[BaseRoute] = (),
) -> Starlette:
    """The app serving ``agent`` under ``settings`` (its tokens, limits). ``host``: the address it
    is served on (on loopback, the MCP transport refuses other ``Host`` headers: DNS rebinding).
    ``warm_up``: load the model and calibrate at start (``/readyz`` says when done). ``routes``:
    more routes, matched after the API's (the review UI at ``/``)."""
    service = Service(agent, settings)
    tokens = TokenTable(settings.tokens)
    mcp = _http_tools(service)
    mcp.streamable_http_app(
        max_request_body_size=settings.max_body_bytes, host=host
    )  # builds its session manager
    transport = StreamableHTTPASGIApp(mcp.session_manager)
    mcp_endpoint = RequireAuthMiddleware(transport, []) if tokens else transport

    def authenticated(request: Request) -> Caller:
        if tokens and not request.user.is_authenticated:
            raise Refused(401, "invalid_token", "Authentication required")
        return caller_of(request.user)

    async def lookup(request: Request) -> Response:
        caller = authenticated(request)
        body = _body(await request.body(), LookupBody)
        session = None if body.session is None else caller.session(body.session)
        result = await service.lookup(body.query, session, caller)
        status = {"invalid_input": 422, "retrieval_failed": 503}.get(result.evidence_status, 200)
        headers = _retry(settings) if status == 503 else None
        return JSONResponse(result.model_dump(by_alias=True, mode="json"), status, headers)

    async def verify(request: Request) -> Response:
        caller = authenticated(request)
        body = _body(await request.body(), VerifyBody)
        try:
            verdict = await service.call(
                service.verify, body.answer, caller.session(body.session), caller, body.check_uncited
            )
        except AnswerTooLongError as exc:
            raise Refused(422, "answer_too_long", str(exc)) from None
        except RecorderUnavailableError as exc:
            raise Refused(503, "recorder_unavailable", f"verify needs the invocation record: {exc}") from None
        return JSONResponse(verdict.model_dump(by_alias=True, mode="json"))

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "up"})

    async def readyz(request: Request) -> Response:
        parts = {
            "warmedUp": service.ready,
            "store": "unavailable" if service.last_failure else "open",
            "inFlight": service.admission.in_flight,
        }
        ready = service.ready and not service.last_failure
        return JSONResponse(
            {"ready": ready, **parts}, 200 if ready else 503, None if ready else _retry(settings)
        )

    async def metrics(request: Request) -> Response:
        authenticated(request)
        return Response(
            generate_latest(service.metrics.registry), headers={"content-type": CONTENT_TYPE_LATEST}
        )

    async def openapi(request: Request) -> Response:
        return JSONResponse(OPENAPI)

    async def refused(request: Request, exc: Exception) -> Response:
        if isinstance(exc, Busy | TimedOut):
            status, kind = (429, "busy") if isinstance(exc, Busy) else (503, "timeout")
            exc = Refused(status, kind, service.refusal(exc))
        elif isinstance(exc, HTTPException):
            kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "invalid_request")
            exc = Refused(exc.status_code, kind, str(exc.detail))
        elif not isinstance(exc, Refused):
            logger.exception("request failed")
            exc = Refused(500, "internal", "the server failed to answer; see its log")
        if exc.kind not in ("busy", "timeout"):  # counted where they happen (the MCP tools too)
            service.metrics.errors.labels(exc.kind).inc()
        headers = _retry(settings) if exc.status in (429, 503) else None
        if exc.status == 401:
            headers = {
                "www-authenticate": f'Bearer error="invalid_token", error_description="{exc.description}"'
            }
        body = ApiError(error=exc.kind, error_description=exc.description).model_dump()
        return JSONResponse(body, exc.status, headers)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with mcp.session_manager.run(), anyio.create_task_group() as tasks:
            if warm_up:
                scopes = [caller.scope for caller in tokens.callers()] if tokens else [None]
                tasks.start_soon(anyio.to_thread.run_sync, service.warm_up, scopes)
            else:
                service.ready = True
            yield
            tasks.cancel_scope.cancel()
        if not await service.admission.drained(settings.shutdown_timeout_s):
            logger.warning("closing the store with %d calls still running", service.admission.in_flight)
        await anyio.to_thread.run_sync(agent.close)

    api = [
        Route("/mcp", mcp_endpoint, methods=["GET", "POST", "DELETE"]),
        Mount(  # its own router: an unknown /v1 path or method is the API's JSON 404/405, not a page's
            "/v1",
            routes=[Route("/lookup", lookup, methods=["POST"]), Route("/verify", verify, methods=["POST"])],
        ),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]
    middleware = [
        Middleware(RequestMetrics, metrics=service.metrics, routes=ROUTES),
        Middleware(BodyLimits, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout_s),
        Middleware(AuthenticationMiddleware, backend=BearerAuthBackend(tokens)),
        Middleware(AuthContextMiddleware),
    ]
    app = Starlette(
        routes=[*api, *routes],
        middleware=middleware,
        # each its own handler: Starlette sends only a bare Exception's to its outermost layer, which
        # logs a traceback and passes by the request metrics
        exception_handlers={exc: refused for exc in (Refused, Busy, TimedOut, HTTPException, Exception)},
        lifespan=lifespan,
    )
    app.state.service = service
    return app


def _http_tools(service: Service) -> MCPServer:
    """The MCP tools over streamable HTTP: each call made as its request's caller, in the MCP
    session it belongs to, through the service's admission (a refusal is a tool error)."""

    async def lookup_knowledge(query: str, ctx: Context) -> Annotated[CallToolResult, LookupResult]:
        caller, session = _mcp_caller(ctx)
        try:
            return lookup_tool_result(await service.lookup(query, session, caller))
        except (Busy, TimedOut) as exc:
            return tool_error(service.refusal(exc))

    async def verify_answer(
        ctx: Context, answer: str, check_uncited: bool = False
    ) -> Annotated[CallToolResult, AnswerVerdict]:
        caller, session = _mcp_caller(ctx)
        verify = functools.partial(service.verify, answer, session, caller, check_uncited)
        try:
            return await service.call(verify_tool_result, verify)
        except (Busy, TimedOut) as exc:
            return tool_error(service.refusal(exc))

    return tool_server(lookup_knowledge, verify_answer)


def _mcp_caller(ctx: Context) -> tuple[Caller, str]:
    """The caller of an MCP call (from its HTTP request's token) and its lookup session: the one its
    ``_meta`` names (:data:`SESSION_META_KEY`, the JSON API's ``session``), else its MCP session
    (``Mcp-Session-Id`` of a handshake-era client: the SDK serves a session only to the token that
    opened it), else (a stateless 2026-07-28 client) one session per caller."""
    request = ctx.request_context.request
    caller = caller_of(request.scope.get("user")) if isinstance(request, Request) else ANONYMOUS
    named = (ctx.request_context.meta or {}).get(SESSION_META_KEY)
    if isinstance(named, str) and named:
        return caller, caller.session(named)
    mcp_session = request.headers.get("mcp-session-id") if isinstance(request, Request) else None
    return caller, f"mcp-{mcp_session}" if mcp_session else caller.session("mcp")


def _body(raw: bytes, model: type[BaseModel]) -> Any:
    """The request body as ``model``: 400 when it is not JSON, 422 when it is not that object
    (which fields, never their values)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise Refused(400, "bad_json", "the request body is not valid JSON") from None
    try:
        return model.model_validate(data, strict=True)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
        raise Refused(422, "invalid_request", problems[:1000]) from None


def _retry(settings: ServeConfig) -> dict[str, str]:
    return {"retry-after": str(settings.retry_after_s)}


def _openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the JSON API, its schemas the pydantic models themselves."""
    _, schema = models_json_schema(
        [(LookupBody, "validation"), (VerifyBody, "validation"), (LookupResult, "serialization"),
         (AnswerVerdict, "serialization"), (ApiError, "serialization")],
        ref_template="#/components/schemas/{model}",
    )  # fmt: skip

    def ref(name: str) -> dict[str, Any]:
        return {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}

    errors = {
        "400": {"description": "not JSON", **ref("ApiError")},
        "401": {"description": "no valid bearer token", **ref("ApiError")},
        "413": {"description": "body over serve.max_body_bytes", **ref("ApiError")},
        "422": {"description": "not the request's fields or types", **ref("ApiError")},
        "429": {"description": "serve.max_in_flight calls running; see Retry-After", **ref("ApiError")},
        "503": {"description": "timed out, or the store is unavailable; see Retry-After", **ref("ApiError")},
    }
    bearer = [{"bearer": []}]
    return {
        "openapi": "3.1.0",
        "info": {"title": "lookup-knowledge", "version": "1"},
        "components": {
            "schemas": schema["$defs"],
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "paths": {
            "/v1/lookup": {"post": {
                "summary": "Look up evidence for one query (the lookup_knowledge tool)", "security": bearer,
                "requestBody": {"required": True, **ref("LookupBody")},
                "responses": {"200": {"description": "the result", **ref("LookupResult")}, **errors,
                              "422": {"description": "invalid_input (the result says why) or invalid fields",
                                      **ref("LookupResult")}},
            }},
            "/v1/verify": {"post": {
                "summary": "Verify an answer against the session's lookups (the verify_answer tool)",
                "security": bearer, "requestBody": {"required": True, **ref("VerifyBody")},
                "responses": {"200": {"description": "the verdict", **ref("AnswerVerdict")}, **errors},
            }},
            "/healthz": {"get": {"summary": "The process is up",
                                 "responses": {"200": {"description": "up"}}}},
            "/readyz": {"get": {"summary": "Model loaded, store calibrated and answering",
                                "responses": {"200": {"description": "ready"},
                                              "503": {"description": "not yet"}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics", "security": bearer,
                                 "responses": {"200": {"description": "text format 0.0.4"}}}},
        },
    }  # fmt: skip


OPENAPI = _openapi()


def serve_http(
    config: Config,
    host: str,
    port: int,
    *,
    allow_unauthenticated: bool = False,
    eval_dirs: Sequence[Path] = (),
    on_start: Callable[[str], None] = print,
) -> None:
    """Serve the configured tool on ``host:port`` until SIGTERM or SIGINT, which let the calls in
    flight finish (``serve.shutdown_timeout_s``) and close the store. Without tokens only a
    loopback ``host`` is served, unless ``allow_unauthenticated``."""
    settings = config.serve
    if not settings.tokens and host not in LOOPBACK and not allow_unauthenticated:
        raise ValueError(
            f"no serve.tokens are configured, so {host} would let anyone who reaches it search the "
            "knowledge base: configure tokens (lookup-knowledge token NAME), bind a loopback address, "
            "or pass --allow-unauthenticated"
        )
    app = serve_app(
        config, AgentLookup.from_config(config, require_store=False), host=host, eval_dirs=eval_dirs
    )
    logging.getLogger("mcp").setLevel(logging.WARNING)  # the SDK's session notes: not for the operator
    for handler in logging.getLogger().handlers:  # the SDK logs client text (a tool name) in full
        handler.addFilter(CappedLogText())
    unrestricted = sum(token.unrestricted for token in settings.tokens)
    who = (
        f"{len(settings.tokens)} bearer token(s) configured"
        + (f", {unrestricted} of them unrestricted" if unrestricted else "")
        if settings.tokens
        else "no tokens configured: every call is made as access.principals"
        + (", from any address (--allow-unauthenticated)" if host not in LOOPBACK else ", loopback only")
    )
    on_start(
        f"serving on http://{_authority(host, port)}: MCP at /mcp, JSON at /v1/lookup and /v1/verify, "
        + ("no review pages (the review extra)" if missing_modules("review") else "the review pages at /")
        + f"; {who}"
    )
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=int(settings.shutdown_timeout_s),
        timeout_keep_alive=5,
    )


def serve_app(
    config: Config, agent: AgentLookup, *, host: str = "127.0.0.1", eval_dirs: Sequence[Path] = ()
) -> Starlette:
    """The app ``serve`` runs: :func:`build_app` over ``agent`` under ``config.serve``, with the
    review pages (:func:`review_pages`) at ``/`` where the ``review`` extra is installed."""
    pages = review_pages(agent, config, eval_dirs)
    return build_app(agent, config.serve, host=host, routes=[] if pages is None else [Mount("/", app=pages)])


def review_pages(agent: AgentLookup, config: Config, eval_dirs: Sequence[Path]) -> Starlette | None:
    """The review UI (:mod:`lookup_knowledge.review`) over ``agent``, its reviewer a request's
    bearer token or sign-in cookie in that token's scope, as for the API (an unrestricted token:
    every document, call and eval run); without tokens, the one local reviewer is
    ``access.principals`` (unrestricted by default, as ``lookup-knowledge review``); ``None``
    without the ``review`` extra."""
    if missing_modules("review"):
        return None
    from lookup_knowledge.review import request_token, review_app

    tokens = TokenTable(config.serve.tokens)
    everyone = AccessScope.of(config.access.principals)

    def reviewer(request: Request) -> AccessScope | None:
        if not tokens:
            return everyone
        caller = tokens.caller(request_token(request) or "")
        return None if caller is None else caller.scope

    return review_app(lambda: agent.tool, agent.recorder, eval_dirs, reviewer, token_sign_in=bool(tokens))


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
