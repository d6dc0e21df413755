"""Shared fixtures and helpers for the lookup-knowledge test suite.

Reusable by every test module (including the dataflow tests):

* ``embedder`` (session): the real ``SentenceTransformerEmbedder()`` — the offline MiniLM model
  loads once per test session.
* ``write_markdown(root, relpath, frontmatter, body)``: write one markdown file with YAML
  frontmatter; ``write_corpus(root, docs)``: write several at once.
* ``small_corpus`` (function): a tiny 3-document markdown folder in ``tmp_path``.
* ``tmp_config`` (function): the default ``Config`` with ``store.path = tmp_path``;
  ``make_config(tmp_path, **overrides)`` builds one with extra dotted-key overrides.
* ``without_progress(stderr)``: what ``ingest`` printed on stderr besides its progress lines.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import worker_environment  # noqa: F401  (first: before any library starts a thread pool)
import yaml
from dataflow_fixtures import SampleKB, ingest_sample_kb
from integration_fixtures import restrict_refund_policy

from lookup_knowledge import AgentLookup, KnowledgeTool, ingest, sample_knowledge_base
from lookup_knowledge.adapters.embedder import SentenceTransformerEmbedder
from lookup_knowledge.adapters.exported_encoder import CACHE_ENV
from lookup_knowledge.adapters.recorder import InvocationRecorder
from lookup_knowledge.agent.lookup import invocation_db_url
from lookup_knowledge.config import Config, load_config


def pytest_configure(config: pytest.Config) -> None:
    """Model exports go to a cache kept between test runs (``--cache-clear`` drops it), not ``~/.cache``."""
    if os.environ.get(CACHE_ENV):
        return
    cache = (
        config.cache.mkdir("lookup-knowledge") if getattr(config, "cache", None) else Path(tempfile.mkdtemp())
    )
    os.environ[CACHE_ENV] = str(cache)


def write_markdown(root: Path, relpath: str, frontmatter: Mapping[str, Any] | None, body: str) -> Path:
    """Write ``root/relpath`` as markdown with a YAML frontmatter block (none if empty/None)."""
    path = Path(root) / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    header = ""
    if frontmatter:
        dumped = yaml.safe_dump(dict(frontmatter), allow_unicode=True, sort_keys=False)
        header = f"---\n{dumped}---\n\n"
    path.write_text(header + body, encoding="utf-8")
    return path


def write_corpus(root: Path, docs: Mapping[str, tuple[Mapping[str, Any] | None, str]]) -> Path:
    """Write several markdown files: ``{relpath: (frontmatter, body)}``; returns ``root``."""
    for relpath, (frontmatter, body) in docs.items():
        write_markdown(root, relpath, frontmatter, body)
    return Path(root)


SMALL_CORPUS: dict[str, tuple[dict[str, Any], str]] = {
    "payments/refunds.md": (
        {
            "id": "refunds",
            "title": "Refund Policy",
            "domain": "payments",
            "keywords": ["refund", "chargeback"],
        },
        "# Refund Policy\n\nCustomers may request a refund within 30 days of purchase. The refund goes "
        "back to the original payment method; support confirms it by email within two days.\n\n"
        "## Exceptions\n\nDigital goods that were downloaded are not refundable. Custom orders and "
        "services that were already delivered are excluded too, unless local law says otherwise.\n",
    ),
    "infrastructure/kafka.md": (
        {
            "id": "kafka-runbook",
            "title": "Kafka Operations Runbook",
            "domain": "infrastructure",
            "keywords": ["kafka", "consumer lag"],
        },
        "# Kafka Operations Runbook\n\nWhen consumer lag grows, check the broker disk usage.\n",
    ),
    "security/keys.md": (
        {
            "id": "api-keys",
            "title": "API Key Rotation",
            "domain": "security",
            "tags": ["secrets"],
        },
        "# API Key Rotation\n\nRotate every production API key at least every 90 days.\n",
    ),
}


@pytest.fixture
def small_corpus(tmp_path: Path) -> Path:
    """A 3-document markdown knowledge base (payments, infrastructure, security)."""
    return write_corpus(tmp_path / "kb", SMALL_CORPUS)


def make_config(store_path: Path, **overrides: Any) -> Config:
    """The default config with ``store.path`` set, plus ``dotted.key`` overrides.

    Dots cannot appear in keyword names, so use ``__``: ``make_config(p, ingest__chunk_chars=200)``.
    """
    values: dict[str, Any] = {"store.path": str(store_path)}
    values.update({key.replace("__", "."): value for key, value in overrides.items()})
    return load_config(overrides=values)


INGEST_PHASES = (
    "reading", "opening the store and the model", "chunking", "embedding and writing", "indexing", "measuring"
)  # fmt: skip  # what `ingest` reports, in order (tests/test_ingest.py checks the names)


def without_progress(stderr: str) -> str:
    """``ingest``'s stderr without its progress lines (each begins with its phase's name)."""
    prefixes = tuple(f"{phase}: " for phase in INGEST_PHASES)
    return "".join(line for line in stderr.splitlines(keepends=True) if not line.startswith(prefixes))


@pytest.fixture
def tmp_config(tmp_path: Path) -> Config:
    """The default config whose store (and L0 index) live directly under ``tmp_path``."""
    return make_config(tmp_path)


@pytest.fixture(scope="session")
def embedder() -> SentenceTransformerEmbedder:
    """The real offline all-MiniLM-L6-v2 embedder, loaded once per session."""
    model = SentenceTransformerEmbedder()
    assert model.dimension == 384  # forces the model load here, once
    return model


_SAMPLE_STORE = pytest.StashKey[Path]()


@pytest.fixture(scope="module")
def sample_store(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    embedder: SentenceTransformerEmbedder,
) -> Path:
    """A private copy (per module) of the sample knowledge base's store, ingested once per session."""
    stash = request.config.stash
    if _SAMPLE_STORE not in stash:
        master = tmp_path_factory.mktemp("sample-store")
        config = load_config(overrides={"store.path": str(master)})
        ingest(sample_knowledge_base(), config, embedder=embedder)
        stash[_SAMPLE_STORE] = master
    store = tmp_path_factory.mktemp("store")
    shutil.copytree(stash[_SAMPLE_STORE], store, dirs_exist_ok=True)
    return store


