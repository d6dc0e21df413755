"""Corrupt data is detected, not served; CLI failures are one line, never a traceback."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import SMALL_CORPUS, make_config, without_progress, write_corpus, write_markdown
from typer.testing import CliRunner

from lookup_knowledge.agent.lookup import AgentLookup
from lookup_knowledge.cli import app as cli
from lookup_knowledge.cli.output import print_json
from lookup_knowledge.config import Config
from lookup_knowledge.ingestion import ingest
from lookup_knowledge.stores import l0_index_path

LOOKUP_KNOWLEDGE = Path(sys.executable).with_name("lookup-knowledge")


@pytest.fixture
def small_store(tmp_path: Path, embedder) -> Config:
    kb = write_corpus(tmp_path / "kb", SMALL_CORPUS)
    write_markdown(
        kb, "odd.md", {"id": "[/oops]", "title": "[bold]Markup[/bold] title"}, "Refunds [/] need approval."
    )
    config = make_config(tmp_path / "store")
    ingest(kb, config, embedder=embedder)
    return config


def run(*args: str) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(cli.app, list(args))
    assert outcome.exception is None or isinstance(outcome.exception, SystemExit), outcome.exception
    return outcome.exit_code, outcome.stdout, outcome.stderr


def test_garbage_in_the_vector_file_gives_retrieval_failed(small_store: Config, embedder) -> None:
    [vectors] = (small_store.store.path / small_store.store.collection).rglob(
        "vector_storage-dense/vectors/chunk_0.mmap"
    )
    with vectors.open("r+b") as handle:
        handle.write(np.full(8 * 384, 1e30, dtype=np.float32).tobytes())  # huge finite values
    with AgentLookup.from_config(small_store, record=False) as agent:
        agent.tool.embedder = embedder
        result = agent.call("refund within 30 days")
    assert result.evidence_status == "retrieval_failed"
    assert result.evidence_blocks == []
    errors = [attempt.error or "" for attempt in result.retrieval_trace.attempts]
    assert errors and all("outside the cosine range" in e and "ingest again" in e for e in errors)


def _overwrite_vectors(config: Config, values: np.ndarray) -> None:
    [vectors] = (config.store.path / config.store.collection).rglob(
        "vector_storage-dense/vectors/chunk_0.mmap"
    )
    with vectors.open("r+b") as handle:
        handle.write(values.astype(np.float32).tobytes())


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_vectors_give_retrieval_failed_not_no_evidence(
    small_store: Config, embedder, value: float
) -> None:
    _overwrite_vectors(small_store, np.full(8 * 384, value))  # every stored vector
    with AgentLookup.from_config(small_store, record=False) as agent:
        agent.tool.embedder = embedder
        result = agent.call("refund within 30 days")
    assert result.evidence_status == "retrieval_failed"
    errors = [attempt.error or "" for attempt in result.retrieval_trace.attempts]
    assert errors and all("corrupt" in e and "ingest again" in e for e in errors)
    assert "ingest again" in result.message


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_one_non_finite_vector_fails_the_searches_that_miss_it(
    small_store: Config, embedder, mode: str
) -> None:
    """The engine drops the NaN point, so the search comes back short ("returned 4 of the 5
    stored points"); a hybrid search may instead rank it by BM25, and the store then cannot give
    its cosine."""
    _overwrite_vectors(small_store, np.full(384, np.nan))  # the first stored vector only
    retrieval = small_store.retrieval.model_copy(update={"mode": mode})
    with AgentLookup.from_config(
        small_store.model_copy(update={"retrieval": retrieval}), record=False
    ) as agent:
        agent.tool.embedder = embedder
        result = agent.call("refund within 30 days")
    unfiltered = [a for a in result.retrieval_trace.attempts if a.kind == "unfiltered"]
    error = unfiltered[0].error or ""
    assert "returned 4 of the 5 stored points" in error or "cannot score point" in error, error
    assert "ingest again" in error


@pytest.mark.parametrize(
    "content",
    [b'{"version": 1, "documents": [{"doc_id"', b'{"version": 99, "documents": []}', b"\xff\xfe", b"[]"],
)
def test_an_unreadable_l0_index_is_one_line_and_retrieval_failed(small_store: Config, content: bytes) -> None:
    l0_index_path(small_store).write_bytes(content)
    store = f"store.path={small_store.store.path}"
    code, stdout, _ = run("query", "refunds", "--json", "--no-record", "--set", store)
    assert code == 1
    result = json.loads(stdout)
    assert result["evidenceStatus"] == "retrieval_failed"
    assert "L0 index" in result["message"] and "ingest the knowledge base again" in result["message"]
    code, _, stderr = run("ingest", str(small_store.store.path.parent / "kb"), "--set", store)
    assert code == 2
    assert without_progress(stderr).count("\n") == 1 and "L0 index" in stderr


def test_removed_segments_are_corruption_not_an_empty_knowledge_base(small_store: Config) -> None:
    segments = small_store.store.path / small_store.store.collection / "segments"
    removed = [path for path in segments.iterdir() if path.is_dir()]
    for segment in removed:
        shutil.rmtree(segment)
    store = f"store.path={small_store.store.path}"
    code, stdout, _ = run("query", "refund within 30 days", "--json", "--no-record", "--set", store)
    assert removed and code == 1
    result = json.loads(stdout)
    assert result["evidenceStatus"] == "retrieval_failed"  # was no_evidence: "nothing usable"
    message = " ".join(result["message"].split())
    assert "holds 0 chunks while its L0 index lists 4 documents" in message
    assert "ingest the knowledge base again" in message
    code, _, stderr = run("ingest", str(small_store.store.path.parent / "kb"), "--set", store)
    assert code == 0, stderr  # ingest finds the documents missing and writes them again
    code, stdout, _ = run("query", "refund within 30 days", "--json", "--no-record", "--set", store)
    assert code == 0 and json.loads(stdout)["evidenceStatus"] == "evidence"


def test_rich_markup_in_user_and_document_text_is_printed_as_text(small_store: Config) -> None:
    code, _, stderr = run("query", "refunds", "--set", "[/]")
    assert code == 2 and "[/]" in stderr and stderr.count("\n") == 1
    code, stdout, _ = run(
        "query",
        "markup title refunds need approval",
        "--no-record",
        "--set",
        f"store.path={small_store.store.path}",
    )
    assert code == 0
    assert "[/oops]" in stdout


@pytest.mark.parametrize("override", ["embedder.device=gpu", "embedder.model=/no/such/model"])
def test_a_bad_embedder_setting_is_one_line(override: str) -> None:
    code, _, stderr = run("query", "refunds", "--set", override)
    assert code == 2
    assert stderr.count("\n") == 1 and override.split("=")[0] in stderr


def test_json_on_an_ascii_stdout_is_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr(sys, "stdout", stdout)
    print_json({"query": "如何申请增值税专用发票"})
    stdout.flush()
    assert json.loads(stdout.buffer.getvalue()) == {"query": "如何申请增值税专用发票"}


@pytest.mark.slow  # a CLI process that loads the model
def test_a_cjk_query_on_an_ascii_terminal_prints_without_a_traceback(small_store: Config) -> None:
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "LC_ALL": "C", "LANG": "C"}
    args = [
        str(LOOKUP_KNOWLEDGE),
        "query",
        "如何申请退款 refund",
        "--set",
        f"store.path={small_store.store.path}",
    ]
    done = subprocess.run(args, env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode("ascii", "replace")[-2000:]
    assert b"Traceback" not in done.stderr
    assert b"\\u5982" in done.stdout or b"refund" in done.stdout
