"""Ingestion: source documents -> chunks -> dense embeddings + BM25 vectors -> search store + L0 index.

Idempotent and atomic per document: point ids derive from the evidence key and the document's
content hash, and every chunk carries that hash and its version's chunk count. A document is
unchanged only when the store holds exactly its current version, complete; a changed one is
written beside its old version, which is then deleted, so a kill at any point leaves the old
version intact and the next run completes the new one. ``prune`` removes documents whose
source is gone, never ones skipped (unreadable) in this run. A document with no text but
headings (a redirect page) has no chunks: it is skipped and named, and a version the store
holds of it is removed.

>>> report = ingest("knowledge/", load_config())  # doctest: +SKIP
>>> report.chunks_written  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from rich.console import Console

from lookup_knowledge.adapters.corpus import Corpus, SkippedFile, SourceDocument, read_corpus
from lookup_knowledge.adapters.documents import DocumentLimits, forget_converted
from lookup_knowledge.adapters.embedder import Embedder
from lookup_knowledge.adapters.errors import StoreUnavailableError
from lookup_knowledge.adapters.l0_index import L0Document, L0Index
from lookup_knowledge.adapters.multilingual import chunk_languages, identifies_languages
from lookup_knowledge.adapters.payload import LANGUAGE_FIELD, ChunkPayload, LocationPayload
from lookup_knowledge.adapters.search import KnowledgeStore, StoredChunk, StoredDocument, evidence_key
from lookup_knowledge.adapters.sparse import (
    SPARSE_INDEX,
    THAI_WORDS,
    bm25_encoder,
    segments_thai,
    sparse_text,
)
from lookup_knowledge.chunking import CHUNKING, EMBEDDED_TEXT, Chunk, SourceSpan, chunk_document
from lookup_knowledge.config import Config
from lookup_knowledge.instruction_flag import block_markers
from lookup_knowledge.progress import QUIET, Phase, ProgressReport, duration, progress_to
from lookup_knowledge.stores import (
    build_embedder,
    build_multilingual_embedder,
    converted_dir,
    l0_index_path,
    open_store,
)

NO_TEXT = "no body text, only a title or headings: nothing to cite"
logger = logging.getLogger("lookup_knowledge.ingest")
EMBED_GROUP = 512  # chunks embedded and written per step (bounded memory, steady progress)
LANGUAGE_GROUP = 256  # unchanged documents whose chunks' languages are read and set per step


@dataclass
class IngestReport:
    """What an ingestion run did."""

    source: str
    documents: int = 0
    new: int = 0
    updated: int = 0
    unchanged: int = 0
    pruned: int = 0  # stored documents removed: their source gone (prune) or left with no text
    chunks_written: int = 0
    chunks_embedded: int = 0  # of those written: the rest reused their old version's vector (same text)
    languages_added: int = 0  # unchanged documents whose chunks got their language (a payload update)
    points_in_store: int = 0
    skipped: list[SkippedFile] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class _PendingChunk:
    doc: SourceDocument
    chunk: Chunk
    doc_hash: str
    doc_chunks: int
    ingested_at: str
    access: tuple[str, ...]
    source: str  # vector_source: the model and the form of the embedded text
    language: str | None  # the chunk's language (None: not detected)


def ingest(
    source: str | Path,
    config: Config,
    *,
    prune: bool = False,
    progress: bool | ProgressReport = False,
    embedder: Embedder | None = None,
    store: KnowledgeStore | None = None,
    multilingual: Embedder | None | Literal["configured"] = "configured",
) -> IngestReport:
    """Ingest a markdown folder or BEIR JSONL corpus into the configured store and L0 index.

    ``progress``: where each phase's progress and end line go (``True``: stderr, as a live bar
    on a terminal, else as lines); by default nowhere. ``multilingual``: the encoder of the
    chunks' multilingual vectors (default: as ``multilingual.vectors`` configures it; ``None``:
    none), written to a store that holds such vectors (a new one is made with them)."""
    started = time.perf_counter()
    phases = progress if isinstance(progress, ProgressReport) else _stderr_or_quiet(progress)
    with phases.phase("reading", unit="files") as phase:
        corpus = read_corpus(
            source,
            config.ingest.max_file_bytes,
            allow_outside_root=config.ingest.allow_outside_root,
            max_record_bytes=config.ingest.max_record_bytes,
            document_limits=DocumentLimits(**config.ingest.documents.model_dump()),
            converted_dir=converted_dir(config),
            on_file=phase.update,
        )
        phase.detail = f"{len(corpus.documents):,} documents, {len(corpus.skipped):,} skipped"
    embedder = embedder or build_embedder(config)
    if multilingual == "configured":
        multilingual = build_multilingual_embedder(config)
    owns_store = store is None
    if store is None:
        with phases.phase("opening the store and the model"):
            extra = multilingual.dimension if multilingual is not None else None
            store = open_store(config, embedder.dimension, multilingual_dimension=extra)
    if multilingual is not None and not store.multilingual_vectors:
        logger.warning(
            "ingest: the store was made without multilingual vectors, so none are written; "
            "delete it and ingest again to add them (docs/multilingual.md)"
        )
        multilingual = None
    try:
        report = _sync(corpus, store, embedder, config, prune, phases, multilingual)
        report.points_in_store = store.count()
    finally:
        if owns_store:
            store.close()
    report.source = str(source)
    report.seconds = time.perf_counter() - started
    return report


def _stderr_or_quiet(progress: bool) -> ProgressReport:
    return progress_to(Console(stderr=True)) if progress else QUIET


@dataclass(frozen=True, slots=True)
class _Changes:
    """What an ingest writes: the documents with text, those of them changed (with their chunks),
    and the changed ones without text (their ids and sources), which it skips."""

    documents: list[SourceDocument]
    changed: list[SourceDocument]
    chunks: dict[str, list[Chunk]]
    hashes: dict[str, str]
    textless: dict[str, str]

    @property
    def skipped(self) -> list[SkippedFile]:
        return [SkippedFile(source, NO_TEXT, source) for source in self.textless.values()]


def _sync(
    corpus: Corpus,
    store: KnowledgeStore,
    embedder: Embedder,
    config: Config,
    prune: bool,
    phases: ProgressReport,
    multilingual: Embedder | None = None,
) -> IngestReport:
    with phases.phase("chunking", unit="documents") as phase:
        stored = store.documents()
        changes = _changes(corpus.documents, stored, embedder, config, phase)
    documents, changed, skipped = changes.documents, changes.changed, [*corpus.skipped, *changes.skipped]
    access = {doc.doc_id: document_access(doc, config) for doc in documents}
    total = sum(len(changes.chunks[doc.doc_id]) for doc in changed)
    with phases.phase("embedding and writing", total, unit="chunks") as phase:
        embedded, writing = _write(
            changed, changes.chunks, changes.hashes, access, store, embedder, phase,
            config.embedder.batch_size, set(stored), multilingual,
        )  # fmt: skip
        reused = f"{total - embedded:,} vectors reused, " if embedded < total else ""
        phase.detail = f"{reused}writing {duration(writing)} of it"
    gone = _prunable(stored, changes.hashes, skipped) if prune else []
    gone = sorted({*gone, *(changes.textless.keys() & stored.keys())})  # a page now without text too
    with phases.phase("indexing"):
        regranted = _index(config, store, stored, documents, changed, access, gone)
        languages_added = _add_languages(documents, changed, stored, store)
    updated = sum(doc.doc_id in stored for doc in changed) + regranted
    return IngestReport(
        source="",
        documents=len(documents),
        new=len(changed) - updated,
        updated=updated,
        unchanged=len(documents) - len(changed) - regranted,
        pruned=len(gone),
        chunks_written=total,
        chunks_embedded=embedded,
        languages_added=languages_added,
        skipped=skipped,
    )


def _index(
    config: Config,
    store: KnowledgeStore,
    stored: dict[str, StoredDocument],
    documents: list[SourceDocument],
    changed: list[SourceDocument],
    access: dict[str, tuple[str, ...]],
    gone: list[str],
) -> int:
    """After the writes: the L0 index, access updates, the ``gone`` documents deleted and the
    store optimized; how many unchanged documents had their access updated."""
    _update_l0(config, documents, access, gone)  # first: the L0 index never lists a document the store lost
    regranted = _set_access(documents, changed, stored, access, store)
    store.delete_documents(gone)
    _forget_converted(config, stored, documents, {doc.doc_id for doc in changed} | set(gone))
    if changed or gone:
        store.optimize()  # HNSW index and merged segments: search goes from exact scans to ~1 ms
    return regranted


def _changes(
    documents: list[SourceDocument],
    stored: dict[str, StoredDocument],
    embedder: Embedder,
    config: Config,
    phase: Phase,
) -> _Changes:
    """The documents whose current version the store does not hold, chunked (``phase`` counts
    them); those left without a chunk have no text."""
    hashes = {doc.doc_id: document_hash(doc, config, embedder.model_name) for doc in documents}
    changed = [doc for doc in documents if not _holds(stored.get(doc.doc_id), hashes[doc.doc_id], doc)]
    phase.update(0, len(changed))
    chunks: dict[str, list[Chunk]] = {}
    for doc in changed:
        chunks[doc.doc_id] = chunk_document(doc, config.ingest.chunk_chars)
        phase.advance()
    textless = {doc.doc_id: doc.source for doc in changed if not chunks[doc.doc_id]}
    phase.detail = f"{sum(map(len, chunks.values())):,} chunks"
    phase.detail += f", {len(textless):,} without text (skipped)" if textless else ""
    return _Changes(
        [doc for doc in documents if doc.doc_id not in textless],
        [doc for doc in changed if doc.doc_id not in textless],
        chunks,
        hashes,
        textless,
    )


def _holds(stored: StoredDocument | None, doc_hash: str, doc: SourceDocument) -> bool:
    """The store holds this version of the document, complete, and no other: it is unchanged.

    A file whose bytes changed without changing the document (a frontmatter field not read) is
    written again, so its blocks carry the new version; a store from before versions is not
    re-embedded for them (its blocks' freshness stays unknown until the document changes)."""
    if stored is None or not stored.holds_only(doc_hash):
        return False
    return stored.source_version is None or doc.file is None or stored.source_version == doc.file.version


def _forget_converted(
    config: Config, stored: dict[str, StoredDocument], documents: list[SourceDocument], replaced: set[str]
) -> None:
    """Converted texts of file versions the store no longer holds (a changed or pruned document's
    old version) removed; one that another document still holds is kept."""
    held = {doc.file.version for doc in documents if doc.file}
    held |= {doc.source_version for doc_id, doc in stored.items() if doc_id not in replaced}
    old = {stored[doc_id].source_version for doc_id in replaced if doc_id in stored}
    forget_converted(converted_dir(config), {version for version in old if version} - held)


def document_access(doc: SourceDocument, config: Config) -> tuple[str, ...]:
    """Who may see a document: its own ``access`` field, else ``access.default``."""
    return doc.access if doc.access is not None else config.access.default_access


def _set_access(
    documents: list[SourceDocument],
    changed: list[SourceDocument],
    stored: dict[str, StoredDocument],
    access: dict[str, tuple[str, ...]],
    store: KnowledgeStore,
) -> int:
    """Rewrite the access field of the unchanged documents whose access changed (a JSONL record's
    ``access``, ``access.default``, a store from before access control): one payload update per
    document, no new embedding. Returns how many were updated."""
    written = {doc.doc_id for doc in changed}
    regranted = [
        doc.doc_id
        for doc in documents
        if doc.doc_id not in written and not stored[doc.doc_id].holds_access(access[doc.doc_id])
    ]
    for doc_id in regranted:
        store.set_access(doc_id, access[doc_id])
    return len(regranted)


def _add_languages(
    documents: list[SourceDocument],
    changed: list[SourceDocument],
    stored: dict[str, StoredDocument],
    store: KnowledgeStore,
) -> int:
    """Give the chunks of the unchanged documents stored without languages (a store from before
    them, or ingested without the ``multilingual`` extra) their language: their text read back,
    one payload update per language, no new embedding; none without the identifier. Returns how
    many documents were updated."""
    if not identifies_languages():
        return 0
    written = {doc.doc_id for doc in changed}
    lacking = [d.doc_id for d in documents if d.doc_id not in written and stored[d.doc_id].lacks_languages]
    for start in range(0, len(lacking), LANGUAGE_GROUP):
        texts = store.chunk_texts(lacking[start : start + LANGUAGE_GROUP])
        store.set_languages({
            point_id: language
            for chunks in texts.values()
            for (point_id, _), language in zip(chunks, chunk_languages([t for _, t in chunks]), strict=True)
            if language is not None
        })  # fmt: skip
    return len(lacking)


def _prunable(
    stored: dict[str, StoredDocument], hashes: dict[str, str], skipped: list[SkippedFile]
) -> list[str]:
    """Stored documents whose source is gone; none when a skipped record's document is unknown."""
    if any(s.doc_source is None for s in skipped):
        return []  # a JSONL line that did not parse may be any stored document: keep them all
    kept_sources = {s.doc_source for s in skipped}
    return sorted(
        doc_id for doc_id, doc in stored.items() if doc_id not in hashes and doc.source not in kept_sources
    )


def _write(
    documents: list[SourceDocument],
    chunks: dict[str, list[Chunk]],
    hashes: dict[str, str],
    access: dict[str, tuple[str, ...]],
    store: KnowledgeStore,
    embedder: Embedder,
    phase: Phase,
    step: int,
    stored: AbstractSet[str] = frozenset(),
    multilingual: Embedder | None = None,
) -> tuple[int, float]:
    """Embed and write whole documents in groups of about :data:`EMBED_GROUP` chunks; how many
    chunks were embedded, and the seconds spent writing. ``phase`` counts the chunks as their
    vectors come: on a CPU ``step`` at a time (:func:`_embedded`), off it a group at a time.

    A group never splits a document, and documents go in order of their mean chunk length
    (the model pads each batch to its longest), so each write replaces whole documents. A new
    version of a ``stored`` document reuses the vector of each chunk whose embedded text (its
    breadcrumb and content) its old version holds, made the same way (:func:`vector_source`): an
    edit to one section of a long page embeds that section's chunks, not the page's.

    An embedder that encodes on a GPU (:attr:`~.embedder.Embedder.encodes_off_cpu`) embeds the
    next group on a worker thread while this one's BM25 vectors, payloads and write run here:
    that work would otherwise leave the GPU idle for longer than it encodes (SciFact on an H200:
    docs/benchmarks.md). On a CPU the encoder already uses every core, so each group is written
    as soon as it is embedded. Writes stay in order, one group at a time, on this thread.
    The ``multilingual`` encoder, when given, encodes each group's chunks (every chunk written:
    its vector is not reused) on a thread of its own while the dense encoder embeds the group:
    the two overlap where the dense encoder leaves a core idle (ingest with the multilingual
    vectors ran at 77-81% of its speed without them, against 69% one after the other:
    docs/multilingual.md).
    """
    ordered = sorted(documents, key=lambda doc: _mean_length(chunks[doc.doc_id]))
    ingested_at = datetime.now(UTC).isoformat(timespec="seconds")
    embedded, writing, source = 0, 0.0, vector_source(embedder)
    ahead = 1 if getattr(embedder, "encodes_off_cpu", False) else 0  # an embedder need not subclass Embedder
    beside = multilingual is not None
    with _embedding_worker(ahead > 0) as worker, _embedding_worker(beside, "ingest-multilingual") as other:
        waiting: list[_Embedding] = []
        for group in _groups(ordered, chunks, EMBED_GROUP):
            pending = [
                _PendingChunk(
                    doc,
                    chunk,
                    hashes[doc.doc_id],
                    len(chunks[doc.doc_id]),
                    ingested_at,
                    access[doc.doc_id],
                    source,
                    language,
                )
                for doc in group
                for chunk, language in zip(chunks[doc.doc_id], _languages(chunks[doc.doc_id]), strict=True)
            ]
            replaced = [doc.doc_id for doc in group if doc.doc_id in stored]
            others = _multilingual(pending, multilingual, other)  # begins before the dense encoder
            waiting.append(
                _embedding(pending, embedder, store, replaced, source, worker, phase, step, others)
            )
            while len(waiting) > ahead:
                fresh, seconds = _write_group(waiting.pop(0), store)
                embedded, writing = embedded + fresh, writing + seconds
        for done in waiting:  # the last group, embedded ahead
            fresh, seconds = _write_group(done, store)
            embedded, writing = embedded + fresh, writing + seconds
    return embedded, writing


@contextmanager
def _embedding_worker(wanted: bool, name: str = "ingest-embedding") -> Iterator[ThreadPoolExecutor | None]:
    """The thread that embeds groups ahead of their writes, or beside the dense encoder (none,
    unless ``wanted``: they are embedded here, where an interrupt stops the encoder at its next
    batch); a group not yet begun when ingest stops is not embedded."""
    if not wanted:
        yield None
        return
    worker = ThreadPoolExecutor(1, thread_name_prefix=name)
    try:
        yield worker
    finally:
        worker.shutdown(wait=True, cancel_futures=True)


@dataclass(frozen=True, slots=True)
class _Embedding:
    """A group's chunks on their way to the store: the vectors its old versions give, and the
    rest being embedded (in chunk order)."""

    pending: list[_PendingChunk]
    old: dict[tuple[str, str], Sequence[float]]
    fresh: Future[Sequence[Sequence[float]]] | None
    multilingual: Future[Sequence[Sequence[float]]] | None = None

    def multilingual_vectors(self) -> Sequence[Sequence[float] | None]:
        return self.multilingual.result() if self.multilingual is not None else [None] * len(self.pending)

    def vectors(self) -> list[Sequence[float]]:
        new = iter(self.fresh.result() if self.fresh is not None else [])
        keys = [_text_key(p) for p in self.pending]
        return [self.old[key] if key in self.old else next(new) for key in keys]

    @property
    def fresh_count(self) -> int:
        return sum(_text_key(p) not in self.old for p in self.pending)


def _embedding(
    pending: list[_PendingChunk],
    embedder: Embedder,
    store: KnowledgeStore,
    replaced: list[str],
    source: str,
    worker: ThreadPoolExecutor | None,
    phase: Phase,
    step: int,
    multilingual: Future[Sequence[Sequence[float]]] | None = None,
) -> _Embedding:
    """A group's vectors: its old version's where the store holds the same embedded text made
    the same way (``source``; ``replaced``: the group's documents it holds, read here), the rest
    embedded on ``worker`` as one batch (none: here, now, ``step`` at a time); ``phase`` counts
    each vector as it comes. ``multilingual``: the group's multilingual vectors on their way."""
    old = store.stored_vectors(replaced, source) if replaced else {}
    fresh = [p.chunk.embedding_text for p in pending if _text_key(p) not in old]
    phase.advance(len(pending) - len(fresh))
    if not fresh:
        return _Embedding(pending, old, None, multilingual)
    if worker is not None:  # a GPU or a cluster batches the group itself
        submitted = worker.submit(_embedded, embedder, fresh, len(fresh), phase)
        return _Embedding(pending, old, submitted, multilingual)
    embedded: Future[Sequence[Sequence[float]]] = Future()
    embedded.set_result(_embedded(embedder, fresh, step, phase))
    return _Embedding(pending, old, embedded, multilingual)


def _multilingual(
    pending: list[_PendingChunk], multilingual: Embedder | None, worker: ThreadPoolExecutor | None
) -> Future[Sequence[Sequence[float]]] | None:
    """The group's multilingual vectors, encoded on ``worker`` (none without the encoder)."""
    if multilingual is None or worker is None:
        return None
    return worker.submit(multilingual.embed_documents, [p.chunk.embedding_text for p in pending])


def _embedded(embedder: Embedder, texts: list[str], step: int, phase: Phase) -> list[Sequence[float]]:
    """``texts`` embedded ``step`` at a time, longest first as the encoders batch them (a step of
    their batch size embeds the very batches one call would), each step counted by ``phase``."""
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    vectors: list[Sequence[float]] = [()] * len(texts)
    for start in range(0, len(texts), step):
        rows = order[start : start + step]
        for row, vector in zip(rows, embedder.embed_documents([texts[i] for i in rows]), strict=True):
            vectors[row] = vector
        phase.advance(len(rows))
    return vectors


def _languages(chunks: list[Chunk]) -> list[str | None]:
    """A document's chunks' languages, read from their content (not the breadcrumb: an English
    title may head a page in another language)."""
    return chunk_languages([chunk.content for chunk in chunks])


def _text_key(pending: _PendingChunk) -> tuple[str, str]:
    """What a stored vector is reused by: the chunk's embedded text (breadcrumb and content)."""
    return pending.chunk.breadcrumb, pending.chunk.content


def _write_group(embedding: _Embedding, store: KnowledgeStore) -> tuple[int, float]:
    """Write a group's chunks (with their BM25 vectors, multilingual vectors and payloads) once
    its vectors are there; how many were embedded, and the seconds the writing took."""
    pending = embedding.pending
    vectors, others = embedding.vectors(), embedding.multilingual_vectors()
    began = time.perf_counter()
    sparse = [bm25_encoder().embed_document(_sparse_text(p)) for p in pending]
    store.write_documents(
        [
            StoredChunk(v, _payload(p), s, m)
            for p, v, s, m in zip(pending, vectors, sparse, others, strict=True)
        ]
    )
    return embedding.fresh_count, time.perf_counter() - began


def vector_source(embedder: Embedder) -> str:
    """What makes a chunk's dense vector, kept with it (``embedding_model``): the model and the
    form of the embedded text; a stored vector is reused only when both are the same."""
    return f"{embedder.model_name} ({EMBEDDED_TEXT})"


def _sparse_text(pending: _PendingChunk) -> str:
    return sparse_text(pending.doc.title, pending.chunk.breadcrumb, pending.chunk.content)


def _mean_length(chunks: list[Chunk]) -> float:
    return sum(len(c.embedding_text) for c in chunks) / max(1, len(chunks))


def _groups(
    documents: Sequence[SourceDocument], chunks: dict[str, list[Chunk]], size: int
) -> Iterator[list[SourceDocument]]:
    group: list[SourceDocument] = []
    filled = 0
    for doc in documents:
        if group and filled + len(chunks[doc.doc_id]) > size:
            yield group
            group, filled = [], 0
        group.append(doc)
        filled += len(chunks[doc.doc_id])
    if group:
        yield group


def _payload(pending: _PendingChunk) -> ChunkPayload:
    doc, chunk = pending.doc, pending.chunk
    payload = ChunkPayload(
        evidence_key=evidence_key(doc.doc_id, chunk.chunk_index),
        doc_id=doc.doc_id,
        chunk_index=chunk.chunk_index,
        content=chunk.content,
        source=doc.source,
        title=doc.title,
        breadcrumb=chunk.breadcrumb,
        category=list(doc.categories),
        keywords=list(doc.keywords),
        entities=list(doc.entities),
        description=doc.description,
        doc_type=doc.doc_type,
        doc_hash=pending.doc_hash,
        doc_chunks=pending.doc_chunks,
        instruction_like_v1=bool(block_markers(chunk.breadcrumb, chunk.content)),
        location=_location_payload(chunk.location),
        heading_path=list(chunk.heading_path),
        ingested_at=pending.ingested_at,
        source_file=doc.file.payload() if doc.file else None,
        access=list(pending.access),
        embedding_model=pending.source,
    )
    if pending.language is not None:  # absent: not detected, so a later ingest may add it
        payload[LANGUAGE_FIELD] = pending.language
    return payload


def _location_payload(location: SourceSpan) -> LocationPayload:
    return {
        "start_line": location.start_line, "end_line": location.end_line,
        "start_char": location.start_char, "end_char": location.end_char,
        **{key: value for key in ("page", "slide", "sheet") if (value := getattr(location, key)) is not None},
    }  # fmt: skip


def document_hash(doc: SourceDocument, config: Config, model_name: str) -> str:
    """Content hash of a document and everything that shapes its chunks and vectors."""
    fingerprint = [
        doc.source, doc.title, doc.body, doc.format, doc.categories, doc.keywords, doc.entities,
        doc.description, doc.doc_type, config.ingest.chunk_chars, CHUNKING, model_name, SPARSE_INDEX,
        doc.body_offset, doc.body_line,
    ]  # fmt: skip
    if segments_thai(f"{doc.title}\n{doc.body}"):  # Thai cut into words (none: the hash it had)
        fingerprint.append(THAI_WORDS)
    if doc.parts:  # pages, slides, sheets of a converted document (none: the hash markdown always had)
        fingerprint.append([[p.kind, p.number, p.name, p.start, p.end] for p in doc.parts])
    return hashlib.sha256(json.dumps(fingerprint, ensure_ascii=False).encode()).hexdigest()[:32]


def _update_l0(
    config: Config, documents: list[SourceDocument], access: dict[str, tuple[str, ...]], gone: list[str]
) -> None:
    path = l0_index_path(config)
    index = L0Index.load(path)
    try:
        index.upsert(  # writes only the documents whose hints changed
            L0Document(d.doc_id, d.title, d.keywords, d.categories, d.entities, access[d.doc_id])
            for d in documents
        )
        index.remove(gone)
        index.save(path)
    except OSError as exc:  # a full disk: the store holds the documents, the next run writes the index
        raise StoreUnavailableError(f"cannot write the L0 index {path}: {exc.strerror or exc}") from exc
    finally:
        index.close()
