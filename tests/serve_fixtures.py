"""Helpers for tests that run ``lookup-knowledge serve``'s app under a real uvicorn server on a free
loopback port, in a thread of the test process (``tests/test_serve.py``, ``tests/test_review.py``)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn

READY_WAIT_S = 300  # the warm-up loads the model and calibrates the store on a busy 2-core machine


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextmanager
def live(app: Any) -> Iterator[str]:
    """``app`` served by a real uvicorn server on a free loopback port; its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=60))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(120)
        sock.close()


def wait_ready(base: str) -> None:
    """Wait until the server listens and says it is ready."""
    deadline = time.monotonic() + READY_WAIT_S
    while True:
        with contextlib.suppress(httpx.ConnectError):
            if httpx.get(f"{base}/readyz").status_code == 200:
                return
        assert time.monotonic() < deadline, "the server never became ready"
        time.sleep(0.1)
