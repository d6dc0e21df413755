"""``lookup-knowledge serve`` under concurrent clients: lookups per second and latency over the JSON
API and over MCP (streamable HTTP, the SDK's client), next to the same lookups made in-process,
measured in one run on the sample knowledge base.

In turn, for each number of concurrent clients: the in-process lookups (threads calling one
``AgentLookup``, recorded as the server records them), then, against one ``serve`` process on
loopback (``serve.max_in_flight`` set to the most clients, so none is refused), the JSON API
(``httpx`` async clients, one connection each) and MCP (one SDK client each, the 2026-07-28
protocol). The connections are opened first; then each client sends the sample questions back
to back until its time is up, and lookups/s counts the answers over the time to the last one.
The server's resident memory is read after each row. The clients run on the same cores as the
server: over HTTP the figures include the clients' own work.

    python benchmarks/serve.py [--clients 1 4 16 64] [--seconds 10] [--out FILE.json] [--doc docs/serve.md]
    python benchmarks/serve.py --from-json   # rewrite the doc's table from --out only
    python benchmarks/serve.py --soak 600 [--ingest-every 60] [--from-json]   # 16 clients, an ingest a minute

A full run (the default clients and seconds) rewrites its table of docs/serve.md whole.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from doc_sections import machine_line, measured, replace_table
from mcp import Client
from rich.console import Console
from rich.table import Table

from lookup_knowledge import AgentLookup, ingest, load_config, sample_knowledge_base

QUERIES = Path(__file__).resolve().parents[1] / "lookup_knowledge" / "sample-eval" / "queries.jsonl"
LOOKUP_KNOWLEDGE = Path(sys.executable).with_name("lookup-knowledge")
CLIENTS = (1, 4, 16, 64)
SECONDS = 10.0


def questions() -> list[str]:
    return [json.loads(line)["text"] for line in QUERIES.read_text(encoding="utf-8").splitlines() if line]


def summary(latencies_s: list[float], errors: int, seconds: float, rss_mb: float | None) -> dict[str, Any]:
    """The figures of one row: ``seconds`` from the first call to the last answer."""
    ms = sorted(x * 1000 for x in latencies_s)
    cut = statistics.quantiles(ms, n=100) if len(ms) > 1 else ms * 99
    return {
        "lookups": len(ms),
        "errors": errors,
        "per_s": round(len(ms) / seconds, 1),
        "p50_ms": round(statistics.median(ms), 2) if ms else None,
        "p95_ms": round(cut[94], 2) if ms else None,
        "p99_ms": round(cut[98], 2) if ms else None,
        "server_rss_mb": rss_mb,
    }


def in_process(agent: AgentLookup, clients: int, seconds: float, texts: list[str]) -> dict[str, Any]:
    """``clients`` threads calling the agent back to back for ``seconds``."""
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def client(n: int) -> None:
        nonlocal errors
        i = n
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            result = agent.call(texts[i % len(texts)], f"bench-{n}")
            took = time.perf_counter() - started
            with lock:
                latencies.append(took)
                errors += result.evidence_status in ("retrieval_failed", "invalid_input")
            i += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return summary(latencies, errors, time.perf_counter() - started, rss_mb(os.getpid()))


async def over_http(
    base: str, clients: int, seconds: float, texts: list[str], mcp: bool
) -> tuple[list[float], int, float]:
    """``clients`` connections (JSON, or MCP client sessions) opened first, then each calling back
    to back for ``seconds``: the latencies, the errors and the seconds until the last answer."""
    latencies: list[float] = []
    errors = 0
    async with contextlib.AsyncExitStack() as stack:
        if mcp:
            sessions = [
                await stack.enter_async_context(Client(f"{base}/mcp", read_timeout_seconds=600))
                for _ in range(clients)
            ]
        else:
            https = [
                await stack.enter_async_context(httpx.AsyncClient(base_url=base, timeout=600))
                for _ in range(clients)
            ]

        async def call(n: int, text: str) -> bool:
            if mcp:
                return not (await sessions[n].call_tool("lookup_knowledge", {"query": text})).is_error
            answer = await https[n].post("/v1/lookup", json={"query": text, "session": f"b{n}"})
            return answer.status_code == 200

        started = time.perf_counter()
        deadline = started + seconds

        async def client(n: int) -> None:
            nonlocal errors
            i = n
            while time.perf_counter() < deadline:
                began = time.perf_counter()
                ok = await call(n, texts[i % len(texts)])
                latencies.append(time.perf_counter() - began)
                errors += not ok
                i += 1

        await asyncio.gather(*(client(n) for n in range(clients)))
        return latencies, errors, time.perf_counter() - started


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(store: Path, clients: list[int], seconds: float) -> dict[str, Any]:
    config = load_config(overrides={"store.path": str(store)})
    texts = questions()
    results: dict[str, Any] = {"in-process": {}, "JSON API": {}, "MCP": {}}
    with AgentLookup.from_config(config) as agent:
        agent.warm_up()
        for n in clients:
            results["in-process"][n] = in_process(agent, n, seconds, texts)
            print(f"in-process, {n} clients: {results['in-process'][n]}", file=sys.stderr)
    port = free_port()
    command = [
        str(LOOKUP_KNOWLEDGE), "serve", "--port", str(port), "--set", f"store.path={store}",
        "--set", f"serve.max_in_flight={max(clients)}",
    ]  # fmt: skip
    server = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, server)
        results["server_rss_mb_ready"] = rss_mb(server.pid)
        for name, mcp in (("JSON API", False), ("MCP", True)):
            for n in clients:
                latencies, errors, took = asyncio.run(over_http(base, n, seconds, texts, mcp))
                results[name][n] = summary(latencies, errors, took, rss_mb(server.pid))
                print(f"{name}, {n} clients: {results[name][n]}", file=sys.stderr)
    finally:
        server.terminate()
        server.wait(120)
    return results


SOAK_QUERY = "zorbquill ledger reconciliation"
LEAK_MARKERS = ("zorbquill-ledger", "vexillum", "Zorbquill Ledger")


def soak_document(folder: Path, version: int) -> None:
    """The document the soak rewrites and ingests each time: only ``finance`` may see it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "zorbquill.md").write_text(
        f"---\nid: zorbquill-ledger\ntitle: Zorbquill Ledger\ndomain: payments\naccess: [finance]\n---\n\n"
        f"# Zorbquill Ledger\n\nThe zorbquill ledger reconciliation runs at {version:02d}:00 under "
        f"vexillum control; revision {version}.\n",
        encoding="utf-8",
    )


