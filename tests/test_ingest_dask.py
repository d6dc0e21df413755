"""``ingest --dask``: chunks embedded on a local Dask cluster and written by this process give the
store a plain ingest gives (same points, payloads, vectors, L0 index); a cluster that cannot be
reached is one line."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import qdrant_edge as qe
from conftest import SMALL_CORPUS, make_config, write_corpus
from qdrant_client import QdrantClient
from typer.testing import CliRunner

from lookup_knowledge import ingest
from lookup_knowledge.adapters import dask_cluster
from lookup_knowledge.adapters.dask_cluster import ClusterUnavailableError, DaskEmbedder, connect
from lookup_knowledge.adapters.embedder import Embedder, EmbedderError
from lookup_knowledge.adapters.l0_index import L0Document, L0Index
from lookup_knowledge.adapters.qdrant_store import DENSE_VECTOR, SPARSE_VECTOR
from lookup_knowledge.cli.app import app
from lookup_knowledge.config import Config
from lookup_knowledge.stores import build_cluster_embedder, l0_index_path

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("dask.distributed")

# small chunks and model batches: several pieces per group, so their order on the way back counts
SETTINGS = {"embedder__backend": "torch", "embedder__batch_size": 2, "ingest__chunk_chars": 150}
Point = tuple[dict[str, Any], np.ndarray, dict[int, float]]  # payload, dense, sparse (index -> value)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """One in-process worker: it shares this process's loaded model (a worker process would load
    its own, as on a real cluster)."""
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
    ) as cluster:
        yield cluster


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "kb", SMALL_CORPUS)


def test_a_dask_ingest_stores_what_a_plain_ingest_stores(
    corpus: Path, tmp_path: Path, cluster: Any, embedder: Embedder
) -> None:
    plain = make_config(tmp_path / "plain", store__backend="qdrant", **SETTINGS)
    ingest(corpus, plain, embedder=embedder)
    on_dask = make_config(tmp_path / "dask", store__backend="qdrant", **SETTINGS)
    with distributed.Client(cluster) as client:
        report = ingest(corpus, on_dask, embedder=build_cluster_embedder(on_dask, client))
    assert report.chunks_written == report.points_in_store > len(SMALL_CORPUS)
    assert_same_stores(client_points(plain), client_points(on_dask))
    assert l0_index(plain) == l0_index(on_dask)


def test_ingest_dask_on_the_command_line_fills_the_edge_store_as_plain_ingest(
    corpus: Path, tmp_path: Path, cluster: Any, embedder: Embedder
) -> None:
    plain = make_config(tmp_path / "plain", **SETTINGS)
    ingest(corpus, plain, embedder=embedder)
    sets = [f"store.path={tmp_path / 'dask'}", *(f"{k.replace('__', '.')}={v}" for k, v in SETTINGS.items())]
    args = ["ingest", str(corpus), "--dask", cluster.scheduler_address]
    result = CliRunner().invoke(app, [*args, *(arg for s in sets for arg in ("--set", s))])
    assert result.exit_code == 0, result.output
    assert "embedding on the Dask cluster at" in result.stderr
    assert "chunks written" in result.stdout
    on_dask = make_config(tmp_path / "dask", **SETTINGS)
    assert_same_stores(edge_points(plain), edge_points(on_dask))
    assert l0_index(plain) == l0_index(on_dask)


def test_ingest_dask_with_nobody_at_the_address_is_one_line(corpus: Path, tmp_path: Path) -> None:
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        result = CliRunner().invoke(
            app,
            ["ingest", str(corpus), "--dask", "tcp://127.0.0.1:1", "--set", f"store.path={tmp_path / 's'}"],
        )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no Dask scheduler at tcp://127.0.0.1:1: Timed out")
    assert "Traceback" not in result.output
    assert not (tmp_path / "s").exists()  # nothing was ingested


def test_ingest_dask_with_watch_is_refused(corpus: Path, tmp_path: Path) -> None:
    args = [
        "ingest",
        str(corpus),
        "--watch",
        "--dask",
        "tcp://127.0.0.1:1",
        "--set",
        f"store.path={tmp_path}",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "--dask and --watch do not go together" in result.stderr


def test_workers_on_another_version_are_refused_naming_them(
    cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dask_cluster, "installed_version", lambda: "9.9.9")  # this process's version
    with pytest.raises(ClusterUnavailableError) as refused:
        connect(cluster.scheduler_address)
    worker, version = (
        next(iter(cluster.scheduler_info["workers"])),
        importlib.metadata.version("lookup-knowledge"),
    )
    assert str(refused.value).startswith(
        f"Dask workers without lookup-knowledge 9.9.9: {worker} ({version});"
    )


def test_a_malformed_address_is_refused_at_once() -> None:
    with pytest.raises(ClusterUnavailableError, match="no Dask scheduler at localhost: .*port"):
        connect("localhost")


def test_a_failure_on_the_cluster_is_an_embedder_error(cluster: Any) -> None:
    def broken() -> Embedder:
        raise RuntimeError("model folder gone")

    with distributed.Client(cluster) as client:
        embedder = DaskEmbedder(client, broken, "broken")
        with pytest.raises(
            EmbedderError, match="on the Dask cluster at .* failed: RuntimeError: model folder gone"
        ):
            embedder.embed_documents(["a text"])


def assert_same_stores(expected: dict[str, Point], actual: dict[str, Point]) -> None:
    assert sorted(actual) == sorted(expected)
    for point_id, (payload, dense, sparse) in expected.items():
        got_payload, got_dense, got_sparse = actual[point_id]
        assert _without_time(got_payload) == _without_time(payload)
        np.testing.assert_allclose(got_dense, dense, rtol=0, atol=1e-5)
        assert got_sparse.keys() == sparse.keys()
        np.testing.assert_allclose(list(got_sparse.values()), list(sparse.values()), rtol=1e-6)


def _without_time(payload: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in payload.items() if key != "ingested_at"}  # the run's clock


def client_points(config: Config) -> dict[str, Point]:
    client = QdrantClient(path=str(config.store.path / "qdrant"))
    try:
        records, _ = client.scroll(
            config.store.collection, limit=10_000, with_payload=True, with_vectors=True
        )
    finally:
        client.close()
    return _points(records)


def edge_points(config: Config) -> dict[str, Point]:
    shard = qe.EdgeShard.load(str(config.store.path / config.store.collection))
    try:
        records, _ = shard.scroll(qe.ScrollRequest(limit=10_000, with_payload=True, with_vector=True))
    finally:
        shard.close()
    return _points(records)


def _points(records: list[Any]) -> dict[str, Point]:
    """Each stored point by id: its payload, dense vector and BM25 weights by term index."""
    points = {}
    for record in records:
        sparse = record.vector[SPARSE_VECTOR]
        weights = dict(zip(sparse.indices, sparse.values, strict=True))
        points[str(record.id)] = (record.payload, np.array(record.vector[DENSE_VECTOR]), weights)
    return points


def l0_index(config: Config) -> dict[str, L0Document]:
    """The L0 index's documents, every field of each."""
    return dict(L0Index.load(l0_index_path(config)).documents)


def test_a_scheduler_without_workers_is_refused_naming_the_wait() -> None:
    with (
        distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as empty,
        dask.config.set({"distributed.comm.timeouts.connect": "1s"}),
        pytest.raises(
            ClusterUnavailableError, match=r"has no workers \(waited 1s\): start one with `dask worker"
        ),
    ):
        connect(empty.scheduler_address)


def test_texts_spread_over_every_worker_thread_come_back_in_order(embedder: Embedder) -> None:
    texts = [f"passage {i}: " + "refunds and chargebacks " * i for i in range(8)]
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=4, processes=False, dashboard_address=":0"
        ) as four_threads,
        distributed.Client(four_threads) as client,
        distributed.get_task_stream(client) as stream,
    ):
        rows = DaskEmbedder(client, lambda: embedder, embedder.model_name, piece_size=64).embed_documents(
            texts
        )
    assert len(stream.data) == 4  # pieces of 2 texts, one per thread, not one piece of 64
    np.testing.assert_allclose(rows, embedder.embed_documents(texts), rtol=0, atol=1e-5)
