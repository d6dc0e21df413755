"""Where configured components come from: the store, the embedder and the L0 index location."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lookup_knowledge.adapters.embedder import SentenceTransformerEmbedder
from lookup_knowledge.adapters.qdrant_client_store import QdrantClientStore
from lookup_knowledge.adapters.qdrant_edge_store import QdrantEdgeStore
from lookup_knowledge.adapters.search import KnowledgeSearchPort, KnowledgeStore
from lookup_knowledge.adapters.server_port import ReconnectingSearchPort
from lookup_knowledge.adapters.shared_store import SharedSearchPort, open_shared
from lookup_knowledge.config import Config


def build_embedder(config: Config) -> SentenceTransformerEmbedder:
    """The configured embedder; its model loads on first use and is shared per process."""
    e = config.embedder
    return SentenceTransformerEmbedder(
        e.model, batch_size=e.batch_size, device=e.device, backend=e.backend, quantize=e.quantize
    )


def open_store(config: Config, dimension: int | None = None, *, create: bool = True) -> KnowledgeStore:
    """The configured search store: embedded Qdrant Edge, or qdrant-client by URL / local mode.

    ``dimension`` is needed only to create a store; an existing one opens without it (so a
    lookup learns that the store is missing or down before the model loads).
    """
    store = config.store
    if store.backend == "edge":
        path = store.path / store.collection
        return open_shared(lambda: QdrantEdgeStore(path, dimension, create=create), path, store.lock_wait_s)
    if store.url:
        return QdrantClientStore(
            store.collection,
            dimension,
            url=store.url,
            api_key=store.api_key,
            timeout_s=store.timeout_s,
            create=create,
        )
    location = ":memory:" if str(store.path) == ":memory:" else store.path / "qdrant"
    return QdrantClientStore(store.collection, dimension, location=location, create=create)


def open_search_port(
    config: Config, on_reopen: Callable[[], None], *, require_store: bool = True
) -> KnowledgeSearchPort:
    """The search port of a long-lived lookup process: an embedded store it hands over to
    another process that asks (then reopens, calling ``on_reopen``); a server store reopened
    after an outage (``require_store=False``: even one that is down now, for a server that
    must start anyway and answer ``retrieval_failed`` until the store is back)."""
    store = config.store
    if store.backend != "edge":
        port = ReconnectingSearchPort(lambda: open_store(config, create=False), on_reopen)
        if require_store:
            port.connect()
        return port
    path = store.path / store.collection
    return SharedSearchPort(lambda: QdrantEdgeStore(path, create=False), path, store.lock_wait_s, on_reopen)


def l0_index_path(config: Config) -> Path:
    """The L0 index file, persisted next to the store."""
    return config.store.path / f"{config.store.collection}.l0.json"
