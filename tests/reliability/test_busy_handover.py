"""Ingest while a busy ``lookup-knowledge mcp`` serves the store: nothing lost, the new text served.

A real server (the MCP SDK's client over stdio) answers two callers that call back to back, with
no pause, while a separate ingest process edits one document per round: 24 rounds (the first and
the last through the ``lookup-knowledge ingest`` CLI, the others through ``ingest()`` in a worker
process that keeps its model loaded). After every ingest that succeeded, the next call returns
the new text and the ingest reported 1 updated, 2 unchanged (a document that vanished would be
"new"). Then kill -9 of each side: an ingest killed mid-run (the server recovers; the rerun
completes), and the server killed while it serves and an ingest waits for it (the ingest
completes; a new server serves what it wrote).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from conftest import SMALL_CORPUS, make_config, write_corpus, write_markdown
from mcp import Client, StdioServerParameters

from lookup_knowledge.agent.tool_definition import TOOL_NAME
from lookup_knowledge.ingestion import ingest

pytestmark = pytest.mark.slow

LOOKUP_KNOWLEDGE = Path(sys.executable).with_name("lookup-knowledge")
ROUNDS = 24
CALLERS = 2
QUERY = "refund within how many days"
BACKGROUND = [QUERY, "kafka consumer lag", "rotate production API keys"]
WORKER = r"""
import json, sys
from lookup_knowledge.config import load_config
from lookup_knowledge.ingestion import ingest
from lookup_knowledge.stores import build_embedder
kb, store = sys.argv[1], sys.argv[2]
config = load_config(overrides={"store.path": store})
embedder = build_embedder(config)
assert embedder.dimension
print(json.dumps({"ready": True}), flush=True)
for _ in sys.stdin:
    try:
        r = ingest(kb, config, embedder=embedder)
        counts = {"new": r.new, "updated": r.updated, "unchanged": r.unchanged}
        print(json.dumps({"ok": True, **counts}), flush=True)
    except Exception as exc:
        print(json.dumps({"ok": False, "error": str(exc)}), flush=True)
