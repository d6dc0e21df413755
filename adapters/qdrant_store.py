"""What both Qdrant adapters (the embedded Edge shard and the client of a server) share: a search
is a batch of one, the documents are read from the stored payloads, the count is one of all."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Mapping
from typing import Any

from .search import KnowledgeStore, SearchHit, SearchRequest, StoredDocument, stored_documents


class QdrantStore(KnowledgeStore):
    """A :class:`KnowledgeStore` over a Qdrant engine: each adapter sends the batch, scrolls the
    payloads and counts points in its engine's API."""

    def search(self, request: SearchRequest) -> list[SearchHit]:
        """One search (dense, sparse or fused hybrid), filtered by category when the request
        carries one."""
        return self.search_batch([request])[0]

    def documents(self) -> dict[str, StoredDocument]:
        """Every stored document, with its source and the completeness of each stored version."""
        return stored_documents(self._payloads())

    def count(self) -> int:
        return self._matching(None)

    @abstractmethod
    def _payloads(self) -> Iterator[Mapping[str, Any]]:
        """Every point's version fields (:data:`~.payload.VERSION_FIELDS`), page by page."""

    @abstractmethod
    def _matching(self, request: SearchRequest | None) -> int:
        """The exact number of points a request may return (under its category and access
        filters); of all points without a request."""
