"""Store faults reach the caller as one exception family and the agent as ``retrieval_failed``.

A Qdrant server that refuses connections, one that accepts them and never answers, a store or
collection that is missing, and a store locked by another holder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import make_config, without_progress
from typer.testing import CliRunner

from lookup_knowledge.adapters.errors import (
    StoreError,
    StoreLockedError,
    StoreMissingError,
    StoreUnavailableError,
)
from lookup_knowledge.adapters.qdrant_client_store import QdrantClientStore
from lookup_knowledge.adapters.qdrant_edge_store import QdrantEdgeStore
from lookup_knowledge.cli.app import app
from lookup_knowledge.stores import open_store

TIMEOUT_S = 1.0


def query_json(tmp_path: Path, url: str, *extra: str) -> tuple[int, dict]:
    args = ["query", "refund approval", "--json", "--no-record"]
    sets = [
        f"store.path={tmp_path}",
        "store.backend=qdrant",
        f"store.url={url}",
        f"store.timeout_s={TIMEOUT_S}",
    ]
    for setting in sets:
        args += ["--set", setting]
    outcome = CliRunner().invoke(app, [*args, *extra])
    return outcome.exit_code, json.loads(outcome.stdout)


@pytest.mark.parametrize("kind", ["refused", "hung"])
def test_query_json_with_the_server_down_prints_retrieval_failed_after_one_attempt(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """One connection, one ``store.timeout_s``, no retries (how long that takes:
    benchmarks/reliability_faults.py)."""
    url = request.getfixturevalue(f"{kind}_url")
    code, result = query_json(tmp_path, url)
    assert code == 1
    assert result["evidenceStatus"] == "retrieval_failed"
    assert result["found"] is False
    assert url in result["message"]
    if kind == "hung":
        assert f"no answer within store.timeout_s = {TIMEOUT_S} s" in result["message"]
        assert request.getfixturevalue("silent_server").accepted() == 1
    assert not list(tmp_path.iterdir())  # nothing recorded, nothing created


@pytest.mark.parametrize("kind", ["refused", "hung"])
def test_the_server_adapter_raises_unavailable(kind: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue(f"{kind}_url")
    with pytest.raises(StoreUnavailableError, match="is unavailable") as excinfo:
        QdrantClientStore("knowledge", 384, url=url, timeout_s=TIMEOUT_S)
    assert url in str(excinfo.value)
    if kind == "hung":  # the timeout honoured: one connection, no retries
        assert f"no answer within store.timeout_s = {TIMEOUT_S} s" in str(excinfo.value)
        assert request.getfixturevalue("silent_server").accepted() == 1


def test_a_missing_collection_is_reported_not_created(tmp_path: Path) -> None:
    QdrantClientStore("other", 384, location=tmp_path / "qdrant").close()
    with pytest.raises(StoreMissingError, match="no collection 'knowledge'.*ingest first"):
        QdrantClientStore("knowledge", 384, location=tmp_path / "qdrant", create=False)
    store = QdrantClientStore("other", 384, location=tmp_path / "qdrant")
    try:
        assert not store._client.collection_exists("knowledge")
    finally:
        store.close()


@pytest.mark.parametrize("backend", ["edge", "qdrant"])
def test_open_store_without_create_reports_a_missing_store(backend: str, tmp_path: Path) -> None:
    config = make_config(tmp_path / "nothing-here", store__backend=backend)
    with pytest.raises(StoreMissingError, match="ingest first"):
        open_store(config, 384, create=False)
    assert not (tmp_path / "nothing-here").exists()


@pytest.mark.parametrize("backend", ["edge", "qdrant"])
def test_a_store_held_elsewhere_is_locked(backend: str, tmp_path: Path) -> None:
    config = make_config(tmp_path, store__backend=backend)
    holder = open_store(config, 384)
    try:
        with pytest.raises(StoreLockedError, match="locked"):
            open_store(config, 384)
    finally:
        holder.close()


def test_every_store_error_is_one_family() -> None:
    for error in (StoreUnavailableError, StoreMissingError, StoreLockedError):
        assert issubclass(error, StoreError)
    assert issubclass(StoreMissingError, StoreUnavailableError)


def test_query_on_a_missing_edge_store_prints_retrieval_failed(tmp_path: Path) -> None:
    args = ["query", "refunds", "--json", "--set", f"store.path={tmp_path / 'none'}"]
    outcome = CliRunner().invoke(app, args)
    assert outcome.exit_code == 1
    result = json.loads(outcome.stdout)
    assert result["evidenceStatus"] == "retrieval_failed"
    assert "ingest first" in result["message"]
    assert not (tmp_path / "none").exists()


def test_edge_store_opens_without_knowing_the_dimension(tmp_path: Path) -> None:
    QdrantEdgeStore(tmp_path / "edge", 384).close()
    store = QdrantEdgeStore(tmp_path / "edge", create=False)
    try:
        assert store.count() == 0
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["refused", "hung"])
def test_ingest_with_the_server_down_is_one_line(
    kind: str, tmp_path: Path, small_corpus: Path, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(f"{kind}_url")
    sets = [
        f"store.path={tmp_path / 'store'}",
        "store.backend=qdrant",
        f"store.url={url}",
        "store.timeout_s=1",
    ]
    args = ["ingest", str(small_corpus), *[arg for setting in sets for arg in ("--set", setting)]]
    outcome = CliRunner().invoke(app, args)
    assert outcome.exit_code == 2
    errors = without_progress(outcome.stderr)  # the phases done before the store was needed aside
    assert errors.count("\n") == 1 and "is unavailable" in errors and url in errors
    assert "Traceback" not in outcome.stderr


def test_a_rejected_query_creates_nothing_where_store_path_points(tmp_path: Path) -> None:
    target = tmp_path / "etc"
    target.mkdir()
    outcome = CliRunner().invoke(app, ["query", "\u200b", "--set", f"store.path={target}"])
    assert outcome.exit_code == 2 and "invalid query" in outcome.stderr
    assert not list(target.iterdir())  # no invocations.sqlite where no store was ingested


def test_a_rejected_query_on_a_store_ingested_before_sqlite_l0_is_recorded(tmp_path: Path) -> None:
    (tmp_path / "knowledge.l0.json").write_text('{"documents": []}', encoding="utf-8")  # format 1
    outcome = CliRunner().invoke(app, ["query", "\u200b", "--set", f"store.path={tmp_path}"])
    assert outcome.exit_code == 2 and "invalid query" in outcome.stderr
    assert (tmp_path / "invocations.sqlite").is_file()  # recorded, as for a store ingested since
