"""A cheap deterministic embedder for tests about the store, not the model (the ingest crash
test kills many child processes; each loading the real model cost ~20 s and checked nothing)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from lookup_knowledge.adapters.embedder import Embedder

DIMENSION = 384


class HashingEmbedder(Embedder):
    """Bag of hashed words, unit length: the same text gives the same vector in every process,
    whatever the batch, so two ingests of one corpus store identical vectors."""

    model_name = "hashing-test-embedder"

    @property
    def dimension(self) -> int:
        return DIMENSION

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_queries(texts)

    def embed_query(self, text: str) -> np.ndarray:
        vector = np.zeros(DIMENSION, dtype=np.float32)
        for word in text.lower().split() or [""]:
            vector[
                int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big") % DIMENSION
            ] += 1
        return vector / np.linalg.norm(vector)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.embed_query(text) for text in texts]).reshape(len(texts), DIMENSION)


def _bucket(word: str) -> int:
    digest = hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=4).digest()
    return int.from_bytes(digest, "big") % DIMENSION
