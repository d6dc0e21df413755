"""One embedded store shared by processes: the holder hands it over when another process asks.

Qdrant Edge lets one process hold a shard. A process that finds it held writes a *handover
request* (``<collection>.handover``: its pid and command) and retries opening until
``store.lock_wait_s`` passes (the lock error then names the holder). A process serving lookups
through :class:`SharedSearchPort` sees the request (a watcher thread looks every 0.1 s), closes
the shard once its searches in flight finish, lets the requester open it first (it waits while
the request stands), and reopens it at its next lookup, waiting the same bounded time while the
other process holds it. Which process may open the shard is decided by the store's lock file
(``QdrantEdgeStore``), never by the engine's own open, which damages a shard held elsewhere.
So ``lookup-knowledge ingest`` works while ``lookup-knowledge mcp`` serves the same store, and
the server's next lookup reads what was ingested.

>>> port = SharedSearchPort(lambda: open_store(config, create=False), store_dir, wait_s=10)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import StoreLockedError
from .search import AccessFilter, Candidates, KnowledgeSearchPort, KnowledgeStore, SearchRequest
from .text import escape_surrogates

POLL_S = 0.1  # how often a waiting opener retries and the holder looks for a handover request


def _alive(note: str) -> bool:
    """Whether the process a note names still runs (a dead requester's note is stale)."""
    try:
        pid = int(note.split(" ", 1)[0])
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # another user's process
        return True
    return pid != os.getpid()


def open_shared(opener: Callable[[], KnowledgeStore], path: Path, wait_s: float) -> KnowledgeStore:
    """Open the store at ``path``; while another process holds it, ask it to hand the store over
    and retry for up to ``wait_s`` seconds (held in this process: no wait). The lock error then
    names the holder."""
    request = handover_request(path)
    deadline = time.monotonic() + wait_s
    asked = False
    try:
        while True:
            try:
                store = opener()
            except StoreLockedError as exc:
                if _read(holder_note(path)).split(" ", 1)[0] == str(os.getpid()):
                    raise  # held in this process: no one to ask
                if time.monotonic() >= deadline:
                    raise StoreLockedError(f"{exc} (waited {wait_s:g} s, store.lock_wait_s)") from None
                if not asked:
                    write_private(request, process_note())
                    asked = True
                time.sleep(POLL_S)
                continue
            return store
    finally:
        if asked:
            with contextlib.suppress(FileNotFoundError):
                request.unlink()


def holder_note(path: Path) -> Path:
    """The file in which the process holding the store at ``path`` names itself."""
    return path.with_name(path.name + ".holder")


def process_note() -> str:
    """This process as a note for lock files: its pid and program name (``lookup-knowledge mcp``:
    the command's name, never its arguments, which may hold secrets), always encodable."""
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    command = ""
    if program.startswith("lookup-knowledge") and len(sys.argv) > 1 and _COMMAND.fullmatch(sys.argv[1]):
        command = sys.argv[1]  # our own CLI's first argument, when a plain word, is its command
    return escape_surrogates(f"{os.getpid()} {program} {command}".strip())[:120]


_COMMAND = re.compile(r"[a-z][a-z-]{0,30}")  # a subcommand's name (``mcp``, ``ingest``), not a value


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (mode 0600), whatever it holds
    (lone surrogates from undecodable argv bytes are escaped)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as file:
        os.fchmod(fd, 0o600)  # a file left by an older release keeps its mode otherwise
        file.write(text)


def handover_request(path: Path) -> Path:
    """The file by which a process asks the holder of the store at ``path`` to hand it over."""
    return path.with_name(path.name + ".handover")


def _read(file: Path) -> str:
    try:
        return file.read_text(encoding="utf-8").strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return ""


class SharedSearchPort(KnowledgeSearchPort):
    """The search port of a serving process, handing its store over when another process asks.

    Searches run concurrently; a handover waits for those in flight, closes the store and calls
    ``on_reopen`` after the next open (so the caller can reload what else was ingested, such as
    the L0 index). Costs a lookup nothing while no one asks: the watcher is a separate thread.
    """

    def __init__(
        self,
        opener: Callable[[], KnowledgeStore],
        path: Path,
        wait_s: float,
        on_reopen: Callable[[], None] | None = None,
    ) -> None:
        self._opener, self._path, self._wait_s = opener, path, wait_s
        self._on_reopen = on_reopen
        self._request = handover_request(path)
        self._state = threading.Condition()
        self._in_flight = 0
        self._handing_over = False
        self._closed = False
        self.handovers = 0  # how often the store was handed over (diagnostics)
        self._store: KnowledgeStore | None = open_shared(opener, path, wait_s)
        self._watcher = threading.Thread(target=self._watch, name="store-handover", daemon=True)
        self._watcher.start()

    def search(self, request: SearchRequest) -> Candidates:
        store = self._acquire()
        try:
            return store.search(request)
        finally:
            self._release()

    def search_batch(self, requests: Sequence[SearchRequest]) -> list[Candidates]:
        store = self._acquire()
        try:
            return store.search_batch(requests)
        finally:
            self._release()

    def term_idf(self, token_ids: Sequence[int], access: AccessFilter | None = None) -> dict[int, float]:
        store = self._acquire()
        try:
            return store.term_idf(token_ids, access)
        finally:
            self._release()

    def unheld_term_idf(self) -> float | None:
        store = self._acquire()
        try:
            return store.unheld_term_idf()
        finally:
            self._release()

    def sample_chunks(self, n: int, access: AccessFilter | None = None) -> list[tuple[str, str]]:
        store = self._acquire()
        try:
            return store.sample_chunks(n, access)
        finally:
            self._release()

    def _acquire(self) -> KnowledgeStore:
        with self._state:
            self._state.wait_for(lambda: not self._handing_over)
            reopened = False
            if self._store is None:
                self._yield_to_requester()
                self._store = open_shared(self._opener, self._path, self._wait_s)
                reopened = True
            self._in_flight += 1
            store = self._store
        if reopened and self._on_reopen is not None:
            self._on_reopen()
        return store

    def _yield_to_requester(self) -> None:
        """Let the process that asked for the store open it first: while its request stands (it
        is removed once that process has the store), wait, at most ``wait_s``. Without this a
        server called back to back reopens at once and the requester, retrying every
        :data:`POLL_S`, can lose every race until its wait runs out."""
        deadline = time.monotonic() + self._wait_s
        while _alive(_read(self._request)) and time.monotonic() < deadline:
            time.sleep(POLL_S / 10)

    def _release(self) -> None:
        with self._state:
            self._in_flight -= 1
            self._state.notify_all()

    def _watch(self) -> None:
        while not self._closed:
            time.sleep(POLL_S)
            if self._store is not None and _alive(_read(self._request)):
                self._hand_over()

    def _hand_over(self) -> None:
        with self._state:
            self._handing_over = True  # new searches wait: a busy server still hands over
            self._state.wait_for(lambda: self._in_flight == 0)
            if self._store is not None:
                self._store.close()
                self._store = None
                self.handovers += 1
            self._handing_over = False
            self._state.notify_all()

    def close(self) -> None:
        """Stop watching and close the store."""
        self._closed = True
        self._hand_over()
