"""Secrets never leave the configuration: a planted secret, through the fault matrix.

A password is planted in ``store.url`` and ``recorder.url`` (``--set``, as an operator would)
and every fault that can run here is provoked: the store missing, held by another process, a
Qdrant server refusing connections, one that accepts and never answers, the invocation
database unreachable, bad configuration. Every output is then scanned for the secret: stdout,
stderr, the result JSON, the invocation rows, the log records, the holder and handover notes
and every file under the store's folder. Zero hits.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from conftest import make_config
from mcp import Client
from test_mcp_frames import STARTUP_TIMEOUT_S, RawServer
from typer.testing import CliRunner

from lookup_knowledge.adapters.errors import StoreBackendError, StoreLockedError
from lookup_knowledge.adapters.recorder import InvocationRecorder
from lookup_knowledge.adapters.redaction import mask_secrets
from lookup_knowledge.adapters.shared_store import holder_note, process_note
from lookup_knowledge.agent.lookup import AgentLookup
from lookup_knowledge.agent.mcp_server import build_server
from lookup_knowledge.cli.app import app

SECRET = "Planted-s3cret-7f3a9"
LOOKUP_KNOWLEDGE = Path(sys.executable).with_name("lookup-knowledge")
QUERY = "Who must approve a refund above 500 EUR?"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def secret_store_url(port: int) -> str:
    return f"http://admin:{SECRET}@127.0.0.1:{port}/?api_key={SECRET}"


def secret_recorder_url() -> str:
    """A PostgreSQL database nobody serves, its password the secret."""
    return f"postgresql+psycopg://lookup:{SECRET}@127.0.0.1:{_closed_port()}/lookup?connect_timeout=1"


class Outputs:
    """Everything the product wrote during a test, to be scanned for the secret."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []

    def add(self, where: str, text: str) -> None:
        self.texts.append((where, text))

    def add_tree(self, root: Path) -> None:
        """Every file under ``root`` (the store, the L0 index, SQLite files, the notes)."""
        for file in sorted(p for p in root.rglob("*") if p.is_file()):
            self.add(str(file), file.read_bytes().decode("utf-8", "replace"))

    def add_rows(self, database: Path) -> None:
        rows = InvocationRecorder(f"sqlite:///{database}").list(last=1000)
        assert rows, f"nothing recorded in {database}"
        self.add(f"rows of {database}", json.dumps([row.to_json() for row in rows], default=str))

    def hits(self) -> list[str]:
        return [where for where, text in self.texts if SECRET in text]


