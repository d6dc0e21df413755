"""`ingest --watch`: a watcher process keeps a store in sync with a folder while another process serves it."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from conftest import SMALL_CORPUS, make_config, write_corpus, write_markdown

from lookup_knowledge import KnowledgeTool
from lookup_knowledge.adapters.embedder import SentenceTransformerEmbedder

pytestmark = pytest.mark.slow
CLI = [str(Path(sys.executable).parent / "lookup-knowledge")]
HANG_GUARD_S = 120.0  # waits for an event stop after this long (how soon it comes: benchmarks/watch.py)
NEW_TEXT = "Gift cards are never refundable, said the zebra committee."


def _lines(stream: IO[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
    return lines


def _wait_for(lines: queue.Queue[str], text: str, timeout_s: float = HANG_GUARD_S) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=deadline - time.monotonic())
        except queue.Empty:
            break
        if text in line:
            return line
    raise AssertionError(f"no line with {text!r} within {timeout_s} s")


@pytest.fixture
def watcher(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], queue.Queue[str], Path]]:
    kb = write_corpus(tmp_path / "kb", SMALL_CORPUS)
    command = [*CLI, "ingest", "--watch", str(kb), "--set", f"store.path={tmp_path / 'store'}"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = _lines(process.stdout)  # type: ignore[arg-type]
    try:
        _wait_for(lines, "ingested 3 documents")
        yield process, lines, kb
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _searchable(tool: KnowledgeTool, query: str, doc_id: str, present: bool = True) -> None:
    """Return once ``doc_id`` is (or is no longer) among the lookup's blocks."""
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        docs = {b.doc_id for b in tool.lookup(query).evidence_blocks}
        if (doc_id in docs) is present:
            return
        time.sleep(0.05)
    state = "never became searchable" if present else "was still returned"
    raise AssertionError(f"{doc_id} {state} within {HANG_GUARD_S:g} s (a hang guard)")


def test_an_edit_and_a_deletion_reach_a_serving_process_and_sigterm_stops_cleanly(
    watcher: tuple[subprocess.Popen[str], queue.Queue[str], Path],
    tmp_path: Path,
    embedder: SentenceTransformerEmbedder,
) -> None:
    process, lines, kb = watcher
    tool = KnowledgeTool(make_config(tmp_path / "store"), embedder=embedder)  # serves between ingests
    try:
        assert tool.lookup("kafka consumer lag").found
        write_markdown(kb, "payments/gift-cards.md", {"id": "gift-cards", "title": "Gift cards"}, NEW_TEXT)
        _searchable(tool, "Are gift cards refundable?", "gift-cards")
        (kb / "payments/gift-cards.md").unlink()
        _wait_for(lines, "1 pruned")
        _searchable(tool, "Are gift cards refundable?", "gift-cards", present=False)
    finally:
        tool.close()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    _wait_for(lines, "stopped")
