"""8 threads x 50 recorded calls (a round; more rounds until the handovers are done) while the
store is handed over again and again.

Until the store has been handed over three times, a handover request is posted and withdrawn
again and again (its requester, this test's parent process, is alive; withdrawing it is what a
requester does once it has the store), so the serving port closes the store whenever its searches
in flight finish, waits while the request stands, and reopens it at the next lookup, over and
over, under load. Every call must still give the answer a sequential call gives, every call is
recorded once, and no session's domains mix.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from conftest import make_config

from lookup_knowledge.adapters.recorder import InvocationRecorder
from lookup_knowledge.adapters.shared_store import handover_request
from lookup_knowledge.agent.knowledge_tool import KnowledgeTool
from lookup_knowledge.agent.lookup import AgentLookup, invocation_db_url

THREADS, CALLS = 8, 50
HANDOVERS = 3  # the requests go on until the store was handed over this often, the calls with them
HANG_GUARD_S = 300.0  # the asking stops after this long (never the case but on a hang)
ASKED_S = 0.2  # how long each request stands, and the pause before the next
QUERIES = [
    "Who must approve a refund above 500 EUR?",
    "kafka consumer lag",
    "如何申请增值税专用发票",
    "\u200b",
    "",
]


def keys(result) -> tuple[str, list[str]]:
    return result.evidence_status, [block.evidence_key for block in result.evidence_blocks]


def test_concurrent_calls_through_repeated_handovers(sample_store: Path, embedder) -> None:
    config = make_config(sample_store)
    recorder = InvocationRecorder(invocation_db_url(config))
    sequence = [QUERIES[(i * 3) % len(QUERIES)] for i in range(CALLS)]
    with AgentLookup(KnowledgeTool(config, embedder=embedder), recorder) as agent:
        expected = {query: keys(agent.call(query, "sequential")) for query in QUERIES}
        request = handover_request(config.store.path / config.store.collection)
        start, asked = threading.Barrier(THREADS), threading.Event()

        def session(thread: int):
            """Rounds of the sequence until the handovers are done (however fast the calls run)."""
            start.wait()
            calls = []
            while not calls or not asked.is_set():
                calls += [agent.call(query, f"thread-{thread}") for query in sequence]
            return calls

        def ask_again_and_again() -> None:
            until = time.monotonic() + HANG_GUARD_S
            try:
                while time.monotonic() < until and agent.tool.search_port.handovers < HANDOVERS:
                    request.write_text(f"{os.getppid()} pytest parent", encoding="utf-8")
                    time.sleep(ASKED_S)
                    request.unlink()
                    time.sleep(ASKED_S)
            finally:
                asked.set()

        asking = threading.Thread(target=ask_again_and_again)
        asking.start()
        with ThreadPoolExecutor(THREADS) as pool:
            results = list(pool.map(session, range(THREADS)))
        asking.join()
        handovers = agent.tool.search_port.handovers
        calls = sum(len(thread_results) for thread_results in results)
        rows = recorder.list(last=calls + len(QUERIES) + 1)
    assert handovers >= HANDOVERS, f"{handovers} handovers in {HANG_GUARD_S:g} s (the hang guard)"
    for thread_results in results:
        rounds = len(thread_results) // CALLS
        assert [keys(result) for result in thread_results] == [expected[query] for query in sequence * rounds]
    assert len(rows) == calls + len(QUERIES)
    for thread in range(THREADS):
        mine = [row for row in rows if row.session_id == f"thread-{thread}"]
        assert [row.input for row in mine] == sequence * (len(results[thread]) // CALLS)
        domains = {domain for result in results[thread] for domain in result.retrieved_domains_this_session}
        assert domains <= {"payments", "infrastructure", "customer-support", "security", "data-platform"}
    print(f"\n{calls} calls from {THREADS} threads, {handovers} handovers, {len(rows)} rows")