def soak(store: Path, seconds: float, every: float, clients: int) -> dict[str, Any]:
    """``clients`` JSON clients (half with a token that may see the soak document, half without)
    calling back to back for ``seconds`` while the document is edited and ingested every
    ``every`` seconds by another process: errors, leaks (the document's words in an answer to
    the other token) and the server's memory over time."""
    folder = store.parent / "soak-docs"
    soak_document(folder, 0)
    overrides = ["--set", f"store.path={store}"]
    subprocess.run(
        [str(LOOKUP_KNOWLEDGE), "ingest", str(folder), *overrides], check=True, capture_output=True
    )
    tokens = {"finance": "soak-finance-token", "support": "soak-support-token"}
    entries = ", ".join(
        f"{{name: {n}, sha256: {hashlib.sha256(t.encode()).hexdigest()}, principals: [{n}]}}"
        for n, t in tokens.items()
    )
    port = free_port()
    command = [
        str(LOOKUP_KNOWLEDGE), "serve", "--port", str(port), *overrides, "--set", f"serve.tokens=[{entries}]",
        "--set", f"serve.max_in_flight={clients}",  # every call admitted: a 429 would count as an error
    ]  # fmt: skip
    server = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    texts = [*questions(), SOAK_QUERY]
    counts = {"lookups": 0, "errors": 0, "leaks": 0, "seen_by_owner": 0, "ingests": 0, "failed_ingests": 0}
    statuses: dict[int, int] = {}
    rss: list[float | None] = []
    try:
        wait_ready(base, server)
        rss.append(rss_mb(server.pid))

        async def client(n: int, deadline: float) -> None:
            who = "finance" if n % 2 else "support"
            headers = {"Authorization": f"Bearer {tokens[who]}"}
            async with httpx.AsyncClient(base_url=base, timeout=600, headers=headers) as http:
                i = n
                while time.perf_counter() < deadline:
                    answer = await http.post(
                        "/v1/lookup", json={"query": texts[i % len(texts)], "session": f"s{n}"}
                    )
                    counts["lookups"] += 1
                    counts["errors"] += answer.status_code != 200
                    statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
                    # what only the document holds (the query's own words are echoed back)
                    holds = any(m in answer.text for m in LEAK_MARKERS)
                    counts["leaks"] += who == "support" and holds
                    counts["seen_by_owner"] += who == "finance" and holds  # the control: it is there
                    i += 1

        async def ingests(deadline: float) -> None:
            version = 0
            while time.perf_counter() + every < deadline:
                await asyncio.sleep(every)
                version += 1
                soak_document(folder, version)
                done = await asyncio.to_thread(
                    subprocess.run,
                    [str(LOOKUP_KNOWLEDGE), "ingest", str(folder), *overrides],
                    capture_output=True,
                )
                counts["ingests"] += 1
                counts["failed_ingests"] += done.returncode != 0
                rss.append(rss_mb(server.pid))
                print(
                    f"soak: ingest {version} -> {done.returncode}, {counts}, RSS {rss[-1]} MB",
                    file=sys.stderr,
                )

        async def main() -> None:
            deadline = time.perf_counter() + seconds
            await asyncio.gather(ingests(deadline), *(client(n, deadline) for n in range(clients)))

        asyncio.run(main())
        rss.append(rss_mb(server.pid))
    finally:
        server.terminate()
        server.wait(120)
    return {**counts, "statuses": statuses, "seconds": seconds, "clients": clients, "server_rss_mb": rss}


