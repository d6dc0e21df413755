"""The sharded eval on a local Dask cluster (Hamilton's DaskExecutor) equals the in-process run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import SMALL_CORPUS, write_corpus
from typer.testing import CliRunner

from lookup_knowledge import KnowledgeTool, ingest, load_config
from lookup_knowledge.adapters.embedder import Embedder
from lookup_knowledge.cli.app import app
from lookup_knowledge.eval.evaluation import distributed_evaluate, evaluate

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("dask.distributed")

QUERIES = pd.DataFrame(
    {
        "query_id": [f"q{i}" for i in range(6)],
        "query": [
            "refund for downloaded goods", "consumer lag grows", "rotate API keys",
            "chargeback", "broker disk usage", "",
        ],
        "category": [None, None, "payments", None, "security", None],
    }
)  # fmt: skip
QRELS = {"q0": {"refunds": 1}, "q1": {"kafka-runbook": 1}, "q2": {"api-keys": 1}}


def test_distributed_eval_matches_in_process(tmp_path: Path, embedder: Embedder) -> None:
    corpus = write_corpus(tmp_path / "corpus", SMALL_CORPUS)
    config = load_config(
        overrides={"store.backend": "qdrant", "store.path": str(tmp_path / "store"), "retrieval.return_n": 3}
    )
    ingest(corpus, config, embedder=embedder)
    with KnowledgeTool(config, embedder=embedder) as tool:
        local = evaluate(tool, QUERIES, QRELS)

    # one worker process: a qdrant-client local-mode store admits one process at a time
    with (
        distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True) as cluster,
        distributed.Client(cluster) as client,
    ):
        remote = distributed_evaluate(config, QUERIES, QRELS, client, shard_size=2)

    columns = [
        "query_id",
        "evidence_status",
        "fallback_reason",
        "category_filter",
        "evidence_keys",
        "doc_ids",
    ]
    assert _plain(remote.results[columns]) == _plain(local.results[columns])
    assert remote.results["fallback_reason"].notna().any()  # the pinned wrong filters retried
    assert remote.metrics["overall"]["ndcg@10"] == pytest.approx(local.metrics["overall"]["ndcg@10"])

    def scores(run) -> list[float]:  # noqa: ANN001
        return [s for row in run.results["rerank_scores"] for s in row]

    assert scores(remote) == pytest.approx(scores(local), abs=1e-5)


def _plain(frame: pd.DataFrame) -> list[dict]:
    """Rows as plain Python values (missing -> None), so dtype differences do not matter."""
    return [
        {
            k: (None if not isinstance(v, list) and pd.isna(v) else list(v) if isinstance(v, list) else v)
            for k, v in row.items()
        }
        for row in frame.astype(object).to_dict("records")
    ]


def test_eval_dask_with_nobody_at_the_address_is_one_line(tmp_path: Path) -> None:
    QUERIES.to_parquet(tmp_path / "queries.parquet")
    args = ["eval", str(tmp_path / "queries.parquet"), "--out", str(tmp_path / "out")]
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        result = CliRunner().invoke(app, [*args, "--dask", "tcp://127.0.0.1:1"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no Dask scheduler at tcp://127.0.0.1:1: Timed out")
    assert "Traceback" not in result.output