@pytest.fixture(scope="module")
def store_config(sample_store: Path) -> Config:
    """The default configuration on the module's sample store."""
    return load_config(overrides={"store.path": str(sample_store)})


@pytest.fixture
def agent(store_config: Config, embedder: SentenceTransformerEmbedder) -> Iterator[AgentLookup]:
    """Recorded calls (``AgentLookup``) over the sample store, with the shared model."""
    recorder = InvocationRecorder(invocation_db_url(store_config))
    with AgentLookup(KnowledgeTool(store_config, embedder=embedder), recorder) as agent:
        yield agent


@pytest.fixture(scope="module")
def restricted_agent(
    store_config: Config, embedder: SentenceTransformerEmbedder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AgentLookup]:
    """Recorded calls over the module's sample store, its refund policy restricted to ``finance``
    (:func:`integration_fixtures.restrict_refund_policy`)."""
    restrict_refund_policy(store_config, embedder, tmp_path_factory.mktemp("restricted-kb"))
    recorder = InvocationRecorder(invocation_db_url(store_config))
    with AgentLookup(KnowledgeTool(store_config, embedder=embedder), recorder) as agent:
        yield agent


@pytest.fixture(scope="session")
def sample_kb(
    tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder
) -> Iterator[SampleKB]:
    """The sample knowledge base ingested once per session into one Qdrant Edge store that every
    tool built by ``make_tool`` shares as its injected search port (one handle may hold a store)."""
    kb = ingest_sample_kb(tmp_path_factory.mktemp("sample-kb-store"), embedder)
    yield kb
    kb.store.close()


MODEL_FIXTURES = {"embedder", "sample_kb", "sample_store"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that loads the real model (through a fixture) with ``model``, so
    ``pytest -m "not model and not slow"`` is the fast inner loop."""
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)


class ManualClock:
    """A monotonic clock the test moves: a module's intervals pass when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class SilentServer:
    """A loopback server that accepts connections and never answers (a hung service), counting
    the connections it accepted: how often a client tried, whatever the clock says."""

    def __init__(self) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self.port: int = self._socket.getsockname()[1]
        self._held: list[tuple[socket.socket, tuple[str, int]]] = []  # (connection, its peer)
        self._probes: list[socket.socket] = []
        self._lock = threading.Condition()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, peer = self._socket.accept()
            except OSError:
                return
            with self._lock:
                self._held.append((connection, peer))
                self._lock.notify_all()

    def accepted(self) -> int:
        """The connections clients made so far. A probe connection is made and awaited first:
        the backlog is accepted in order, so every connection made before this call is counted."""
        probe = socket.create_connection(("127.0.0.1", self.port))
        with self._lock:
            self._probes.append(probe)
            address = probe.getsockname()
            arrived = self._lock.wait_for(lambda: any(peer == address for _, peer in self._held), 60)
            assert arrived, "no probe accepted in 60 s (a hang guard, not a speed limit)"
            probes = {p.getsockname() for p in self._probes}
            return sum(peer not in probes for _, peer in self._held)

    def close(self) -> None:
        self._socket.close()
        with self._lock:
            for connection in [*(c for c, _ in self._held), *self._probes]:
                connection.close()


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    """A :class:`SilentServer` on a loopback port, closed after the test."""
    server = SilentServer()
    yield server
    server.close()


@pytest.fixture
def silent_port(silent_server: SilentServer) -> int:
    """A loopback port whose server accepts connections and never answers (a hung service)."""
    return silent_server.port


@pytest.fixture
def refused_url() -> str:
    """A loopback URL nobody listens on (a server that is down)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def hung_url(silent_port: int) -> str:
    """A server URL that accepts connections and never answers."""
    return f"http://127.0.0.1:{silent_port}"
