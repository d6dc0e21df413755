"""The search port: what the dataflow asks of a vector store, and what a store must offer ingestion.

Both store adapters (Qdrant Edge, qdrant-client) implement :class:`KnowledgeStore`; the
dataflow only sees the narrower :class:`KnowledgeSearchPort`.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

CATEGORY_FIELD = "category"
DOC_ID_FIELD = "doc_id"
DOC_HASH_FIELD = "doc_hash"
CHUNK_INDEX_FIELD = "chunk_index"
CONTENT_FIELD = "content"
EVIDENCE_KEY_FIELD = "evidence_key"

_POINT_NAMESPACE = uuid.UUID("6f1d9a52-8a63-4b8e-9a43-3c1f2b7d0e15")


def evidence_key(doc_id: str, chunk_index: int) -> str:
    """The chunk-scoped identity of a piece of evidence: ``docId#chunk-<n>``."""
    return f"{doc_id}#chunk-{chunk_index}"


def identity_key(hit: SearchHit, original_rank: int) -> str:
    """``docId#chunk-<n>``, else ``vector:<pointId>``, else ``rank:<originalRank>``."""
    if hit.doc_id is not None and hit.chunk_index is not None:
        return evidence_key(hit.doc_id, hit.chunk_index)
    if hit.point_id:
        return f"vector:{hit.point_id}"
    return f"rank:{original_rank}"


def point_id_for(key: str) -> str:
    """Deterministic point id (UUID5 of the evidence key), so re-ingestion is idempotent."""
    return str(uuid.uuid5(_POINT_NAMESPACE, key))


def cosine_normalized(score: float) -> float:
    """Normalized similarity for cosine distance: the similarity clipped to [0, 1]."""
    return min(1.0, max(0.0, score))


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """One dense search: the text (for traces), its vector, width and an optional category."""

    query_text: str
    query_vector: Sequence[float]
    top_k: int
    category: str | None = None
    mode: Literal["dense"] = "dense"


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One scored point as the port returns it."""

    point_id: str
    content: str
    score: float
    normalized_score: float
    payload: Mapping[str, Any]
    doc_id: str | None = None
    chunk_index: int | None = None


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """A chunk ready to be written: its vector and payload (which carries doc_id and chunk_index)."""

    vector: Sequence[float]
    payload: Mapping[str, Any] = field(default_factory=dict)

    @property
    def point_id(self) -> str:
        return point_id_for(self.payload[EVIDENCE_KEY_FIELD])


class KnowledgeSearchPort(ABC):
    """What the dataflow needs from a store (an ABC, so Hamilton can type-check the input)."""

    @abstractmethod
    def search(self, request: SearchRequest) -> list[SearchHit]:
        """Dense search; hits best first."""

    @abstractmethod
    def search_batch(self, requests: Sequence[SearchRequest]) -> list[list[SearchHit]]:
        """Several searches at once, results in request order."""


class KnowledgeStore(KnowledgeSearchPort):
    """A search port that ingestion can also write to."""

    @abstractmethod
    def upsert(self, chunks: Sequence[StoredChunk]) -> None:
        """Insert or replace chunks by their deterministic point ids."""

    @abstractmethod
    def delete_documents(self, doc_ids: Iterable[str]) -> None:
        """Delete every chunk of these documents."""

    @abstractmethod
    def delete_stale_chunks(self, current_hashes: Mapping[str, str]) -> None:
        """Delete the chunks of these documents whose content hash is not the current one."""

    @abstractmethod
    def document_hashes(self) -> dict[str, str]:
        """doc_id -> content hash of every stored document."""

    @abstractmethod
    def count(self) -> int:
        """Number of stored chunks."""

    @abstractmethod
    def close(self) -> None:
        """Flush and release the store."""

    def optimize(self) -> None:  # noqa: B027 - optional: only embedded engines need it
        """Build indexes after bulk writes (stores that index on their own do nothing)."""


def hit_from_payload(point_id: Any, score: float, payload: Mapping[str, Any] | None) -> SearchHit:
    """Build a :class:`SearchHit` from a store's raw point (shared by both adapters)."""
    payload = payload or {}
    chunk_index = payload.get(CHUNK_INDEX_FIELD)
    return SearchHit(
        point_id=str(point_id),
        content=payload.get(CONTENT_FIELD, ""),
        score=score,
        normalized_score=cosine_normalized(score),
        payload=payload,
        doc_id=payload.get(DOC_ID_FIELD),
        chunk_index=int(chunk_index) if chunk_index is not None else None,
    )
