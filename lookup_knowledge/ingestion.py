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
import time
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from lookup_knowledge.adapters.corpus import Corpus, SkippedFile, SourceDocument, read_corpus
from lookup_knowledge.adapters.documents import DocumentLimits, forget_converted
from lookup_knowledge.adapters.embedder import Embedder
from lookup_knowledge.adapters.errors import StoreUnavailableError
from lookup_knowledge.adapters.l0_index import L0Document, L0Index
from lookup_knowledge.adapters.payload import ChunkPayload, LocationPayload
from lookup_knowledge.adapters.search import KnowledgeStore, StoredChunk, StoredDocument, evidence_key
from lookup_knowledge.adapters.sparse import SPARSE_INDEX, bm25_encoder, sparse_text
from lookup_knowledge.chunking import CHUNKING, EMBEDDED_TEXT, Chunk, SourceSpan, chunk_document
from lookup_knowledge.config import Config
from lookup_knowledge.instruction_flag import block_markers
from lookup_knowledge.stores import build_embedder, converted_dir, l0_index_path, open_store

NO_TEXT = "no body text, only a title or headings: nothing to cite"
PROGRESS_LINE_S = 15  # seconds between progress lines when the output is not a terminal
EMBED_GROUP = 512  # chunks embedded and written per step (bounded memory, steady progress)


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


def ingest(
    source: str | Path,
    config: Config,
    *,
    prune: bool = False,
    progress: bool = False,
    embedder: Embedder | None = None,
    store: KnowledgeStore | None = None,
) -> IngestReport:
    """Ingest a markdown folder or BEIR JSONL corpus into the configured store and L0 index."""
    started = time.perf_counter()
    corpus = read_corpus(
        source,
        config.ingest.max_file_bytes,
        allow_outside_root=config.ingest.allow_outside_root,
        max_record_bytes=config.ingest.max_record_bytes,
        document_limits=DocumentLimits(**config.ingest.documents.model_dump()),
        converted_dir=converted_dir(config),
    )
    embedder = embedder or build_embedder(config)
    owns_store = store is None
    store = store or open_store(config, embedder.dimension)
    try:
        report = _sync(corpus, store, embedder, config, prune, progress)
        report.points_in_store = store.count()
    finally:
        if owns_store:
            store.close()
    report.source = str(source)
    report.seconds = time.perf_counter() - started
    return report


def _sync(
    corpus: Corpus,
    store: KnowledgeStore,
    embedder: Embedder,
    config: Config,
    prune: bool,
    progress: bool,
) -> IngestReport:
    stored = store.documents()
    hashes = {doc.doc_id: document_hash(doc, config, embedder.model_name) for doc in corpus.documents}
    changed = [doc for doc in corpus.documents if not _holds(stored.get(doc.doc_id), hashes[doc.doc_id], doc)]
    chunks = {doc.doc_id: chunk_document(doc, config.ingest.chunk_chars) for doc in changed}
    textless = {doc.doc_id: doc.source for doc in changed if not chunks[doc.doc_id]}
    skipped = [*corpus.skipped, *(SkippedFile(source, NO_TEXT, source) for source in textless.values())]
    documents = [doc for doc in corpus.documents if doc.doc_id not in textless]
    changed = [doc for doc in changed if doc.doc_id not in textless]
    access = {doc.doc_id: document_access(doc, config) for doc in documents}
    embedded = _write(changed, chunks, hashes, access, store, embedder, progress, set(stored))
    gone = sorted(
        {*(_prunable(stored, hashes, skipped) if prune else []), *(textless.keys() & stored.keys())}
    )
    _update_l0(config, documents, access, gone)  # first: the L0 index never lists a document the store lost
    regranted = _set_access(documents, changed, stored, access, store)
    store.delete_documents(gone)
    _forget_converted(config, stored, documents, {doc.doc_id for doc in changed} | set(gone))
    if changed or gone:
        store.optimize()  # HNSW index and merged segments: search goes from exact scans to ~1 ms
    updated = sum(doc.doc_id in stored for doc in changed) + regranted
    return IngestReport(
        source="",
        documents=len(documents),
        new=len(changed) - updated,
        updated=updated,
        unchanged=len(documents) - len(changed) - regranted,
        pruned=len(gone),
        chunks_written=sum(len(chunks[doc.doc_id]) for doc in changed),
        chunks_embedded=embedded,
        skipped=skipped,
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
    progress: bool,
    stored: AbstractSet[str] = frozenset(),
) -> int:
    """Embed and write whole documents in groups of about :data:`EMBED_GROUP` chunks; how many
    chunks were embedded.

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
    """
    ordered = sorted(documents, key=lambda doc: _mean_length(chunks[doc.doc_id]))
    ingested_at = datetime.now(UTC).isoformat(timespec="seconds")
    embedded, source = 0, vector_source(embedder)
    ahead = 1 if getattr(embedder, "encodes_off_cpu", False) else 0  # an embedder need not subclass Embedder
    with _progress_bar(progress) as bar, _embedding_worker(ahead) as worker:
        task = bar.add_task("embedding chunks", total=sum(map(len, chunks.values())))
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
                )
                for doc in group
                for chunk in chunks[doc.doc_id]
            ]
            replaced = [doc.doc_id for doc in group if doc.doc_id in stored]
            waiting.append(_embedding(pending, embedder, store, replaced, source, worker))
            while len(waiting) > ahead:
                done = waiting.pop(0)
                embedded += _write_group(done, store)
                bar.advance(task, len(done.pending))
        for done in waiting:  # the last group, embedded ahead
            embedded += _write_group(done, store)
            bar.advance(task, len(done.pending))
    return embedded


