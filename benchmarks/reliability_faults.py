"""Time to a clear answer per fault: how long until ``query --json`` prints ``retrieval_failed``
(or the CLI one clear line), and what a hung invocation database costs a call.

    .venv/bin/python benchmarks/reliability_faults.py [--out benchmarks/results/reliability_faults.json]

Each fault is made real: a loopback port nobody listens on, a socket that accepts and never
answers, a missing store, a store held by another process, a corrupt vector file (random
bytes, NaN), a model folder without a model; ``lookup-knowledge mcp`` on a server that is down
is timed per call through the MCP SDK's client. Timed
in-process (``CliRunner``, interpreter start and imports excluded) and, for the server fault,
also as a fresh process (imports included) next to ``lookup-knowledge --help`` on the same
machine, so the share that is process start is visible. The durations the tests no longer assert
are timed here too: a hung invocation database's cost to 8 concurrent callers while its circuit
is open, and to the call after the retry interval; a hung reopening of the search port's store;
a hostile front matter (billion laughs) and a sheet that declares a million rows read whole.

Hostile input (issue 60), measured every run: a real ``lookup-knowledge mcp`` spoken to in raw
frames gets each hostile megabyte (``verify_answer`` answers of one long word and of citations,
over and at the 100,000-character limit; frames that are not JSON: escaped quotes, open
brackets, bracket pairs with the id last) with a ``ping`` written right behind it: the ping's
delay (and a ping on an idle server as the baseline), the message's own reply, and a lookup
after them all; an unknown 100,000-character tool name and the stderr lines it costs; a folder
with a 10 MB frontmatter ``id`` ingested by the CLI under a 3 GB address-space cap (peak RSS,
documents kept); file names and ids with control and bidirectional characters ingested and
looked up (documents kept, control characters left in the results' ids, keys and sources).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import queue
import random
import re
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from typer.testing import CliRunner

from lookup_knowledge import KnowledgeTool, ingest, load_config, sample_knowledge_base
from lookup_knowledge.adapters.corpus import read_corpus
from lookup_knowledge.adapters.documents import DocumentLimits
from lookup_knowledge.adapters.errors import StoreUnavailableError
from lookup_knowledge.adapters.qdrant_client_store import QdrantClientStore
from lookup_knowledge.adapters.qdrant_edge_store import QdrantEdgeStore
from lookup_knowledge.adapters.recorder import (
    CircuitBreaker,
    Invocation,
    InvocationRecorder,
    RecorderUnavailableError,
)
from lookup_knowledge.adapters.search import SearchRequest
from lookup_knowledge.adapters.server_port import ReconnectingSearchPort
from lookup_knowledge.agent.verify import MAX_ANSWER_CHARS
from lookup_knowledge.cli.app import app

CLI = Path(sys.executable).with_name("lookup-knowledge")
MB = 1_000_000
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def hung_server() -> tuple[str, socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    threading.Thread(
        target=lambda: [held.append(server.accept()[0]) for _ in range(1000)], daemon=True
    ).start()
    return f"127.0.0.1:{server.getsockname()[1]}", server


def free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def timed_query(*sets: str) -> tuple[float, int, str]:
    args = ["query", "refund approval", "--json", "--no-record"]
    for setting in sets:
        args += ["--set", setting]
    started = time.perf_counter()
    outcome = CliRunner().invoke(app, args)
    elapsed = time.perf_counter() - started
    status = (
        json.loads(outcome.stdout)["evidenceStatus"] if outcome.stdout.strip() else outcome.stderr.strip()
    )
    return elapsed, outcome.exit_code, status


async def mcp_calls(
    path: Path, url: str, timeout: float, calls: int = 5
) -> tuple[float, list[tuple[float, str]]]:
    """Start ``lookup-knowledge mcp`` on a server store at ``url``; its start-up time (model load
    included), then each call's time and status, one call a second."""
    sets = [f"store.path={path}", "store.backend=qdrant", f"store.url={url}", f"store.timeout_s={timeout}"]
    params = StdioServerParameters(command=str(CLI), args=["mcp", *(a for s in sets for a in ("--set", s))])
    started = time.perf_counter()
    answers = []
    async with Client(params, read_timeout_seconds=300) as client:
        start_s = time.perf_counter() - started
        for _ in range(calls):
            await anyio.sleep(1.0)
            began = time.perf_counter()
            result = await client.call_tool("lookup_knowledge", {"query": "refund approval"})
            answers.append((time.perf_counter() - began, result.structured_content["evidenceStatus"]))
    return start_s, answers


