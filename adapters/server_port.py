"""The search port of a serving process on a server store: it outlives the server's outages.

A Qdrant server may be down when ``lookup-knowledge mcp`` starts or go down while it serves.
:class:`ReconnectingSearchPort` opens the store when a lookup needs it; when the store is
unavailable (refused, timed out after ``store.timeout_s``, collection missing) the search raises
:class:`~.errors.StoreUnavailableError` (the lookup answers ``retrieval_failed``), the port drops
its client, and the next lookup opens it afresh: the server recovers without a restart. For
``retry_after_s`` after a failure the port fails at once with the same error, so the searches of
one lookup (a filtered search and its retries) cost one timeout, not one each.

>>> port = ReconnectingSearchPort(lambda: open_store(config, create=False))  # doctest: +SKIP
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from .errors import StoreUnavailableError
from .search import AccessScope, KnowledgeSearchPort, KnowledgeStore, SearchHit, SearchRequest

RETRY_AFTER_S = 1.0
T = TypeVar("T")


class ReconnectingSearchPort(KnowledgeSearchPort):
    """A store opened on demand and dropped when unavailable; ``on_reopen`` runs after each
    reopening (the caller reloads what an ingest may have changed, such as the L0 index)."""

    def __init__(
        self,
        opener: Callable[[], KnowledgeStore],
        on_reopen: Callable[[], None] | None = None,
        retry_after_s: float = RETRY_AFTER_S,
    ) -> None:
        self._opener, self._on_reopen, self._retry_after_s = opener, on_reopen, retry_after_s
        self._lock = threading.Lock()
        self._store: KnowledgeStore | None = None
        self._opened = 0
        self._failure: tuple[float, StoreUnavailableError] | None = None

    def connect(self) -> None:
        """Open the store now (raises :class:`StoreUnavailableError` when it cannot)."""
        self._acquire()

    def search(self, request: SearchRequest) -> list[SearchHit]:
        return self._on_store(lambda store: store.search(request))

    def search_batch(self, requests: Sequence[SearchRequest]) -> list[list[SearchHit]]:
        return self._on_store(lambda store: store.search_batch(requests))

    def term_idf(self, token_ids: Sequence[int], access: AccessScope | None = None) -> dict[int, float]:
        return self._on_store(lambda store: store.term_idf(token_ids, access))

    def _on_store(self, call: Callable[[KnowledgeStore], T]) -> T:
        """``call`` on the open store; a store that turns out unavailable is dropped."""
        store = self._acquire()
        try:
            return call(store)
        except StoreUnavailableError as exc:
            self._drop(store, exc)
            raise

    def _acquire(self) -> KnowledgeStore:
        with self._lock:
            if self._store is not None:
                return self._store
            if self._failure is not None and time.monotonic() - self._failure[0] < self._retry_after_s:
                raise type(self._failure[1])(str(self._failure[1]))
            try:
                self._store = self._opener()
            except StoreUnavailableError as exc:
                self._failure = (time.monotonic(), exc)
                raise
            self._failure = None
            self._opened += 1
            store, reopened = self._store, self._opened > 1
        if reopened and self._on_reopen is not None:
            self._on_reopen()
        return store

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
            store, self._store = self._store, None
        if store is not None:
            store.close()
