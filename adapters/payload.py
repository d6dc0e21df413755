"""The chunk payload: what ingestion stores with every point, and the one spelling of its fields.

:class:`ChunkPayload` is the payload ingest writes; every reader (the store adapters, the
dataflow's post-processing, the freshness check) names a field by its constant here. A store
ingested by an older release may lack fields added since (``location``, ``source_file``,
``access``, ``language``, ...), so readers ``get`` them and treat a missing one as unknown.

>>> payload[DOC_ID_FIELD]  # doctest: +SKIP
'kafka-consumer-lag'
"""

from __future__ import annotations

from typing import Final, NotRequired, TypedDict


class LocationPayload(TypedDict):
    """Where the chunk lies in its source (see :class:`~lookup_knowledge.chunking.SourceSpan`)."""

    start_line: int | None
    end_line: int | None
    start_char: int
    end_char: int
    page: NotRequired[int]  # a converted document's page (PDF), slide (PPTX) or sheet (XLSX)
    slide: NotRequired[int]
    sheet: NotRequired[str]


class SourceFilePayload(TypedDict):
    """The stamp of the file the chunk was ingested from (:mod:`~.source_files`)."""

    path: str
    version: str
    mtime_ns: int
    size: int
    path_bytes: NotRequired[str]  # the name's bytes (hex) when they are not UTF-8


class ChunkPayload(TypedDict):
    """The payload of one stored chunk, keys in the order ingest writes them."""

    evidence_key: str  # docId#chunk-<n>
    doc_id: str
    chunk_index: int
    content: str
    source: str
    title: str
    breadcrumb: str
    category: list[str]  # the document's categories (the L0 domain hints match them)
    keywords: list[str]
    entities: list[str]
    description: str | None
    doc_type: str | None
    doc_hash: str  # the document version's content hash
    doc_chunks: int  # how many chunks the document's version has: its completeness mark
    instruction_like_v1: bool  # set at ingest; a new pattern set gets a new field name
    location: LocationPayload | None  # None: written before locations, or an old page-without-text stand-in
    heading_path: list[str]  # the chunk's headings, outermost first
    ingested_at: str  # when the chunk's document version was written (ISO 8601, UTC)
    source_file: SourceFilePayload | None  # None: a JSONL record
    access: list[str]  # the principals (groups, users) that may see the chunk's document
    embedding_model: str  # the model and form of text that made its vector: reused for the same text
    language: NotRequired[str]  # ISO 639-1, detected at ingest; absent: not detected (docs/multilingual.md)


PAYLOAD_FIELDS: Final = frozenset(ChunkPayload.__required_keys__ | ChunkPayload.__optional_keys__)


def payload_field(name: str) -> str:
    """``name``, refused at import unless :class:`ChunkPayload` declares it."""
    if name not in PAYLOAD_FIELDS:
        raise TypeError(f"{name!r} is not a field of ChunkPayload")
    return name


EVIDENCE_KEY_FIELD: Final = payload_field("evidence_key")
DOC_ID_FIELD: Final = payload_field("doc_id")
CHUNK_INDEX_FIELD: Final = payload_field("chunk_index")
CONTENT_FIELD: Final = payload_field("content")
SOURCE_FIELD: Final = payload_field("source")
TITLE_FIELD: Final = payload_field("title")
BREADCRUMB_FIELD: Final = payload_field("breadcrumb")
CATEGORY_FIELD: Final = payload_field("category")
KEYWORDS_FIELD: Final = payload_field("keywords")
ENTITIES_FIELD: Final = payload_field("entities")
DESCRIPTION_FIELD: Final = payload_field("description")
DOC_TYPE_FIELD: Final = payload_field("doc_type")
DOC_HASH_FIELD: Final = payload_field("doc_hash")
DOC_CHUNKS_FIELD: Final = payload_field("doc_chunks")
INSTRUCTION_LIKE_FIELD: Final = payload_field("instruction_like_v1")
LOCATION_FIELD: Final = payload_field("location")
HEADING_PATH_FIELD: Final = payload_field("heading_path")
INGESTED_AT_FIELD: Final = payload_field("ingested_at")
SOURCE_FILE_FIELD: Final = payload_field("source_file")
ACCESS_FIELD: Final = payload_field("access")
EMBEDDING_MODEL_FIELD: Final = payload_field("embedding_model")
LANGUAGE_FIELD: Final = payload_field("language")

VERSION_FIELDS: Final = (
    DOC_ID_FIELD,
    DOC_HASH_FIELD,
    DOC_CHUNKS_FIELD,
    SOURCE_FIELD,
    SOURCE_FILE_FIELD,
    ACCESS_FIELD,
    LANGUAGE_FIELD,
)  # what KnowledgeStore.documents() reads of every point
