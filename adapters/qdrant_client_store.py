"""The server store: a Qdrant server or cluster by URL through ``qdrant-client`` (or its local mode).

>>> store = QdrantClientStore("knowledge", 384, url="http://qdrant:6333")  # doctest: +SKIP
>>> store = QdrantClientStore("knowledge", 384, location=":memory:")  # tests, no server
>>> layout = ClusterLayout(shard_number=6, replication_factor=2)  # a new collection on a cluster
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException

from .errors import (
    StoreBackendError,
    StoreError,
    StoreLockedError,
    StoreMissingError,
    StoreOutdatedError,
    StoreUnavailableError,
)
from .payload import ACCESS_FIELD, CATEGORY_FIELD, DOC_ID_FIELD, LANGUAGE_FIELD, VERSION_FIELDS
from .qdrant_store import (
    DENSE_VECTOR,
    MULTILINGUAL_VECTOR,
    RRF_K,
    SPARSE_VECTOR,
    QdrantStore,
    ScoredPoints,
    dense_vector,
    float_list,
    found_candidates,
    fused_legs,
    missing_points,
    multilingual_searchable,
    points_by_value,
    stored_cosines,
)
from .redaction import mask_secrets
from .search import AccessFilter, Candidates, SearchRequest, StoredChunk
from .sparse import SparseVector
from .text import first_line

_SCROLL_PAGE = 1024
_UPSERT_BATCH = 256


@dataclass(frozen=True, slots=True)
class ClusterLayout:
    """How a Qdrant cluster spreads a collection it creates (None: the server's default). Local
    mode accepts and ignores them, as qdrant-client does; an existing collection keeps its own."""

    shard_number: int | None = None
    replication_factor: int | None = None
    write_consistency_factor: int | None = None


class QdrantClientStore(QdrantStore):
    """A Qdrant collection reached by URL (API key from the caller), local path or ``:memory:``:
    named dense and BM25 sparse vectors (IDF applied by the server), as the embedded store."""

    def __init__(
        self,
        collection: str,
        dimension: int | None = None,
        *,
        url: str | None = None,
        api_key: str | None = None,
        location: str | Path | None = None,
        timeout_s: float | None = None,
        create: bool = True,
        layout: ClusterLayout = ClusterLayout(),
        multilingual_dimension: int | None = None,
    ) -> None:
        self.collection = collection
        self.dimension = dimension
        self.multilingual_dimension = multilingual_dimension
        self._multilingual = False
        self.layout = layout
        self._where = mask_secrets(url or str(location))  # named in messages: credentials masked
        if url:  # every request, the connection included, is bounded by ``timeout_s``
            try:
                self._client = QdrantClient(
                    url=url, api_key=api_key, timeout=timeout_s, check_compatibility=False
                )
            except Exception as exc:  # a URL the client cannot parse (bad port, unknown scheme)
                raise StoreUnavailableError(
                    f"store.url {self._where} is not a usable Qdrant URL: {first_line(exc)}"
                ) from None
        elif str(location) == ":memory:":
            self._client = QdrantClient(location=":memory:")
        else:
            if not create and not Path(str(location)).exists():
                raise StoreMissingError(f"no knowledge store at {location}: ingest first")
            try:
                self._client = QdrantClient(path=str(location))
            except RuntimeError as exc:  # "already accessed by another instance of Qdrant client"
                raise StoreLockedError(
                    f"cannot open knowledge store at {location}: it is locked, already open in another "
                    "process (or elsewhere in this one); close that first"
                ) from exc
        self._timeout_s = timeout_s
        self._ensure_collection(create)

    def _ensure_collection(self, create: bool) -> None:
        with self._errors("opening the collection"):
            if self._client.collection_exists(self.collection):
                params = self._client.get_collection(self.collection).config.params
                if SPARSE_VECTOR not in (params.sparse_vectors or {}):
                    raise StoreOutdatedError(f"{self._where}, collection {self.collection!r}")
                self._multilingual = (
                    isinstance(params.vectors, dict) and MULTILINGUAL_VECTOR in params.vectors
                )
                return
            if not create or self.dimension is None:
                raise StoreMissingError(f"no collection {self.collection!r} at {self._where}: ingest first")
            vectors = {
                DENSE_VECTOR: models.VectorParams(size=self.dimension, distance=models.Distance.COSINE)
            }
            if self.multilingual_dimension is not None:
                vectors[MULTILINGUAL_VECTOR] = models.VectorParams(
                    size=self.multilingual_dimension, distance=models.Distance.COSINE
                )
            self._client.create_collection(
                self.collection,
                vectors_config=vectors,
                sparse_vectors_config={
                    SPARSE_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)
                },
                **asdict(self.layout),
            )
            with warnings.catch_warnings():  # local mode has no payload indexes and says so
                warnings.simplefilter("ignore")
                for field in (CATEGORY_FIELD, DOC_ID_FIELD, ACCESS_FIELD, LANGUAGE_FIELD):
                    self._client.create_payload_index(
                        self.collection, field, field_schema=models.PayloadSchemaType.KEYWORD
                    )
            self._multilingual = self.multilingual_dimension is not None

    @property
    def multilingual_vectors(self) -> bool:
        return self._multilingual

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """A server that does not answer is unavailable; any other failure is a backend error."""
        try:
            yield
        except StoreError:
            raise
        except ResponseHandlingException as exc:  # the transport: refused, reset, timed out
            reason = first_line(exc)
            if "timed out" in reason:
                reason = f"no answer within store.timeout_s = {self._timeout_s} s"
            raise StoreUnavailableError(f"Qdrant at {self._where} is unavailable: {reason}") from exc
        except Exception as exc:
            raise StoreBackendError(f"{action} failed: {first_line(exc)}") from exc

    def search_batch(self, requests: Sequence[SearchRequest]) -> list[Candidates]:
        """Several searches in one round trip (a hybrid search brings its dense, sparse and
        multilingual companions, its legs run alone)."""
        requests = [multilingual_searchable(request, self._multilingual) for request in requests]
        queries = [query for request in requests for query in engine_queries(request)]
        with self._errors("search" if len(requests) == 1 else "batch search"):
            responses = iter(self._client.query_batch_points(self.collection, requests=queries))
        points = (r.points for r in responses)
        return found_candidates(requests, points, self._cosines, self._matching)

    def _cosines(self, scored: Sequence[ScoredPoints]) -> list[dict[Any, float]]:
        """The dense scores of the points each request still lacks, from their stored vectors
        (one call for all: :func:`stored_cosines`)."""
        with self._errors("search"):
            records = self._client.retrieve(
                self.collection, missing_points(scored), with_payload=False, with_vectors=[DENSE_VECTOR]
            )
        return stored_cosines(scored, {r.id: dense_vector(r) for r in records})

    def _token_tops(self, token_ids: Sequence[int], access: AccessFilter | None) -> list[Any]:
        conditions = _access_conditions(access)
        where = models.Filter(must=conditions) if conditions else None
        queries = [
            models.QueryRequest(
                query=models.SparseVector(indices=[token], values=[1.0]),
                using=SPARSE_VECTOR,
                filter=where,
                limit=1,
                with_vector=[SPARSE_VECTOR],
            )
            for token in token_ids
        ]
        with self._errors("search"):
            responses = self._client.query_batch_points(self.collection, requests=queries)
        return [response.points[0] if response.points else None for response in responses]

    def upsert(self, chunks: Sequence[StoredChunk]) -> None:
        for start in range(0, len(chunks), _UPSERT_BATCH):
            points = [
                models.PointStruct(id=c.point_id, vector=self._vectors(c), payload=dict(c.payload))
                for c in chunks[start : start + _UPSERT_BATCH]
            ]
            with self._errors("upsert"):
                self._client.upsert(self.collection, points=points)

    def _vectors(self, chunk: StoredChunk) -> dict[str, Any]:
        vectors = {DENSE_VECTOR: float_list(chunk.vector), SPARSE_VECTOR: _sparse(chunk.sparse_vector)}
        if self._multilingual and chunk.multilingual_vector is not None:
            vectors[MULTILINGUAL_VECTOR] = float_list(chunk.multilingual_vector)
        return vectors

    def set_access(self, doc_id: str, access: Sequence[str]) -> None:
        where = models.Filter(
            must=[models.FieldCondition(key=DOC_ID_FIELD, match=models.MatchValue(value=doc_id))]
        )
        with self._errors("access update"):
            self._client.set_payload(self.collection, payload={ACCESS_FIELD: list(access)}, points=where)

    def set_languages(self, languages: Mapping[Any, str]) -> None:
        for language, ids in points_by_value(languages).items():
            with self._errors("language update"):
                self._client.set_payload(self.collection, payload={LANGUAGE_FIELD: language}, points=ids)

    def delete_documents(self, doc_ids: Iterable[str]) -> None:
        ids = sorted(set(doc_ids))
        if ids:
            condition = models.FieldCondition(key=DOC_ID_FIELD, match=models.MatchAny(any=ids))
            selector = models.FilterSelector(filter=models.Filter(must=[condition]))
            with self._errors("delete"):
                self._client.delete(self.collection, points_selector=selector)

    def delete_other_chunks(self, keep: Mapping[str, Sequence[str]]) -> None:
        for doc_id, point_ids in keep.items():
            others = models.Filter(
                must=[models.FieldCondition(key=DOC_ID_FIELD, match=models.MatchValue(value=doc_id))],
                must_not=[models.HasIdCondition(has_id=list(point_ids))],
            )
            with self._errors("delete"):
                self._client.delete(self.collection, points_selector=models.FilterSelector(filter=others))

    def _payloads(self) -> Iterator[Mapping[str, Any]]:
        offset = None
        while True:
            with self._errors("scroll"):
                records, offset = self._client.scroll(
                    self.collection, limit=_SCROLL_PAGE, offset=offset, with_payload=list(VERSION_FIELDS)
                )
            yield from (record.payload or {} for record in records)
            if offset is None:
                return

    def _document_points(
        self, doc_ids: list[str], fields: list[str], *, dense: bool
    ) -> Iterator[tuple[Any, Mapping[str, Any], Sequence[float] | None]]:
        where = models.Filter(
            must=[models.FieldCondition(key=DOC_ID_FIELD, match=models.MatchAny(any=doc_ids))]
        )
        offset = None
        while True:
            with self._errors("scroll"):
                records, offset = self._client.scroll(
                    self.collection,
                    scroll_filter=where,
                    limit=_SCROLL_PAGE,
                    offset=offset,
                    with_payload=fields,
                    with_vectors=[DENSE_VECTOR] if dense else False,
                )
            yield from ((record.id, record.payload or {}, dense_vector(record)) for record in records)
            if offset is None:
                return

    def _first_payloads(
        self, n: int, access: AccessFilter | None, fields: list[str]
    ) -> list[Mapping[str, Any]]:
        where = models.Filter(must=conditions) if (conditions := _access_conditions(access)) else None
        with self._errors("scroll"):
            records, _ = self._client.scroll(
                self.collection, limit=n, scroll_filter=where, with_payload=fields
            )
        return [record.payload or {} for record in records]

    def _points_estimate(self) -> int:
        with self._errors("count"):
            return self._client.count(self.collection, exact=False).count

    def _matching(self, request: SearchRequest | None) -> int:
        with self._errors("count"):
            where = None if request is None else _request_filter(request)
            return self._client.count(self.collection, count_filter=where, exact=True).count

    def close(self) -> None:
        self._client.close()


def engine_queries(request: SearchRequest) -> list[models.QueryRequest]:
    """The server queries of one request: the ranked one, and for hybrid its dense and sparse
    companions (its dense, sparse and multilingual searches run alone, ``ranked_width`` deep: the
    DAG reads each hit's places and BM25 score in them). A ``scores_only`` request's ranked query
    returns each point's document id alone."""
    where = _request_filter(request)
    payload: bool | list[str] = [DOC_ID_FIELD] if request.scores_only else True
    dense = list(request.query_vector)
    if request.mode == "dense":
        return [
            models.QueryRequest(
                query=dense, using=DENSE_VECTOR, filter=where, limit=request.top_k, with_payload=payload
            )
        ]
    sparse = _sparse(request.sparse_vector)
    # its terms name the matches (cosines come from dense scores); a scores-only search names none
    vectors = False if request.scores_only else [SPARSE_VECTOR]
    if request.mode == "sparse":
        return [
            models.QueryRequest(
                query=sparse,
                using=SPARSE_VECTOR,
                filter=where,
                limit=request.ranked_width,
                with_payload=payload,
                with_vector=vectors,
            )
        ]
    width = request.prefetch_width
    fusion = (
        models.RrfQuery(rrf=models.Rrf(k=RRF_K))
        if request.fusion == "rrf"
        else models.FusionQuery(fusion=models.Fusion.DBSF)
    )
    legs = [(dense, DENSE_VECTOR), (sparse, SPARSE_VECTOR)]
    if request.multilingual_vector is not None:
        legs.append((float_list(request.multilingual_vector), MULTILINGUAL_VECTOR))
    fused = models.QueryRequest(
        prefetch=[
            models.Prefetch(query=q, using=name, filter=where, limit=width)
            for q, name in fused_legs(request, legs)
        ],
        query=fusion,
        limit=request.ranked_width,
        with_payload=payload,
        with_vector=vectors,
    )
    companions = [
        models.QueryRequest(query=q, using=name, filter=where, limit=request.ranked_width) for q, name in legs
    ]
    return [fused, *companions]


def _sparse(vector: SparseVector | None) -> models.SparseVector:
    assert vector is not None  # SearchRequest guarantees it outside dense mode
    return models.SparseVector(indices=list(vector.indices), values=list(vector.values))


def _request_filter(request: SearchRequest) -> models.Filter | None:
    """The payload filter of every query of a request: its category, its caller's access, and
    the language its chunks must not be written in."""
    must = _access_conditions(request.access)
    if request.category is not None:
        must.append(
            models.FieldCondition(key=CATEGORY_FIELD, match=models.MatchValue(value=request.category))
        )
    language = request.other_languages_than
    must_not = (
        []
        if language is None
        else [models.FieldCondition(key=LANGUAGE_FIELD, match=models.MatchValue(value=language))]
    )
    return models.Filter(must=must or None, must_not=must_not or None) if must or must_not else None


def _access_conditions(access: Sequence[str] | None) -> list[models.FieldCondition]:
    """A restricted caller's condition: the chunk's access holds one of its principals."""
    if access is None:
        return []
    return [models.FieldCondition(key=ACCESS_FIELD, match=models.MatchAny(any=list(access)))]
