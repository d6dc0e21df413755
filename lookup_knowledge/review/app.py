"""The review pages: a Starlette app of server-rendered HTML (Jinja2) that ``serve`` mounts at
``/`` and ``lookup-knowledge review`` serves alone. Read-only: its lookups are not recorded.

Who a request is comes only from the host: ``principals_of(request)`` returns the reviewer's
:class:`AccessScope`, or ``None`` (not signed in: the sign-in page, 401). A host that checks
bearer tokens reads them with :func:`request_token` (the ``Authorization`` header, else the
HttpOnly, SameSite=Strict cookie the sign-in form sets); no form field or query parameter is
ever read as a principal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from lookup_knowledge.adapters.recorder import Invocation, InvocationRecorder, RecorderUnavailableError
from lookup_knowledge.adapters.redaction import mask_secrets
from lookup_knowledge.adapters.search import AccessScope
from lookup_knowledge.agent.request import LookupRequest, session_key
from lookup_knowledge.review.evals import (
    RunFolder,
    compare_runs,
    load_run,
    may_review,
    run_folders,
    run_scopes,
)
from lookup_knowledge.review.inspection import (
    STATUS_WORDS,
    VERDICT_WORDS,
    Inspection,
    from_record,
    from_result,
)

if TYPE_CHECKING:
    from lookup_knowledge.agent.knowledge_tool import KnowledgeTool
    from lookup_knowledge.contract import LookupResult

logger = logging.getLogger(__name__)

TOKEN_COOKIE = "lookup_knowledge_review"
PrincipalsOf = Callable[[Request], AccessScope | None]
HERE = Path(__file__).parent
RECORDS_PER_PAGE = 50
RECORD_STATUSES = (*STATUS_WORDS, "verified", "not_verified")
MAX_SCANNED_ROWS = 5000  # rows read per records page at most while skipping ones the reviewer may not see
MAX_TOKEN_CHARS = 4096


def request_token(request: Request) -> str | None:
    """The bearer token of a request: ``Authorization: Bearer ...``, else the sign-in cookie."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.cookies.get(TOKEN_COOKIE) or None


class ReviewError(Exception):
    """A request the pages answer with a message (bad input, nothing there): never a traceback."""

    def __init__(self, message: str, status_code: int = 400) -> None:
        super().__init__(message)
        self.status_code = status_code


