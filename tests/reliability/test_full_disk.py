"""A full disk gives a clear error, never a crash: ingest and query on a small filesystem.

The engine writes its preallocated files through memory maps, so on a full disk it died by
SIGBUS (exit -7) in ingest and in query. Here a 400 MiB tmpfs holds a store; a filler file leaves
20 MiB free; ingest then fails with one line (its documents untouched) and query answers
``retrieval_failed``; with the filler removed the same ingest completes. The CLI runs in
subprocesses, so a regression shows as a signal exit instead of killing the test run. Needs
root (``mount``); skipped otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import SMALL_CORPUS, make_config, without_progress, write_corpus, write_markdown

from lookup_knowledge.ingestion import ingest

pytestmark = pytest.mark.slow

LOOKUP_KNOWLEDGE = Path(sys.executable).with_name("lookup-knowledge")
LEFT_FREE_MIB = 20
CHANGED = "Customers may request a refund within 60 days when the parcel was lost."


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 400 MiB tmpfs mounted for this test."""
    mount = tmp_path / f"disk-{uuid.uuid4().hex[:8]}"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("creating a small filesystem needs root (mount -t tmpfs)")
    command = ["mount", "-t", "tmpfs", "-o", "size=400m", "tmpfs", str(mount)]
    done = subprocess.run(command, capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave_mib: int) -> Path:
    status = os.statvfs(disk)
    filler = disk / "filler"
    with filler.open("wb") as handle:
        block = b"\0" * (1 << 20)
        for _ in range(status.f_bavail * status.f_frsize // (1 << 20) - leave_mib):
            handle.write(block)
    return filler


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LOOKUP_KNOWLEDGE), *args], capture_output=True, text=True, timeout=300)


def test_ingest_and_query_on_a_full_disk_fail_cleanly(small_disk: Path, tmp_path: Path, embedder) -> None:
    kb = write_corpus(tmp_path / "kb", SMALL_CORPUS)
    config = make_config(small_disk / "store")
    ingest(kb, config, embedder=embedder)
    store = f"store.path={config.store.path}"
    write_markdown(
        kb, "payments/refunds.md", SMALL_CORPUS["payments/refunds.md"][0], f"# Refund Policy\n\n{CHANGED}\n"
    )
    filler = fill(small_disk, LEFT_FREE_MIB)

    ingested = cli("ingest", str(kb), "--set", store)
    assert ingested.returncode in (1, 2), (ingested.returncode, ingested.stderr)  # not -7 (SIGBUS)
    assert "not enough free disk space" in ingested.stderr and "Traceback" not in ingested.stderr
    assert without_progress(ingested.stderr).strip().count("\n") == 0  # one line

    queried = cli("query", "refund within how many days", "--json", "--no-record", "--set", store)
    assert queried.returncode == 1, (queried.returncode, queried.stderr)
    result = json.loads(queried.stdout)
    assert result["evidenceStatus"] == "retrieval_failed"
    assert "not enough free disk space" in " ".join(result["message"].split())

    filler.unlink()  # free the space: the same ingest completes, the store serves the new text
    ingested = cli("ingest", str(kb), "--set", store)
    assert ingested.returncode == 0, ingested.stderr
    assert "0 / 1 / 2" in " ".join(ingested.stdout.split())  # the failed run wrote nothing
    queried = cli("query", "refund within how many days", "--json", "--no-record", "--set", store)
    assert queried.returncode == 0 and CHANGED in queried.stdout
