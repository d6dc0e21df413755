"""The embedded default store: the Qdrant engine in-process via ``qdrant-edge-py``.

>>> store = QdrantEdgeStore("/tmp/kb/knowledge", dimension=384)  # doctest: +SKIP
>>> store.search(SearchRequest("refunds", vector, top_k=5, category="payments"))  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from .search import (
    CATEGORY_FIELD,
    DOC_ID_FIELD,
    VERSION_FIELDS,
    KnowledgeStore,
    SearchHit,
    SearchRequest,
    StoredChunk,
    StoredDocument,
    StoreLockedError,
    StoreMissingError,
    StoreUnavailableError,
    backend_errors,
    complete_hits,
    hit_from_payload,
    process_note,
    stored_documents,
)
from .shared_store import holder_note

__all__ = ["QdrantEdgeStore", "StoreUnavailableError"]

_SCROLL_PAGE = 1024
_UPSERT_BATCH = 512


class QdrantEdgeStore(KnowledgeStore):
    """A persistent Qdrant Edge shard with a keyword payload index on the category field."""

    def __init__(self, path: str | Path, dimension: int | None = None, *, create: bool = True) -> None:
        self.path = Path(path)
        self.dimension = dimension
        self._holder = holder_note(self.path)
        self._shard = self._open(create)
        with contextlib.suppress(OSError):  # so a process kept waiting can name the holder
            self._holder.write_text(process_note(), encoding="utf-8")

    def _open(self, create: bool) -> qe.EdgeShard:
        config = None
        if self.dimension is not None:
            config = qe.EdgeConfig(vectors=qe.EdgeVectorParams(self.dimension, qe.Distance.Cosine))
        try:
            if self.path.is_dir() and any(self.path.iterdir()):
                return qe.EdgeShard.load(str(self.path), config)
            if not create:
                raise StoreMissingError(f"no knowledge store at {self.path}: ingest first")
            if config is None:
                raise ValueError("a new store needs the embedding dimension")
            shard = qe.EdgeShard.create(str(self.path), config)
        except StoreUnavailableError:
            raise
        except Exception as exc:  # the engine raises plain exceptions (WouldBlock, config mismatch)
            if "WouldBlock" in str(exc):  # the WAL lock is held by another open store
                raise StoreLockedError(
                    f"cannot open knowledge store at {self.path}: it is locked, already open in "
                    f"another process (or elsewhere in this one): {self._held_by()}; close that first"
                ) from exc
            raise StoreUnavailableError(f"cannot open knowledge store at {self.path}: {exc}") from exc
        for field in (CATEGORY_FIELD, DOC_ID_FIELD):
            shard.update(qe.UpdateOperation.create_field_index(field, qe.PayloadSchemaType.Keyword))
        return shard

    def search(self, request: SearchRequest) -> list[SearchHit]:
        """Dense search, filtered by category when the request carries one."""
        with backend_errors("search"):
            points = self._shard.query(self._query(request))
        return complete_hits(
            request, [hit_from_payload(p.id, p.score, p.payload) for p in points], self._count
        )

    def search_batch(self, requests: Sequence[SearchRequest]) -> list[list[SearchHit]]:
        """Several searches planned as one batch by the engine."""
        batch = qe.QueryBatchRequest([self._query(request) for request in requests])
        with backend_errors("batch search"):
            results = self._shard.query_batch(batch)
        return [
            complete_hits(request, [hit_from_payload(p.id, p.score, p.payload) for p in points], self._count)
            for request, points in zip(requests, results, strict=True)
        ]

    @staticmethod
    def _query(request: SearchRequest) -> qe.QueryRequest:
        return qe.QueryRequest(
            limit=request.top_k,
            query=qe.Query.Nearest(list(request.query_vector)),
            filter=_category_filter(request.category),
            with_payload=True,
        )

    def upsert(self, chunks: Sequence[StoredChunk]) -> None:
        for start in range(0, len(chunks), _UPSERT_BATCH):
            points = [
                qe.Point(chunk.point_id, list(chunk.vector), dict(chunk.payload))
                for chunk in chunks[start : start + _UPSERT_BATCH]
            ]
            with backend_errors("upsert"):
                self._shard.update(qe.UpdateOperation.upsert_points(points))

    def delete_documents(self, doc_ids: Iterable[str]) -> None:
        ids = sorted(set(doc_ids))
        if ids:
            condition = qe.FieldCondition(DOC_ID_FIELD, match=qe.MatchAny(ids))
            with backend_errors("delete"):
                self._shard.update(qe.UpdateOperation.delete_points_by_filter(qe.Filter(must=[condition])))

    def delete_other_chunks(self, keep: Mapping[str, Sequence[str]]) -> None:
        for doc_id, point_ids in keep.items():
            others = qe.Filter(
                must=[qe.FieldCondition(DOC_ID_FIELD, match=qe.MatchValue(doc_id))],
                must_not=[qe.HasIdCondition(set(point_ids))],
            )
            with backend_errors("delete"):
                self._shard.update(qe.UpdateOperation.delete_points_by_filter(others))

    def documents(self) -> dict[str, StoredDocument]:
        """Every stored document, with its source and the completeness of each stored version."""
        return stored_documents(self._payloads())

    def _payloads(self) -> Iterator[Mapping[str, Any]]:
        offset = None
        selector = qe.PayloadSelector.Include(list(VERSION_FIELDS))
        while True:
            request = qe.ScrollRequest(offset=offset, limit=_SCROLL_PAGE, with_payload=selector)
            with backend_errors("scroll"):
                records, offset = self._shard.scroll(request)
            yield from (record.payload or {} for record in records)
            if offset is None:
                return

    def count(self) -> int:
        return self._count(None)

    def _count(self, category: str | None) -> int:
        with backend_errors("count"):
            return self._shard.count(qe.CountRequest(exact=True, filter=_category_filter(category)))

    def optimize(self) -> None:
        """Build the HNSW index and merge segments (run after bulk ingestion)."""
        with backend_errors("optimize"):
            self._shard.optimize()

    def _held_by(self) -> str:
        try:
            pid, _, command = self._holder.read_text(encoding="utf-8").strip().partition(" ")
        except (OSError, UnicodeDecodeError):
            return "holder unknown"
        return f"held by pid {pid} ({command})"

    def close(self) -> None:
        if self._shard is not None:
            self._shard.flush()
            self._shard.close()
            self._shard = None
            with contextlib.suppress(OSError, UnicodeDecodeError):
                if self._holder.read_text(encoding="utf-8").startswith(f"{os.getpid()} "):
                    self._holder.unlink()


def _category_filter(category: str | None) -> qe.Filter | None:
    if category is None:
        return None
    return qe.Filter(must=[qe.FieldCondition(CATEGORY_FIELD, match=qe.MatchValue(category))])
