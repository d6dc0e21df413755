"""One embedded store shared by a serving process and the CLI.

``lookup-knowledge mcp`` serves a store; ``lookup-knowledge ingest`` of a changed document into
the same store succeeds while it runs, and the server's next call returns the changed text. A
holder that never hands over makes the wait run out after ``store.lock_wait_s``, naming it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from conftest import SMALL_CORPUS, make_config, write_corpus, write_markdown
from mcp import Client, StdioServerParameters

from lookup_knowledge.adapters.qdrant_edge_store import QdrantEdgeStore
from lookup_knowledge.agent.tool_definition import TOOL_NAME
from lookup_knowledge.ingestion import ingest

LOOKUP_KNOWLEDGE = Path(sys.executable).with_name("lookup-knowledge")
CHANGED = "Customers may request a refund within 45 days when the parcel arrived damaged."


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LOOKUP_KNOWLEDGE), *args], capture_output=True, text=True, timeout=300)


async def serve_ingest_and_look_up(
    store: Path, kb: Path
) -> tuple[str, subprocess.CompletedProcess[str], str, float]:
    params = StdioServerParameters(
        command=str(LOOKUP_KNOWLEDGE), args=["mcp", "--set", f"store.path={store}"]
    )
    async with Client(params, read_timeout_seconds=180) as client:
        before = await client.call_tool(TOOL_NAME, {"query": "refund within how many days"})
        write_markdown(
            kb,
            "payments/refunds.md",
            SMALL_CORPUS["payments/refunds.md"][0],
            f"# Refund Policy\n\n{CHANGED}\n",
        )
        ingested = await anyio.to_thread.run_sync(cli, "ingest", str(kb), "--set", f"store.path={store}")
        started = time.perf_counter()
        after = await client.call_tool(TOOL_NAME, {"query": "refund within how many days"})
        reopen_s = time.perf_counter() - started
    return before.content[0].text, ingested, after.content[0].text, reopen_s


def test_ingest_while_the_mcp_server_serves_the_store(tmp_path: Path, embedder) -> None:
    kb = write_corpus(tmp_path / "kb", SMALL_CORPUS)
    config = make_config(tmp_path / "store")
    ingest(kb, config, embedder=embedder)
    before, ingested, after, reopen_s = anyio.run(serve_ingest_and_look_up, config.store.path, kb)
    assert ingested.returncode == 0, ingested.stderr
    assert "1 / 2" in ingested.stdout  # new / updated / unchanged: 0 / 1 / 2
    assert "30 days" in before and CHANGED not in before
    assert CHANGED in after
    print(f"\nfirst lookup after the handover (reopen included): {reopen_s * 1000:.0f} ms")


@pytest.mark.slow  # a CLI process that loads the model
def test_a_holder_that_never_hands_over_is_named_after_a_bounded_wait(tmp_path: Path, embedder) -> None:
    kb = write_corpus(tmp_path / "kb", SMALL_CORPUS)
    config = make_config(tmp_path / "store")
    ingest(kb, config, embedder=embedder)
    held = QdrantEdgeStore(config.store.path / config.store.collection, create=False)
    try:
        done = cli(
            "ingest", str(kb), "--set", f"store.path={config.store.path}", "--set", "store.lock_wait_s=1"
        )
    finally:
        held.close()
    assert done.returncode == 2
    message = " ".join(done.stderr.split())
    assert f"held by pid {os.getpid()}" in message
    assert "waited 1 s, store.lock_wait_s" in message
    assert "Traceback" not in done.stderr
