"""What ``lookup-knowledge info`` reports: the configuration in force and what it resolves to.

>>> facts = describe(load_config())  # doctest: +SKIP
>>> facts["embedder"]["backends"]
{'query': 'openvino', 'document': 'openvino'}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from lookup_knowledge.adapters.embedder import EncodePath
from lookup_knowledge.adapters.errors import StoreError
from lookup_knowledge.adapters.redaction import mask_secrets
from lookup_knowledge.adapters.search import StoredDocument
from lookup_knowledge.config import Config
from lookup_knowledge.stores import build_embedder, open_store

UNKNOWN_LANGUAGE = "unknown"  # language_counts' key for the chunks stored without a language


def describe(config: Config) -> dict[str, Any]:
    """Config, embedder (model, device, the backend each path really runs) and store size."""
    embedder = build_embedder(config)
    paths: tuple[EncodePath, ...] = ("query", "document")
    encoders = {path: embedder.encoder(path) for path in paths}
    return {
        "config": _masked(_effective(config)),
        "embedder": {
            "model": config.embedder.model,
            "device": embedder.device,
            "backends": {path: _label(e.backend, e.quantize) for path, e in encoders.items()},
            "dimension": embedder.dimension,
        },
        "store": _store_facts(config, embedder.dimension),
    }


def _effective(config: Config) -> dict[str, Any]:
    """The configuration dump with the widths the lookup really uses (``retrieve_k`` and
    ``return_n`` resolved from ``top_k`` and the defaults, never ``null``)."""
    dump = config.model_dump(mode="json")
    dump["retrieval"] |= {
        "retrieve_k": config.retrieval.effective_retrieve_k,
        "return_n": config.retrieval.effective_return_n,
    }
    return dump


def _masked(value: Any) -> Any:
    """The configuration dump with the credentials of every URL in it masked."""
    if isinstance(value, str):
        return mask_secrets(value)
    if isinstance(value, dict):
        return {key: _masked(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_masked(item) for item in value]
    return value


def _label(backend: str, quantize: str) -> str:
    return backend if quantize == "none" else f"{backend} ({quantize})"


def _store_facts(config: Config, dimension: int) -> dict[str, Any]:
    store = config.store
    local = store.path / store.collection if store.backend == "edge" else store.path
    location = mask_secrets(store.url) if store.url else str(local)
    facts: dict[str, Any] = {
        "backend": store.backend, "location": location, "documents": 0, "chunks": 0,
        "multilingual_vectors": False, "chunk_languages": {},
    }  # fmt: skip
    try:
        opened = open_store(config, dimension, create=False)
    except StoreError as exc:  # missing (ingest first), down, or held by another process
        return {**facts, "problem": str(exc)}
    try:
        documents = opened.documents()
        return {
            **facts,
            "documents": len(documents),
            "chunks": opened.count(),
            "multilingual_vectors": opened.multilingual_vectors,  # docs/multilingual.md
            "chunk_languages": language_counts(documents.values()),
            "problem": None,
        }
    finally:
        opened.close()


def language_counts(documents: Iterable[StoredDocument]) -> dict[str, int]:
    """How many stored chunks are in each language, most first; ``unknown``: chunks without one
    (a store from before languages, or ingested without the language identifier)."""
    counts: Counter[str] = Counter()
    for document in documents:
        counts.update({language or UNKNOWN_LANGUAGE: n for language, n in document.languages.items()})
    return dict(counts.most_common())
