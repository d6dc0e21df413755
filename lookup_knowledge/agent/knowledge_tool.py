"""The public entry point: :class:`KnowledgeTool` runs the lookup dataflow for one request at a
time (:mod:`~lookup_knowledge.agent.request`).

>>> with KnowledgeTool.from_config(load_config()) as tool:  # doctest: +SKIP
...     result = tool.lookup("who approves refunds over 500 EUR?", session_id="s1")
...     result.model_dump(by_alias=True, mode="json")["evidenceBlocks"][0]["evidenceKey"]
'payments-refund-policy#chunk-2'
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lookup_knowledge.adapters.answerability import AnswerabilityReader
from lookup_knowledge.adapters.embedder import Embedder, EmbedderError
from lookup_knowledge.adapters.errors import StoreError
from lookup_knowledge.adapters.l0_index import L0Index
from lookup_knowledge.adapters.redaction import mask_secrets
from lookup_knowledge.adapters.search import UNRESTRICTED, AccessScope, KnowledgeSearchPort
from lookup_knowledge.agent.failures import rejected_result, retrieval_failed_result
from lookup_knowledge.agent.request import (
    LookupRequest,
    RejectedRequest,
    RequestSettings,
    lookup_request,
)
from lookup_knowledge.agent.session_memory import SessionMemory
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
from lookup_knowledge.stores import (
    build_answer_reader,
    build_embedder,
    build_multilingual_embedder,
    calibration_path,
    l0_index_path,
    open_search_port,
)

logger = logging.getLogger(__name__)


class KnowledgeTool:
    """The ``lookup_knowledge`` tool over a configured store, embedder and L0 index.

    Ports may be injected; those not given are built from the configuration, opened once and
    reused across calls. ``adapters`` are extra Hamilton lifecycle adapters (hooks, tracers) for
    every lookup's run. What each session was returned is kept in :attr:`sessions`. Safe to call
    from several threads.
    """

    def __init__(
        self,
        config: Config,
        *,
        search_port: KnowledgeSearchPort | None = None,
        embedder: Embedder | None = None,
        multilingual_embedder: Embedder | None = None,
        answer_reader: AnswerabilityReader | None = None,
        l0_index: L0Index | None = None,
        adapters: Sequence[Any] = (),
        require_store: bool | None = None,
        store_calibration: ProbeCalibration | None = None,
    ) -> None:
        self.config = config
        self.request_settings = RequestSettings.from_config(config)
        self.sessions = SessionMemory(config.recorder.session_memory)
        self.embedder = embedder or build_embedder(config)
        self.multilingual_embedder = multilingual_embedder or build_multilingual_embedder(config, "search")
        self.answer_reader = answer_reader or build_answer_reader(config)
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
            "multilingual_embedder": self.multilingual_embedder,
            "answer_reader": self.answer_reader,
            "l0_index": self.l0_index,
            "store_calibration": self.store_calibration,
            **settings_inputs(config),
        }
        try:  # ports and settings of the wrong type fail here, once, not per call
            self.driver.validate_execution([FINAL_NODE], inputs=self.dataflow_inputs("validation"))
        except ValueError:
            self.close()
            raise

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
            multilingual_embedder=self.multilingual_embedder,
            answer_reader=self.answer_reader if config.answerability.reader else None,
            l0_index=self.l0_index,
            store_calibration=self.store_calibration,
        )

    def lookup(
        self,
        query: Any,
        session_id: Any = None,
        *,
        pinned_category: Any = None,
        prior_session_domains: list[str] | None = None,
        principals: Any = None,
    ) -> LookupResult:
        """Run the dataflow for one query; never raises for bad input or a failing backend.

        ``principals``: the caller's groups or users (a list of names); the lookup then sees only
        documents whose access names one of them or ``public``, in every part of its result.
        ``None``: ``access.principals`` of the configuration (itself ``None`` by default:
        unrestricted); an :class:`AccessScope`: exactly that scope (``UNRESTRICTED``: every
        document). ``prior_session_domains``: see :meth:`answer`.
        """
        request = self.request(query, session_id, pinned_category=pinned_category, principals=principals)
        return self.answer(request, prior_session_domains)

    def request(
        self, query: Any, session_id: Any = None, *, pinned_category: Any = None, principals: Any = None
    ) -> LookupRequest | RejectedRequest:
        """The validated request under this tool's configuration (:func:`lookup_request`)."""
        return lookup_request(
            query,
            session_id,
            pinned_category=pinned_category,
            principals=principals,
            settings=self.request_settings,
        )

    def answer(
        self, request: LookupRequest | RejectedRequest, prior_session_domains: list[str] | None = None
    ) -> LookupResult:
        """The result of a request: its dataflow run, or why it was refused.

        ``prior_session_domains`` replaces :attr:`sessions` when the caller keeps sessions itself
        (the invocation record does)."""
        if prior_session_domains is None:
            prior_session_domains = self.sessions.domains(request.session_id, request.scope)
        if isinstance(request, RejectedRequest):
            return rejected_result(request, prior_session_domains)
        inputs = self.dataflow_inputs(
            request.query, request.pinned_category, prior_session_domains, request.scope
        )
        result = self.execute_dataflow(inputs)
        self.sessions.add(request.session_id, request.scope, result.retrieved_domains_this_session)
        return result

    def calibrate(self) -> None:
        """Measure the store's probe null for this tool's searches (the configured caller) now,
        kept beside the store for its version, so that no lookup waits for it (``ingest`` does this)."""
        scope = AccessScope.of(self.request_settings.default_principals)
        inputs = self.dataflow_inputs("calibration", scope=scope)
        with one_blas_thread():
            self.driver.execute(["probe_null"], inputs=inputs)

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
        return retrieval_failed_result(inputs["query"], failure, inputs["prior_session_domains"])

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
        scope: AccessScope = UNRESTRICTED,
    ) -> dict[str, Any]:
        """The Hamilton inputs for one valid (stripped) query of a caller in ``scope``, with the L0
        index as its file now holds it."""
        self._current_l0_index()
        return {
            **self._static_inputs,
            "query": query,
            "pinned_category": pinned_category,
            "prior_session_domains": prior_session_domains or [],
            "access_scope": scope.filter,
        }

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


def _file_stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells a file's versions apart cheaply: its inode, size and modification time."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


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
