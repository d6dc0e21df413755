"""Ingest killed with SIGKILL at random points, then rerun: the store equals a clean ingest.

A child process ingests an update of a small knowledge base (changed, grown, shrunk and new
documents) in small write groups, saying on stdout when each write returns; it is killed at a
random moment: after a random number of writes plus a random fraction of a write's time (so
in the embedding, the upsert or the delete of the next group), again and again on the same
store. After every kill each document must still hold one complete version
(its old or its new one); after a final rerun the store must equal a clean ingest of the same
corpus chunk for chunk: the same points, payloads and vectors, and the same L0 index.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import qdrant_edge as qe
from conftest import make_config, write_markdown
from hashing_embedder import HashingEmbedder

from lookup_knowledge.adapters.l0_index import L0Index
from lookup_knowledge.config import Config
from lookup_knowledge.ingestion import ingest
from lookup_knowledge.stores import l0_index_path, open_store

KILLS = 5
DOCUMENTS = 60
CHANGED = DOCUMENTS // 3 + DOCUMENTS // 10  # documents version 2 changes or adds
TESTS = Path(__file__).resolve().parents[1]
WRITE_GROUP = 8  # chunks per write in the child: many writes, so kills land between and inside them

CHILD = """
import importlib, json, sys
from lookup_knowledge.adapters.qdrant_edge_store import QdrantEdgeStore
from lookup_knowledge.config import load_config
from hashing_embedder import HashingEmbedder
settings = json.loads(sys.argv[1])
importlib.import_module("lookup_knowledge.ingestion").EMBED_GROUP = settings["group"]
write_documents = QdrantEdgeStore.write_documents
def reported(store, chunks):
    write_documents(store, chunks)
    print("wrote", flush=True)
QdrantEdgeStore.write_documents = reported
config = load_config(overrides=settings["overrides"])
embedder = HashingEmbedder()
print("ready", flush=True)
from lookup_knowledge import ingest
ingest(settings["source"], config, embedder=embedder)
print("done", flush=True)
"""


def write_version(kb: Path, version: int) -> None:
    """Version 1, or version 2: a third of the documents changed (some longer, some shorter),
    a tenth new, the rest unchanged."""
    for n in range(DOCUMENTS + (DOCUMENTS // 10 if version == 2 else 0)):
        rng = random.Random(n)
        sections = 1 + rng.randrange(5)
        changed = version == 2 and n % 3 == 0
        if changed:
            sections = max(1, sections + rng.choice([-2, -1, 1, 2]))
        words = [
            f"v{version if changed else 1} doc{n} section{i} " + "lorem ipsum " * 12 for i in range(sections)
        ]
        body = "\n\n".join(f"## Part {i}\n{text}" for i, text in enumerate(words))
        write_markdown(kb, f"d{n:03d}.md", {"id": f"doc-{n}", "domain": f"area{n % 4}"}, body)


def snapshot(config: Config) -> dict[str, Any]:
    """Every point of the store (id -> payload, dense vector and rounded BM25 vector) and the L0
    index's documents."""
    shard = qe.EdgeShard.load(str(config.store.path / config.store.collection))
    points: dict[str, Any] = {}
    offset = None
    try:
        while True:
            request = qe.ScrollRequest(offset=offset, limit=1024, with_payload=True, with_vector=True)
            records, offset = shard.scroll(request)
            for record in records:
                dense, sparse = record.vector["dense"], record.vector["bm25"]
                bm25 = dict(zip(sparse.indices, [round(x, 4) for x in sparse.values], strict=True))
                points[str(record.id)] = (record.payload, np.asarray(dense), bm25)
            if offset is None:
                break
    finally:
        shard.close()
    return {"points": points, "l0": sorted(L0Index.load(l0_index_path(config)).documents)}


