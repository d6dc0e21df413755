"""One BLAS thread while lookups run, counted across the threads that run them.

numpy's BLAS threads fight the query encoder's on few cores (the next embedding slows down), so a
lookup runs with one. The setting is process-wide: threadpoolctl's own context, entered by two
lookups that overlap on different threads, would let the first to end restore the threads under
the second, and the second restore the first one's limit for good. Here the first holder sets
the limit and the last one restores what it found; a holder inside another costs a counter.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from threadpoolctl import ThreadpoolController

_lock = threading.Lock()
_holders = 0
_limiter: Any = None  # threadpoolctl's limiter of the first holder, which restores


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS limited to one thread inside; the process-wide setting restored when the last
    holder (of any thread) leaves."""
    global _holders, _limiter
    with _lock:
        if _holders == 0:
            _limiter = _controller().limit(limits=1, user_api="blas")
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                _limiter.restore_original_limits()
                _limiter = None


@cache
def _controller() -> ThreadpoolController:
    return ThreadpoolController()
