"""A model failure is one line on the CLI, loses nothing, and the next ingest completes.

The fault is injected into the real encoder (it raises after some batches, as an out-of-memory
error or a broken runtime would); a model folder that holds no model fails at load.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import make_config, without_progress, write_markdown
from test_ingest_crash import snapshot
from typer.testing import CliRunner

from lookup_knowledge import ingestion
from lookup_knowledge.adapters.embedder import TorchEncoder
from lookup_knowledge.agent.lookup import AgentLookup
from lookup_knowledge.cli import app as cli

DOCUMENTS = 12
TORCH = ["--set", "embedder.backend=torch"]  # the encoder the fault is injected into


def knowledge_base(root: Path) -> Path:
    for n in range(DOCUMENTS):
        body = f"## Part {n}\nDocument {n} explains topic {n}: " + "details " * 30
        write_markdown(root, f"d{n:02d}.md", {"id": f"doc-{n}", "domain": f"area{n % 3}"}, body)
    return root


def ingest_cli(kb: Path, store: Path, *extra: str) -> tuple[int, str]:
    """Exit code and the error line (progress lines aside); asserts there is at most one and no traceback."""
    outcome = CliRunner().invoke(cli.app, ["ingest", str(kb), "--set", f"store.path={store}", *TORCH, *extra])
    assert outcome.exception is None or isinstance(outcome.exception, SystemExit), outcome.exception
    assert "Traceback" not in outcome.stderr
    errors = without_progress(outcome.stderr).splitlines()
    assert len(errors) <= 1, outcome.stderr
    return outcome.exit_code, "".join(errors)


def test_an_encoder_failing_mid_ingest_is_one_line_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embedder
) -> None:
    kb = knowledge_base(tmp_path / "kb")
    clean = make_config(tmp_path / "clean", embedder__backend="torch")
    ingestion.ingest(kb, clean)

    monkeypatch.setattr(ingestion, "EMBED_GROUP", 3)  # many writes, so the failure lands mid-run
    encode = TorchEncoder.encode
    calls = []

    def failing(self, texts, batch_size):  # the injected fault: the third batch raises
        calls.append(len(texts))
        if len(calls) == 3:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\n(details follow)")
        return encode(self, texts, batch_size)

    monkeypatch.setattr(TorchEncoder, "encode", failing)
    code, stderr = ingest_cli(kb, tmp_path / "store")
    assert code == 1, stderr
    assert (
        stderr.startswith("error: ")
        and "failed to encode: RuntimeError: CUDA out of memory" in stderr
        and "run ingest again" in stderr
    )

    store = make_config(tmp_path / "store", embedder__backend="torch")
    written = snapshot(store)["points"]
    assert written and set(written) < set(snapshot(clean)["points"])  # the first groups stayed

    monkeypatch.setattr(TorchEncoder, "encode", encode)
    code, _ = ingest_cli(kb, tmp_path / "store")
    assert code == 0
    after, expected = snapshot(store), snapshot(clean)  # the next run completed it, chunk for chunk
    assert after["points"].keys() == expected["points"].keys()
    for key, (payload, vector, bm25) in after["points"].items():
        # when a version was written differs between the two ingests; what was written must not
        assert {**payload, "ingested_at": None} == {**expected["points"][key][0], "ingested_at": None}, key
        assert np.allclose(vector, expected["points"][key][1], atol=1e-3)  # batches differ: float noise
        assert bm25 == expected["points"][key][2], key
    assert after["l0"] == expected["l0"]


def test_a_folder_without_a_model_is_one_line(tmp_path: Path) -> None:
    kb = knowledge_base(tmp_path / "kb")
    (tmp_path / "empty-model").mkdir()
    model = f"embedder.model={tmp_path / 'empty-model'}"
    code, stderr = ingest_cli(kb, tmp_path / "store", "--set", model, "--set", "embedder.backend=auto")
    assert code == 1
    assert stderr.startswith("error: ") and "did not load" in stderr


def test_a_model_failure_in_a_lookup_is_retrieval_failed(
    sample_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(self, texts, batch_size):  # the injected fault
        raise RuntimeError("boom")

    monkeypatch.setattr(TorchEncoder, "encode", failing)
    config = make_config(sample_store, embedder__backend="torch")
    with AgentLookup.from_config(config, record=False) as agent:
        result = agent.call("Who approves refunds?")
    assert result.evidence_status == "retrieval_failed"
    assert "failed to encode: RuntimeError: boom" in result.message
