"""Where configured components come from: the store, the embedder and the L0 index location."""

from __future__ import annotations

from pathlib import Path

from lookup_knowledge.adapters.embedder import SentenceTransformerEmbedder
from lookup_knowledge.adapters.qdrant_client_store import QdrantClientStore
from lookup_knowledge.adapters.qdrant_edge_store import QdrantEdgeStore
from lookup_knowledge.adapters.search import KnowledgeStore
from lookup_knowledge.config import Config


def build_embedder(config: Config) -> SentenceTransformerEmbedder:
    """The configured embedder; its model loads on first use and is shared per process."""
    e = config.embedder
    return SentenceTransformerEmbedder(
        e.model, batch_size=e.batch_size, device=e.device, backend=e.backend, quantize=e.quantize
    )


def open_store(config: Config, dimension: int, *, create: bool = True) -> KnowledgeStore:
    """The configured search store: embedded Qdrant Edge, or qdrant-client by URL / local mode."""
    store = config.store
    if store.backend == "edge":
        return QdrantEdgeStore(store.path / store.collection, dimension, create=create)
    if store.url:
        return QdrantClientStore(store.collection, dimension, url=store.url, api_key=store.api_key)
    location = ":memory:" if str(store.path) == ":memory:" else store.path / "qdrant"
    return QdrantClientStore(store.collection, dimension, location=location)


def l0_index_path(config: Config) -> Path:
    """The L0 index file, persisted next to the store."""
    return config.store.path / f"{config.store.collection}.l0.json"