@contextmanager
def _embedding_worker(ahead: int) -> Iterator[ThreadPoolExecutor | None]:
    """The thread that embeds groups ahead of their writes (none: they are embedded here, where
    an interrupt stops the encoder at its next batch); a group not yet begun when ingest stops is
    not embedded."""
    if not ahead:
        yield None
        return
    worker = ThreadPoolExecutor(1, thread_name_prefix="ingest-embedding")
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
) -> _Embedding:
    """A group's vectors: its old version's where the store holds the same embedded text made
    the same way (``source``; ``replaced``: the group's documents it holds, read here), the rest
    embedded as one batch on ``worker`` (none: here, now)."""
    old = store.stored_vectors(replaced, source) if replaced else {}
    fresh = [p.chunk.embedding_text for p in pending if _text_key(p) not in old]
    if not fresh:
        return _Embedding(pending, old, None)
    if worker is not None:
        return _Embedding(pending, old, worker.submit(embedder.embed_documents, fresh))
    embedded: Future[Sequence[Sequence[float]]] = Future()
    embedded.set_result(embedder.embed_documents(fresh))
    return _Embedding(pending, old, embedded)


def _text_key(pending: _PendingChunk) -> tuple[str, str]:
    """What a stored vector is reused by: the chunk's embedded text (breadcrumb and content)."""
    return pending.chunk.breadcrumb, pending.chunk.content


def _write_group(embedding: _Embedding, store: KnowledgeStore) -> int:
    """Write a group's chunks (with their BM25 vectors and payloads); how many were embedded."""
    pending = embedding.pending
    vectors = embedding.vectors()
    sparse = [bm25_encoder().embed_document(_sparse_text(p)) for p in pending]
    store.write_documents(
        [StoredChunk(v, _payload(p), s) for p, v, s in zip(pending, vectors, sparse, strict=True)]
    )
    return embedding.fresh_count


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


def _progress_bar(enabled: bool) -> Progress | _ProgressLines:
    """A live bar on a terminal; plain lines now and then in a log or pipe; nothing if disabled."""
    console = Console(stderr=True)
    if enabled and not console.is_terminal:
        return _ProgressLines(console)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not enabled,
        transient=True,
    )


class _ProgressLines:
    """Progress for output that is not a terminal (a log file, CI): one line at most every
    :data:`PROGRESS_LINE_S` seconds and one at the end, the bar's interface otherwise."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.description, self.total, self.done = "", 0, 0
        self.started = self.printed = time.monotonic()

    def __enter__(self) -> _ProgressLines:
        return self

    def __exit__(self, *_: object) -> None:
        if self.total:
            self._line()

    def add_task(self, description: str, total: int) -> int:
        self.description, self.total = description, total
        return 0

    def advance(self, _task: int, advance: int) -> None:
        self.done += advance
        if time.monotonic() - self.printed >= PROGRESS_LINE_S and self.done < self.total:
            self._line()

    def _line(self) -> None:
        self.printed = time.monotonic()
        share = self.done / self.total
        elapsed = self.printed - self.started
        self.console.print(
            f"{self.description}: {self.done}/{self.total} ({share:.0%}), {elapsed:.0f} s",
            highlight=False,
            markup=False,
        )


def _payload(pending: _PendingChunk) -> ChunkPayload:
    doc, chunk = pending.doc, pending.chunk
    return ChunkPayload(
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