@pytest.fixture
def outputs(caplog: pytest.LogCaptureFixture) -> Iterator[Outputs]:
    found = Outputs()
    with caplog.at_level(logging.DEBUG):
        yield found
    found.add("log records", "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records))
    found.add("log text", caplog.text)
    assert found.texts
    assert found.hits() == [], f"the secret reached: {found.hits()}"


def cli(outputs: Outputs, *args: str) -> tuple[int, str]:
    """Run the CLI in process; its stdout and stderr go to the scan. Returns (exit code, stdout)."""
    outcome = CliRunner().invoke(app, list(args))
    outputs.add(f"stdout of {args[:1]}", outcome.stdout)
    outputs.add(f"stderr of {args[:1]}", outcome.stderr)
    if outcome.exception is not None and not isinstance(outcome.exception, SystemExit):
        raise outcome.exception
    return outcome.exit_code, outcome.stdout


def query(outputs: Outputs, *sets: str) -> tuple[int, dict]:
    args = ["query", QUERY, "--json"]
    for setting in sets:
        args += ["--set", setting]
    code, stdout = cli(outputs, *args)
    return code, json.loads(stdout)


def test_mask_secrets_masks_credentials_and_query_secrets() -> None:
    assert mask_secrets(secret_store_url(6333)) == "http://admin:***@127.0.0.1:6333/?api_key=***"
    assert mask_secrets(f"at https://{SECRET}@host/x, then") == "at https://***@host/x, then"
    assert mask_secrets(f"postgresql://u:p@ss{SECRET}@db/k?sslmode=require&password={SECRET}") == (
        "postgresql://u:***@db/k?sslmode=require&password=***"
    )
    assert mask_secrets("sqlite:////var/kb/invocations.sqlite") == "sqlite:////var/kb/invocations.sqlite"
    assert StoreBackendError(f"search at {secret_store_url(1)} failed").args[0].count(SECRET) == 0


@pytest.mark.parametrize("kind", ["refused", "hung"])
def test_a_server_down_never_shows_the_secret(
    kind: str, tmp_path: Path, outputs: Outputs, silent_port: int
) -> None:
    port = _closed_port() if kind == "refused" else silent_port
    database = tmp_path / "invocations.sqlite"
    sets = ["store.backend=qdrant", f"store.url={secret_store_url(port)}", "store.timeout_s=1"]
    code, result = query(outputs, f"store.path={tmp_path}", f"recorder.url=sqlite:///{database}", *sets)
    assert (code, result["evidenceStatus"]) == (1, "retrieval_failed")
    assert "http://admin:***@127.0.0.1" in result["message"]
    outputs.add("result", json.dumps(result))
    outputs.add_rows(database)
    code, _ = cli(outputs, "info", "--json", "--set", f"store.path={tmp_path}", *_sets(sets))
    assert code == 0
    outputs.add_tree(tmp_path)


def _sets(settings: list[str]) -> list[str]:
    return [arg for setting in settings for arg in ("--set", setting)]


def test_a_missing_store_and_an_unreachable_database_never_show_the_secret(
    tmp_path: Path, outputs: Outputs
) -> None:
    recorder = f"recorder.url={secret_recorder_url()}"
    code, result = query(outputs, f"store.path={tmp_path / 'missing'}", recorder)
    assert (code, result["evidenceStatus"]) == (1, "retrieval_failed")
    outputs.add("result", json.dumps(result))
    code, _ = cli(outputs, "invocations", "--set", recorder)
    assert code == 1  # the database is unreachable: one line naming it, masked
    outputs.add_tree(tmp_path)


def test_an_unreachable_database_while_serving_never_shows_the_secret(
    sample_store: Path, outputs: Outputs
) -> None:
    config = make_config(sample_store, recorder__url=secret_recorder_url())
    with AgentLookup.from_config(config) as agent:
        result = agent.call(QUERY, "s1")
        mcp_result = anyio.run(_mcp_call, agent)
    assert result.evidence_status == "evidence"
    record = result.retrieval_trace.invocation_record
    assert record.written is False and "postgresql+psycopg://lookup:***@127.0.0.1" in record.error
    outputs.add("result", result.model_dump_json())
    outputs.add("mcp result", mcp_result)
    outputs.add_tree(sample_store)


async def _mcp_call(agent: AgentLookup) -> str:
    async with Client(build_server(agent)) as client:
        return (await client.call_tool("lookup_knowledge", {"query": QUERY})).model_dump_json()


@pytest.mark.parametrize(
    "settings",
    [
        ["store.backend=qdrant", f"store.url=http://admin:{SECRET}@127.0.0.1:notaport"],
        ["store.backend=qdrant", f"store.url=ftp://admin:{SECRET}@127.0.0.1"],
        [f"recorder.url=nodialect://admin:{SECRET}@db/k"],
        [f"=http://admin:{SECRET}@127.0.0.1"],
        [f"store.timeout_s=http://admin:{SECRET}@127.0.0.1"],
    ],
)
def test_bad_configuration_never_shows_the_secret(
    settings: list[str], tmp_path: Path, outputs: Outputs
) -> None:
    code, stdout = cli(outputs, "query", QUERY, "--json", "--set", f"store.path={tmp_path}", *_sets(settings))
    assert code in (1, 2)  # retrieval_failed (a URL the client refuses) or a configuration error
    if code == 1:
        assert json.loads(stdout)["evidenceStatus"] == "retrieval_failed"
    outputs.add_tree(tmp_path)


def test_the_holder_note_names_the_process_not_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        sys, "argv", ["/venv/bin/lookup-knowledge", "mcp", "--set", f"recorder.url=x:{SECRET}"]
    )
    assert process_note() == f"{os.getpid()} lookup-knowledge mcp"
    monkeypatch.setattr(sys, "argv", ["/venv/bin/lookup-knowledge", "--set", SECRET.lower()])
    assert process_note() == f"{os.getpid()} lookup-knowledge"
    monkeypatch.setattr(sys, "argv", ["serve\udcff.py", SECRET.lower()])
    assert process_note() == f"{os.getpid()} serve\\udcff.py"


