"""``lookup-knowledge info``: the configuration in force, the store's size, model, backends, device."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from typer.testing import CliRunner

from lookup_knowledge.cli.app import app


def info(*args: str) -> dict:
    result = CliRunner().invoke(app, ["info", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_info_reports_store_size_model_backends_and_device(sample_store: Path) -> None:
    facts = info("--set", f"store.path={sample_store}", "--set", "embedder.backend=onnx")
    assert facts["store"]["chunks"] > facts["store"]["documents"] > 0
    assert facts["store"]["problem"] is None
    assert facts["embedder"]["model"] == "all-MiniLM-L6-v2"
    assert facts["embedder"]["backends"] == {"query": "onnx", "document": "onnx"}
    assert facts["embedder"]["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert facts["embedder"]["dimension"] == 384
    assert facts["config"]["embedder"]["backend"] == "onnx"
    assert facts["config"]["store"]["path"] == str(sample_store)


def test_info_on_a_missing_store_says_to_ingest_first(tmp_path: Path) -> None:
    facts = info("--set", f"store.path={tmp_path / 'none'}", "--set", "embedder.backend=torch")
    assert facts["store"]["chunks"] == 0
    assert "ingest first" in facts["store"]["problem"]
    assert not (tmp_path / "none").exists()


def test_info_prints_a_readable_summary(sample_store: Path) -> None:
    result = CliRunner().invoke(app, ["info", "--set", f"store.path={sample_store}"])
    assert result.exit_code == 0, result.output
    for label in ("model", "device", "query backend", "document backend", "documents / chunks"):
        assert label in result.stdout
    assert "configuration in force:" in result.stdout and "reference_threshold" in result.stdout


def test_info_shows_the_widths_in_force_not_null(tmp_path: Path) -> None:
    store = f"store.path={tmp_path / 'none'}"
    defaults = info("--set", store, "--set", "embedder.backend=torch")["config"]["retrieval"]
    assert (defaults["retrieve_k"], defaults["return_n"]) == (20, 5)
    legacy = info("--set", store, "--set", "embedder.backend=torch", "--set", "retrieval.top_k=8")
    assert (legacy["config"]["retrieval"]["retrieve_k"], legacy["config"]["retrieval"]["return_n"]) == (8, 8)
