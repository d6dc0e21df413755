"""The public entry point: :class:`KnowledgeTool` runs the lookup dataflow for one query at a time
(the request validated by :mod:`lookup_knowledge.agent.request`).

>>> with KnowledgeTool.from_config(load_config()) as tool:  # doctest: +SKIP
...     result = tool.lookup("who approves refunds over 500 EUR?", session_id="s1")
...     result.model_dump(by_alias=True, mode="json")["evidenceBlocks"][0]["evidenceKey"]
'payments-refund-policy#chunk-2'
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lookup_knowledge.adapters.embedder import Embedder, EmbedderError
from lookup_knowledge.adapters.errors import StoreError
from lookup_knowledge.adapters.l0_index import L0Index
from lookup_knowledge.adapters.redaction import mask_secrets
from lookup_knowledge.adapters.search import AccessScope, KnowledgeSearchPort, access_scope
from lookup_knowledge.agent.request import (
    failure_result,
    lookup_request,
    plain_string,
    rejected_result,
    session_key,
    valid_principals,
)
from lookup_knowledge.blas import one_blas_thread
from lookup_knowledge.calibration import KeptNulls, ProbeCalibration
from lookup_knowledge.config import Config
from lookup_knowledge.contract import LookupResult
from lookup_knowledge.extras import require
from lookup_knowledge.pipeline import (
    FINAL_NODE,
    execute_lookup,
    execute_requests,
    lookup_driver,
    settings_inputs,
)
from lookup_knowledge.stores import build_embedder, calibration_path, l0_index_path, open_search_port

logger = logging.getLogger(__name__)
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
        store_calibration: ProbeCalibration | None = None,
    ) -> None:
        self.config = config
        self.embedder = embedder or build_embedder(config)
        self._owned_store = None
        # read from its file: read again when the file changes (an ingest in this process or another)
        self._l0_from_file = l0_index is None
        self._l0_stamp = _file_stamp(l0_index_path(config))
        self.l0_index = l0_index if l0_index is not None else L0Index.load(l0_index_path(config))
        if search_port is None and config.l1.enabled:
            # opened before the model loads; handed over to an ingest that asks, then reopened
            search_port = self._owned_store = open_search_port(
                config, on_reopen=self._store_reopened, require_store=_store_required(config, require_store)
            )
        self.search_port = search_port
        # the store's probe null, measured at first lookup (shared by the tool's variants) and
        # kept next to the store for its version (the L0 index file: every ingest rewrites it)
        self.store_calibration = store_calibration or ProbeCalibration(
            kept=KeptNulls(calibration_path(config), lambda: _file_stamp(l0_index_path(config)))
        )
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

    def variant(self, config: Config) -> KnowledgeTool:
        """A tool with another configuration over this tool's store, embedder and L0 index, and
        its store calibration (a probe null is kept per search shape, so it is measured once for
        both). This tool keeps the store: close it, not the variant."""
        return KnowledgeTool(
            config,
            search_port=self.search_port,
            embedder=self.embedder,
            l0_index=self.l0_index,
            store_calibration=self.store_calibration,
        )

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

    def calibrate(self) -> None:
        """Measure the store's probe null for this tool's searches (the configured caller) now,
        kept beside the store for its version, so that no lookup waits for it (``ingest`` does this)."""
        scope = self.access_scope(None)
        inputs = self.dataflow_inputs("calibration", access_scope=None if scope is False else scope)
        with one_blas_thread():
            self.driver.execute(["probe_null"], inputs=inputs)

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
            with one_blas_thread():
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
            with one_blas_thread():
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
        """The Hamilton inputs for one (valid) query (``access_scope``: see :meth:`access_scope`),
        with the L0 index as its file now holds it."""
        self._current_l0_index()
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

    def _current_l0_index(self) -> None:
        """Read the L0 index again when its file changed since it was read (one ``stat``): an
        ingest through a store object this tool shares, which hands nothing over, changes it too
        (a document's narrowed access then shows in no hint of the next lookup)."""
        if self._l0_from_file and _file_stamp(l0_index_path(self.config)) != self._l0_stamp:
            self._reload_l0_index()

    def _store_reopened(self) -> None:
        """The store was handed over (another process may have ingested): the L0 index read
        again unless this tool already read the file as it is now, the probe null measured again."""
        if not self._l0_from_file or _file_stamp(l0_index_path(self.config)) != self._l0_stamp:
            self._reload_l0_index()
        else:
            self.store_calibration.reset()

    def _reload_l0_index(self) -> None:
        """Read the L0 index from its file, and forget the probe null (the store may hold new data)."""
        path = l0_index_path(self.config)
        self._l0_stamp = _file_stamp(path)
        self.l0_index = L0Index.load(path)
        self.store_calibration.reset()
        self._static_inputs = {**self._static_inputs, "l0_index": self.l0_index}

    def close(self) -> None:
        """Release the store and the L0 index this tool opened (writes to that index not saved
        are dropped, with the copy of its file that held them)."""
        if self._owned_store is not None:
            self._owned_store.close()
            self._owned_store = None
        if self._l0_from_file:
            self.l0_index.close()

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


def _file_stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells a file's versions apart cheaply: its inode, size and modification time."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _session_cost(session_id: str, domains: list[str]) -> int:
    """The bytes one remembered session is counted at: its text plus a fixed overhead."""
    return _SESSION_ENTRY_BYTES + len(session_id) + sum(len(domain) for domain in domains)


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