def wait_ready(base: str, server: subprocess.Popen) -> None:
    """Wait until ``server`` answers ``/readyz`` with 200."""
    while True:
        try:
            if httpx.get(f"{base}/readyz").status_code == 200:
                return
        except httpx.ConnectError:
            pass
        if server.poll() is not None:
            raise SystemExit("serve exited before it was ready")
        time.sleep(0.2)


def soak_table(outcome: dict[str, Any]) -> str:
    """The soak's one row: calls, failures, leaks, ingests and the server's memory."""
    rss = [x for x in outcome["server_rss_mb"] if x is not None]
    return "\n".join(
        [
            machine_line(outcome.get("ran", {}), "serve.py --soak 600"),
            "",
            "| seconds | clients | lookups | failed | leaks | ingests (failed) | RSS MB: first, last, max |",
            "|---:|---:|---:|---:|---:|---:|---|",
            f"| {outcome['seconds']:g} | {outcome['clients']} | {outcome['lookups']} | {outcome['errors']} "
            f"| {outcome['leaks']} | {outcome['ingests']} ({outcome['failed_ingests']}) "
            f"| {rss[0]}, {rss[-1]}, {max(rss)} |",
        ]
    )


def markdown_table(results: dict[str, Any]) -> str:
    rows = [
        machine_line(results["ran"], "serve.py")
        + f" {results['seconds']:g} s per row; sample knowledge base.",
        "",
        "| path | clients | lookups/s | p50 ms | p95 ms | p99 ms | errors | server RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for path in ("in-process", "JSON API", "MCP"):
        for n, row in results[path].items():
            rss = "" if path == "in-process" else row["server_rss_mb"]
            rows.append(
                f"| {path} | {n} | {row['per_s']} | {row['p50_ms']} | {row['p95_ms']} | {row['p99_ms']} "
                f"| {row['errors']} | {rss} |"
            )
    return "\n".join(rows)


def print_table(results: dict[str, Any]) -> None:
    table = Table("path", "clients", "lookups/s", "p50 ms", "p95 ms", "p99 ms", "errors", "server RSS MB")
    for path in ("in-process", "JSON API", "MCP"):
        for n, row in results[path].items():
            table.add_row(
                path, str(n), *(str(row[k]) for k in ("per_s", "p50_ms", "p95_ms", "p99_ms", "errors")),
                "" if path == "in-process" else str(row["server_rss_mb"]),
            )  # fmt: skip
    Console(width=120).print(table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=list(CLIENTS))
    parser.add_argument("--seconds", type=float, default=SECONDS, help="per row")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/serve.json"))
    parser.add_argument("--doc", type=Path, default=Path("docs/serve.md"))
    parser.add_argument("--from-json", action="store_true", help="rewrite the doc's table from --out")
    parser.add_argument("--soak", type=float, default=None, metavar="SECONDS", help="run the soak instead")
    parser.add_argument("--ingest-every", type=float, default=60.0, metavar="SECONDS")
    args = parser.parse_args()
    if args.soak is not None:
        path = args.out.with_name("serve_soak.json")
        if args.from_json:
            outcome = json.loads(path.read_text(encoding="utf-8"))
        else:
            load = os.getloadavg()[0]
            with tempfile.TemporaryDirectory() as tmp:
                store = Path(tmp) / "store"
                ingest(sample_knowledge_base(), load_config(overrides={"store.path": str(store)}))
                outcome = soak(store, args.soak, args.ingest_every, 16) | {"ran": measured(load)}
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(outcome, indent=2), encoding="utf-8")
        Console().print(outcome)
        if args.from_json or (args.soak >= 600 and args.ingest_every == 60):
            replace_table(args.doc, "serve-soak", soak_table(outcome))
        return 0
    if args.from_json:
        results = json.loads(args.out.read_text(encoding="utf-8"))
    else:
        load = os.getloadavg()[0]
        with tempfile.TemporaryDirectory() as tmp:
            store = Path(tmp) / "store"
            ingest(sample_knowledge_base(), load_config(overrides={"store.path": str(store)}))
            results = run(store, args.clients, args.seconds)
            shutil.rmtree(store, ignore_errors=True)
        results |= {"seconds": args.seconds, "ran": measured(load)}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2), encoding="utf-8")
    results = json.loads(json.dumps(results))  # client counts as the JSON's keys
    print_table(results)
    if args.from_json or (args.clients == list(CLIENTS) and args.seconds == SECONDS):
        replace_table(args.doc, "serve", markdown_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
