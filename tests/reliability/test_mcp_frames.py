"""Every frame written to ``lookup-knowledge mcp`` gets an answer.

The SDK's stdio reader drops a line it cannot parse, so its client waits its full timeout: a
request id without a method, a lone-surrogate escape in the query and 100,000-deep nesting were
all left unanswered. Raw frames go to a real server process here, the replies are read off its
stdout.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from lookup_knowledge.agent.mcp_server import MAX_LOG_CHARS, read_frame
from lookup_knowledge.agent.tool_definition import TOOL_NAME, VERIFY_TOOL_NAME
from lookup_knowledge.agent.verify import MAX_ANSWER_CHARS

LOOKUP_KNOWLEDGE = Path(sys.executable).with_name("lookup-knowledge")
STARTUP_TIMEOUT_S = 180  # the server imports torch and loads the model on a busy 2-core machine
REPLY_TIMEOUT_S = 120.0  # a hang guard: a dropped frame is never answered; a reply takes milliseconds
DEEP = 100_000
HANG_GUARD_S = 120  # a hang guard, not a speed bound: the quadratic scans held the server for hours
MB = 1_000_000


def _call(frame_id: int, query: str) -> str:
    params = {"name": TOOL_NAME, "arguments": {"query": query}}
    return json.dumps({"jsonrpc": "2.0", "id": frame_id, "method": "tools/call", "params": params})


def _verify(frame_id: int, answer: str) -> str:
    params = {"name": VERIFY_TOOL_NAME, "arguments": {"answer": answer}}
    return json.dumps({"jsonrpc": "2.0", "id": frame_id, "method": "tools/call", "params": params})


def hostile_messages() -> list[tuple[str, int, str, int | None]]:
    """(what, frame id, frame, the id its reply carries) for each hostile message the server must
    read in one pass: answers for ``verify_answer`` over and at its limit, frames that are not JSON."""
    at_limit = MAX_ANSWER_CHARS
    return [
        ("verify: one 1 MB word", 10, _verify(10, "x" * MB), 10),
        ("verify: 1 MB of citations", 11, _verify(11, "k1#chunk-1 " * (MB // 11)), 11),
        ("verify: one word at the limit", 12, _verify(12, "x" * at_limit), 12),
        ("verify: citations at the limit", 13, _verify(13, "k1#chunk-1 " * (at_limit // 11)), 13),
        ("frame: 1 MB of escaped quotes", 14, '{"jsonrpc":"2.0","x":"' + '\\"' * (MB // 2), None),
        ("frame: 1 MB of open brackets", 15, '{"jsonrpc":"2.0","x":' + "[" * MB, None),
        (
            "frame: 1 MB of bracket pairs, id last",
            16,
            '{"jsonrpc":"2.0","x":' + "[]," * (MB // 3) + '0,"id":16',
            16,
        ),
    ]


class RawServer:
    """A ``lookup-knowledge mcp`` process spoken to in raw lines; replies collected by id."""

    def __init__(self, store: Path, *extra: str, stderr: Any = subprocess.DEVNULL) -> None:
        command = [str(LOOKUP_KNOWLEDGE), "mcp", "--set", f"store.path={store}", *extra]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
        self._lines: queue.Queue[tuple[float, bytes]] = queue.Queue()
        self._early: list[tuple[float, dict[str, Any]]] = []  # replies read while waiting for another
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put((time.perf_counter(), line))

    def send(self, line: str) -> float:
        """Write ``line``; when it was written (``time.perf_counter``)."""
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode("utf-8") + b"\n")
        self.process.stdin.flush()
        return time.perf_counter()

    def reply(self, frame_id: int | None, timeout_s: float = REPLY_TIMEOUT_S) -> dict[str, Any]:
        """The reply with ``frame_id``; waiting stops after ``timeout_s`` (a hang guard)."""
        return self.reply_at(frame_id, timeout_s)[0]

    def reply_at(self, frame_id: int | None, timeout_s: float) -> tuple[dict[str, Any], float]:
        """The reply with ``frame_id`` and when it arrived; replies to other frames are kept."""
        for i, (arrived, message) in enumerate(self._early):
            if message.get("id") == frame_id:
                del self._early[i]
                return message, arrived
        deadline = time.perf_counter() + timeout_s
        while (left := deadline - time.perf_counter()) > 0:
            try:
                arrived, line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            message = json.loads(line)
            if "result" not in message and "error" not in message:
                continue  # a notification or a request of the server's
            if message.get("id") == frame_id:
                return message, arrived
            self._early.append((arrived, message))
        raise AssertionError(f"no reply to frame {frame_id} within {timeout_s} s: never answered")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.mark.slow
def test_every_frame_is_answered(sample_store: Path) -> None:
    server = RawServer(sample_store)
    try:
        initialize = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw"}}
        server.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize}))
        server.reply(0, STARTUP_TIMEOUT_S)
        server.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))

        server.send('{"jsonrpc": "2.0", "id": 1}')  # an id without a method
        no_method = server.reply(1)
        assert no_method["error"]["code"] == -32600

        server.send(_call(2, "refund \ud800 approval"))  # json.dumps writes it as the escape "\\ud800"
        surrogate = server.reply(2)  # a real lookup call
        result = surrogate["result"]
        assert result["isError"] is True  # a tool error result the agent can read
        assert result["structuredContent"]["evidenceStatus"] == "invalid_input"
        assert result["structuredContent"]["message"] == "Invalid query: the query is not valid UTF-8 text."

        deep = (
            '{"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {"x": ' + "[" * DEEP + "]" * DEEP + "}}"
        )
        server.send(deep)
        nested = server.reply(3)
        assert nested["error"]["code"] == -32700

        server.send("not json at all")  # no id to answer: the reply's id is null
        garbage = server.reply(None)
        assert garbage["error"]["code"] == -32700

        server.send(_call(4, "Who must approve a refund above 500 EUR?"))  # the server serves on
        served = server.reply(4)
        assert served["result"]["structuredContent"]["evidenceStatus"] == "evidence"
    finally:
        server.close()
    assert server.process.returncode == 0


@pytest.mark.slow
def test_a_ping_right_behind_each_hostile_megabyte_is_answered(sample_store: Path) -> None:
    """Each hostile message is read in one pass (a tool call in a worker thread, a frame parsed
    off the event loop), so a ping written right behind it is answered, and the server serves
    a lookup afterwards."""
    server = RawServer(sample_store)
    try:
        initialize = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw"}}
        server.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize}))
        server.reply(0, STARTUP_TIMEOUT_S)
        server.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        delays = {}
        for what, frame_id, frame, reply_id in hostile_messages():
            server.send(frame)
            sent = server.send(json.dumps({"jsonrpc": "2.0", "id": 100 + frame_id, "method": "ping"}))
            pong, arrived = server.reply_at(100 + frame_id, HANG_GUARD_S)
            assert pong["result"] == {}
            delays[what] = arrived - sent
            answer = server.reply(reply_id, HANG_GUARD_S)
            if what.startswith("frame"):
                assert answer["error"]["code"] == -32700
            elif "1 MB" in what:  # over the limit: a tool error the agent reads
                assert answer["result"]["isError"] is True
                [text] = answer["result"]["content"]
                length = len(json.loads(frame)["params"]["arguments"]["answer"])
                assert text["text"].startswith(f"Invalid answer: the answer has {length:,} characters;")
                assert f"verify_answer takes at most {MAX_ANSWER_CHARS:,}" in text["text"]
            else:
                verdict = answer["result"]["structuredContent"]
                assert verdict["verified"] is False
                assert len(verdict["citations"]) == (0 if "word" in what else MAX_ANSWER_CHARS // 11)
        server.send(_call(20, "Who must approve a refund above 500 EUR?"))
        served = server.reply(20, HANG_GUARD_S)
        assert served["result"]["structuredContent"]["evidenceStatus"] == "evidence"
        print("ping delays: " + ", ".join(f"{what} {delay:.2f} s" for what, delay in delays.items()))
    finally:
        server.close()
    assert server.process.returncode == 0


@pytest.mark.slow
def test_an_unknown_huge_tool_name_reaches_the_log_cut(sample_store: Path, tmp_path: Path) -> None:
    """The SDK logs an unknown tool's name in full; the server's log filter cuts each message."""
    with (tmp_path / "stderr.txt").open("w+b") as stderr:
        server = RawServer(sample_store, stderr=stderr)
        try:
            initialize = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw"}}
            server.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize}))
            server.reply(0, STARTUP_TIMEOUT_S)
            server.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            stderr.flush()
            before = stderr.seek(0, 2)
            params = {"name": "x" * 100_000, "arguments": {}}
            server.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}))
            unknown = server.reply(1, HANG_GUARD_S)
            assert unknown["result"]["isError"] is True  # the client is told, in full
            server.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
            server.reply(2, HANG_GUARD_S)
        finally:
            server.close()
        stderr.seek(before)
        logged = stderr.read().decode("utf-8", "replace")
    assert "Tool" in logged and "characters, cut" in logged  # the rejected name, cut
    assert logged.count("x") < 2 * MAX_LOG_CHARS  # was the name twice in full: 200,000
    assert logged.count("\n") < 40  # was 5,403 lines


@pytest.mark.parametrize(
    ("line", "code", "frame_id"),
    [
        ('{"jsonrpc": "2.0", "id": 7}', -32600, 7),
        ('{"jsonrpc": "2.0", "id": "a", "method": 5}', -32600, "a"),
        ("[1, 2]", -32600, None),
        ('{"jsonrpc": "2.0", "id": 8, "params": {"id": 9, "x": ' + "[" * DEEP + "]" * DEEP + "}}", -32700, 8),
        ('{"params": {"id": 9}, "id": true, "x": ' + "{" * 10, -32700, None),
        ("{broken", -32700, None),
    ],
)
def test_a_frame_the_sdk_cannot_read_is_answered_with_its_id(line: str, code: int, frame_id: Any) -> None:
    reply = read_frame(line)
    assert reply is not None and not hasattr(reply, "message")
    assert (reply.error.code, reply.id) == (code, frame_id)


def test_a_lone_surrogate_escape_reaches_the_tool_and_blank_lines_are_skipped() -> None:
    frame = read_frame(_call(5, "a\ud800b"))
    assert frame.message.params["arguments"]["query"] == "a\ud800b"
    assert read_frame("  \n") is None