@pytest.mark.slow
def test_a_held_store_never_shows_the_holders_arguments(sample_store: Path, outputs: Outputs) -> None:
    """A real ``lookup-knowledge mcp`` with the secret on its command line holds the store; a
    lookup that finds it held names the holder, and the note (0600) names only the process;
    after a kill -9 the note stays, still without the secret."""
    log = sample_store.parent / f"{sample_store.name}-server-stderr.txt"
    with log.open("wb") as stderr:
        server = RawServer(sample_store, "--set", f"recorder.url={secret_recorder_url()}", stderr=stderr)
    try:
        initialize = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw"}}
        server.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize}))
        server.reply(0, STARTUP_TIMEOUT_S)  # serving: the store is held
        note = holder_note(sample_store / "knowledge")
        assert note.read_text() == f"{server.process.pid} lookup-knowledge mcp"
        assert stat.S_IMODE(note.stat().st_mode) == 0o600
        code, result = query(outputs, f"store.path={sample_store}", "store.lock_wait_s=0")
        assert (code, result["evidenceStatus"]) == (1, "retrieval_failed")
        assert f"held by pid {server.process.pid} (lookup-knowledge mcp)" in result["message"]
        outputs.add("result", json.dumps(result))
    finally:
        server.process.kill()
        server.process.wait(timeout=30)
    assert note.is_file()  # a kill -9 leaves it
    outputs.add("the server's stderr", log.read_text(encoding="utf-8", errors="replace"))
    outputs.add_tree(sample_store)


@pytest.mark.slow
def test_undecodable_argv_bytes_neither_crash_nor_break_the_notes(tmp_path: Path, small_corpus: Path) -> None:
    """``ingest $'DIR\\xff'`` and ``query --session $'s\\xff'`` (bytes the locale cannot decode)
    run to the end; the session is recorded with the bytes escaped."""
    folder = os.fsencode(tmp_path) + b"/kb\xff"
    os.rename(small_corpus, os.fsdecode(folder))
    store = f"store.path={tmp_path / 'store'}".encode()
    env = {**os.environ, "LC_ALL": "C.UTF-8", "PYTHONUTF8": "0"}
    ingest = subprocess.run(
        [os.fsencode(LOOKUP_KNOWLEDGE), b"ingest", folder, b"--set", store], capture_output=True, env=env
    )
    assert ingest.returncode == 0, ingest.stderr.decode("utf-8", "replace")
    assert b"Traceback" not in ingest.stderr
    asked = [os.fsencode(LOOKUP_KNOWLEDGE), b"query", QUERY.encode(), b"--session", b"s\xff", b"--set", store]
    looked_up = subprocess.run(asked, capture_output=True, env=env)
    assert looked_up.returncode == 0, looked_up.stderr.decode("utf-8", "replace")
    assert b"Traceback" not in looked_up.stderr
    [row] = InvocationRecorder(f"sqlite:///{tmp_path / 'store' / 'invocations.sqlite'}").list()
    assert (row.session_id, row.status) == ("s\\udcff", "evidence")
    for note in (tmp_path / "store").glob("*.holder"):
        assert stat.S_IMODE(note.stat().st_mode) == 0o600


def test_a_store_held_in_process_names_no_arguments(tmp_path: Path, small_corpus: Path, embedder) -> None:
    from lookup_knowledge import ingest
    from lookup_knowledge.stores import open_store

    config = make_config(tmp_path, store__lock_wait_s=0)
    ingest(small_corpus, config, embedder=embedder)
    held = open_store(config, create=False)
    try:
        with pytest.raises(StoreLockedError) as raised:
            open_store(config, create=False)
        note = holder_note(tmp_path / "knowledge")
        assert stat.S_IMODE(note.stat().st_mode) == 0o600
        assert str(raised.value).endswith("; close that first")
        assert note.read_text() == process_note()
    finally:
        held.close()
