"""Edit-to-searchable time of ``ingest --watch`` while ``lookup-knowledge mcp`` serves the store.

    python benchmarks/watch.py [--edits 20] [--out benchmarks/results/watch.json]

Copies the sample knowledge base to a temporary folder, ingests it, starts the MCP server (a real
MCP SDK client over stdio) and an ``ingest --watch`` process on the same store, then edits one
document at a time: it appends a sentence holding a word no document has, and asks the server
for that word every 50 ms until a returned block holds it. The time from the write to that
lookup is one sample. Prints a table and writes JSON with p50/p95/max and the watcher's own
ingest time per batch (from its report lines).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

import anyio
from mcp import Client, StdioServerParameters

from lookup_knowledge import load_config, sample_knowledge_base
from lookup_knowledge.agent.tool_definition import TOOL_NAME
from lookup_knowledge.ingestion import ingest

CLI = str(Path(sys.executable).with_name("lookup-knowledge"))
RESULTS = Path(__file__).parent / "results" / "watch.json"
POLL_S = 0.05
GIVE_UP_S = 30.0
SECONDS = re.compile(r"in (\d+\.\d+) s")


def _lines(stream: IO[str]) -> queue.Queue[tuple[float, str]]:
    """The stream's lines, each with the monotonic time it arrived."""
    lines: queue.Queue[tuple[float, str]] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put((time.monotonic(), line))

    threading.Thread(target=read, daemon=True).start()
    return lines


def _wait_for(lines: queue.Queue[tuple[float, str]], text: str, timeout_s: float = 180) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            _, line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            break
        if text in line:
            return line
    raise RuntimeError(f"the watcher printed no line with {text!r} within {timeout_s} s")


async def _searchable(client: Client, word: str) -> bool:
    result = await client.call_tool(TOOL_NAME, {"query": f"{word} policy"})
    blocks = (result.structured_content or {}).get("evidenceBlocks", [])
    return any(word in block.get("content", "") for block in blocks)


async def _measure(
    store: Path, kb: Path, edits: int, watcher_lines: queue.Queue[tuple[float, str]]
) -> dict[str, Any]:
    params = StdioServerParameters(command=CLI, args=["mcp", "--set", f"store.path={store}"])
    files = sorted(kb.rglob("*.md"))
    samples: list[float] = []
    ingest_s: list[float] = []
    ingested_after: list[float] = []  # from the write to the watcher's report line
    async with Client(params, read_timeout_seconds=180) as client:
        await client.call_tool(TOOL_NAME, {"query": "warm-up"})
        for number in range(edits):
            word = f"zorblax{number}quux"
            file = files[number % len(files)]
            started = time.monotonic()
            with file.open("a", encoding="utf-8") as out:
                out.write(f"\n\nThe {word} rule applies to this policy since the last review.\n")
            while not await _searchable(client, word):
                if time.monotonic() - started > GIVE_UP_S:
                    raise RuntimeError(f"{word} not searchable within {GIVE_UP_S} s")
                await anyio.sleep(POLL_S)
            samples.append(time.monotonic() - started)
            await anyio.sleep(0.3)  # the watcher's report line arrives
            while not watcher_lines.empty():
                at, line = watcher_lines.get()
                if (match := SECONDS.search(line)) and "ingested" in line:
                    ingest_s.append(float(match.group(1)))
                    ingested_after.append(round(at - started, 3))
    return {"samples_s": samples, "watcher_ingest_s": ingest_s, "ingested_after_s": ingested_after}


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        kb, store = Path(tmp) / "kb", Path(tmp) / "store"
        shutil.copytree(sample_knowledge_base(), kb)
        ingest(kb, load_config(overrides={"store.path": str(store)}))
        command = [CLI, "ingest", "--watch", str(kb), "--set", f"store.path={store}"]
        watcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            lines = _lines(watcher.stdout)  # type: ignore[arg-type]
            _wait_for(lines, "ingested")
            measured = anyio.run(_measure, store, kb, args.edits, lines)
        finally:
            watcher.terminate()
            watcher.wait(timeout=60)
    samples = measured["samples_s"]
    figures = {
        "store": "sample knowledge base, default configuration; MCP server and ingest --watch processes",
        "edits": len(samples),
        "edit_to_searchable_s": {
            "p50": _percentile(samples, 0.5),
            "p95": _percentile(samples, 0.95),
            "max": round(max(samples), 3),
            "mean": round(statistics.fmean(samples), 3),
        },  # fmt: skip
        "watcher_ingest_s_p50": _percentile(measured["watcher_ingest_s"] or [0.0], 0.5),
        "samples_s": [round(x, 3) for x in samples],
        "watcher_ingest_s": measured["watcher_ingest_s"],
        "ingested_after_s": measured["ingested_after_s"],
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared), load {os.getloadavg()[0]:.1f}",
        "date": time.strftime("%Y-%m-%d"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    s = figures["edit_to_searchable_s"]
    print(f"{'edits':<8}{'p50 s':>8}{'p95 s':>8}{'max s':>8}{'watcher ingest p50 s':>22}")
    print(f"{len(samples):<8}{s['p50']:>8}{s['p95']:>8}{s['max']:>8}{figures['watcher_ingest_s_p50']:>22}")


if __name__ == "__main__":
    main()
