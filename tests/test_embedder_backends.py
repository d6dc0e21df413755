"""Embedding backends: parity with torch, the export cache, fallbacks, device and backend choice."""

from __future__ import annotations

import logging
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from lookup_knowledge.adapters import embedder as embedder_module
from lookup_knowledge.adapters import exported_encoder
from lookup_knowledge.adapters.embedder import (
    AUTO_CPU_BACKENDS,
    AUTO_CPU_WITHOUT_OPENVINO,
    SentenceTransformerEmbedder,
    resolve_backends,
    resolve_device,
    resolve_model_path,
)

# A fixed multilingual set: short and long, several scripts, one text past the 256-token limit.
PARITY_TEXTS = [
    "Who must approve a refund above 500 EUR?",
    "PCI DSS rules for card data in the payments.events Kafka topic",
    "如何申请增值税专用发票",
    "Wie beantrage ich eine Rückerstattung für eine doppelte Abbuchung?",
    "Quelle est la politique de conservation des journaux d'audit ?",
    "Политика возврата средств для цифровых товаров",
    "返金ポリシーについて教えてください",
    "ما هي مدة الاحتفاظ بسجلات الدفع؟",
    "¿Cómo rotar las claves de cifrado del clúster?",
    "x",
    "Vitamin D deficiency is associated with increased risk of tuberculosis. " * 40,
]


@pytest.fixture(scope="module")
def torch_vectors() -> np.ndarray:
    return SentenceTransformerEmbedder(backend="torch", device="cpu").embed_documents(PARITY_TEXTS)


def cosines(vectors: np.ndarray, reference: np.ndarray) -> np.ndarray:
    return (vectors * reference).sum(axis=1)


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_unquantized_backend_matches_torch_per_text(backend: str, torch_vectors: np.ndarray) -> None:
    embedder = SentenceTransformerEmbedder(backend=backend, quantize="none", device="cpu")
    assert embedder.encoder("document").backend == backend  # really ran, no silent fallback
    vectors = embedder.embed_documents(PARITY_TEXTS)
    assert vectors.dtype == np.float32 and vectors.shape == torch_vectors.shape
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert cosines(vectors, torch_vectors).min() >= 0.999


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_int8_backend_stays_close_to_torch(backend: str, torch_vectors: np.ndarray) -> None:
    embedder = SentenceTransformerEmbedder(backend=backend, quantize="int8", device="cpu")
    encoder = embedder.encoder("query")
    assert (encoder.backend, encoder.quantize) == (backend, "int8")
    assert cosines(embedder.embed_queries(PARITY_TEXTS), torch_vectors).min() >= 0.98


def test_query_and_batch_paths_agree() -> None:
    embedder = SentenceTransformerEmbedder(backend="onnx", device="cpu")
    batch = embedder.embed_queries(PARITY_TEXTS)
    single = np.stack([embedder.embed_query(text) for text in PARITY_TEXTS])
    assert cosines(single, batch).min() >= 0.9999  # padding in a batch changes nothing
    assert embedder.embed_queries([]).shape == (0, 384)


def test_export_is_made_once_and_reused() -> None:
    model_path = resolve_model_path("all-MiniLM-L6-v2")
    export_dir = exported_encoder.export_model(model_path)
    graph = export_dir / "model.onnx"
    before = graph.stat().st_mtime_ns
    assert exported_encoder.export_model(model_path) == export_dir
    assert graph.stat().st_mtime_ns == before
    assert export_dir.parent.parent == exported_encoder.cache_root()


def test_openvino_keeps_the_model_it_compiled_and_loads_it_again(
    fresh_encoders: None, torch_vectors: np.ndarray
) -> None:
    first = SentenceTransformerEmbedder(backend="openvino", quantize="none", device="cpu")
    compiled = first.encoder("query").export_dir / "openvino-compiled"
    assert any(compiled.iterdir())  # the compiled blob, for the next cold process
    embedder_module._cached_encoder.cache_clear()  # a cold process: loaded from the blob
    again = SentenceTransformerEmbedder(backend="openvino", quantize="none", device="cpu")
    assert again.encoder("query").backend == "openvino"
    assert cosines(again.embed_queries(PARITY_TEXTS), torch_vectors).min() >= 0.999


