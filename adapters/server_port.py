"""The search port of a serving process on a server store: it outlives the server's outages.

A Qdrant server may be down when ``lookup-knowledge mcp`` starts or go down while it serves.
:class:`ReconnectingSearchPort` opens the store when a lookup needs it; when the store is
unavailable (refused, timed out after ``store.timeout_s``, collection missing) the search raises
:class:`~.errors.StoreUnavailableError` (the lookup answers ``retrieval_failed``), the port drops
its client, and a later lookup opens it afresh: the server recovers without a restart. For
``retry_after_s`` after a failure the port fails at once with the same error, so the searches of
one lookup (a filtered search and its retries) cost one attempt, not one each. A reopening runs
on its own thread and a lookup waits for it at most ``wait_s``: a hung server costs a lookup
``wait_s``, not ``store.timeout_s``, and a server that is back answers the lookup that reopens it.

>>> port = ReconnectingSearchPort(lambda: open_store(config, create=False))  # doctest: +SKIP
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as WaitTimeout
from typing import TypeVar

from .errors import StoreUnavailableError
from .search import AccessFilter, Candidates, KnowledgeSearchPort, KnowledgeStore, SearchRequest

RETRY_AFTER_S = 1.0
WAIT_S = 0.25  # a reopening on a live server takes milliseconds; a hung one keeps the thread
T = TypeVar("T")


class ReconnectingSearchPort(KnowledgeSearchPort):
    """A store opened on demand and dropped when unavailable; ``on_reopen`` runs after each
    reopening (the caller reloads what an ingest may have changed, such as the L0 index)."""

    def __init__(
        self,
        opener: Callable[[], KnowledgeStore],
        on_reopen: Callable[[], None] | None = None,
        retry_after_s: float = RETRY_AFTER_S,
        wait_s: float = WAIT_S,
    ) -> None:
        self._opener, self._on_reopen = opener, on_reopen
        self._retry_after_s, self._wait_s = retry_after_s, wait_s
        self._lock = threading.Lock()
        self._store: KnowledgeStore | None = None
        self._opening: Future[KnowledgeStore] | None = None
        self._waited_out: Future[KnowledgeStore] | None = None  # an opening hung past a wait
        self._opened = 0
        self._closed = False
        self._failure: tuple[float, StoreUnavailableError] | None = None

    def connect(self) -> None:
        """Open the store now, waiting as long as that takes (raises
        :class:`StoreUnavailableError` when it cannot)."""
        self._acquire(wait_s=None)

    def search(self, request: SearchRequest) -> Candidates:
        return self._on_store(lambda store: store.search(request))

    def search_batch(self, requests: Sequence[SearchRequest]) -> list[Candidates]:
        return self._on_store(lambda store: store.search_batch(requests))

    def term_idf(self, token_ids: Sequence[int], access: AccessFilter | None = None) -> dict[int, float]:
        return self._on_store(lambda store: store.term_idf(token_ids, access))

    def unheld_term_idf(self) -> float | None:
        return self._on_store(lambda store: store.unheld_term_idf())

    def sample_chunks(self, n: int, access: AccessFilter | None = None) -> list[tuple[str, str]]:
        return self._on_store(lambda store: store.sample_chunks(n, access))

    def _on_store(self, call: Callable[[KnowledgeStore], T]) -> T:
        """``call`` on the open store; a store that turns out unavailable is dropped."""
        store = self._acquire(self._wait_s)
        try:
            return call(store)
        except StoreUnavailableError as exc:
            self._drop(store, exc)
            raise

    def _acquire(self, wait_s: float | None) -> KnowledgeStore:
        """The open store, else the outcome of an opening waited for at most ``wait_s`` (None:
        as long as it takes, as for the first opening, when no failure is known to report).
        While an opening someone waited out runs on, the last failure is raised at once."""
        with self._lock:
            if self._store is not None:
                return self._store
            if self._opening is None:
                if self._failure is not None and time.monotonic() - self._failure[0] < self._retry_after_s:
                    raise self._last_failure()
                self._opening = Future()
                threading.Thread(target=self._open, args=(self._opening,), daemon=True).start()
            elif self._opening is self._waited_out:
                raise self._last_failure()
            opening, known = self._opening, self._failure is not None
        try:
            return opening.result(timeout=wait_s if known else None)
        except WaitTimeout:
            with self._lock:
                if self._store is not None:  # opened in the meantime
                    return self._store
                self._waited_out = opening
                raise self._last_failure() from None

    def _last_failure(self) -> StoreUnavailableError:
        assert self._failure is not None
        return type(self._failure[1])(str(self._failure[1]))

    def _open(self, opening: Future[KnowledgeStore]) -> None:
        """Open the store on this thread and settle ``opening`` with it or its error."""
        try:
            store = self._opener()
        except BaseException as exc:
            with self._lock:
                self._opening = None
                if isinstance(exc, StoreUnavailableError):
                    self._failure = (time.monotonic(), exc)
            opening.set_exception(exc)
            return
        with self._lock:
            self._opening = None
            closed = self._closed
            if not closed:
                self._store, self._failure = store, None
                self._opened += 1
            reopened = self._opened > 1
        if closed:
            store.close()
            opening.set_exception(StoreUnavailableError("the search port was closed"))
            return
        if reopened and self._on_reopen is not None:
            self._on_reopen()
        opening.set_result(store)

    def _drop(self, store: KnowledgeStore, exc: StoreUnavailableError) -> None:
        """Forget ``store`` after it failed, so the next lookup opens it afresh."""
        with self._lock:
            self._failure = (time.monotonic(), exc)
            if self._store is store:
                self._store = None
        store.close()

    def close(self) -> None:
        """Close the store if open."""
        with self._lock:
            store, self._store, self._closed = self._store, None, True
        if store is not None:
            store.close()