def timed(call: Callable[[], object]) -> float:
    """Seconds ``call`` took, whatever it raised (every fault here ends in an exception)."""
    started = time.perf_counter()
    with contextlib.suppress(Exception):
        call()
    return time.perf_counter() - started


def recorder_rows(hung: str) -> list[dict]:
    """A hung invocation database: 8 threads x 10 calls while the circuit is open, then the one
    call that retries after the interval and the call after it."""
    row = Invocation("s", "lookup_knowledge", "q", "evidence", 0, None, None, 1.0, {})
    url = f"postgresql+psycopg://lk:pw@{hung}/lk"
    recorder = InvocationRecorder(url, connect_timeout_s=1.0, breaker=CircuitBreaker(60.0))
    first = timed(lambda: recorder.record(row))
    waits: list[float] = []
    start = threading.Barrier(8)

    def caller() -> None:
        start.wait()
        waits.extend(timed(lambda: recorder.record(row)) for _ in range(10))

    threads = [threading.Thread(target=caller) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    recorder.close()
    rows = [
        {
            "fault": "recorder hung, 8 threads x 10 calls open",
            "setting": "timeout_s=1, retry_after_s=60",
            "seconds": max(waits),
            "first_call_s": first,
            "later_calls_max_s": max(waits),
            "later_calls_median_s": statistics.median(waits),
            "exit": None,
            "status": "failed fast",
        }
    ]
    recorder = InvocationRecorder(url, connect_timeout_s=1.0, breaker=CircuitBreaker(0.5))
    timed(lambda: recorder.record(row))
    time.sleep(0.6)
    retry, after = timed(lambda: recorder.record(row)), timed(lambda: recorder.record(row))
    recorder.close()
    rows.append(
        {
            "fault": "recorder hung, the call after the interval",
            "setting": "timeout_s=1, retry_after_s=0.5",
            "seconds": retry,
            "next_call_s": after,
            "exit": None,
            "status": "one retry, then open again",
        }
    )
    return rows


class _DownStore:
    """A store whose server went away: every search fails as an unreachable server does."""

    def search(self, request: SearchRequest) -> list:
        raise StoreUnavailableError("Qdrant at http://qdrant:6333 is unavailable: connection refused")

    def close(self) -> None:
        pass


def port_row() -> dict:
    """A reopening that hangs (a server that accepts and never answers): what each lookup waits."""
    answer, opened = threading.Event(), []

    def opener() -> _DownStore:
        if opened:
            answer.wait(60)
        opened.append(1)
        return _DownStore()

    port = ReconnectingSearchPort(opener, retry_after_s=0, wait_s=0.1)  # type: ignore[arg-type]
    port.connect()
    request = SearchRequest("q", [0.0] * 384, 3)
    timed(lambda: port.search(request))  # the open store fails: dropped
    waits = [timed(lambda: port.search(request)) for _ in range(5)]
    answer.set()
    port.close()
    return {
        "fault": "search port, reopening hangs",
        "setting": "wait_s=0.1",
        "seconds": waits[0],
        "later_lookups_max_s": max(waits[1:]),
        "exit": None,
        "status": "last error, at once",
    }


def hostile_file_rows(work: Path) -> list[dict]:
    """Front matter whose aliases expand to 3.4e9 characters; an XLSX declaring A1:XFD1048576."""
    names = "abcdefghi"
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"{cur}: &{cur} [{','.join([f'*{prev}'] * 9)}]" for prev, cur in itertools.pairwise(names)]
    (work / "bomb").mkdir()
    (work / "bomb" / "bomb.md").write_text("---\n" + "\n".join([*lines, "title: *i"]) + "\n---\nbody\n")
    started = time.perf_counter()
    skipped = read_corpus(work / "bomb").skipped
    rows = [
        {
            "fault": "billion laughs in front matter",
            "setting": "",
            "seconds": time.perf_counter() - started,
            "exit": None,
            "status": skipped[0].reason[:60],
        }
    ]
    import openpyxl  # the documents extra

    (work / "sheet").mkdir()
    book = openpyxl.Workbook()
    book.active["A1"], book.active["XFD1048576"] = "first cell", "last cell"
    book.save(work / "sheet" / "inflated.xlsx")
    started = time.perf_counter()
    corpus = read_corpus(work / "sheet", document_limits=DocumentLimits(timeout_s=120))
    rows.append(
        {
            "fault": "sheet declaring 1e6 rows x 16,384 columns",
            "setting": "worker start included",
            "seconds": time.perf_counter() - started,
            "exit": None,
            "status": f"{len(corpus.documents)} converted, {len(corpus.documents[0].body)} chars",
        }
    )
    return rows


