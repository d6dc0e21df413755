"""The public entry point: :class:`KnowledgeTool` runs the lookup dataflow for one query at a time.

>>> with KnowledgeTool.from_config(load_config()) as tool:  # doctest: +SKIP
...     result = tool.lookup("who approves refunds over 500 EUR?", session_id="s1")
...     result.model_dump(by_alias=True, mode="json")["evidenceBlocks"][0]["evidenceKey"]
'payments-refund-policy#chunk-2'
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Sequence
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError
from threadpoolctl import ThreadpoolController

from lookup_knowledge.adapters.embedder import Embedder, EmbedderError
from lookup_knowledge.adapters.l0_index import L0Index
from lookup_knowledge.adapters.redaction import mask_secrets
from lookup_knowledge.adapters.search import AccessScope, KnowledgeSearchPort, StoreError, access_scope
from lookup_knowledge.calibration import ProbeCalibration
from lookup_knowledge.config import Config
from lookup_knowledge.contract import EvidenceStatus, LookupResult
from lookup_knowledge.extras import require
from lookup_knowledge.pipeline import (
    FINAL_NODE,
    execute_lookup,
    execute_requests,
    lookup_driver,
    settings_inputs,
)
from lookup_knowledge.stores import build_embedder, l0_index_path, open_search_port

logger = logging.getLogger(__name__)
_SURROGATE = re.compile("[\ud800-\udfff]")  # Unicode category Cs: what invalid UTF-8 decodes to
_FIELD_NAMES = {"query": "the query", "session_id": "the session id", "pinned_category": "the category"}
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # category Cc except tab, LF, CR
MAX_SESSION_ID_CHARS = 200  # a longer session id is kept (and recorded) as a prefix and its hash
SESSION_MEMORY_BYTES = 32 * 2**20  # session memory's bound in bytes, beside recorder.session_memory
_SESSION_ENTRY_BYTES = 400  # what one remembered session costs beyond its text (dict entry, objects)


class KnowledgeTool:
    """The ``lookup_knowledge`` tool over a configured store, embedder and L0 index.

    Ports may be injected; those not given are built from the configuration, opened once and
    reused across calls. ``adapters`` are extra Hamilton lifecycle adapters (hooks, tracers) for
    every lookup's run. Safe to call from several threads.
    """

    def __init__(
        self,
        config: Config,
        *,
        search_port: KnowledgeSearchPort | None = None,
        embedder: Embedder | None = None,
        l0_index: L0Index | None = None,
        adapters: Sequence[Any] = (),
        require_store: bool | None = None,
    ) -> None:
        self.config = config
        self.embedder = embedder or build_embedder(config)
        self._owned_store = None
        self.l0_index = l0_index if l0_index is not None else L0Index.load(l0_index_path(config))
        if search_port is None and config.l1.enabled:
            # opened before the model loads; handed over to an ingest that asks, then reopened
            search_port = self._owned_store = open_search_port(
                config, on_reopen=self._reload_l0_index, require_store=_store_required(config, require_store)
            )
        self.search_port = search_port
        self.store_calibration = ProbeCalibration()  # the store's probe null, measured at first lookup
        self.driver, self.executed_nodes = lookup_driver(config, *_tracing(config), *adapters)
        self._static_inputs = {
            "search_port": self.search_port,
            "embedder": self.embedder,
            "l0_index": self.l0_index,
            "store_calibration": self.store_calibration,
            **settings_inputs(config),
        }
        try:  # ports and settings of the wrong type fail here, once, not per call
            self.driver.validate_execution([FINAL_NODE], inputs=self.dataflow_inputs("validation"))
        except ValueError:
            self.close()
            raise
        self._sessions: OrderedDict[str, list[str]] = OrderedDict()  # least recently used first
        self._sessions_bytes = 0  # what the sessions in memory cost (see _session_cost)
        self.session_memory_bytes = SESSION_MEMORY_BYTES
        self._sessions_lock = threading.Lock()

    @classmethod
    def from_config(cls, config: Config, *, require_store: bool | None = None) -> KnowledgeTool:
        """Build the tool on the configured store, embedder and L0 index.

        ``require_store=False``: a store that cannot be opened now is retried at each lookup
        (which answers ``retrieval_failed`` until it is back) instead of failing here. The
        default (``None``) is ``False`` for a Qdrant server (``store.url``: an agent host may start
        a moment before its server) and ``True`` for a local store, whose absence is a clear
        error at start.
        """
        return cls(config, require_store=require_store)

    def lookup(
        self,
        query: Any,
        session_id: str | None = None,
        *,
        pinned_category: str | None = None,
        prior_session_domains: list[str] | None = None,
        principals: Any = None,
    ) -> LookupResult:
        """Run the dataflow for one query; never raises for bad input or a failing backend.

        ``prior_session_domains`` replaces the tool's in-memory session memory when the caller
        keeps sessions itself (the invocation record does). ``principals``: the caller's groups
        or users (a list of names); the lookup then sees only documents whose access names one of
        them or ``public``, in every part of its result. ``None``: ``access.principals`` of the
        configuration (itself ``None`` by default: unrestricted).
        """
        request = lookup_request(
            query, self.config.retrieval.max_query_chars, session_id, pinned_category, principals
        )
        if isinstance(request, str):
            if prior_session_domains is None:
                session = plain_string(session_id)
                key = session_key(session) if isinstance(session, str) else None
                scope = self.access_scope(valid_principals(principals))
                prior_session_domains = [] if scope is False else self.session_domains(key, scope)
            return rejected_result(query, request, prior_session_domains)
        scope = self.access_scope(request.principals)
        if prior_session_domains is None:
            prior_session_domains = self.session_domains(request.session_id, scope)
        inputs = self.dataflow_inputs(request.query, request.pinned_category, prior_session_domains, scope)
        result = self.execute_dataflow(inputs)
        self._remember(_session_slot(request.session_id, scope), result.retrieved_domains_this_session)
        return result

    def access_scope(self, principals: Sequence[str] | None | bool) -> AccessScope | None | bool:
        """The access filter of a caller's lookups: its principals and ``public``; with none
        given, those of ``access.principals``; ``None`` (unrestricted) when neither names any.
        ``False`` (principals that are not valid) stays ``False``: such a caller sees nothing."""
        if principals is False:
            return False
        return access_scope(principals if principals is not None else self.config.access.principals)

    def execute_dataflow(
        self, inputs: dict[str, Any], overrides: dict[str, Any] | None = None
    ) -> LookupResult:
        """Execute the DAG for prepared inputs (``overrides`` may supply e.g. a batched
        ``query_vector``); a failure reaches the caller as a ``retrieval_failed`` result."""
        try:
            with _one_blas_thread():
                return execute_lookup(self.driver, inputs, overrides)
        except (StoreError, EmbedderError) as exc:  # the store (outside a search) or the model failed
            logger.warning("lookup failed: %s", exc)
            failure = exc
        except Exception as exc:  # the model, or a defect: logged with its traceback
            logger.exception("lookup failed: %s", mask_secrets(str(exc)))
            failure = exc
        message = f"Knowledge retrieval failed: {failure}"
        return failure_result(inputs["query"], "retrieval_failed", message, inputs["prior_session_domains"])

    def execute_requests(self, inputs: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any] | None:
        """The DAG run up to its store requests (``l1_requests``) with every node it computed,
        for a batch to send; ``None`` when that part failed (the full run then reports it)."""
        try:
            with _one_blas_thread():
                return execute_requests(self.driver, inputs, overrides)
        except Exception as exc:
            logger.warning("lookup planning failed: %s", mask_secrets(str(exc)))
            return None

    def dataflow_inputs(
        self,
        query: str,
        pinned_category: str | None = None,
        prior_session_domains: list[str] | None = None,
        access_scope: AccessScope | None = None,
    ) -> dict[str, Any]:
        """The Hamilton inputs for one (valid) query (``access_scope``: see :meth:`access_scope`)."""
        return {
            **self._static_inputs,
            "query": query.strip(),
            "pinned_category": pinned_category,
            "prior_session_domains": prior_session_domains or [],
            "access_scope": access_scope,
        }

    def session_domains(self, session_id: str | None, access: AccessScope | None = None) -> list[str]:
        """Domains of evidence returned earlier in this session to callers of this access scope
        (another scope's lookups in the same session are not shared), first seen first."""
        if session_id is None:
            return []
        with self._sessions_lock:
            return list(self._sessions.get(_session_slot(session_id, access), []))

    def _remember(self, session_id: str | None, domains: list[str]) -> None:
        """Keep the session's domains; the least recently used sessions go first once there are
        more than ``recorder.session_memory`` or they cost more than :data:`SESSION_MEMORY_BYTES`."""
        if session_id is None:
            return
        with self._sessions_lock:
            known = self._sessions.pop(session_id, None)
            if known is None:
                known = []
            else:
                self._sessions_bytes -= _session_cost(session_id, known)
            known.extend(d for d in domains if d not in known)
            self._sessions[session_id] = known
            self._sessions_bytes += _session_cost(session_id, known)
            most, budget = self.config.recorder.session_memory, self.session_memory_bytes
            while self._sessions and (len(self._sessions) > most or self._sessions_bytes > budget):
                oldest, kept = self._sessions.popitem(last=False)
                self._sessions_bytes -= _session_cost(oldest, kept)

    def _reload_l0_index(self) -> None:
        """Read the L0 index again (the store was handed over: another process may have ingested)."""
        self.l0_index = L0Index.load(l0_index_path(self.config))
        self.store_calibration.reset()
        self._static_inputs = {**self._static_inputs, "l0_index": self.l0_index}

    def close(self) -> None:
        """Release the store this tool opened."""
        if self._owned_store is not None:
            self._owned_store.close()
            self._owned_store = None

    def __enter__(self) -> KnowledgeTool:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _session_slot(session_id: str | None, access: AccessScope | None) -> str | None:
    """Where a session's domains are kept for one access scope: callers of different scopes
    never share what a session saw, whatever session id they give."""
    if session_id is None or access is None:
        return session_id
    return f"{session_id}\x00{chr(31).join(access)}"


def _session_cost(session_id: str, domains: list[str]) -> int:
    """The bytes one remembered session is counted at: its text plus a fixed overhead."""
    return _SESSION_ENTRY_BYTES + len(session_id) + sum(len(domain) for domain in domains)


def session_key(session_id: str) -> str:
    """A session id as it is kept and recorded: lone surrogates (undecodable bytes) escaped, and
    one longer than :data:`MAX_SESSION_ID_CHARS` replaced by its first 64 characters and the
    SHA-256 of the whole (``<prefix>...sha256:<hex>``, 139 characters): still one stable
    session, at a bounded cost in memory and in the record."""
    text = session_id.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= MAX_SESSION_ID_CHARS:
        return text
    return f"{text[:64]}...sha256:{hashlib.sha256(text.encode('utf-8')).hexdigest()}"


def _store_required(config: Config, require_store: bool | None) -> bool:
    """Whether the store must open when the tool is built (see :meth:`KnowledgeTool.from_config`)."""
    if require_store is not None:
        return require_store
    return not (config.store.backend == "qdrant" and config.store.url)


def _tracing(config: Config) -> list[Any]:
    """The OpenTelemetry adapter when ``tracing.opentelemetry`` is on (the API loads only then)."""
    if not config.tracing.opentelemetry:
        return []
    require("otel", "tracing.opentelemetry")
    from lookup_knowledge.tracing import LookupSpans

    return [LookupSpans(include_query=config.tracing.include_query)]


@cache
def _blas_controller() -> ThreadpoolController:
    return ThreadpoolController()


def _one_blas_thread() -> Any:
    """One BLAS thread around a lookup: numpy's BLAS threads fight torch's on few cores (the
    next query embedding slows down); the process-wide setting is restored afterwards."""
    return _blas_controller().limit(limits=1, user_api="blas")


class LookupRequest(BaseModel):
    """One lookup's input, validated alike at every entry point (API, MCP, CLI, evaluation).

    A ``str`` subclass (``numpy.str_``) is read as its plain string; any other type is refused
    without calling its methods. The query must hold visible text (not only whitespace or
    format characters such as U+200B), valid UTF-8 (no lone surrogates) and no control
    characters, within ``max_query_chars`` (validation context). A session id or pinned
    category with lone surrogates (undecodable bytes) is kept with them escaped; a session id
    over :data:`MAX_SESSION_ID_CHARS` is kept as its prefix and hash (:func:`session_key`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    query: str
    session_id: str | None = None
    pinned_category: str | None = None
    principals: tuple[str, ...] | None = None

    @field_validator("principals", mode="before")
    @classmethod
    def _principal_names(cls, value: Any) -> Any:
        """A list (or tuple, set) of nonblank names; one string is one principal."""
        if value is None:
            return None
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list | tuple | set | frozenset) or not all(
            isinstance(name, str) and name.strip() and not _SURROGATE.search(name) for name in names
        ):
            raise PydanticCustomError("principals", "the principals must be a list of nonblank names")
        return tuple(sorted({plain_string(name).strip() for name in names}))

    @field_validator("query", "session_id", "pinned_category", mode="before")
    @classmethod
    def _plain_string(cls, value: Any, info: ValidationInfo) -> Any:
        if type(value) is str or (value is None and info.field_name != "query"):
            return value
        if isinstance(value, str):
            return plain_string(value)
        name = {"query": "the query", "session_id": "the session id"}.get(
            str(info.field_name), "the category"
        )
        kind = type(value).__name__
        raise PydanticCustomError(
            "not_a_string", "{name} must be a string, not {kind}", {"name": name, "kind": kind}
        )

    @field_validator("query")
    @classmethod
    def _readable_query(cls, query: str, info: ValidationInfo) -> str:
        max_chars = (info.context or {}).get("max_query_chars", len(query))
        if not query.strip():
            raise PydanticCustomError("empty", "the query is empty")
        if len(query) > max_chars:
            raise PydanticCustomError(
                "too_long",
                "the query has {n} characters; the limit is {limit} (retrieval.max_query_chars)",
                {"n": len(query), "limit": max_chars},
            )
        if _SURROGATE.search(query):
            raise PydanticCustomError("not_utf8", "the query is not valid UTF-8 text")
        if _CONTROL.search(query):
            raise PydanticCustomError("control", "the query contains control characters")
        if not any(not ch.isspace() and unicodedata.category(ch) != "Cf" for ch in query):
            raise PydanticCustomError("invisible", "the query has only invisible (format) characters")
        return query.strip()

    @field_validator("session_id")
    @classmethod
    def _session_key(cls, value: str | None) -> str | None:
        return None if value is None else session_key(value)

    @field_validator("pinned_category")
    @classmethod
    def _encodable(cls, value: str | None) -> str | None:
        return None if value is None else value.encode("utf-8", "backslashreplace").decode("utf-8")


def valid_principals(principals: Any) -> tuple[str, ...] | None | bool:
    """``principals`` as a lookup takes them (sorted, stripped), ``None`` when not given, or
    ``False`` when they are not a list of nonblank names."""
    try:
        return LookupRequest.model_validate({"query": "-", "principals": principals}).principals
    except ValidationError:
        return False


def plain_string(value: Any) -> Any:
    """A ``str`` subclass as its plain string (its own methods are never called); else ``value``."""
    return str.__str__(value) if isinstance(value, str) and type(value) is not str else value


def lookup_request(
    query: Any, max_chars: int, session_id: Any = None, pinned_category: Any = None, principals: Any = None
) -> LookupRequest | str:
    """The validated request, or why it cannot be looked up."""
    data = {
        "query": query,
        "session_id": session_id,
        "pinned_category": pinned_category,
        "principals": principals,
    }
    try:
        return LookupRequest.model_validate(data, context={"max_query_chars": max_chars})
    except ValidationError as exc:
        return exc.errors()[0]["msg"]


def query_problem(query: Any, max_chars: int) -> str | None:
    """Why a query cannot be looked up, or ``None`` when it is fine."""
    request = lookup_request(query, max_chars)
    return request if isinstance(request, str) else None


def invalid_query_result(query: Any, max_chars: int, session_domains: list[str]) -> LookupResult | None:
    """The ``invalid_input`` result for a query that cannot be looked up, else ``None``."""
    problem = query_problem(query, max_chars)
    return None if problem is None else rejected_result(query, problem, session_domains)


def rejected_result(query: Any, problem: str, session_domains: list[str]) -> LookupResult:
    """The ``invalid_input`` result saying why ``query`` was refused."""
    return failure_result(_echo(query), "invalid_input", f"Invalid query: {problem}.", session_domains)


def _echo(query: Any) -> str:
    """The rejected query as it can be echoed in JSON: short, and encodable as UTF-8.

    Only a string is echoed (another object's ``__str__`` may raise or lie); a lone surrogate
    (e.g. from ``surrogateescape`` decoding) is echoed as its escape sequence rather than
    making the whole result unserializable.
    """
    if not isinstance(query, str):
        return f"<{type(query).__name__}>"
    return str.__str__(query)[:200].encode("utf-8", "backslashreplace").decode("utf-8")


def failure_result(
    query: str, status: EvidenceStatus, message: str, session_domains: list[str]
) -> LookupResult:
    """A ``found=false`` result for a call that could not run the dataflow (credentials in
    the message masked)."""
    return LookupResult(
        query=query,
        found=False,
        evidence_status=status,
        evidence_blocks=[],
        context_pack=None,
        retrieval_trace=None,
        rerank_trace=None,
        relevance_level="none",
        completeness_hint="none: no evidence was returned",
        retrieved_domains_this_session=session_domains,
        message=mask_secrets(message),
    )
