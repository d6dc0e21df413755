"""Where configured components come from: the store, the embedder and the L0 index location."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lookup_knowledge.adapters.answerability import AnswerabilityReader, shipped_reader
from lookup_knowledge.adapters.dask_cluster import DaskEmbedder
from lookup_knowledge.adapters.embedder import SentenceTransformerEmbedder
from lookup_knowledge.adapters.errors import StoreBackendError
from lookup_knowledge.adapters.l0_index import L0Index
from lookup_knowledge.adapters.multilingual import MultilingualEmbedder, multilingual_installed
from lookup_knowledge.adapters.qdrant_edge_store import QdrantEdgeStore
from lookup_knowledge.adapters.search import KnowledgeSearchPort, KnowledgeStore
from lookup_knowledge.adapters.server_port import ReconnectingSearchPort
from lookup_knowledge.adapters.shared_store import SharedSearchPort, open_shared
from lookup_knowledge.config import CLUSTER_SETTINGS, Config
from lookup_knowledge.extras import require


def build_embedder(config: Config) -> SentenceTransformerEmbedder:
    """The configured embedder; its model loads on first use and is shared per process."""
    e = config.embedder
    return SentenceTransformerEmbedder(
        e.model, batch_size=e.batch_size, device=e.device, backend=e.backend, quantize=e.quantize
    )


def build_multilingual_embedder(config: Config, use: str = "vectors") -> MultilingualEmbedder | None:
    """The multilingual encoder when ``multilingual.<use>`` (``vectors`` at ingest, ``search``
    at lookups) is on, or ``auto`` and the ``multilingual`` extra is installed; else ``None``."""
    m = config.multilingual
    setting = getattr(m, use)
    if setting == "off" or (setting == "auto" and not multilingual_installed()):
        return None
    if not multilingual_installed():
        require("multilingual", f"multilingual.{use}: {setting}")
    return MultilingualEmbedder(max_chars=m.max_chars, threads=m.threads)


def build_answer_reader(config: Config) -> AnswerabilityReader | None:
    """The shipped answerability reader when ``answerability.reader`` is on (loaded once per
    process), else ``None``."""
    return shipped_reader() if config.answerability.reader else None


def build_cluster_embedder(config: Config, client: Any) -> DaskEmbedder:
    """The configured embedder run on the Dask cluster behind ``client``: every worker builds it
    from ``config`` (its own device and backend), one model batch per task."""
    return DaskEmbedder(
        client, functools.partial(build_embedder, config), config.embedder.model, config.embedder.batch_size
    )


def open_store(
    config: Config,
    dimension: int | None = None,
    *,
    create: bool = True,
    multilingual_dimension: int | None = None,
) -> KnowledgeStore:
    """The configured search store: embedded Qdrant Edge, or qdrant-client by URL / local mode.

    ``dimension`` is needed only to create a store; an existing one opens without it (so a
    lookup learns that the store is missing or down before the model loads).
    ``multilingual_dimension``: a new store gets a multilingual vector per chunk of this length.
    """
    store = config.store
    if store.backend == "edge":
        path = store.path / store.collection
        return open_shared(
            lambda: QdrantEdgeStore(
                path, dimension, create=create, multilingual_dimension=multilingual_dimension
            ),
            path,
            store.lock_wait_s,
        )
    # qdrant-client (about a second of imports) loads only for a store that is not embedded
    from lookup_knowledge.adapters.qdrant_client_store import ClusterLayout, QdrantClientStore

    layout = ClusterLayout(**{name: getattr(store, name) for name in CLUSTER_SETTINGS})
    if store.url:
        return QdrantClientStore(
            store.collection,
            dimension,
            url=store.url,
            api_key=store.api_key,
            timeout_s=store.timeout_s,
            create=create,
            layout=layout,
            multilingual_dimension=multilingual_dimension,
        )
    location = ":memory:" if str(store.path) == ":memory:" else store.path / "qdrant"
    return QdrantClientStore(
        store.collection,
        dimension,
        location=location,
        create=create,
        layout=layout,
        multilingual_dimension=multilingual_dimension,
    )


def open_search_port(
    config: Config, on_reopen: Callable[[], None], *, require_store: bool = True
) -> KnowledgeSearchPort:
    """The search port of a long-lived lookup process: an embedded store it hands over to
    another process that asks (then reopens, calling ``on_reopen``); a server store reopened
    after an outage (``require_store=False``: even one that is down now, for a server that
    must start anyway and answer ``retrieval_failed`` until the store is back)."""
    store = config.store
    if store.backend != "edge":
        port = ReconnectingSearchPort(lambda: _complete(open_store(config, create=False), config), on_reopen)
        if require_store:
            port.connect()
        return port
    path = store.path / store.collection
    return SharedSearchPort(
        lambda: _complete(QdrantEdgeStore(path, create=False), config), path, store.lock_wait_s, on_reopen
    )


def _complete(store: KnowledgeStore, config: Config) -> KnowledgeStore:
    """The store opened for lookups, unless it holds fewer chunks than its L0 index lists
    documents (every document has a chunk, and ingest updates the L0 index before it deletes):
    its data is missing (segments removed, a collection dropped), which is corruption, not an
    empty knowledge base."""
    try:
        listed = len(L0Index.load(l0_index_path(config)).documents)
        points = store.count()
    except BaseException:
        store.close()
        raise
    if points < listed:
        store.close()
        raise StoreBackendError(
            f"the knowledge store {config.store.collection!r} holds {points} chunks while its L0 index "
            f"lists {listed} documents: its data is missing or damaged; delete the store "
            f"({_where(config)}) and its L0 index and ingest the knowledge base again"
        )
    return store


def _where(config: Config) -> str:
    if config.store.backend == "edge":
        return str(config.store.path / config.store.collection)
    return f"the collection {config.store.collection!r}"


def l0_index_path(config: Config) -> Path:
    """The L0 index file, persisted next to the store."""
    return config.store.path / f"{config.store.collection}.l0.sqlite"


def calibration_path(config: Config) -> Path:
    """The probe nulls measured on the store, kept next to it (``KeptNulls``)."""
    return config.store.path / f"{config.store.collection}.calibration.json"


def converted_dir(config: Config) -> Path:
    """The folder of documents' converted texts (one per file version), next to the store."""
    return config.store.path / f"{config.store.collection}.documents"
