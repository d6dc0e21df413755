"""Recorded ``lookup_knowledge`` calls: :class:`AgentLookup` runs the calls that the agent entry
points make (the Python callable, the MCP tool, ``lookup-knowledge query`` and ``shell``); each
one is timed and written to the ``tool_invocation`` table (:mod:`~lookup_knowledge.agent.invocation_row`).
What the agent sees of the tool is :mod:`~lookup_knowledge.agent.tool_definition`.

>>> with AgentLookup.from_config(load_config()) as agent:  # doctest: +SKIP
...     lookup_knowledge = agent.lookup_function(session_id="agent-1")
...     lookup_knowledge("Who must approve a refund above 500 EUR?")["evidenceStatus"]
'evidence'
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Container, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import ValidationError

from lookup_knowledge.adapters.l0_index import L0Document
from lookup_knowledge.adapters.multilingual import language_of, mainland_chinese
from lookup_knowledge.adapters.recorder import (
    CircuitBreaker,
    Invocation,
    InvocationRecorder,
    RecorderUnavailableError,
)
from lookup_knowledge.adapters.search import AccessScope
from lookup_knowledge.adapters.text import first_line
from lookup_knowledge.agent.invocation_row import invocation_row
from lookup_knowledge.agent.knowledge_tool import KnowledgeTool
from lookup_knowledge.agent.request import LookupRequest, RejectedRequest, access_scope, session_key
from lookup_knowledge.agent.tool_definition import (
    QUERY_DESCRIPTION,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    VERIFY_TOOL_NAME,
    VerifyArguments,
)
from lookup_knowledge.agent.verify import (
    CITATION_PATTERN,
    AnswerTooLongError,
    AnswerVerdict,
    ReturnedBlock,
    verify_answer,
)
from lookup_knowledge.config import Config
from lookup_knowledge.contract import InvocationRecordStatus, LookupResult

logger = logging.getLogger(__name__)


def invocation_db_url(config: Config) -> str:
    """``recorder.url``, else an SQLite file ``invocations.sqlite`` under ``store.path``."""
    if config.recorder.url:
        return config.recorder.url
    return f"sqlite:///{(config.store.path / 'invocations.sqlite').absolute()}"


def build_recorder(config: Config) -> InvocationRecorder:
    """The configured invocation recorder, with its connect timeout and circuit breaker."""
    settings = config.recorder
    breaker = CircuitBreaker(retry_after_s=settings.retry_after_s)
    return InvocationRecorder(
        invocation_db_url(config), connect_timeout_s=settings.timeout_s, breaker=breaker
    )


def new_session_id(prefix: str = "session") -> str:
    """A fresh, unique session id."""
    return f"{prefix}-{uuid.uuid4().hex}"


class AgentLookup:
    """Recorded ``lookup_knowledge`` calls over one :class:`KnowledgeTool`: what agents call.

    Each :meth:`call` is the tool's lookup, with the session's earlier evidence domains read from
    the record, timed, and written as one ``tool_invocation`` row; the result says whether the
    row was written (``retrievalTrace.invocationRecord``; a result without a trace, e.g.
    ``invalid_input``, gets a note in its ``message`` when the row could not be written).
    Recording never fails a lookup: with the database unavailable the failure is logged and
    session domains come from the tool's session memory. With ``recorder=None`` nothing is
    recorded. Never raises; safe to call from several threads.

    >>> recorder = InvocationRecorder(invocation_db_url(config))  # doctest: +SKIP
    >>> agent = AgentLookup(KnowledgeTool(config), recorder)  # doctest: +SKIP
    >>> agent.call("kafka consumer lag", session_id="s1").retrieval_trace.invocation_record  # doctest: +SKIP
    InvocationRecordStatus(written=True, id=1, error=None)
    """

    def __init__(self, tool: KnowledgeTool, recorder: InvocationRecorder | None) -> None:
        self.tool = tool
        self.recorder = recorder
        self._cold_start_ms: float | None = None  # reported by the next call, then cleared
        self._lock = threading.Lock()

    def warm_up(self, principals: Any = None, *, multilingual: bool = True) -> float:
        """Load the query models and run one unrecorded lookup now (a cold start: the model load
        takes seconds, a first search and a first encode of its shape tens of milliseconds), so
        that calls measure only themselves; the next call reports the time as
        ``retrievalTrace.coldStartMs``. The models (the English encoder, the language identifier,
        the multilingual encoder) load side by side, one thread each. ``multilingual``: load the
        multilingual encoder too (a server's first question may need it; a single CLI question
        loads it only if it does). A model that fails to load is reported by each call
        (``retrieval_failed``), not here. ``principals``: the callers' to come (their scope's probe
        null is measured too). Returns the milliseconds it took."""
        started = time.perf_counter()
        loads = [lambda: self.tool.embedder.embed_query("warm-up"), lambda: language_of("warm-up")]
        if multilingual and self.tool.multilingual_embedder is not None:  # its 30 MB table
            loads.append(lambda: self.tool.multilingual_embedder.embed_query("warm-up"))
            loads.append(lambda: mainland_chinese("預熱"))  # the converter's character table
        with ThreadPoolExecutor(len(loads), thread_name_prefix="warm-up") as pool:
            failed = [exc for exc in pool.map(_raised, loads) if exc is not None]
        if failed:
            logger.warning("a query model did not load: %s", first_line(failed[0]))
        else:
            self.tool.lookup("warm-up lookup of the knowledge base", principals=principals)  # never raises
        cold_start_ms = round((time.perf_counter() - started) * 1000, 3)
        with self._lock:
            self._cold_start_ms = cold_start_ms
        return cold_start_ms

    @classmethod
    def from_config(
        cls, config: Config, *, record: bool = True, require_store: bool | None = None
    ) -> AgentLookup:
        """The configured tool, recording to :func:`invocation_db_url` when ``record``
        (``require_store``: see :meth:`KnowledgeTool.from_config`)."""
        recorder = build_recorder(config) if record else None
        return cls(KnowledgeTool.from_config(config, require_store=require_store), recorder)

    def call(self, query: Any, session_id: Any = None, *, principals: Any = None) -> LookupResult:
        """Look up ``query`` in ``session_id`` (``None``: a session of its own) and record the call.

        ``principals``: the caller's groups or users (see :meth:`KnowledgeTool.lookup`; ``None``:
        ``access.principals``). A session's domains are shared only among calls of one access scope.
        """
        return self.run(self.tool.request(query, session_id, principals=principals))

    def run(self, request: LookupRequest | RejectedRequest) -> LookupResult:
        """Answer a request built by :meth:`KnowledgeTool.request` and record the call."""
        prior_domains = self._recorded_session_domains(request)
        started = time.perf_counter()
        result = self.tool.answer(request, prior_domains)
        latency_ms = (time.perf_counter() - started) * 1000
        return self._recorded(request.session_id, self._with_cold_start(result), latency_ms)

    def _with_cold_start(self, result: LookupResult) -> LookupResult:
        """``result`` with the cold start of :meth:`warm_up` in its trace, the first call after it."""
        if result.retrieval_trace is None:
            return result
        with self._lock:
            load_ms, self._cold_start_ms = self._cold_start_ms, None
        if load_ms is None:
            return result
        trace = result.retrieval_trace.model_copy(update={"cold_start_ms": load_ms})
        return result.model_copy(update={"retrieval_trace": trace})

    def _recorded(self, session_id: str | None, result: LookupResult, latency_ms: float) -> LookupResult:
        """``result``, its call written to the record (saying whether that worked)."""
        if self.recorder is None:
            return result
        try:
            row_id = self.recorder.record(invocation_row(session_id, result, latency_ms))
            status = InvocationRecordStatus(written=True, id=row_id)
        except Exception as exc:  # recording must never fail the lookup it records
            unexpected = not isinstance(exc, RecorderUnavailableError)
            logger.warning("lookup_knowledge call not recorded: %s", exc, exc_info=unexpected)
            status = InvocationRecordStatus(written=False, error=str(exc) or type(exc).__name__)
        return with_record_status(result, status)

    def lookup_function(
        self, session_id: str | None = None, *, principals: Any = None
    ) -> Callable[[str], dict[str, Any]]:
        """A plain ``lookup_knowledge(query: str) -> dict`` (the contract JSON) bound to one session
        and one caller's ``principals`` (``None``: ``access.principals``).

        Without ``session_id`` the function gets a fresh session of its own. For agent
        frameworks that take Python functions as tools: its name, docstring and annotations
        describe the tool.
        """
        session = session_id or new_session_id()

        def lookup_knowledge(query: str) -> dict[str, Any]:
            return self.call(query, session, principals=principals).model_dump(by_alias=True, mode="json")

        lookup_knowledge.__qualname__ = TOOL_NAME
        lookup_knowledge.__doc__ = f"{TOOL_DESCRIPTION}\n\nArgs:\n    query: {QUERY_DESCRIPTION}\n"
        return lookup_knowledge

    def verify_answer(
        self,
        answer: str,
        session_id: str,
        *,
        check_uncited: bool = False,
        citation_pattern: str = CITATION_PATTERN,
        principals: Any = None,
    ) -> AnswerVerdict:
        """Check ``answer`` against what this session's recorded lookups returned and record the
        verdict (:func:`verify_in_session`). A restricted caller (``principals``, else
        ``access.principals``) is checked against the lookups made in its access scope, and a key
        of a document it may not see is ``unknown_key``, as if the document did not exist. Raises
        :class:`RecorderUnavailableError` when there is no record to read."""
        if self.recorder is None:
            raise RecorderUnavailableError("verify_answer needs the invocation record (recording is off)")
        scope = access_scope(principals, self.tool.request_settings)
        documents = self.tool.l0_index.documents
        visible: Container[str] = documents if not scope.restricted else _Visible(documents, scope)
        return verify_in_session(
            answer,
            session_id,
            self.recorder,
            visible,
            check_uncited=check_uncited,
            citation_pattern=citation_pattern,
            scope=scope,
        )

    def _recorded_session_domains(self, request: LookupRequest | RejectedRequest) -> list[str] | None:
        """The session's domains from the record, of its calls in the request's scope; ``None``
        (use the tool's memory) without a record."""
        if request.session_id is None or request.scope.sees_nothing:
            return []
        if self.recorder is None:
            return None
        try:
            return self.recorder.session_domains(request.session_id, request.scope)
        except Exception as exc:  # an unreadable record must not fail the lookup either
            unexpected = not isinstance(exc, RecorderUnavailableError)
            logger.warning("session domains from memory, no record: %s", exc, exc_info=unexpected)
            return None

    def close(self) -> None:
        """Release the tool's store and the recorder's database connections."""
        self.tool.close()
        if self.recorder is not None:
            self.recorder.close()

    def __enter__(self) -> AgentLookup:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class _Visible(Container[str]):
    """The documents a caller of ``scope`` may see, asked one id at a time (a restricted
    caller's check reads only the cited documents, not every document of the index)."""

    def __init__(self, documents: Mapping[str, L0Document], scope: AccessScope) -> None:
        self.documents, self.scope = documents, scope

    def __contains__(self, doc_id: object) -> bool:
        doc = self.documents.get(doc_id) if isinstance(doc_id, str) else None
        return doc is not None and self.scope.may_see(doc.access)


def verify_in_session(
    answer: str,
    session_id: str,
    recorder: InvocationRecorder,
    doc_ids: Container[str] = (),
    *,
    check_uncited: bool = False,
    citation_pattern: str = CITATION_PATTERN,
    scope: AccessScope | None = None,
) -> AnswerVerdict:
    """``verify_answer`` against the blocks the record says ``session_id``'s lookups returned
    (with a ``scope``: its lookups in that access scope, and keys returned anywhere in it); a key
    not returned is ``not_returned`` when another session got it or ``doc_ids`` (the L0 index)
    holds its document, else ``unknown_key``. The verdict is recorded as a ``verify_answer`` row of
    the session (``invocationRecord`` says whether that worked). Raises
    :class:`RecorderUnavailableError` when the record cannot be read."""
    session_id = session_key(session_id)
    started = time.perf_counter()
    rows = recorder.session_evidence(session_id, scope)
    returned = [ReturnedBlock.from_record(e, row.id) for row in rows for e in row.returned_evidence or []]

    def known_keys(keys: set[str]) -> set[str]:
        in_base = {key for key in keys if key.rsplit("#chunk-", 1)[0] in doc_ids}
        return in_base | recorder.returned_anywhere(keys - in_base, scope)

    verdict = verify_answer(
        answer,
        returned=returned,
        known_keys=known_keys,
        check_uncited=check_uncited,
        citation_pattern=citation_pattern,
        session_id=session_id,
    )
    row = Invocation(
        session_id=session_id,
        tool_name=VERIFY_TOOL_NAME,
        input=answer,
        status="verified" if verdict.verified else "not_verified",
        evidence_count=len(verdict.citations),
        retrieval_layer=None,
        fallback_reason=None,
        latency_ms=round((time.perf_counter() - started) * 1000, 3),
        retrieval_details=verdict.model_dump(by_alias=True, mode="json", exclude={"invocation_record"}),
    )
    try:
        status = InvocationRecordStatus(written=True, id=recorder.record(row))
    except RecorderUnavailableError as exc:  # the verdict stands without its row
        logger.warning("verify_answer call not recorded: %s", exc)
        status = InvocationRecordStatus(written=False, error=str(exc))
    return verdict.model_copy(update={"invocation_record": status})


def checked_answer(
    agent: AgentLookup, session_id: str, answer: Any, check_uncited: Any, principals: Any
) -> AnswerVerdict | str:
    """:meth:`AgentLookup.verify_answer` of the tool's arguments, or why it could not check them
    (one line for the agent: every entry point reports it as its tool error)."""
    try:
        arguments = VerifyArguments(answer=answer, check_uncited=check_uncited)
    except ValidationError as exc:
        return invalid_arguments(exc)
    return verified_or_why(
        lambda: agent.verify_answer(
            arguments.answer, session_id, check_uncited=arguments.check_uncited, principals=principals
        )
    )


def verified_or_why(verify: Callable[[], AnswerVerdict]) -> AnswerVerdict | str:
    """What ``verify()`` gives, or why it gave nothing (an answer too long, no invocation record),
    in one line for the agent: every entry point reports it as its tool error."""
    try:
        return verify()
    except AnswerTooLongError as exc:
        return f"Invalid answer: {exc}"
    except RecorderUnavailableError as exc:
        return f"verify_answer needs the invocation record: {exc}"


def invalid_arguments(error: ValidationError) -> str:
    """Why a tool's arguments were refused, in one line for the agent."""
    problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in error.errors())
    return f"Invalid arguments: {problems}"


def with_record_status(result: LookupResult, status: InvocationRecordStatus) -> LookupResult:
    """``result`` saying whether its invocation row was written."""
    trace = result.retrieval_trace
    if trace is not None:
        trace = trace.model_copy(update={"invocation_record": status})
        return result.model_copy(update={"retrieval_trace": trace})
    if status.written:
        return result
    note = f" (This call was not recorded: {status.error})"
    return result.model_copy(update={"message": result.message + note})


def _raised(load: Callable[[], object]) -> BaseException | None:
    """What ``load()`` raised, or ``None``."""
    try:
        load()
    except Exception as exc:
        return exc
    return None
