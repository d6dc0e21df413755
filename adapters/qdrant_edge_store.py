"""The embedded default store: the Qdrant engine in-process via ``qdrant-edge-py``.

>>> store = QdrantEdgeStore("/tmp/kb/knowledge", dimension=384)  # doctest: +SKIP
>>> store.search(SearchRequest("refunds", vector, top_k=5, category="payments"))  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from .errors import (
    PointGoneError,
    StoreLockedError,
    StoreMissingError,
    StoreOutdatedError,
    StoreUnavailableError,
    backend_errors,
)
from .payload import ACCESS_FIELD, CATEGORY_FIELD, DOC_ID_FIELD, LANGUAGE_FIELD, VERSION_FIELDS
from .qdrant_store import (
    DENSE_VECTOR,
    MULTILINGUAL_VECTOR,
    RRF_K,
    SPARSE_VECTOR,
    PointData,
    QdrantStore,
    ScoredPoints,
    dense_vector,
    float_list,
    found_candidates,
    fused_legs,
    missing_points,
    multilingual_searchable,
    points_by_value,
    reads_back,
    stored_cosines,
)
from .search import AccessFilter, Candidates, SearchRequest, StoredChunk
from .shared_store import holder_note, process_note, write_private
from .sparse import SparseVector

__all__ = ["QdrantEdgeStore", "StoreUnavailableError"]

_SCROLL_PAGE = 1024
_UPSERT_BATCH = 512
_MIB = 1 << 20
# Free disk space the engine needs: it preallocates its files as sparse files and writes them
# through memory maps, so on a full disk a write into a hole kills the process by SIGBUS (no
# error to catch). Measured with qdrant-edge-py 0.9.0: a new store's files are 146 MiB in
# apparent size (WAL 64 MiB, segments 82 MiB), the 220-chunk sample store's 178 MiB.
_NEW_STORE_BYTES = 160 * _MIB
_CHUNK_BYTES = 16 * 1024  # per chunk written: vectors, payload and WAL entry, with room to spare
_OPTIMIZE_BYTES = 32 * _MIB  # a merged segment's preallocation beyond a copy of the data (sample: 32)
_SPACE_MARGIN = 16 * _MIB
INDEXED_FIELDS = (CATEGORY_FIELD, DOC_ID_FIELD, ACCESS_FIELD, LANGUAGE_FIELD)  # a new store's indexes


class QdrantEdgeStore(QdrantStore):
    """A persistent Qdrant Edge shard: a named dense vector and a named BM25 sparse vector (IDF
    applied by the engine) per chunk, and a multilingual vector when the store was created with
    ``multilingual_dimension``; keyword payload indexes on the category, doc_id and access."""

    def __init__(
        self,
        path: str | Path,
        dimension: int | None = None,
        *,
        create: bool = True,
        multilingual_dimension: int | None = None,
    ) -> None:
        self.path = Path(path)
        self.dimension = dimension
        self.multilingual_dimension = multilingual_dimension
        self._multilingual = False
        self._holder = holder_note(self.path)
        if not create and not _has_data(self.path):
            raise StoreMissingError(f"no knowledge store at {self.path}: ingest first")
        self._lock = self._locked()
        try:
            self._ensure_space(0 if _has_data(self.path) else _NEW_STORE_BYTES)
            self._shard = self._open(create)
        except BaseException:
            os.close(self._lock)
            raise
        with contextlib.suppress(OSError):  # so a process kept waiting can name the holder
            write_private(self._holder, process_note())

    def _locked(self) -> int:
        """Take the store's lock file (``<collection>.lock``) before the engine touches the shard.

        qdrant-edge-py 0.9.0 modifies a held shard's segment files when another process calls
        ``EdgeShard.load`` on it, even though that load then fails with WouldBlock: the holder's
        later writes are lost or its flush fails (``repro/engine_race.py``). So no process asks
        the engine to open a shard that another process may hold: an exclusive ``flock`` decides
        first, and is released by the kernel when its holder exits, however it exits.
        """
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock_file(self.path), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreUnavailableError(f"cannot open knowledge store at {self.path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLockedError(
                f"cannot open knowledge store at {self.path}: it is locked, already open in "
                f"another process (or elsewhere in this one): {self._held_by()}; close that first"
            ) from None
        return fd

    def _ensure_space(self, extra: int) -> None:
        """Refuse, with a clear error, to let the engine work on a disk without room for it: the
        holes in its preallocated files (it may fill them in place), ``extra`` and a margin."""
        try:
            disk = os.statvfs(self.path.parent)
            holes = sum(_hole_bytes(file) for file in self.path.rglob("*"))
        except OSError:
            return  # a store that cannot be inspected fails at its open, with the engine's error
        free, needed = disk.f_bavail * disk.f_frsize, holes + extra + _SPACE_MARGIN
        if free < needed:
            raise StoreUnavailableError(
                f"not enough free disk space for the knowledge store at {self.path}: "
                f"{free / _MIB:.0f} MiB free, about {needed / _MIB:.0f} MiB needed (the engine writes "
                "its preallocated files through memory maps, which a full disk would crash); "
                "free some space and run it again"
            )

    @property
    def multilingual_vectors(self) -> bool:
        return self._multilingual

    def _config(self) -> qe.EdgeConfig | None:
        if self.dimension is None:
            return None
        vectors = {DENSE_VECTOR: qe.EdgeVectorParams(self.dimension, qe.Distance.Cosine)}
        if self.multilingual_dimension is not None:
            vectors[MULTILINGUAL_VECTOR] = qe.EdgeVectorParams(
                self.multilingual_dimension, qe.Distance.Cosine
            )
        return qe.EdgeConfig(
            vectors=vectors,
            sparse_vectors={SPARSE_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        )

    def _load(self, config: qe.EdgeConfig | None) -> qe.EdgeShard:
        """The existing shard; one made with or without multilingual vectors unlike ``config``
        (an older store, or one made with them off or on) loads as it is."""
        try:
            return qe.EdgeShard.load(str(self.path), config)
        except Exception as exc:
            mismatch = str(exc)
            if (
                config is None
                or "Incompatible configs" not in mismatch
                or MULTILINGUAL_VECTOR not in mismatch
            ):
                raise
        return qe.EdgeShard.load(str(self.path), None)

    def _open(self, create: bool) -> qe.EdgeShard:
        config = self._config()
        try:
            if _has_data(self.path):
                return _indexed(self._checked(self._load(config)), (LANGUAGE_FIELD,), required=False)
            if config is None:
                raise ValueError("a new store needs the embedding dimension")
            shard = qe.EdgeShard.create(str(self.path), config)
            self._multilingual = self.multilingual_dimension is not None
        except StoreUnavailableError:
            raise
        except Exception as exc:  # the engine raises plain exceptions (WouldBlock, config mismatch)
            if "WouldBlock" in str(exc):  # the WAL lock is held by another open store
                raise StoreLockedError(
                    f"cannot open knowledge store at {self.path}: it is locked, already open in "
                    f"another process (or elsewhere in this one): {self._held_by()}; close that first"
                ) from exc
            if f'key "{DENSE_VECTOR}" not found' in str(exc):  # a store of a release before hybrid
                raise StoreOutdatedError(str(self.path)) from None
            raise StoreUnavailableError(f"cannot open knowledge store at {self.path}: {exc}") from exc
        return _indexed(shard, INDEXED_FIELDS)

    def _checked(self, shard: qe.EdgeShard) -> qe.EdgeShard:
        """The shard, if it holds BM25 vectors (a store of an older release does not)."""
        probe = qe.QueryRequest(
            limit=1, query=qe.Query.Nearest(_sparse(SparseVector((0,), (1.0,))), SPARSE_VECTOR)
        )
        try:
            shard.query(probe)
        except Exception as exc:
            if "Not existing vector name" not in str(exc):
                raise
            shard.close()
            raise StoreOutdatedError(str(self.path)) from None
        self._multilingual = _holds_vector(shard, MULTILINGUAL_VECTOR)
        return shard

    def search_batch(self, requests: Sequence[SearchRequest]) -> list[Candidates]:
        """Several searches planned as one batch by the engine (a hybrid search brings its
        dense, sparse and multilingual companions, its legs run alone). A write of this process
        that removed a returned point between the batch and the read of its text (a new version
        of its document) is met by searching again, once."""
        try:
            return self._search_batch(requests)
        except PointGoneError:
            return self._search_batch(requests)

    def _search_batch(self, requests: Sequence[SearchRequest]) -> list[Candidates]:
        requests = [multilingual_searchable(request, self._multilingual) for request in requests]
        queries = [query for request in requests for query in engine_queries(request)]
        with backend_errors("search" if len(requests) == 1 else "batch search"):
            results = iter(self._shard.query_batch(qe.QueryBatchRequest(queries)))
        return found_candidates(requests, results, self._cosines, self._matching, self._points)

    def _points(self, ids: list[Any]) -> dict[Any, PointData]:
        """The payload and BM25 vector of each point a search returned (one call for all)."""
        with backend_errors("search"):
            records = self._shard.retrieve(ids, with_payload=True, with_vector=[SPARSE_VECTOR])
        return {r.id: (r.payload, r.vector) for r in records}

    def _cosines(self, scored: Sequence[ScoredPoints]) -> list[dict[Any, float]]:
        """The dense scores of the points each request still lacks, from their stored vectors
        (one call for all: :func:`stored_cosines`)."""
        with backend_errors("search"):
            points = missing_points(scored)
            records = self._shard.retrieve(points, with_payload=False, with_vector=[DENSE_VECTOR])
        return stored_cosines(scored, {r.id: dense_vector(r) for r in records})

    def _token_tops(self, token_ids: Sequence[int], access: AccessFilter | None) -> list[Any]:
        where = qe.Filter(must=conditions) if (conditions := _access_conditions(access)) else None
        queries = [
            qe.QueryRequest(
                limit=1,
                query=qe.Query.Nearest(qe.SparseVector([token], [1.0]), SPARSE_VECTOR),
                filter=where,
                with_vector=[SPARSE_VECTOR],
            )
            for token in token_ids
        ]
        with backend_errors("search"):
            results = self._shard.query_batch(qe.QueryBatchRequest(queries))
        return [points[0] if points else None for points in results]

    def upsert(self, chunks: Sequence[StoredChunk]) -> None:
        for start in range(0, len(chunks), _UPSERT_BATCH):
            self._ensure_space(len(chunks[start : start + _UPSERT_BATCH]) * _CHUNK_BYTES)
            points = [
                qe.Point(chunk.point_id, self._vectors(chunk), dict(chunk.payload))
                for chunk in chunks[start : start + _UPSERT_BATCH]
            ]
            with backend_errors("upsert"):
                self._shard.update(qe.UpdateOperation.upsert_points(points))

    def _vectors(self, chunk: StoredChunk) -> dict[str, Any]:
        vectors = {DENSE_VECTOR: float_list(chunk.vector), SPARSE_VECTOR: _sparse(chunk.sparse_vector)}
        if self._multilingual and chunk.multilingual_vector is not None:
            vectors[MULTILINGUAL_VECTOR] = float_list(chunk.multilingual_vector)
        return vectors

    def set_access(self, doc_id: str, access: Sequence[str]) -> None:
        where = qe.Filter(must=[qe.FieldCondition(DOC_ID_FIELD, match=qe.MatchValue(doc_id))])
        with backend_errors("access update"):
            self._shard.update(qe.UpdateOperation.set_payload_by_filter(where, {ACCESS_FIELD: list(access)}))

    def set_languages(self, languages: Mapping[Any, str]) -> None:
        for language, ids in points_by_value(languages).items():
            with backend_errors("language update"):
                self._shard.update(qe.UpdateOperation.set_payload(ids, {LANGUAGE_FIELD: language}))

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

    def _document_points(
        self, doc_ids: list[str], fields: list[str], *, dense: bool
    ) -> Iterator[tuple[Any, Mapping[str, Any], Sequence[float] | None]]:
        where = qe.Filter(must=[qe.FieldCondition(DOC_ID_FIELD, match=qe.MatchAny(doc_ids))])
        offset = None
        while True:
            request = qe.ScrollRequest(
                offset=offset,
                limit=_SCROLL_PAGE,
                filter=where,
                with_payload=qe.PayloadSelector.Include(fields),
                with_vector=[DENSE_VECTOR] if dense else False,
            )
            with backend_errors("scroll"):
                records, offset = self._shard.scroll(request)
            yield from ((record.id, record.payload or {}, dense_vector(record)) for record in records)
            if offset is None:
                return

    def _first_payloads(
        self, n: int, access: AccessFilter | None, fields: list[str]
    ) -> list[Mapping[str, Any]]:
        where = qe.Filter(must=conditions) if (conditions := _access_conditions(access)) else None
        request = qe.ScrollRequest(limit=n, filter=where, with_payload=qe.PayloadSelector.Include(fields))
        with backend_errors("scroll"):
            records, _ = self._shard.scroll(request)
        return [record.payload or {} for record in records]

    def _points_estimate(self) -> int:
        with backend_errors("count"):
            return self._shard.count(qe.CountRequest(exact=False))

    def _matching(self, request: SearchRequest | None) -> int:
        where = None if request is None else _request_filter(request)
        with backend_errors("count"):
            return self._shard.count(qe.CountRequest(exact=True, filter=where))

    def optimize(self) -> None:
        """Build the HNSW index and merge segments (run after bulk ingestion)."""
        self._ensure_space(_allocated_bytes(self.path / "segments") + _OPTIMIZE_BYTES)
        with backend_errors("optimize"):
            self._shard.optimize()

    def _held_by(self) -> str:
        try:
            pid, _, command = self._holder.read_text(encoding="utf-8").strip().partition(" ")
        except (OSError, UnicodeDecodeError):
            return "holder unknown"
        return f"held by pid {pid} ({command})"

    def close(self) -> None:
        """Flush and close the shard, then release the store (also when the flush fails)."""
        if self._shard is None:
            return
        shard, self._shard = self._shard, None
        try:
            with backend_errors("flush"):
                shard.flush()
        finally:
            with contextlib.suppress(Exception):
                shard.close()
            with contextlib.suppress(OSError, UnicodeDecodeError):
                if self._holder.read_text(encoding="utf-8").startswith(f"{os.getpid()} "):
                    self._holder.unlink()
            os.close(self._lock)  # only now may another process open the shard


def lock_file(path: Path) -> Path:
    """The file whose ``flock`` a process holds while it has the store at ``path`` open."""
    return path.with_name(path.name + ".lock")


def _hole_bytes(file: Path) -> int:
    """How much of a file's apparent size has no disk blocks yet (0 for a directory)."""
    status = file.lstat()
    if not file.is_file():
        return 0
    return max(0, status.st_size - status.st_blocks * 512)


