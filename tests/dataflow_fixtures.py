"""Helpers for the dataflow tests (fallback, post-processing, context, contract): the queries,
the sample knowledge base's handle, a tool over it, hand-made hits and a fault-injecting port.
The ``sample_kb`` fixture itself lives in ``conftest.py``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lookup_knowledge import ingest, load_config, sample_knowledge_base
from lookup_knowledge.adapters.corpus import SourceDocument, read_corpus
from lookup_knowledge.adapters.embedder import Embedder
from lookup_knowledge.adapters.l0_index import L0Index
from lookup_knowledge.adapters.search import (
    AccessScope,
    Candidates,
    KnowledgeSearchPort,
    SearchHit,
    SearchRequest,
)
from lookup_knowledge.agent.knowledge_tool import KnowledgeTool
from lookup_knowledge.calibration import ProbeCalibration, own_question
from lookup_knowledge.config import Config
from lookup_knowledge.probes import PROBE_QUERIES
from lookup_knowledge.ranking import rank, searched_hits
from lookup_knowledge.stores import l0_index_path, open_store

# Queries with a known L0 shape on the sample knowledge base.
REFUND_QUERY = "Who must approve a refund above 500 EUR?"  # L0: one domain (payments)
PCI_QUERY = "PCI DSS rules for card data in the payments.events Kafka topic"  # several domains
PARCEL_QUERY = "compensation for parcels arriving late"  # no L0 hint at all
FAPIAO_QUERY = "如何申请增值税专用发票"  # Chinese: L0 substring match, one domain
REFUND_DOC = "payments-refund-policy"
FAPIAO_DOC = "support-fapiao-requests-zh"


@dataclass
class SampleKB:
    """The ingested sample knowledge base: its store (shared search port) and L0 index."""

    store_path: Path
    store: Any  # the open QdrantEdgeStore
    l0_index: L0Index
    documents: dict[str, SourceDocument]  # doc_id -> document as read from the source


def config_for(store_path: Path, **overrides: Any) -> Config:
    """Default config at ``store_path`` plus ``dotted.key`` overrides (``__`` for the dots)."""
    values: dict[str, Any] = {"store.path": str(store_path)}
    values.update({key.replace("__", "."): value for key, value in overrides.items()})
    return load_config(overrides=values)


def ingest_kb(source: Path, store_path: Path, embedder: Embedder) -> SampleKB:
    """Ingest the knowledge base at ``source`` into ``store_path`` and hold its store open."""
    config = config_for(store_path)
    ingest(source, config, embedder=embedder)
    store = open_store(config, embedder.dimension, create=False)
    documents = {doc.doc_id: doc for doc in read_corpus(source).documents}
    return SampleKB(store_path, store, L0Index.load(l0_index_path(config)), documents)


def ingest_sample_kb(store_path: Path, embedder: Embedder) -> SampleKB:
    """Ingest the sample knowledge base into ``store_path`` and hold its store open, its probe
    null measured and kept beside it (as the CLI's ingest does), so every tool reads the same
    null whichever test ran first (a faulty port's probes never decide it: pass a
    ``store_calibration`` to measure through the port)."""
    kb = ingest_kb(sample_knowledge_base(), store_path, embedder)
    make_tool(kb, embedder).calibrate()
    return kb


def make_tool(
    kb: SampleKB,
    embedder: Embedder,
    *,
    search_port: KnowledgeSearchPort | None = None,
    l0_index: L0Index | None = None,
    store_calibration: ProbeCalibration | None = None,
    **overrides: Any,
) -> KnowledgeTool:
    """A tool over the shared sample store (or ``search_port``) with config overrides (its probe
    null kept beside the store unless ``store_calibration`` says otherwise)."""
    return KnowledgeTool(
        config_for(kb.store_path, **overrides),
        search_port=search_port if search_port is not None else kb.store,
        embedder=embedder,
        l0_index=l0_index if l0_index is not None else kb.l0_index,
        store_calibration=store_calibration,
    )


@dataclass
class SearchCall:
    """One search the port was asked for, and what it answered: its hits as the lookup ranks
    them (the store's candidates ranked, ``lookup_knowledge.ranking.rank``), or the error raised."""

    request: SearchRequest
    hits: list[SearchHit] = field(default_factory=list)
    error: str | None = None


_PROBES = frozenset(PROBE_QUERIES)


class FaultySearchPort(KnowledgeSearchPort):
    """The real store, wrapped: raises on filtered (or unfiltered, or every) search, and records
    each request and each round trip.

    The only test double of the suite: it injects backend faults and lets a test see which
    searches really ran, how they were sent, and which hits they really returned. A hybrid search
    that the DAG fuses again because its BM25 leg matched few chunks (``fused_answers``) is
    recorded apart, in :attr:`refusions` and :attr:`refusion_trips`: :attr:`calls` and
    :attr:`round_trips` are the lookup's searches.
    """

    def __init__(
        self,
        inner: KnowledgeSearchPort,
        *,
        fail_filtered: bool = False,
        fail_unfiltered: bool = False,
        fail_all: bool = False,
        fail_term_idf: bool = False,
        message: str = "simulated backend outage",
    ) -> None:
        self.inner = inner
        self.fail_term_idf = fail_term_idf
        self.term_idf_calls = 0
        self.term_idf_tokens: list[list[int]] = []  # the tokens each term_idf call asked for
        self.fail_filtered = fail_filtered
        self.fail_unfiltered = fail_unfiltered
        self.fail_all = fail_all
        self.message = message
        self.calls: list[SearchCall] = []
        self.round_trips: list[list[SearchRequest]] = []  # one entry per search / search_batch
        self.refusions: list[SearchCall] = []  # few-matches searches fused again
        self.refusion_trips: list[list[SearchRequest]] = []  # and their round trips
        self._own_questions: set[str] = set()  # questions the calibration makes from sampled chunks

    def _fails(self, request: SearchRequest) -> bool:
        filtered = request.category is not None
        return self.fail_all or (self.fail_filtered and filtered) or (self.fail_unfiltered and not filtered)

    def search(self, request: SearchRequest) -> Candidates:
        self.round_trips.append([request])
        return self._search(request)

    def _refusion(self, request: SearchRequest) -> bool:
        """Whether ``request`` is an earlier search fused again (same query and filter, another
        fusion: ``lookup_knowledge.ranking.few_matches_search``)."""
        return request.mode == "hybrid" and any(
            (call.request.query_text, call.request.category) == (request.query_text, request.category)
            and call.request.fusion != request.fusion
            for call in self.calls
        )

    def _search(self, request: SearchRequest) -> Candidates:
        call = SearchCall(request)
        (self.refusions if self._refusion(request) else self.calls).append(call)
        if self._fails(request):
            call.error = self.message
            raise ConnectionError(self.message)
        candidates = self.inner.search(request)
        call.hits = rank(request, candidates)
        return candidates

    def search_batch(self, requests: Sequence[SearchRequest]) -> list[Candidates]:
        """Like a store's batch: one failing request fails the whole round trip.

        The store's calibration searches (its probes and the questions made from its own chunks,
        once per tool: ``lookup_knowledge.calibration``) fail like any search but are not
        recorded: tests count the lookup's own searches."""
        calibration = _PROBES | self._own_questions
        if requests and all(request.query_text in calibration for request in requests):
            if any(self._fails(request) for request in requests):
                raise ConnectionError(self.message)
            return self.inner.search_batch(requests)
        trips = self.refusion_trips if all(self._refusion(r) for r in requests) else self.round_trips
        trips.append(list(requests))
        return [self._search(request) for request in requests]

    def term_idf(self, token_ids: Sequence[int], access: AccessScope | None = None) -> dict[int, float]:
        self.term_idf_calls += 1
        self.term_idf_tokens.append(list(token_ids))
        if self.fail_all or self.fail_term_idf:
            raise ConnectionError(self.message)
        return self.inner.term_idf(token_ids, access)

    def unheld_term_idf(self) -> float | None:
        if self.fail_all or self.fail_term_idf:
            raise ConnectionError(self.message)
        return self.inner.unheld_term_idf()

    def sample_chunks(self, n: int, access: AccessScope | None = None) -> list[tuple[str, str]]:
        """The store's sample, so a wrapped store keeps its own bar (its questions are calibration)."""
        chunks = self.inner.sample_chunks(n, access)
        self._own_questions.update(q for _, content in chunks if (q := own_question(content)))
        return chunks

    def returned_hits(self) -> dict[str, SearchHit]:
        """Evidence key -> hit, over every hit any search returned."""
        return {
            hit.payload["evidence_key"]: hit
            for call in [*self.calls, *self.refusions]
            for hit in call.hits
            if "evidence_key" in hit.payload
        }


def searched(search_port: KnowledgeSearchPort, request: SearchRequest) -> list[SearchHit]:
    """One search's hits as a lookup ranks them: the store's candidates, a few-matches search
    fused again, equal scores ordered (``lookup_knowledge.ranking.searched_hits``)."""
    return searched_hits(search_port, [request])[0]


def as_json(result: Any) -> dict[str, Any]:
    """The contract JSON of a ``LookupResult``."""
    return result.model_dump(by_alias=True, mode="json")


def make_hit(
    doc_id: str | None,
    chunk_index: int | None,
    normalized_score: float,
    *,
    point_id: str = "",
    content: str | None = None,
    payload: Mapping[str, Any] | None = None,
) -> SearchHit:
    """A hand-made search hit (cosine: base score == normalized score here)."""
    return SearchHit(
        point_id=point_id,
        content=content if content is not None else f"{doc_id} chunk {chunk_index} text",
        score=normalized_score,
        normalized_score=normalized_score,
        payload=dict(payload or {}),
        doc_id=doc_id,
        chunk_index=chunk_index,
    )


class FailingEmbedder(Embedder):
    """An embedding model that fails on every call (a fault, injected)."""

    model_name = "failing"

    @property
    def dimension(self) -> int:
        return 384

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        raise RuntimeError("embedder down")

    def embed_query(self, text: str) -> np.ndarray:
        raise RuntimeError("embedder down")

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        raise RuntimeError("embedder down")