class RawServer:
    """``lookup-knowledge mcp`` spoken to in raw lines; each reply kept with when it arrived."""

    def __init__(self, store: Path, stderr: Any) -> None:
        command = [str(CLI), "mcp", "--set", f"store.path={store}"]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
        self.lines: queue.Queue[tuple[float, bytes]] = queue.Queue()
        self.replies: dict[Any, tuple[float, dict]] = {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put((time.perf_counter(), line))

    def send(self, line: str) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode("utf-8") + b"\n")
        self.process.stdin.flush()
        return time.perf_counter()

    def reply(self, frame_id: Any, timeout_s: float = 600) -> tuple[float, dict]:
        """When the reply to ``frame_id`` arrived, and the reply."""
        deadline = time.perf_counter() + timeout_s
        while frame_id not in self.replies:
            arrived, line = self.lines.get(timeout=max(deadline - time.perf_counter(), 0.001))
            message = json.loads(line)
            if "result" in message or "error" in message:
                self.replies.setdefault(message.get("id"), (arrived, message))
        return self.replies.pop(frame_id)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def _tool_call(frame_id: int, name: str, arguments: dict) -> str:
    params = {"name": name, "arguments": arguments}
    return json.dumps({"jsonrpc": "2.0", "id": frame_id, "method": "tools/call", "params": params})


def _reply_summary(message: dict) -> str:
    if "error" in message:
        return f"JSON-RPC error {message['error']['code']}, id {message.get('id')}"
    result = message["result"]
    if result.get("isError"):
        return "tool error: " + result["content"][0]["text"][:60]
    content = result.get("structuredContent") or {}
    if "citations" in content:
        return f"verdict, {len(content['citations']):,} citations"
    return content.get("evidenceStatus", "answered")


