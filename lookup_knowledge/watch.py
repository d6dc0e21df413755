"""Watch mode: keep a store in sync with a folder, one whole ingest per debounced batch of changes.

Each batch runs :func:`~lookup_knowledge.ingestion.ingest` with ``prune`` (deleted files leave the
store), opening the store only for that run, so a serving ``lookup-knowledge mcp`` hands it over
and reads the new version at its next lookup (``adapters/shared_store.py``). A stop request
(Ctrl-C, SIGTERM) ends the watch after the ingest in progress, so no document is half written.

>>> stop = threading.Event()  # doctest: +SKIP
>>> watch_ingest("knowledge/", load_config(), stop, on_report=print)  # doctest: +SKIP
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from lookup_knowledge.config import Config
from lookup_knowledge.ingestion import IngestReport, ingest
from lookup_knowledge.stores import build_embedder

DEBOUNCE_MS = 150  # changes within this quiet gap are one batch (an editor's save is several events)
STEP_MS = 25  # how often the watcher checks for changes and the stop request


def watch_ingest(
    source: str | Path,
    config: Config,
    stop: threading.Event,
    on_report: Callable[[IngestReport], None],
    *,
    on_error: Callable[[Exception], None] | None = None,
) -> int:
    """Ingest ``source``, then again after each batch of changes under it, until ``stop`` is set;
    the number of ingests run. ``on_error`` gets a failed batch's error (the watch goes on);
    without it the error is raised."""
    from watchfiles import watch

    embedder = build_embedder(config)  # loaded once, not per batch
    runs = 0
    for _ in _batches(watch, Path(source), stop):
        try:
            on_report(ingest(source, config, prune=True, embedder=embedder))
        except Exception as exc:  # a file mid-save, a store held too long: the next batch retries
            if on_error is None:
                raise
            on_error(exc)
        runs += 1
    return runs


def _batches(watch: Callable[..., Iterator[object]], source: Path, stop: threading.Event) -> Iterator[None]:
    """One item now (the initial sync), then one per debounced batch of changes, until ``stop``."""
    yield
    changes = watch(source, debounce=DEBOUNCE_MS, step=STEP_MS, stop_event=stop, raise_interrupt=False)
    for _ in changes:
        if stop.is_set():
            return
        yield


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[threading.Event]:
    """Set ``stop`` on SIGINT or SIGTERM instead of interrupting (the previous handlers come back)."""

    def request_stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
