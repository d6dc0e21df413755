"""Back-pressure: a bounded number of calls in flight (:class:`Admission`), each with a deadline,
and request bodies read whole, within a size and a time limit, before any handler runs
(:class:`BodyLimits`): a slow or huge upload holds no worker thread and reaches no handler."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_T = TypeVar("_T")


class Busy(Exception):
    """Every slot is taken: the call was refused at once (429)."""


class TimedOut(Exception):
    """The call did not finish within its deadline (503); it finishes in the background, its slot
    held until then."""


class Admission:
    """At most ``max_in_flight`` calls run at once, each on a worker thread; one more is refused
    (:class:`Busy`) instead of queued, and one that runs past ``timeout_s`` is answered
    (:class:`TimedOut`) while its thread finishes (the engine cannot be interrupted mid-search):
    its slot is freed only then, so the bound holds for threads, not only for requests."""

    def __init__(
        self, max_in_flight: int, timeout_s: float, on_change: Callable[[int], None] = lambda _: None
    ):
        self.max_in_flight, self.timeout_s = max_in_flight, timeout_s
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._threads = anyio.CapacityLimiter(max_in_flight)  # a slot always finds a thread
        self._count = 0
        self._lock = threading.Lock()
        self._on_change = on_change

    @property
    def in_flight(self) -> int:
        return self._count

    def _moved(self, by: int) -> None:
        with self._lock:
            self._count += by
            count = self._count
        self._on_change(count)

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` on a worker thread, within the bound and the deadline."""
        if not self._slots.acquire(blocking=False):
            raise Busy
        self._moved(+1)
        start = threading.Lock()  # taken by whichever comes first: the thread, or a caller giving up

        def work() -> _T:
            if not start.acquire(blocking=False):
                raise TimedOut  # given up before it began (its slot is already free)
            try:
                return fn(*args)
            finally:
                self._slots.release()
                self._moved(-1)

        try:
            with anyio.fail_after(self.timeout_s):
                return await anyio.to_thread.run_sync(work, abandon_on_cancel=True, limiter=self._threads)
        except TimeoutError:
            raise TimedOut from None
        finally:
            if start.acquire(blocking=False):  # the thread never began: free its slot here
                self._slots.release()
                self._moved(-1)

    async def drained(self, wait_s: float) -> bool:
        """Wait up to ``wait_s`` until no call is in flight (shutdown); whether none is."""
        with anyio.move_on_after(wait_s):
            while self._count:
                await anyio.sleep(0.05)
        return self._count == 0


class BodyLimits:
    """ASGI middleware: an HTTP request's body read whole before the app sees it, at most
    ``max_bytes`` (else 413) within ``timeout_s`` (else 408), then handed on; answers in the JSON
    error shape of the API."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.max_bytes:
            await _too_large(send, self.max_bytes)
            return
        chunks: list[bytes] = []
        size = 0
        with anyio.move_on_after(self.timeout_s) as deadline:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                size += len(message.get("body", b""))
                if size > self.max_bytes:
                    await _too_large(send, self.max_bytes)
                    return
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    break
        if deadline.cancelled_caught:
            await json_error(
                send, 408, "body_timeout", f"the request body did not arrive within {self.timeout_s:g} s"
            )
            return
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _too_large(send: Send, limit: int) -> None:
    await json_error(
        send, 413, "too_large", f"the request body exceeds {limit:,} bytes (serve.max_body_bytes)"
    )


async def json_error(
    send: Send, status: int, error: str, description: str, headers: dict[str, str] | None = None
) -> None:
    """Send the API's JSON error (``{"error", "error_description"}``, the shape of the MCP SDK's
    401) from ASGI middleware."""
    body = json.dumps({"error": error, "error_description": description}, separators=(",", ":")).encode()
    fields = {"content-type": "application/json", "content-length": str(len(body)), **(headers or {})}
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(k.encode(), v.encode()) for k, v in fields.items()],
        }
    )
    await send({"type": "http.response.body", "body": body})
