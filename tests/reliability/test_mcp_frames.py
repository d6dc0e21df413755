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

from lookup_knowledge.agent.mcp_server import read_frame
from lookup_knowledge.agent.tool_definition import TOOL_NAME

LOOKUP_KNOWLEDGE = Path(sys.executable).with_name("lookup-knowledge")
STARTUP_TIMEOUT_S = 180  # the server imports torch and loads the model on a busy 2-core machine
REPLY_TIMEOUT_S = 120.0  # a hang guard: a dropped frame is never answered; a reply takes milliseconds
DEEP = 100_000


def _call(frame_id: int, query: str) -> str:
    params = {"name": TOOL_NAME, "arguments": {"query": query}}
    return json.dumps({"jsonrpc": "2.0", "id": frame_id, "method": "tools/call", "params": params})


class RawServer:
    """A ``lookup-knowledge mcp`` process spoken to in raw lines; replies collected by id."""

    def __init__(self, store: Path, *extra: str, stderr: Any = subprocess.DEVNULL) -> None:
        command = [str(LOOKUP_KNOWLEDGE), "mcp", "--set", f"store.path={store}", *extra]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
        self._lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode("utf-8") + b"\n")
        self.process.stdin.flush()

    def reply(self, frame_id: int | None, timeout_s: float = REPLY_TIMEOUT_S) -> dict[str, Any]:
        """The reply with ``frame_id``; waiting stops after ``timeout_s`` (a hang guard)."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = json.loads(self._lines.get(timeout=left))
            except queue.Empty:
                break
            if message.get("id") == frame_id and ("result" in message or "error" in message):
                return message
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