def timeless(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload without the times: when a version was written (``ingested_at``) and the file's
    modification time (version 2 rewrites unchanged files too) differ between two ingests; what
    was written, and the file's version and size, must not."""
    stamp = {k: v for k, v in (payload.get("source_file") or {}).items() if k != "mtime_ns"}
    return {k: v for k, v in payload.items() if k != "ingested_at"} | {"source_file": stamp}


def whole_versions(config: Config, dimension: int) -> tuple[int, int]:
    """(documents holding one complete version, documents whose new version is partial or beside
    the old); fails when a document has no complete version at all."""
    store = open_store(config, dimension, create=False)
    try:
        documents = store.documents()
    finally:
        store.close()
    broken = [doc_id for doc_id, doc in documents.items() if True not in doc.versions.values()]
    assert broken == [], f"documents without a complete version after a kill: {broken}"
    mixed = sum(len(doc.versions) > 1 for doc in documents.values())
    return len(documents) - mixed, mixed


def run_child(settings: dict[str, Any], kill_at: tuple[int, float]) -> bool:
    """Run the child ingest and SIGKILL it ``kill_at[1]`` seconds after its ``kill_at[0]``-th
    write returned. True when it was killed before it finished."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps(settings)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(TESTS)},
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    writes, seconds = kill_at
    for _ in range(writes):
        if child.stdout.readline().strip() != "wrote":
            break  # finished before that many writes
    time.sleep(seconds)
    alive = child.poll() is None
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    return alive and child.returncode == -signal.SIGKILL


@pytest.mark.slow  # many child processes
def test_killed_ingest_then_rerun_equals_a_clean_ingest(tmp_path: Path) -> None:
    embedder = HashingEmbedder()  # the store's atomicity is tested, not the model
    kb = tmp_path / "kb"
    write_version(kb, 1)
    config = make_config(tmp_path / "crashed", ingest__chunk_chars=200)
    ingest(kb, config, embedder=embedder)
    write_version(kb, 2)

    clean = make_config(tmp_path / "clean", ingest__chunk_chars=200)
    started = time.perf_counter()
    clean_report = ingest(kb, clean, embedder=embedder)
    group_seconds = (time.perf_counter() - started) * WRITE_GROUP / clean_report.chunks_written

    settings = {
        "source": str(kb),
        "group": WRITE_GROUP,
        "overrides": {
            "store.path": str(config.store.path),
            "ingest.chunk_chars": 200,
        },
    }
    rng = random.Random(int(os.environ.get("CRASH_SEED", "14")))
    kills, attempts, mixed_seen = 0, 0, 0
    while kills < KILLS:
        attempts += 1
        assert attempts <= 3 * KILLS, f"only {kills} of {attempts} kills landed before the end"
        if run_child(settings, kill_at=(rng.randrange(3), rng.uniform(0.0, 2 * group_seconds))):
            kills += 1
            mixed_seen += whole_versions(config, embedder.dimension)[1]
        else:  # it finished first (the machine ran it faster than timed): back to version 1, so
            write_version(kb, 1)  # the next kills still find writes to land in
            ingest(kb, config, embedder=embedder)
            write_version(kb, 2)
    rerun = ingest(kb, config, embedder=embedder)  # the next run, here in-process
    assert rerun.new + rerun.updated < CHANGED  # the killed runs had written some

    crashed, reference = snapshot(config), snapshot(clean)
    lost = set(reference["points"]) - set(crashed["points"])
    extra = set(crashed["points"]) - set(reference["points"])
    assert (len(lost), len(extra)) == (0, 0)
    assert crashed["l0"] == reference["l0"]
    for point_id, (payload, dense, bm25) in reference["points"].items():
        crashed_payload, crashed_dense, crashed_bm25 = crashed["points"][point_id]
        assert (timeless(crashed_payload), crashed_bm25) == (timeless(payload), bm25), point_id
        assert np.array_equal(crashed_dense, dense), point_id  # one text, one vector, any process
    print(
        f"\n{kills} kills in {attempts} runs; {mixed_seen} documents seen mid-swap; rerun wrote "
        f"{rerun.new + rerun.updated} documents; {len(reference['points'])} chunks, 0 lost"
    )