def hostile_message_rows(store: Path, work: Path) -> list[dict]:
    """A ping right behind each hostile megabyte, over a real server; then a lookup."""
    limit = MAX_ANSWER_CHARS
    messages = [
        ("verify_answer: one 1 MB word", _tool_call(10, "verify_answer", {"answer": "x" * MB}), 10),
        ("verify_answer: 1 MB of citations",
         _tool_call(11, "verify_answer", {"answer": "k1#chunk-1 " * (MB // 11)}), 11),
        (f"verify_answer: one word of {limit:,}",
         _tool_call(12, "verify_answer", {"answer": "x" * limit}), 12),
        (f"verify_answer: {limit:,} of citations",
         _tool_call(13, "verify_answer", {"answer": "k1#chunk-1 " * (limit // 11)}), 13),
        ("frame: 1 MB of escaped quotes", '{"jsonrpc":"2.0","x":"' + '\\"' * (MB // 2), None),
        ("frame: 1 MB of open brackets", '{"jsonrpc":"2.0","x":' + "[" * MB, None),
        ("frame: 1 MB of bracket pairs, id last",
         '{"jsonrpc":"2.0","x":' + "[]," * (MB // 3) + '0,"id":16', 16),
    ]  # fmt: skip
    rows = []
    with (work / "mcp-stderr.txt").open("w+b") as stderr:
        server = RawServer(store, stderr)
        initialize = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench"}}
        server.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize}))
        server.reply(0)
        server.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        sent = server.send(json.dumps({"jsonrpc": "2.0", "id": 99, "method": "ping"}))
        rows.append({"fault": "mcp: ping on an idle server", "setting": "baseline",
                     "seconds": server.reply(99)[0] - sent, "exit": None, "status": "answered"})  # fmt: skip
        for number, (what, frame, reply_id) in enumerate(messages):
            started = server.send(frame)
            sent = server.send(json.dumps({"jsonrpc": "2.0", "id": 100 + number, "method": "ping"}))
            pong_at, _ = server.reply(100 + number)
            replied_at, message = server.reply(reply_id)
            rows.append({"fault": f"mcp: ping behind {what}", "setting": f"{len(frame):,} B frame",
                         "seconds": pong_at - sent, "exit": None, "status": _reply_summary(message),
                         "message_reply_s": replied_at - started})  # fmt: skip
        stderr.flush()
        before = stderr.seek(0, 2)
        started = server.send(_tool_call(30, "x" * 100_000, {}))
        replied_at, message = server.reply(30)
        sent = server.send(json.dumps({"jsonrpc": "2.0", "id": 31, "method": "ping"}))
        server.reply(31)
        stderr.flush()
        stderr.seek(before)
        logged = stderr.read()
        lines = logged.count(b"\n")
        rows.append({"fault": "mcp: unknown 100,000-character tool name", "setting": "log cut at 500",
                     "seconds": replied_at - started, "exit": None,
                     "status": f"{_reply_summary(message)}; {lines} stderr lines, "
                               f"{len(logged):,} bytes"})  # fmt: skip
        started = server.send(
            _tool_call(40, "lookup_knowledge", {"query": "Who must approve a refund above 500 EUR?"})
        )
        replied_at, message = server.reply(40)
        rows.append({"fault": "mcp: a lookup after them all", "setting": "", "seconds": replied_at - started,
                     "exit": None, "status": _reply_summary(message)})  # fmt: skip
        server.close()
    return rows


CAPPED_INGEST = """
import resource, subprocess, sys
resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(done.stdout + done.stderr)
"""


def huge_id_row(work: Path) -> dict:
    """A 10 MB frontmatter id beside an ordinary page, ingested by the CLI under a 3 GB cap."""
    kb = work / "huge-id"
    kb.mkdir()
    (kb / "huge.md").write_text(
        "---\nid: " + "x" * 10_000_000 + "\n---\n# Huge\nRefunds.\n", encoding="utf-8"
    )
    (kb / "fine.md").write_text("# Fine\nRefunds need approval.\n", encoding="utf-8")
    command = [str(CLI), "ingest", str(kb), "--set", f"store.path={work / 'huge-id-store'}",
               "--set", "ingest.max_file_bytes=50000000"]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CAPPED_INGEST, *command], capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    head, _, output = done.stdout.partition("\n")
    code, peak_kb = (int(part) for part in head.split())
    skipped = next((line.strip() for line in output.splitlines() if line.strip().startswith("skipped")), "")
    kept = re.search(r"documents\s*│\s*(\d+)", output)
    return {"fault": "10 MB frontmatter id (ingest, 3 GB cap)", "setting": "max_file_bytes=50 MB",
            "seconds": elapsed, "exit": code, "peak_rss_mb": peak_kb / 1024,
            "status": f"{kept.group(1) if kept else '?'} of 1 other document kept; {skipped}"}  # fmt: skip


def control_name_row(work: Path) -> dict:
    """File names and ids with control and bidi characters: ingested, looked up, escaped."""
    kb = work / "names"
    kb.mkdir()
    (kb / "\x1b[31mred.md").write_text(
        "# Red\nRefunds above 500 EUR need a finance lead.\n", encoding="utf-8"
    )
    (kb / "invoice\u202egpj.md").write_text("# Invoice\nInvoices go out monthly.\n", encoding="utf-8")
    (kb / "nul.md").write_text('---\nid: "a\\x00b\\u202ec"\n---\n# Null\nThe billing cycle ends monthly.\n',
                               encoding="utf-8")  # fmt: skip
    config = load_config(overrides={"store.path": str(work / "names-store")})
    started = time.perf_counter()
    report = ingest(kb, config)
    found, raw = set(), 0
    with KnowledgeTool(config) as tool:
        for query in ("refunds above 500 EUR finance lead", "invoices monthly", "billing cycle monthly"):
            for block in tool.lookup(query).evidence_blocks:
                found.add(block.doc_id)
                fields = (block.doc_id, block.evidence_key, block.source or "", block.source_path or "")
                raw += sum(len(CONTROLS.findall(text)) for text in fields)
    return {"fault": "control/bidi characters in 3 file names and ids", "setting": "",
            "seconds": time.perf_counter() - started, "exit": None,
            "status": f"{report.documents} of 3 ingested, {len(found)} found, {raw} control characters in "
                      f"results; skipped {len(report.skipped)}"}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/reliability_faults.json"))
    out = parser.parse_args().out
    rows: list[dict] = []
    work = Path(tempfile.mkdtemp(prefix="lk-faults-"))
    store = work / "store"
    ingest(sample_knowledge_base(), load_config(overrides={"store.path": str(store)}))

    hung, server = hung_server()
    for name, url, timeout in [
        ("qdrant server refuses", f"http://{free_port()}", 5.0),
        ("qdrant server hung", f"http://{hung}", 1.0),
        ("qdrant server hung", f"http://{hung}", 5.0),
    ]:
        elapsed, code, status = timed_query(
            f"store.path={work / 'q'}",
            "store.backend=qdrant",
            f"store.url={url}",
            f"store.timeout_s={timeout}",
        )
        rows.append(
            {
                "fault": name,
                "setting": f"timeout_s={timeout:g}",
                "seconds": elapsed,
                "exit": code,
                "status": status,
            }
        )

    elapsed, code, status = timed_query(f"store.path={work / 'missing'}")
    rows.append({"fault": "store missing", "setting": "", "seconds": elapsed, "exit": code, "status": status})

    target = str(store / "knowledge")
    hold = f"from {QdrantEdgeStore.__module__} import QdrantEdgeStore as S; s = S({target!r}); "
    holder = subprocess.Popen([sys.executable, "-c", hold + "print('held', flush=True); input()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    elapsed, code, status = timed_query(f"store.path={store}", "store.lock_wait_s=2")
    holder.communicate("\n")
    rows.append({"fault": "store held, never handed over", "setting": "lock_wait_s=2", "seconds": elapsed,
                 "exit": code, "status": status})  # fmt: skip

    corrupt = work / "corrupt"
    subprocess.run(["cp", "-r", str(store), str(corrupt)], check=True)
    [vectors] = (corrupt / "knowledge").rglob("vector_storage-dense/vectors/chunk_0.mmap")
    with vectors.open("r+b") as handle:
        handle.write(random.Random(1).randbytes(200 * 384 * 4))
    elapsed, code, status = timed_query(f"store.path={corrupt}")
    rows.append({"fault": "random bytes in the vector file", "setting": "", "seconds": elapsed, "exit": code,
                 "status": status})  # fmt: skip

    poisoned = work / "nan"
    subprocess.run(["cp", "-r", str(store), str(poisoned)], check=True)
    [vectors] = (poisoned / "knowledge").rglob("vector_storage-dense/vectors/chunk_0.mmap")
    with vectors.open("r+b") as handle:  # every stored vector
        handle.write(struct.pack("<f", math.nan) * (vectors.stat().st_size // 4))
    elapsed, code, status = timed_query(f"store.path={poisoned}")
    rows.append({"fault": "NaN in the vector file", "setting": "", "seconds": elapsed, "exit": code,
                 "status": status})  # fmt: skip

    no_model = work / "empty-model"
    no_model.mkdir()
    elapsed, code, status = timed_query(f"store.path={store}", f"embedder.model={no_model}")
    rows.append({"fault": "model folder without a model (query)", "setting": "", "seconds": elapsed,
                 "exit": code, "status": status})  # fmt: skip
    started = time.perf_counter()
    outcome = CliRunner().invoke(
        app, ["ingest", str(sample_knowledge_base()), "--set", f"store.path={work / 'm'}",
              "--set", f"embedder.model={no_model}"],
    )  # fmt: skip
    rows.append({"fault": "model folder without a model (ingest)", "setting": "",
                 "seconds": time.perf_counter() - started, "exit": outcome.exit_code,
                 "status": outcome.stderr.strip()[:100]})  # fmt: skip

    for name, url in [("refuses", f"http://{free_port()}"), ("hung", f"http://{hung}")]:
        start_s, calls = anyio.run(mcp_calls, work / "q", url, 1.0)
        rows.append({"fault": f"mcp, qdrant server {name}", "setting": "timeout_s=1",
                     "seconds": max(s for s, _ in calls), "exit": None,
                     "status": ", ".join(sorted({status for _, status in calls})),
                     "server_start_s": start_s, "call_seconds": [s for s, _ in calls]})  # fmt: skip

    started = time.perf_counter()
    sets = [
        "store.backend=qdrant",
        f"store.url=http://{hung}",
        "store.timeout_s=1",
        f"store.path={work / 'q'}",
    ]
    command = [str(CLI), "query", "refund", "--json", "--no-record", *(a for s in sets for a in ("--set", s))]
    fresh = subprocess.run(command, capture_output=True, text=True)
    process_s = time.perf_counter() - started
    started = time.perf_counter()
    subprocess.run([str(CLI), "--help"], capture_output=True, check=True)
    help_s = time.perf_counter() - started
    rows.append({"fault": "qdrant server hung (fresh process)", "setting": "timeout_s=1",
                 "seconds": process_s, "exit": fresh.returncode,
                 "status": json.loads(fresh.stdout)["evidenceStatus"],
                 "process_start_s": help_s})  # fmt: skip

    recorder = InvocationRecorder(
        f"postgresql+psycopg://lk:pw@{hung}/lk", connect_timeout_s=2.0, breaker=CircuitBreaker(30.0)
    )
    row = Invocation("s", "lookup_knowledge", "q", "evidence", 0, None, None, 1.0, {})
    costs = []
    for _ in range(20):
        started = time.perf_counter()
        with contextlib.suppress(RecorderUnavailableError):  # every call fails: that is what is timed
            recorder.record(row)
        costs.append(time.perf_counter() - started)
    rows.append({"fault": "recorder database hung, 20 calls", "setting": "timeout_s=2, retry_after_s=30",
                 "seconds": sum(costs), "first_call_s": costs[0], "later_calls_max_s": max(costs[1:]),
                 "exit": None, "status": "row not written, call answered"})  # fmt: skip
    rows += recorder_rows(hung)
    rows.append(port_row())
    started = time.perf_counter()
    with contextlib.suppress(StoreUnavailableError):
        QdrantClientStore("knowledge", 384, url=f"http://{hung}", timeout_s=1.0)
    rows.append(
        {
            "fault": "qdrant adapter opened on a hung server",
            "setting": "timeout_s=1",
            "seconds": time.perf_counter() - started,
            "exit": None,
            "status": "StoreUnavailableError",
        }
    )
    rows += hostile_file_rows(work)
    server.close()

    rows += hostile_message_rows(store, work)
    rows.append(huge_id_row(work))
    rows.append(control_name_row(work))

    print(f"{'fault':58} {'setting':24} {'seconds':>8} {'exit':>5}  status")
    for r in rows:
        extra = f" (peak RSS {r['peak_rss_mb']:.0f} MB)" if "peak_rss_mb" in r else ""
        extra += f" (its reply {r['message_reply_s']:.2f} s)" if "message_reply_s" in r else ""
        print(f"{r['fault']:58} {r['setting']:24} {r['seconds']:8.2f} {r['exit']!s:>5}  {r['status']}{extra}")
    print(f"(a fresh process spends {help_s:.1f} s on `lookup-knowledge --help` alone on this machine)")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