def test_no_compiled_model_cache_where_its_folder_cannot_be_made(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = exported_encoder.export_model(resolve_model_path("all-MiniLM-L6-v2")) / "model.onnx"
    monkeypatch.setattr(Path, "mkdir", lambda *_, **__: (_ for _ in ()).throw(PermissionError("read-only")))
    assert exported_encoder._compiled_model_cache(graph) is None


@pytest.fixture
def fresh_encoders():
    """No encoder loaded in this process yet, so the next use loads (and maybe exports) afresh."""
    embedder_module._cached_encoder.cache_clear()
    yield
    embedder_module._cached_encoder.cache_clear()


@pytest.fixture
def empty_cache(fresh_encoders: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No export cached either."""
    monkeypatch.setenv(exported_encoder.CACHE_ENV, str(tmp_path / "cache"))


def test_failed_export_falls_back_to_torch_with_one_warning(
    empty_cache: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken_export(model_path: str, export_dir: Path) -> None:
        raise RuntimeError("exporter crashed\nwith a long second line")

    monkeypatch.setattr(exported_encoder, "_export", broken_export)
    embedder = SentenceTransformerEmbedder(backend="onnx", device="cpu")
    with caplog.at_level(logging.WARNING, logger="lookup_knowledge.embedder"):
        vector = embedder.embed_query("how do refunds work")
        embedder.embed_query("and again")
    assert embedder.encoder("query").backend == "torch"
    assert vector.shape == (384,)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["embedder.backend onnx unavailable, using torch (RuntimeError: exporter crashed)"]


def test_missing_runtime_falls_back_to_torch(
    fresh_encoders: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "openvino", None)  # as if the extra were not installed
    with caplog.at_level(logging.WARNING, logger="lookup_knowledge.embedder"):
        encoder = SentenceTransformerEmbedder(backend="openvino", device="cpu").encoder("document")
    assert encoder.backend == "torch"
    assert "embedder.backend openvino unavailable, using torch" in caplog.text


def test_auto_backend_is_per_path_on_cpu_and_torch_on_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_backends("auto", "cpu") == AUTO_CPU_BACKENDS
    monkeypatch.setitem(sys.modules, "openvino", None)  # find_spec: not installed
    assert resolve_backends("auto", "cpu") == AUTO_CPU_WITHOUT_OPENVINO
    assert resolve_backends("auto", "cuda") == {"query": "torch", "document": "torch"}
    assert resolve_backends("onnx", "cpu") == {"query": "onnx", "document": "onnx"}


def test_device_auto_uses_cuda_only_when_torch_sees_one(caplog: pytest.LogCaptureFixture) -> None:
    embedder_module._auto_device.cache_clear()
    with caplog.at_level(logging.INFO, logger="lookup_knowledge.embedder"):
        first, second = resolve_device("auto"), resolve_device("auto")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert first == second == expected
    assert [r.getMessage() for r in caplog.records] == [f"embedder.device auto: using {expected}"]
    assert resolve_device("cpu") == "cpu"


@pytest.mark.skipif(embedder_module._nvidia_driver(), reason="this machine has an NVIDIA driver")
def test_device_auto_without_an_nvidia_driver_never_imports_torch() -> None:
    probe = "import sys; from lookup_knowledge.adapters.embedder import resolve_device; "
    probe += "print(resolve_device('auto'), 'torch' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd="/")
    assert run.stdout.split() == ["cpu", "False"]


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_concurrent_queries_get_their_own_vectors(backend: str) -> None:
    embedder = SentenceTransformerEmbedder(backend=backend, device="cpu")
    texts = [f"question {i}: who approves a refund of {100 * i} EUR?" for i in range(16)]
    batch = embedder.embed_queries(texts)
    with ThreadPoolExecutor(4) as pool:
        concurrent = np.stack(list(pool.map(embedder.embed_query, texts)))
    assert cosines(concurrent, batch).min() >= 0.9999