def _allocated_bytes(folder: Path) -> int:
    try:
        return sum(file.lstat().st_blocks * 512 for file in folder.rglob("*"))
    except OSError:
        return 0


def _has_data(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def engine_queries(request: SearchRequest) -> list[qe.QueryRequest]:
    """The engine queries of one request: the ranked one, and for hybrid its dense and sparse
    companions (its dense, sparse and multilingual searches run alone, ``ranked_width`` deep: the
    DAG reads each hit's places and BM25 score in them). A sparse or hybrid ranked query returns
    ids and scores alone: the payload and BM25 vector (whose terms name the matches) of the
    points it returns are read by id (:func:`~.qdrant_store.reads_back`); a ``scores_only``
    request's returns each point's document id."""
    where = _request_filter(request)
    dense = qe.Query.Nearest(list(request.query_vector), DENSE_VECTOR)
    if request.mode == "dense":
        payload = [DOC_ID_FIELD] if request.scores_only else True
        return [qe.QueryRequest(limit=request.top_k, query=dense, filter=where, with_payload=payload)]
    sparse = qe.Query.Nearest(_sparse(request.sparse_vector), SPARSE_VECTOR)
    payload = False if reads_back(request) else [DOC_ID_FIELD]
    if request.mode == "sparse":
        return [qe.QueryRequest(limit=request.ranked_width, query=sparse, filter=where, with_payload=payload)]
    legs = [dense, sparse]
    if request.multilingual_vector is not None:
        legs.append(qe.Query.Nearest(float_list(request.multilingual_vector), MULTILINGUAL_VECTOR))
    fused = qe.QueryRequest(
        limit=request.ranked_width,
        prefetches=[
            qe.Prefetch(request.prefetch_width, query=leg, filter=where) for leg in fused_legs(request, legs)
        ],
        query=qe.Fusion.Rrf(k=RRF_K) if request.fusion == "rrf" else qe.Fusion.Dbsf(),
        with_payload=payload,
    )
    companions = [qe.QueryRequest(limit=request.ranked_width, query=leg, filter=where) for leg in legs]
    return [fused, *companions]


def _holds_vector(shard: qe.EdgeShard, name: str) -> bool:
    """Whether the shard has the named dense vector (asked with a search of an empty filter)."""
    probe = qe.QueryRequest(limit=1, query=qe.Query.Nearest([1.0], name))
    try:
        shard.query(probe)
    except Exception as exc:
        return "Not existing vector name" not in str(exc)
    return True


def _sparse(vector: SparseVector | None) -> qe.SparseVector:
    assert vector is not None  # SearchRequest guarantees it outside dense mode
    return qe.SparseVector(list(vector.indices), list(vector.values))


def _indexed(shard: qe.EdgeShard, fields: tuple[str, ...], required: bool = True) -> qe.EdgeShard:
    """The shard with a keyword index on each of ``fields`` it lacks. A store made before the
    language index gains it when opened: a search that leaves out one language (issue 53's
    second search) scanned every payload without it, 100 ms instead of 4 on 3,000 chunks. A store
    that cannot be written (a read-only copy) opens without it: its searches stay correct."""
    held = shard.info().payload_schema
    for field in fields:
        if field not in held:
            try:
                shard.update(qe.UpdateOperation.create_field_index(field, qe.PayloadSchemaType.Keyword))
            except Exception:  # the engine raises plain exceptions; an added index is only speed
                if required:
                    raise
    return shard


def _request_filter(request: SearchRequest) -> qe.Filter | None:
    """The payload filter of every query of a request: its category, its caller's access, and
    the language its chunks must not be written in."""
    must = _access_conditions(request.access)
    if request.category is not None:
        must.append(qe.FieldCondition(CATEGORY_FIELD, match=qe.MatchValue(request.category)))
    language = request.other_languages_than
    must_not = [] if language is None else [qe.FieldCondition(LANGUAGE_FIELD, match=qe.MatchValue(language))]
    return qe.Filter(must=must or None, must_not=must_not or None) if must or must_not else None


def _access_conditions(access: Sequence[str] | None) -> list[qe.FieldCondition]:
    """A restricted caller's condition: the chunk's access holds one of its principals."""
    return [] if access is None else [qe.FieldCondition(ACCESS_FIELD, match=qe.MatchAny(list(access)))]
