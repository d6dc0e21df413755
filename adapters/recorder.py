"""The invocation recorder: one ``tool_invocation`` row per agent-facing ``lookup_knowledge`` call.

SQLAlchemy Core over SQLite (the default: a file under the store path) or PostgreSQL (by URL).
The schema is created on first use and versioned in a ``schema_version`` table, so a later
release can migrate an existing database instead of failing on it. Version 2 adds
``returned_evidence``: per call, the blocks returned (key, content hash, content, source), what
``verify_answer`` checks an answer's citations and quotes against.

>>> recorder = InvocationRecorder("sqlite:////tmp/kb/invocations.sqlite")  # doctest: +SKIP
>>> row_id = recorder.record(Invocation("s1", "lookup_knowledge", "refunds?", "evidence", 2,  # doctest: +SKIP
...     "L0+L1", None, 12.5, {"evidenceDomains": ["payments"]}))
>>> recorder.session_domains("s1")  # doctest: +SKIP
['payments']
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    Row,
    String,
    Table,
    Text,
    create_engine,
    event,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from .redaction import mask_secrets
from .text import escape_surrogates, first_line

if TYPE_CHECKING:  # the recorder loads without the search port's modules
    from .search import AccessScope

SCHEMA_VERSION = 2
SQLITE_BUSY_TIMEOUT_S = 30.0  # concurrent writers wait for the lock instead of failing
CONNECT_TIMEOUT_S = 2.0  # an unreachable server must not stall an agent's lookup for long
RETRY_AFTER_S = 30.0  # after a failure, calls fail fast this long (doubling, up to MAX_RETRY_AFTER_S)
MAX_RETRY_AFTER_S = 300.0

metadata = MetaData()

tool_invocation = Table(
    "tool_invocation",
    metadata,
    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("session_id", Text),
    Column("tool_name", String(64), nullable=False),
    Column("input", Text, nullable=False),
    Column("status", String(32), nullable=False),
    Column("evidence_count", Integer, nullable=False),
    Column("retrieval_layer", String(16)),
    Column("fallback_reason", String(64)),
    Column("latency_ms", Float, nullable=False),
    Column("retrieval_details", JSON().with_variant(JSONB(), "postgresql"), nullable=False),
    # schema version 2: [{key, sha256, content, source, ...}] of the blocks this call returned
    Column("returned_evidence", JSON().with_variant(JSONB(), "postgresql")),
    Index("ix_tool_invocation_session", "session_id", "id"),
)

schema_version_table = Table(
    "schema_version",
    metadata,
    Column("version", Integer, primary_key=True),
    Column("applied_at", DateTime(timezone=True), nullable=False),
)


def _add_returned_evidence(connection: Connection) -> None:
    """Schema 2: the ``returned_evidence`` column (null on the rows written before it)."""
    column_type = "JSONB" if connection.dialect.name == "postgresql" else "JSON"
    connection.execute(text(f"ALTER TABLE tool_invocation ADD COLUMN returned_evidence {column_type}"))


# version -> the step that upgrades a database from ``version - 1``; version 1 is the initial schema.
_MIGRATIONS: dict[int, Callable[[Connection], None]] = {2: _add_returned_evidence}


class RecorderUnavailableError(RuntimeError):
    """The invocation database cannot be reached, created or written."""


class CircuitBreaker:
    """Fails fast after a failure: for ``retry_after_s``, doubling with each further failure up
    to ``max_retry_after_s``; then one caller tries (the others still fail fast) and a success
    closes it. A hung database so costs one timeout per interval, not one per call."""

    def __init__(self, retry_after_s: float = RETRY_AFTER_S, max_retry_after_s: float = MAX_RETRY_AFTER_S):
        self.retry_after_s = retry_after_s
        self.max_retry_after_s = max_retry_after_s
        self._failures = 0
        self._open_until = 0.0
        self._trial = False
        self._last_error = ""
        self._lock = threading.Lock()

    def check(self) -> None:
        """Return when a call may go to the database; raise while the circuit is open."""
        with self._lock:
            if self._failures == 0:
                return
            wait = self._open_until - time.monotonic()
            if wait > 0 or self._trial:
                retry = f"retrying in {max(wait, 0):.0f} s" if wait > 0 else "a retry is under way"
                raise RecorderUnavailableError(f"{self._last_error} ({retry})")
            self._trial = True

    def failed(self, error: str) -> None:
        with self._lock:
            self._failures += 1
            interval = min(self.max_retry_after_s, self.retry_after_s * 2 ** (self._failures - 1))
            self._open_until = time.monotonic() + interval
            self._trial = False
            self._last_error = error

    def succeeded(self) -> None:
        with self._lock:
            self._failures = 0
            self._trial = False


@dataclass(frozen=True, slots=True)
class Invocation:
    """One recorded ``lookup_knowledge`` call: a ``tool_invocation`` row."""

    session_id: str | None
    tool_name: str
    input: str
    status: str
    evidence_count: int
    retrieval_layer: str | None
    fallback_reason: str | None
    latency_ms: float
    retrieval_details: dict[str, Any]
    returned_evidence: list[dict[str, Any]] | None = None
    id: int | None = None
    created_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        """The row as JSON-ready values (``created_at`` in ISO 8601)."""
        values = asdict(self)
        values["created_at"] = self.created_at.isoformat() if self.created_at else None
        return {"id": values.pop("id"), "created_at": values.pop("created_at"), **values}


class InvocationRecorder:
    """Writes and reads ``tool_invocation`` rows in the database at ``url`` (an SQLAlchemy URL).

    Nothing is opened until the first call; the schema is created then. SQLite runs in WAL mode
    with a busy timeout so several threads (and processes) can record at once. Every failure of
    the database surfaces as :class:`RecorderUnavailableError`; after one, a
    :class:`CircuitBreaker` fails calls fast until it is time to retry. Connecting is bounded by
    ``connect_timeout_s``. Safe to share between threads.
    """

    def __init__(
        self,
        url: str,
        *,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self._raw_url = url  # parsed on first use, so a bad URL fails recording, never construction
        self._connect_timeout_s = connect_timeout_s
        self._breaker = breaker or CircuitBreaker()
        self._engine: Engine | None = None
        self._schema_ready = False
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        """The database URL, credentials masked (:func:`~.redaction.mask_secrets`)."""
        return mask_secrets(self._raw_url)

    def record(self, invocation: Invocation) -> int:
        """Insert one row; returns its id."""
        values = {key: _storable(value) for key, value in asdict(invocation).items() if key != "id"}
        values["created_at"] = invocation.created_at or datetime.now(UTC)
        with self._connect(write=True) as connection:
            row_id = connection.execute(insert(tool_invocation).values(**values)).inserted_primary_key[0]
        return int(row_id)

    def session_domains(self, session_id: str, scope: AccessScope | None = None) -> list[str]:
        """Distinct evidence domains recorded for ``session_id`` so far, first seen first, of its
        calls made in ``scope`` (``retrieval_details.access``: the principals the call was
        restricted to; ``None``, as on rows from before access control, unrestricted), or of all
        its calls when ``scope`` is ``None``."""
        details = tool_invocation.c.retrieval_details
        query = (
            select(details["evidenceDomains"], details["access"])
            .where(tool_invocation.c.session_id == session_id)
            .order_by(tool_invocation.c.id)
        )
        with self._connect() as connection:
            rows = connection.execute(query).all()
        return list(
            dict.fromkeys(
                domain for row, recorded in rows if _in_scope(recorded, scope) for domain in row or []
            )
        )

    def list(self, session_id: str | None = None, last: int = 20) -> list[Invocation]:
        """The newest ``last`` rows (of one session, when given), oldest first."""
        query = select(tool_invocation).order_by(tool_invocation.c.id.desc()).limit(last)
        if session_id is not None:
            query = query.where(tool_invocation.c.session_id == session_id)
        with self._connect() as connection:
            rows = connection.execute(query).all()
        return [_invocation(row) for row in reversed(rows)]

    def newest(
        self,
        *,
        session_id: str | None = None,
        status: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        before_id: int | None = None,
        limit: int = 50,
    ) -> list[Invocation]:
        """Up to ``limit`` rows, newest first, of one session and status when given, created at
        ``since`` or later and before ``until``, with ids below ``before_id`` (the next page)."""
        table = tool_invocation.c
        query = select(tool_invocation).order_by(table.id.desc()).limit(limit)
        for column, value in ((table.session_id, session_id), (table.status, status)):
            if value is not None:
                query = query.where(column == value)
        if since is not None:
            query = query.where(table.created_at >= _utc(since))
        if until is not None:
            query = query.where(table.created_at < _utc(until))
        if before_id is not None:
            query = query.where(table.id < before_id)
        with self._connect() as connection:
            return [_invocation(row) for row in connection.execute(query).all()]

    def session_evidence(self, session_id: str, scope: AccessScope | None = None) -> list[Invocation]:
        """The session's ``lookup_knowledge`` rows that returned evidence, oldest first (with a
        ``scope``: only those of calls made in it)."""
        query = (
            select(tool_invocation)
            .where(tool_invocation.c.session_id == session_id)
            .where(tool_invocation.c.tool_name == "lookup_knowledge")
            .where(tool_invocation.c.evidence_count > 0)
            .order_by(tool_invocation.c.id)
        )
        with self._connect() as connection:
            rows = [_invocation(row) for row in connection.execute(query).all()]
        return [row for row in rows if _in_scope(row.retrieval_details.get("access"), scope)]

    def returned_anywhere(self, keys: Iterable[str], scope: AccessScope | None = None) -> set[str]:
        """Those of ``keys`` some recorded call (of any session) returned (with a ``scope``: some
        call made in it)."""
        wanted = set(keys)
        if not wanted:
            return set()
        returned, access = tool_invocation.c.returned_evidence, tool_invocation.c.retrieval_details["access"]
        query = select(returned, access).where(returned.is_not(None))
        # a per-key JSON containment query differs per backend; rows are scanned, keys matched here
        with self._connect() as connection:
            rows = connection.execute(query).all()
            return {
                entry["key"]
                for row, recorded in rows
                if _in_scope(recorded, scope)
                for entry in row or []
                if entry.get("key") in wanted
            }

    def get(self, invocation_id: int) -> Invocation | None:
        """One row by id, or ``None``."""
        query = select(tool_invocation).where(tool_invocation.c.id == invocation_id)
        with self._connect() as connection:
            row = connection.execute(query).first()
        return None if row is None else _invocation(row)

    def schema_version(self) -> int:
        """The schema version of the database (creating the schema if needed)."""
        with self._connect() as connection:
            return int(connection.execute(select(func.max(schema_version_table.c.version))).scalar_one())

    def close(self) -> None:
        """Release the pooled connections; a later call reconnects."""
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()
            self._engine = None
            self._schema_ready = False

    @contextmanager
    def _connect(self, *, write: bool = False) -> Iterator[Connection]:
        """A connection (a committed transaction when ``write``), database errors translated."""
        self._breaker.check()
        try:
            engine = self._ready_engine()
            with engine.begin() if write else engine.connect() as connection:
                yield connection
        except RecorderUnavailableError as exc:  # e.g. a schema newer than this release reads
            self._breaker.failed(str(exc))
            raise
        except (SQLAlchemyError, OSError, ImportError) as exc:  # ImportError: no driver for the URL
            reason = first_line(exc)  # masked: a driver may name the URL it could not use
            error = RecorderUnavailableError(f"invocation database {self.url} failed: {reason}")
            self._breaker.failed(str(error))
            raise error from exc
        self._breaker.succeeded()

    def _ready_engine(self) -> Engine:
        with self._lock:
            if self._engine is None:
                self._engine = _create_engine(make_url(self._raw_url), self._connect_timeout_s)
            if not self._schema_ready:
                _ensure_schema(self._engine)
                self._schema_ready = True
            return self._engine


def _create_engine(url: URL, connect_timeout_s: float) -> Engine:
    backend = url.get_backend_name()
    if backend == "sqlite":
        if url.database and url.database != ":memory:":
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
        event.listen(engine, "connect", _sqlite_wal)
        return engine
    connect_args = {}
    if backend == "postgresql" and "connect_timeout" not in url.query:
        connect_args["connect_timeout"] = max(1, round(connect_timeout_s))  # libpq takes whole seconds
    return create_engine(url, connect_args=connect_args, pool_pre_ping=True)


def _sqlite_wal(dbapi_connection: Any, _: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _ensure_schema(engine: Engine) -> None:
    """Create the tables (once, idempotently) and bring the schema to :data:`SCHEMA_VERSION`."""
    try:
        _create_or_migrate(engine)
    except SQLAlchemyError as exc:
        if not (isinstance(exc, IntegrityError) or "already exists" in str(exc)):
            raise
        # Another process created the schema between our check and our CREATE: look again.
        _create_or_migrate(engine)


def _create_or_migrate(engine: Engine) -> None:
    with engine.begin() as connection:
        metadata.create_all(connection)
        current = connection.execute(select(func.max(schema_version_table.c.version))).scalar()
        if current is None:
            _mark_version(connection, SCHEMA_VERSION)
            return
        if current > SCHEMA_VERSION:
            raise RecorderUnavailableError(
                f"the invocation database has schema version {current}; this lookup-knowledge "
                f"reads up to version {SCHEMA_VERSION}: upgrade lookup-knowledge"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            _MIGRATIONS[version](connection)
            _mark_version(connection, version)


def _mark_version(connection: Connection, version: int) -> None:
    connection.execute(insert(schema_version_table).values(version=version, applied_at=datetime.now(UTC)))


def _in_scope(recorded: Any, scope: AccessScope | None) -> bool:
    """Whether a row's recorded access filter (JSON: a list, or null/absent) is ``scope``'s
    (``None``: any scope)."""
    return scope is None or (tuple(recorded) if isinstance(recorded, list) else None) == scope.filter


def _utc(moment: datetime) -> datetime:
    """``moment`` in UTC, as rows are written (a naive one is read as UTC)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _storable(value: Any) -> Any:
    """``value`` as every backend stores it: NUL (refused by PostgreSQL) and lone surrogates
    (not encodable as UTF-8) escaped, recursively through JSON lists and objects."""
    if isinstance(value, str):
        return escape_surrogates(value).replace("\x00", "\\x00")
    if isinstance(value, list):
        return [_storable(item) for item in value]
    if isinstance(value, dict):
        return {_storable(key): _storable(item) for key, item in value.items()}
    return value


def _invocation(row: Row[Any]) -> Invocation:
    values = row._asdict()
    created_at: datetime = values["created_at"]
    if created_at.tzinfo is None:  # SQLite keeps no offset; rows are written in UTC
        values["created_at"] = created_at.replace(tzinfo=UTC)
    return Invocation(**values)