def review_app(
    tool_for: Callable[[], KnowledgeTool],
    recorder: InvocationRecorder | None,
    eval_dirs: Iterable[Path],
    principals_of: PrincipalsOf,
    *,
    token_sign_in: bool = True,
) -> Starlette:
    """The review UI. ``tool_for()``: the tool lookups run on (with the reviewer's principals);
    ``recorder``: the invocation record (``None``: no Records page); ``eval_dirs``: eval output
    folders, or folders holding them; ``principals_of``: the reviewer of a request (see the
    module). ``token_sign_in``: offer the sign-in form to a request without principals."""
    pages = ReviewPages(tool_for, recorder, list(eval_dirs), principals_of, token_sign_in)
    routes = [
        Route("/", pages.ask, name="ask"),
        Route("/path", pages.path, name="path"),
        Route("/records", pages.records, name="records"),
        Route("/records/{row_id:int}", pages.record, name="record"),
        Route("/records/{row_id:int}/path", pages.record_path, name="record_path"),
        Route("/records/{row_id:int}/rerun", pages.rerun, name="rerun"),
        Route("/evals", pages.evals, name="evals"),
        Route("/evals/compare", pages.compare, name="compare"),
        Route("/evals/{name}/", pages.eval_run, name="eval_run"),
        Route("/evals/{name}/{file}", pages.eval_file, name="eval_file"),
        Route("/login", pages.sign_in, methods=["GET", "POST"], name="login"),
        Route("/logout", pages.sign_out, methods=["POST"], name="logout"),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    handlers = {HTTPException: pages.http_error, Exception: pages.server_error}
    return Starlette(routes=routes, exception_handlers=handlers)


def _reviewed(handler: Callable[..., Response]) -> Callable[[ReviewPages, Request], Response]:
    """A page for signed-in reviewers: ``handler(self, request, scope)``; the sign-in page (401)
    for a request the host names no principals for, a message page for a :class:`ReviewError`."""

    @wraps(handler)
    def page(self: ReviewPages, request: Request) -> Response:
        scope = self.principals_of(request)
        if scope is None:
            return self.sign_in_page(request)
        try:
            return handler(self, request, scope)
        except ReviewError as exc:
            return self.render(request, "message.html", {"message": str(exc)}, exc.status_code)
        except RecorderUnavailableError as exc:
            return self.render(request, "message.html", {"message": str(exc)}, 503)

    return page


class ReviewPages:
    """The page handlers (plain functions: Starlette runs them on its thread pool)."""

    def __init__(
        self,
        tool_for: Callable[[], KnowledgeTool],
        recorder: InvocationRecorder | None,
        eval_dirs: list[Path],
        principals_of: PrincipalsOf,
        token_sign_in: bool,
    ) -> None:
        self.tool_for, self.recorder, self.eval_dirs = tool_for, recorder, eval_dirs
        self.principals_of, self.token_sign_in = principals_of, token_sign_in
        self.templates = Jinja2Templates(directory=HERE / "templates")
        self.templates.env.filters["num"] = _num
        self.templates.env.globals["verdict_words"] = VERDICT_WORDS

    def render(
        self, request: Request, name: str, context: dict[str, Any], status_code: int = 200
    ) -> Response:
        context = {"signed_in": request.cookies.get(TOKEN_COOKIE) is not None, **context}
        response = self.templates.TemplateResponse(request, name, context, status_code=status_code)
        response.headers["Content-Security-Policy"] = (
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'"
        )
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"  # a query in the URL goes to no other site
        return response

    # --- Ask and the path -------------------------------------------------------------------

    @_reviewed
    def ask(self, request: Request, scope: AccessScope) -> Response:
        query = request.query_params.get("q")
        limit = self.tool_for().request_settings.max_query_chars  # the box takes no more than the tool
        if query is None:
            return self.render(request, "ask.html", {"query": "", "view": None, "limit": limit})
        result = self._lookup(query, scope)
        status = 400 if result.evidence_status == "invalid_input" else 200
        context = {"query": query, "view": from_result(result), "limit": limit}
        return self.render(request, "ask.html", context, status)

    @_reviewed
    def path(self, request: Request, scope: AccessScope) -> Response:
        query = request.query_params.get("q", "")
        result = self._lookup(query, scope)
        view = from_result(result)
        svg, problem = None, None
        if result.evidence_status != "invalid_input":
            from lookup_knowledge.cli.render import execution_graph

            tool = self.tool_for()
            svg, problem = _svg(lambda: execution_graph(tool, result, tool.dataflow_inputs(result.query)))
        context = {"view": view, "svg": svg, "problem": problem, "query": query}
        return self.render(request, "path.html", context, 400 if svg is None and problem is None else 200)

    def _lookup(self, query: str, scope: AccessScope) -> LookupResult:
        """The lookup of ``query`` exactly in ``scope`` (not recorded, no session)."""
        tool = self.tool_for()
        lookup = tool.request(query)
        if isinstance(lookup, LookupRequest):
            lookup = replace(lookup, scope=scope)
        return tool.answer(lookup, [])

    # --- Records ----------------------------------------------------------------------------

    @_reviewed
    def records(self, request: Request, scope: AccessScope) -> Response:
        recorder = self._recorder()
        params = request.query_params
        filters = {
            "session": params.get("session", "").strip(),
            "status": params.get("status", ""),
            "since": params.get("since", ""),
            "until": params.get("until", ""),
        }
        if filters["status"] and filters["status"] not in RECORD_STATUSES:
            raise ReviewError(f"status: {filters['status']!r} is none of {', '.join(RECORD_STATUSES)}")
        before = _int(params.get("before"), "before")
        rows, next_before = _visible_rows(
            recorder,
            scope,
            session_id=session_key(filters["session"]) if filters["session"] else None,
            status=filters["status"] or None,
            since=_moment(filters["since"], "since"),
            until=_moment(filters["until"], "until"),
            before_id=before,
        )
        context = {"rows": rows, "filters": filters, "statuses": RECORD_STATUSES, "next_before": next_before}
        return self.render(request, "records.html", context)

    @_reviewed
    def record(self, request: Request, scope: AccessScope) -> Response:
        row = self._row(request, scope)
        view = from_record(row) if row.tool_name == "lookup_knowledge" else None
        return self.render(request, "record.html", {"row": row, "view": view})

    @_reviewed
    def record_path(self, request: Request, scope: AccessScope) -> Response:
        row = self._row(request, scope)
        view = from_record(row)
        from lookup_knowledge.cli.render import execution_title, path_graph

        tool = self.tool_for()
        title = execution_title(row.input, view.category_filter, row.fallback_reason, row.status)

        def draw() -> Any:
            inputs = tool.dataflow_inputs(row.input)
            return path_graph(tool, inputs, title, view.nodes, view.attempts, row.fallback_reason)

        svg, problem = _svg(draw) if view.nodes else (None, "this call ran no DAG nodes (it was refused)")
        return self.render(request, "path.html", {"view": view, "svg": svg, "problem": problem, "row": row})

    @_reviewed
    def rerun(self, request: Request, scope: AccessScope) -> Response:
        row = self._row(request, scope)
        if row.tool_name != "lookup_knowledge":
            raise ReviewError("only lookup_knowledge calls can be run again")
        before = from_record(row)
        access = row.retrieval_details.get("access")
        as_recorded = AccessScope(tuple(access)) if isinstance(access, list) else AccessScope()
        after = from_result(
            self._lookup(row.input, as_recorded)
        )  # the call's own scope, within the reviewer's
        context = {"row": row, "before": before, "after": after, "changes": _changes(before, after)}
        return self.render(request, "rerun.html", context)

    def _recorder(self) -> InvocationRecorder:
        if self.recorder is None:
            raise ReviewError("no invocation record is configured (recording is off)", 404)
        return self.recorder

    def _row(self, request: Request, scope: AccessScope) -> Invocation:
        row = self._recorder().get(request.path_params["row_id"])
        if row is None or not may_review(scope, _access(row)):  # one answer: no hint that it exists
            raise ReviewError(f"no recorded call {request.path_params['row_id']} that you may see", 404)
        return row

    # --- Eval runs --------------------------------------------------------------------------

    @_reviewed
    def evals(self, request: Request, scope: AccessScope) -> Response:
        runs = [(folder, folder.headline()) for folder in self._runs(scope).values()]
        context = {"runs": runs, "roots": self.eval_dirs, "restricted": scope.restricted}
        return self.render(request, "evals.html", context)

    @_reviewed
    def eval_run(self, request: Request, scope: AccessScope) -> Response:
        folder = self._run(request.path_params["name"], scope)
        report = _markdown(mask_secrets(folder.report() or ""))
        others = [name for name in self._runs(scope) if name != folder.name]
        context = {"folder": folder, "headline": folder.headline(), "report": report, "others": others}
        return self.render(request, "eval_run.html", context)

    @_reviewed
    def eval_file(self, request: Request, scope: AccessScope) -> Response:
        folder = self._run(request.path_params["name"], scope)
        name = request.path_params["file"]
        if name not in folder.plots():  # only the run's own plots, by name: never a path from the URL
            raise ReviewError(f"the run {folder.name} has no plot {name!r}", 404)
        return FileResponse(folder.path / name, media_type="image/png")

    @_reviewed
    def compare(self, request: Request, scope: AccessScope) -> Response:
        params = request.query_params
        runs = self._runs(scope)
        a, b = params.get("a", ""), params.get("b", "")
        if not a or not b:
            raise ReviewError("pick two runs to compare (a and b)")
        if a == b:
            raise ReviewError("pick two different runs to compare")
        metric = params.get("metric", "ndcg@10")
        from lookup_knowledge.eval.evaluation import METRIC_NAMES

        if metric not in METRIC_NAMES:
            raise ReviewError(f"metric: {metric!r} is none of {', '.join(METRIC_NAMES)}")
        first, second = self._run(a, scope, runs), self._run(b, scope, runs)
        comparison = compare_runs(load_run(first), load_run(second), second.name, metric)
        context = {"a": first, "b": second, "comparison": comparison, "metrics": METRIC_NAMES}
        return self.render(request, "compare.html", context)

    def _runs(self, scope: AccessScope) -> dict[str, RunFolder]:
        """The eval runs the reviewer may see: every run for an unrestricted reviewer; for a
        restricted one, those whose every lookup was restricted to principals it holds itself
        (a run made without principals, as ``eval`` makes them by default, could hold any document)."""
        from lookup_knowledge.extras import MissingExtraError, require

        try:
            require("eval", "the Eval runs page")
        except MissingExtraError as exc:  # its message says what to install
            raise ReviewError(str(exc), 501) from None
        folders = run_folders(self.eval_dirs)
        if not scope.restricted:
            return folders
        return {
            name: folder
            for name, folder in folders.items()
            if all(may_review(scope, recorded) for recorded in run_scopes(load_run(folder)))
        }

    def _run(self, name: str, scope: AccessScope, runs: dict[str, RunFolder] | None = None) -> RunFolder:
        folder = (runs if runs is not None else self._runs(scope)).get(name)
        if folder is None:
            raise ReviewError(f"no eval run {name!r} that you may see", 404)
        return folder

    # --- Signing in, errors -----------------------------------------------------------------

    def sign_in_page(self, request: Request, problem: str | None = None) -> Response:
        if problem is None and request.cookies.get(TOKEN_COOKIE):
            problem = "that token was not accepted"
        context = {"problem": problem, "offered": self.token_sign_in}
        response = self.render(request, "login.html", context, 401)
        response.headers["WWW-Authenticate"] = "Bearer"
        return response

    async def sign_in(self, request: Request) -> Response:
        if request.method == "GET":
            if self.principals_of(request) is not None:  # signed in already, or no sign-in needed
                return RedirectResponse(request.url_for("ask"), status_code=303)
            return self.sign_in_page(request)
        if not self.token_sign_in:
            raise HTTPException(404)
        _same_origin(request)
        form = await request.form(max_files=0, max_fields=4)
        token = str(form.get("token") or "").strip()
        if not token or len(token) > MAX_TOKEN_CHARS:
            return self.sign_in_page(request, "paste the token you were given")
        response = RedirectResponse(request.url_for("ask"), status_code=303)
        response.set_cookie(
            TOKEN_COOKIE, token, httponly=True, samesite="strict", secure=request.url.scheme == "https",
            path=request.scope.get("root_path") or "/",
        )  # fmt: skip
        return response

    async def sign_out(self, request: Request) -> Response:
        _same_origin(request)
        response = RedirectResponse(request.url_for("login"), status_code=303)
        response.delete_cookie(TOKEN_COOKIE, path=request.scope.get("root_path") or "/")
        return response

    async def http_error(self, request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        message = "no such page" if status == 404 else getattr(exc, "detail", "") or "request refused"
        return self.render(request, "message.html", {"message": message}, status)

    async def server_error(self, request: Request, exc: Exception) -> Response:
        logger.exception("review page failed", exc_info=exc)
        return self.render(
            request, "message.html", {"message": "this page failed; the server logged why"}, 500
        )


def _same_origin(request: Request) -> None:
    """Refuse a form another site posts (a sign-in with its token would be a login CSRF): a
    browser names the posting page's origin, which must be this one."""
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
        raise HTTPException(403, "a form posted from another site")


def _visible_rows(
    recorder: InvocationRecorder, scope: AccessScope, **filters: Any
) -> tuple[list[Invocation], int | None]:
    """A page of rows the reviewer may see, newest first, and where the next page starts."""
    shown: list[Invocation] = []
    before, scanned = filters.pop("before_id"), 0
    while len(shown) < RECORDS_PER_PAGE and scanned < MAX_SCANNED_ROWS:
        batch = recorder.newest(**filters, before_id=before, limit=RECORDS_PER_PAGE)
        if not batch:
            return shown, None
        scanned += len(batch)
        for row in batch:
            before = row.id
            if may_review(scope, _access(row)):
                shown.append(row)
                if len(shown) == RECORDS_PER_PAGE:
                    break
    return shown, before


def _access(row: Invocation) -> list[str] | None:
    access = row.retrieval_details.get("access") if isinstance(row.retrieval_details, dict) else None
    return access if isinstance(access, list) else None


def _changes(before: Inspection, after: Inspection) -> list[dict[str, Any]]:
    """Per evidence key, its rank in the recorded call and now (``None``: not returned)."""
    was = {block.key: block.rank for block in before.blocks}
    now = {block.key: block.rank for block in after.blocks}
    keys = list(dict.fromkeys([*now, *was]))
    return [
        {
            "key": key,
            "before": was.get(key),
            "now": now.get(key),
            "change": _change(was.get(key), now.get(key)),
        }
        for key in keys
    ]


def _change(before: int | None, now: int | None) -> str:
    if before is None:
        return "new"
    if now is None:
        return "gone"
    return "same rank" if before == now else f"moved {before - now:+d}"


def _svg(draw: Callable[[], Any]) -> tuple[str | None, str | None]:
    """The drawing as inline SVG, or why there is none (no Graphviz on the server)."""
    from lookup_knowledge.cli.render import GRAPHVIZ_HINT, has_graphviz

    if not has_graphviz():
        return None, f"Graphviz `dot` is not installed on the server: {GRAPHVIZ_HINT}"
    svg = draw().pipe(format="svg", encoding="utf-8")
    return svg[svg.index("<svg") :], None


def _markdown(text: str) -> str:
    """The eval report's markdown as HTML (raw HTML in it is escaped, never passed through)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table").render(text)


def _int(value: str | None, name: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise ReviewError(f"{name}: {value[:40]!r} is not a whole number") from None


def _moment(value: str, name: str) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise ReviewError(f"{name}: {value[:40]!r} is not a date and time (2026-12-06T09:30)") from None


def _num(value: Any, digits: int = 4) -> str:
    if value is None or value != value:  # None or NaN
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)
