"""A sentence-transformers model exported once to ONNX and run by ONNX Runtime or OpenVINO.

sentence-transformers' own ``backend="onnx"`` needs ``optimum-onnx``, which pins
``transformers<5`` (sentence-transformers 6 needs ``>=5``), so the model is exported here with
``torch.onnx.export``: token ids in, pooled sentence embedding out (the model's own Pooling
module), normalized in numpy. The export lives in a user cache directory, keyed by the weights
it came from, so each machine exports once.

>>> encoder = load_exported_encoder("/path/to/all-MiniLM-L6-v2", runtime="onnx", quantize="none")
>>> encoder.encode(["how do refunds work"], batch_size=64).shape
(1, 384)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

from .encoder_choices import Quantize
from .text import first_line

Runtime = Literal["onnx", "openvino"]
EXPORT_FORMAT = 2  # bump when the exported graph or the quantization recipe changes
OPSET = 17


class ExportError(RuntimeError):
    """The model could not be exported or loaded by the requested runtime."""


class _Session(Protocol):
    def __call__(self, inputs: dict[str, np.ndarray]) -> np.ndarray: ...


class ExportedEncoder:
    """Tokenizes with the model's fast tokenizer and runs the exported graph; vectors unit-length."""

    def __init__(self, export_dir: Path, session: _Session, runtime: Runtime, quantize: Quantize):
        from tokenizers import Tokenizer

        meta = json.loads((export_dir / "meta.json").read_text())
        self.export_dir = export_dir
        self.backend = runtime
        self.quantize = quantize
        self.dimension: int = meta["dimension"]
        self.input_names: list[str] = meta["input_names"]
        self._session = session
        self._tokenizer = Tokenizer.from_file(str(export_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(meta["max_seq_length"])
        self._tokenizer.enable_padding(pad_id=meta["pad_id"], pad_token=meta["pad_token"])

    def encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        """Unit-length embeddings, one row per text, batched longest first (as sentence-transformers)."""
        order = np.argsort([-len(text) for text in texts], kind="stable")
        vectors = np.empty((len(texts), self.dimension), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            rows = order[start : start + batch_size]
            vectors[rows] = self._embed([texts[i] for i in rows])
        return vectors

    def _embed(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        columns = {
            "input_ids": [e.ids for e in encodings],
            "attention_mask": [e.attention_mask for e in encodings],
            "token_type_ids": [e.type_ids for e in encodings],
        }
        pooled = self._session({name: np.asarray(columns[name], dtype=np.int64) for name in self.input_names})
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.maximum(norms, 1e-12)


def load_exported_encoder(model_path: str, runtime: Runtime, quantize: Quantize) -> ExportedEncoder:
    """The cached export of ``model_path`` (exported now if missing) run by ``runtime``."""
    export_dir = export_model(model_path)
    try:
        graph = _graph_file(export_dir, quantize)
        session = onnxruntime_session(graph) if runtime == "onnx" else _openvino_session(graph)
        return ExportedEncoder(export_dir, session, runtime, quantize)
    except ExportError:
        raise
    except Exception as exc:  # exporters and runtimes raise anything from ImportError to protobuf errors
        raise ExportError(first_line(exc, with_type=True)) from exc


CACHE_ENV = "LOOKUP_KNOWLEDGE_CACHE"


def cache_root() -> Path:
    """``$LOOKUP_KNOWLEDGE_CACHE``, else ``$XDG_CACHE_HOME/lookup-knowledge`` (``~/.cache/...``)."""
    if explicit := os.environ.get(CACHE_ENV):
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lookup-knowledge"


def exported_model_dir(model_path: str) -> Path:
    """Where the export of these exact weights is cached (one folder per weights + exporter)."""
    source = Path(model_path)
    weights = sorted(source.glob("*.safetensors")) + sorted(source.glob("*.bin"))
    identity = [str(source.resolve()), EXPORT_FORMAT] + [[w.name, w.stat().st_size] for w in weights]
    digest = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:16]
    return cache_root() / "exported" / f"{source.name}-{digest}"


def _graph_file(export_dir: Path, quantize: Quantize) -> Path:
    if not (export_dir / "model.onnx").is_file():
        raise ExportError(f"no export at {export_dir}")
    if quantize == "none":
        return export_dir / "model.onnx"
    quantized = export_dir / "model-int8.onnx"
    if not quantized.is_file():
        quantize_graph(export_dir / "model.onnx", quantized)
    return quantized


def export_model(model_path: str) -> Path:
    """Export the model's transformer + pooling to ONNX once; returns the cache folder."""
    export_dir = exported_model_dir(model_path)
    if (export_dir / "model.onnx").is_file():
        return export_dir
    try:
        _export(model_path, export_dir)
    except Exception as exc:
        raise ExportError(first_line(exc, with_type=True)) from exc
    return export_dir


def _export(model_path: str, export_dir: Path) -> None:
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # stderr stays for the one-line messages
    model = SentenceTransformer(model_path, device="cpu", local_files_only=True).eval()
    tokenizer = model.tokenizer
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in tokenizer.model_input_names]

    class Pooled(torch.nn.Module):
        """Token ids -> the model's pooled (not yet normalized) sentence embedding."""

        def __init__(self) -> None:
            super().__init__()
            self.modules_ = torch.nn.Sequential(
                *[m for m in model.children() if not isinstance(m, Normalize)]
            )

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            return self.modules_(dict(zip(names, tensors, strict=True)))["sentence_embedding"]

    sample = tokenizer(["an example sentence", "a second one"], return_tensors="pt", padding=True)
    export_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=export_dir.parent, prefix=".export-"))
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer notes about shapes fixed for this model
            torch.onnx.export(
                Pooled(),
                tuple(sample[n] for n in names),
                str(staging / "model.onnx"),
                input_names=names,
                output_names=["sentence_embedding"],
                dynamic_axes={
                    **{n: {0: "batch", 1: "tokens"} for n in names},
                    "sentence_embedding": {0: "batch"},
                },
                opset_version=OPSET,
                dynamo=False,
            )
        tokenizer.backend_tokenizer.save(str(staging / "tokenizer.json"))
        meta = {
            "dimension": model.get_embedding_dimension(),
            "max_seq_length": model.max_seq_length,
            "input_names": names,
            "pad_id": tokenizer.pad_token_id,
            "pad_token": tokenizer.pad_token,
            "source": model_path,
        }
        (staging / "meta.json").write_text(json.dumps(meta, indent=2))
        try:
            staging.rename(export_dir)
        except OSError:  # another process finished the same export first
            if not (export_dir / "model.onnx").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def quantize_graph(source: Path, target: Path, op_types: tuple[str, ...] = ("MatMul",)) -> None:
    """Dynamic int8 quantization of the weight MatMuls (activations quantized at run time; with
    ``Gather`` in ``op_types``, the embedding tables too).

    The feed-forward output projections stay float: their inputs (after GELU) carry the
    outliers that int8 clips; quantizing them too took the worst cosine to torch below 0.98.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(source), load_external_data=False).graph
    outliers = [n.name for n in graph.node if n.op_type == "MatMul" and _is_ffn_output(n.name)]
    staging = target.with_suffix(f".{os.getpid()}.tmp")
    quantize_dynamic(
        source, staging, weight_type=QuantType.QInt8, per_channel=True,
        op_types_to_quantize=list(op_types), nodes_to_exclude=outliers,
    )  # fmt: skip
    staging.replace(target)


def _is_ffn_output(node_name: str) -> bool:
    return "/output/dense/" in node_name and "/attention/" not in node_name


def _threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def onnxruntime_session(graph: Path) -> _Session:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = _threads()
    # Spinning threads keep the cores busy after each call and slow down whatever runs next
    # (a torch encode, the store search): measured 2-3x on 2 cores.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
    return lambda inputs: session.run(None, inputs)[0]


def _compiled_model_cache(graph: Path) -> Path | None:
    """Where OpenVINO keeps the model it compiled for this CPU, beside the export: a cold
    process then loads it in about 0.1 s instead of compiling for 0.5 s (OpenVINO keys each blob
    by the graph, the device and the settings). ``None`` where the folder cannot be written."""
    folder = graph.parent / "openvino-compiled"
    try:
        folder.mkdir(exist_ok=True)
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK) else None


def _openvino_session(graph: Path) -> _Session:
    import openvino as ov

    settings = {
        "INFERENCE_NUM_THREADS": _threads(),
        "PERFORMANCE_HINT": "LATENCY",
        # Threads pinned to cores wait for a core another process holds: with 2 busy processes on
        # 2 cores a query took 8.0 ms pinned, 3.5 ms unpinned in one test (2.9 ms either way on
        # idle cores); on saturated cores both vary run to run (docs/benchmarks.md).
        "ENABLE_CPU_PINNING": False,
    }
    if (compiled_cache := _compiled_model_cache(graph)) is not None:
        settings["CACHE_DIR"] = str(compiled_cache)
    compiled = ov.Core().compile_model(str(graph), "CPU", settings)
    request = compiled.create_infer_request()
    lock = threading.Lock()  # one infer request serves one call at a time

    def infer(inputs: dict[str, np.ndarray]) -> np.ndarray:
        with lock:
            return request.infer(inputs)[0].copy()

    return infer
