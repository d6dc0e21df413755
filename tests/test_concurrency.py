"""One KnowledgeTool serving concurrent agent calls: 8 threads x 50 recorded calls on the real store."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from threadpoolctl import ThreadpoolController, threadpool_info

from lookup_knowledge import AgentLookup, KnowledgeTool, load_config
from lookup_knowledge.adapters.embedder import SentenceTransformerEmbedder
from lookup_knowledge.adapters.recorder import InvocationRecorder
from lookup_knowledge.agent.lookup import invocation_db_url
from lookup_knowledge.blas import one_blas_thread
from lookup_knowledge.contract import LookupResult

THREADS = 8
CALLS_PER_THREAD = 50
QUERIES = [
    "Who must approve a refund above 500 EUR?",
    "kafka consumer lag",
    "如何申请增值税专用发票",
    "PCI DSS rules for card data in the payments.events Kafka topic",
    "chargeback pizza recipe with mozzarella",
    "how do I rotate production API keys?",
    "",  # invalid input is a call too
    "Zendesk ticket triage priorities",
    "how to bake sourdough bread",
    "data warehouse nightly batch failed",
]
SEQUENCE = [QUERIES[(i * 7) % len(QUERIES)] for i in range(CALLS_PER_THREAD)]


def _comparable(result: LookupResult) -> dict[str, Any]:
    """The contract JSON less what legitimately differs between calls: timings and row ids."""
    payload = result.model_dump(by_alias=True, mode="json")
    trace = payload["retrievalTrace"]
    if trace is not None:
        trace["executedNodes"] = [node["name"] for node in trace["executedNodes"]]
        assert trace.pop("invocationRecord")["written"] is True
    return payload


def test_concurrent_calls_match_sequential_ones_and_are_each_recorded_once(
    sample_store: Path, embedder: SentenceTransformerEmbedder
) -> None:
    config = load_config(overrides={"store.path": str(sample_store)})
    recorder = InvocationRecorder(invocation_db_url(config))
    with AgentLookup(KnowledgeTool(config, embedder=embedder), recorder) as agent:
        expected = [_comparable(agent.call(query, "sequential")) for query in SEQUENCE]
        start = threading.Barrier(THREADS)

        def session(thread: int) -> list[LookupResult]:
            start.wait()
            return [agent.call(query, f"thread-{thread}") for query in SEQUENCE]

        with ThreadPoolExecutor(THREADS) as pool:
            concurrent = list(pool.map(session, range(THREADS)))

        for results in concurrent:
            assert [_comparable(result) for result in results] == expected

        rows = recorder.list(last=10 * THREADS * CALLS_PER_THREAD)
    assert len(rows) == (THREADS + 1) * CALLS_PER_THREAD
    assert len({row.id for row in rows}) == len(rows)
    for thread, results in enumerate(concurrent):
        mine = [row for row in rows if row.session_id == f"thread-{thread}"]
        assert [row.input for row in mine] == SEQUENCE
        assert [row.status for row in mine] == [result.evidence_status for result in results]
        recorded_ids = {r.retrieval_trace.invocation_record.id for r in results if r.retrieval_trace}
        assert recorded_ids <= {row.id for row in mine}


def _blas_threads() -> int:
    return min(pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas")


def test_lookups_that_overlap_on_two_threads_restore_the_blas_threads_they_found() -> None:
    """Each lookup runs with one BLAS thread; two that overlap (the first ends while the second
    runs) keep one until the last ends, which restores what the first found, not one for good."""
    import numpy  # noqa: F401  (its OpenBLAS is the pool limited)

    with ThreadpoolController().limit(limits=2, user_api="blas"):
        first, second = one_blas_thread(), one_blas_thread()
        first.__enter__()
        assert _blas_threads() == 1
        entered = threading.Thread(target=second.__enter__)
        entered.start()
        entered.join()
        first.__exit__(None, None, None)
        assert _blas_threads() == 1  # the second lookup still runs
        second.__exit__(None, None, None)
        assert _blas_threads() == 2
