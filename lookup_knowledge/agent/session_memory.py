"""What each session was returned, kept in memory: the evidence domains of its lookups, per
access scope, for ``retrievedDomainsThisSession`` when there is no invocation record to read.

>>> memory = SessionMemory(max_sessions=100)
>>> memory.add("s1", UNRESTRICTED, ["payments"])
>>> memory.domains("s1", UNRESTRICTED), memory.domains("s1", AccessScope.of(["hr"]))
(['payments'], [])
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from lookup_knowledge.adapters.search import AccessScope

SESSION_MEMORY_BYTES = 32 * 2**20  # the memory's bound in bytes, beside its bound in sessions
_SESSION_ENTRY_BYTES = 400  # what one remembered session costs beyond its text (dict entry, objects)


class SessionMemory:
    """The domains of the evidence each session was returned, first seen first, kept apart per
    access scope (callers of different scopes never share what a session saw, whatever session
    id they give). The least recently used sessions go first once there are more than
    ``max_sessions`` (``recorder.session_memory``) or they cost more than ``max_bytes``. Safe to
    use from several threads."""

    def __init__(self, max_sessions: int, max_bytes: int = SESSION_MEMORY_BYTES) -> None:
        self.max_sessions, self.max_bytes = max_sessions, max_bytes
        self._sessions: OrderedDict[str, list[str]] = OrderedDict()  # least recently used first
        self._bytes = 0
        self._lock = threading.Lock()

    def domains(self, session_id: str | None, scope: AccessScope) -> list[str]:
        """The session's domains in ``scope`` (none without a session, or in a scope that sees nothing)."""
        slot = _slot(session_id, scope)
        with self._lock:
            return list(self._sessions.get(slot, [])) if slot is not None else []

    def add(self, session_id: str | None, scope: AccessScope, domains: list[str]) -> None:
        """Remember that the session was returned evidence of ``domains`` in ``scope``."""
        slot = _slot(session_id, scope)
        if slot is None:
            return
        with self._lock:
            known = self._sessions.pop(slot, None)
            if known is None:
                known = []
            else:
                self._bytes -= _cost(slot, known)
            known.extend(d for d in domains if d not in known)
            self._sessions[slot] = known
            self._bytes += _cost(slot, known)
            while self._sessions and (
                len(self._sessions) > self.max_sessions or self._bytes > self.max_bytes
            ):
                oldest, kept = self._sessions.popitem(last=False)
                self._bytes -= _cost(oldest, kept)

    @property
    def size_bytes(self) -> int:
        """What the remembered sessions are counted at (their text plus a fixed overhead each)."""
        return self._bytes

    def session_keys(self) -> list[str]:
        """The remembered sessions' keys, least recently used first (a restricted scope's suffixed)."""
        with self._lock:
            return list(self._sessions)


def _slot(session_id: str | None, scope: AccessScope) -> str | None:
    """Where a session's domains are kept for one scope; ``None``: nowhere."""
    if session_id is None or scope.sees_nothing:
        return None
    if scope.filter is None:
        return session_id
    return f"{session_id}\x00{chr(31).join(scope.filter)}"


def _cost(slot: str, domains: list[str]) -> int:
    return _SESSION_ENTRY_BYTES + len(slot) + sum(len(domain) for domain in domains)