"""


def marker(version: int) -> str:
    return f"revision r{version}."


def edit(kb: Path, version: int) -> None:
    body = (
        f"# Refund Policy\n\nCustomers may request a refund within {30 + version} days, {marker(version)}\n"
    )
    write_markdown(kb, "payments/refunds.md", SMALL_CORPUS["payments/refunds.md"][0], body)


class IngestWorker:
    """A separate process running ``ingest()`` once per request, its model loaded once."""

    def __init__(self, kb: Path, store: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(kb), str(store)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert json.loads(self.read()) == {"ready": True}

    def read(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline()

    def start(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("ingest\n")
        self.process.stdin.flush()

    def ingest(self) -> dict:
        self.start()
        return json.loads(self.read())

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def cli_ingest(kb: Path, store: Path) -> dict:
    done = subprocess.run(
        [str(LOOKUP_KNOWLEDGE), "ingest", str(kb), "--set", f"store.path={store}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    counts = " ".join(done.stdout.split())
    return {"ok": True, "cli": counts, "updated": 1 if "0 / 1 / 2" in counts else None}


def server(store: Path, pid_file: Path) -> StdioServerParameters:
    """``lookup-knowledge mcp`` behind ``exec`` (same pid), its pid written for a kill -9."""
    script = f'echo $$ > "{pid_file}"; exec "{LOOKUP_KNOWLEDGE}" mcp --set "store.path={store}"'
    return StdioServerParameters(command="/bin/sh", args=["-c", script])


async def call(client: Client, query: str) -> dict:
    result = await client.call_tool(TOOL_NAME, {"query": query})
    return json.loads(result.content[0].text)


def served_text(result: dict) -> str:
    return " ".join(block["content"] for block in result["evidenceBlocks"])


async def serving(
    store: Path, pid_file: Path, body: Callable[[Client, Counter], object], statuses: Counter
) -> object:
    """Run ``body`` against a fresh server while callers call it back to back."""
    async with Client(server(store, pid_file), read_timeout_seconds=120) as client:
        stop = anyio.Event()
        outcome: list[object] = []

        async def caller(index: int) -> None:
            turn = index
            while not stop.is_set():
                try:
                    result = await call(client, BACKGROUND[turn % len(BACKGROUND)])
                except Exception:  # noqa: BLE001 - the server was killed under it
                    statuses["call failed (server killed)"] += 1
                    return
                statuses[result["evidenceStatus"]] += 1
                turn += 1

        async def run_body() -> None:
            try:
                outcome.append(await body(client, statuses))
            finally:
                stop.set()

        async with anyio.create_task_group() as group:
            for index in range(CALLERS):
                group.start_soon(caller, index)
            group.start_soon(run_body)
        return outcome[0]


def test_busy_server_and_ingests_lose_nothing(tmp_path: Path, embedder) -> None:
    kb = write_corpus(tmp_path / "kb", SMALL_CORPUS)
    config = make_config(tmp_path / "store")
    store, pid_file = config.store.path, tmp_path / "server.pid"
    ingest(kb, config, embedder=embedder)
    rng = random.Random(27)
    rounds: list[dict] = []
    statuses: Counter = Counter()
    worker = IngestWorker(kb, store)

    async def ingest_rounds(client: Client, _: Counter) -> None:
        nonlocal worker
        for version in range(1, ROUNDS + 1):
            edit(kb, version)
            started = time.perf_counter()
            if version in (1, ROUNDS):
                report = await anyio.to_thread.run_sync(cli_ingest, kb, store)
            else:
                report = await anyio.to_thread.run_sync(worker.ingest)
            ingest_s = time.perf_counter() - started
            after = await call(client, QUERY)
            rounds.append({"version": version, "report": report, "ingest_s": ingest_s, "after": after})
        # kill -9 of the ingest while it runs (waiting for the handover or writing): the server
        # keeps serving, and the rerun completes the edit
        edit(kb, ROUNDS + 1)
        worker.start()
        await anyio.sleep(rng.uniform(0.05, 0.6))
        worker.kill()
        worker = await anyio.to_thread.run_sync(IngestWorker, kb, store)
        report = await anyio.to_thread.run_sync(worker.ingest)
        after = await call(client, QUERY)
        rounds.append({"version": ROUNDS + 1, "report": report, "after": after, "killed": "ingest"})
        # kill -9 of the busy server while an ingest waits for it to hand the store over
        edit(kb, ROUNDS + 2)
        worker.start()
        await anyio.sleep(0.05)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        report = json.loads(await anyio.to_thread.run_sync(worker.read))
        rounds.append({"version": ROUNDS + 2, "report": report, "killed": "server"})

    try:
        try:
            anyio.run(serving, store, pid_file, ingest_rounds, statuses)
        except BaseException as exc:  # noqa: BLE001 - the killed server's session may end in error
            ending: BaseException | None = exc
        else:
            ending = None
        assert len(rounds) == ROUNDS + 2, (len(rounds), ending)
        killed_calls = statuses.pop("call failed (server killed)", 0)

        async def look_up(client: Client, _: Counter) -> dict:
            return await call(client, QUERY)

        fresh = anyio.run(serving, store, pid_file, look_up, statuses)
    finally:
        worker.close()

    steady = rounds[:ROUNDS]
    assert all(r["report"]["ok"] for r in rounds), [r["report"] for r in rounds if not r["report"]["ok"]]
    lost = [r["version"] for r in steady if r["report"]["updated"] != 1 or r["report"].get("new", 0)]
    assert lost == []  # every round found the edited document in the store: none vanished
    for r in rounds[: ROUNDS + 1]:
        text = served_text(r["after"])
        assert marker(r["version"]) in text, (r["version"], text)  # the new text, served next
        assert marker(r["version"] - 1) not in text
    assert marker(ROUNDS + 2) in served_text(fresh)  # the ingest the killed server let through
    assert statuses["retrieval_failed"] == 0, statuses
    times = sorted(r["ingest_s"] for r in steady[1:-1])
    print(
        f"\n{ROUNDS} rounds + 2 kills: 0 lost; worker ingest {times[len(times) // 2]:.2f} s median, "
        f"{times[-1]:.2f} s max; background calls {dict(statuses)}, {killed_calls} cut by the kill"
    )
