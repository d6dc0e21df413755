"""`agent/session_memory.py`: what each session was returned, per access scope, within bounds."""

from __future__ import annotations

from lookup_knowledge.adapters.search import NO_ACCESS, UNRESTRICTED, AccessScope
from lookup_knowledge.agent.session_memory import SessionMemory

HR = AccessScope.of(["hr"])


def test_domains_accumulate_first_seen_first_per_session() -> None:
    memory = SessionMemory(max_sessions=10)
    memory.add("s1", UNRESTRICTED, ["payments"])
    memory.add("s1", UNRESTRICTED, ["security", "payments"])
    assert memory.domains("s1", UNRESTRICTED) == ["payments", "security"]
    assert memory.domains("s2", UNRESTRICTED) == []
    assert memory.domains(None, UNRESTRICTED) == []


def test_scopes_never_share_a_session() -> None:
    memory = SessionMemory(max_sessions=10)
    memory.add("s1", HR, ["hr"])
    assert memory.domains("s1", UNRESTRICTED) == [] and memory.domains("s1", HR) == ["hr"]
    memory.add("s1", NO_ACCESS, ["payments"])  # a caller that sees nothing is never remembered
    assert memory.domains("s1", NO_ACCESS) == [] and memory.session_keys() == ["s1\x00hr\x1fpublic"]


def test_the_least_recently_used_session_goes_first() -> None:
    memory = SessionMemory(max_sessions=3)
    for n in range(5):
        memory.add(f"s{n}", UNRESTRICTED, ["payments"])
    memory.add("s2", UNRESTRICTED, [])  # used again: now the most recent
    memory.add("s5", UNRESTRICTED, [])
    assert memory.session_keys() == ["s4", "s2", "s5"]


def test_memory_is_bounded_in_bytes() -> None:
    memory = SessionMemory(
        max_sessions=100, max_bytes=3 * (400 + 100 + len("payments"))
    )  # three 100-char ids
    for n in range(5):
        memory.add(f"{n}" * 100, UNRESTRICTED, ["payments"])
    assert memory.session_keys() == ["2" * 100, "3" * 100, "4" * 100]
    assert memory.size_bytes == 3 * (400 + 100 + len("payments"))
    memory.add("3" * 100, UNRESTRICTED, ["security"])  # grows and is the most recent: the oldest goes
    assert memory.session_keys() == ["4" * 100, "3" * 100]
    assert memory.domains("3" * 100, UNRESTRICTED) == ["payments", "security"]
