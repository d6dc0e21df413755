"""One lookup's request, built and validated once at the edge (API, MCP, CLI, evaluation): the
query, the session and the caller's access scope, or why the lookup is refused.

>>> request = lookup_request("  refunds over 500 EUR ", "s1", principals=["finance"])
>>> request.query, request.scope.filter
('refunds over 500 EUR', ('finance', 'public'))
>>> lookup_request("   ").problem
'the query is empty'
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from lookup_knowledge.adapters.search import NO_ACCESS, UNRESTRICTED, AccessScope
from lookup_knowledge.adapters.text import escape_surrogates, fold_width
from lookup_knowledge.config import Config

_SURROGATE = re.compile("[\ud800-\udfff]")  # Unicode category Cs: what invalid UTF-8 decodes to
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # category Cc except tab, LF, CR
MAX_SESSION_ID_CHARS = 200  # a longer session id is kept (and recorded) as a prefix and its hash
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class RequestSettings:
    """What building a request reads from the configuration."""

    max_query_chars: int = 2000  # retrieval.max_query_chars
    default_principals: tuple[str, ...] | None = None  # access.principals: a caller that names none

    @classmethod
    def from_config(cls, config: Config) -> RequestSettings:
        principals = config.access.principals
        return cls(config.retrieval.max_query_chars, None if principals is None else tuple(principals))


@dataclass(frozen=True, slots=True)
class LookupRequest:
    """A lookup to run: its query (stripped, composed to NFC, full-width letters and half-width
    katakana folded by :func:`~lookup_knowledge.adapters.text.fold_width`), session key
    (:func:`session_key`), pinned category and the caller's access scope."""

    query: str
    session_id: str | None = None
    pinned_category: str | None = None
    scope: AccessScope = UNRESTRICTED


@dataclass(frozen=True, slots=True)
class RejectedRequest:
    """A lookup refused before it runs: why, the query as it can be echoed, and the session and
    scope it was asked in, where those were valid (else no session, and a scope that sees nothing)."""

    problem: str
    query: str
    session_id: str | None = None
    scope: AccessScope = NO_ACCESS


class _Invalid(ValueError):
    """Why one part of a request cannot be used."""


def lookup_request(
    query: Any,
    session_id: Any = None,
    *,
    pinned_category: Any = None,
    principals: Any = None,
    settings: RequestSettings = RequestSettings(),
) -> LookupRequest | RejectedRequest:
    """The request, or why it is refused (its first problem: query, session, category, principals).

    A ``str`` subclass (``numpy.str_``) is read as its plain string; any other type is refused
    without calling its methods. The query must hold visible text (not only whitespace or format
    characters such as U+200B), valid UTF-8 (no lone surrogates) and no control characters,
    within ``settings.max_query_chars``. A session id or pinned category with lone surrogates
    (undecodable bytes) is kept with them escaped; a long session id as :func:`session_key`.
    ``principals``: a list (tuple, set) of nonblank names, one string being one principal;
    ``None``: ``settings.default_principals``; an :class:`AccessScope`: that scope as it is (one
    its host decided, e.g. a ``serve`` token's, unrestricted included).
    """
    problems: list[str] = []

    def valid(check: Callable[..., _T], *args: Any) -> _T | None:
        try:
            return check(*args)
        except _Invalid as exc:
            problems.append(str(exc))
            return None

    text = valid(_query, query, settings.max_query_chars)
    session = valid(_optional_text, session_id, "the session id", session_key)
    category = valid(_optional_text, pinned_category, "the category", escape_surrogates)
    scope = valid(_scope, principals, settings.default_principals)
    if text is None or scope is None or problems:
        return RejectedRequest(problems[0], _echo(query), session, scope or NO_ACCESS)
    return LookupRequest(text, session, category, scope)


def access_scope(principals: Any, settings: RequestSettings = RequestSettings()) -> AccessScope:
    """The scope of a caller naming ``principals`` (``None``: ``settings.default_principals``);
    one that sees nothing when they are not a list of nonblank names."""
    try:
        return _scope(principals, settings.default_principals)
    except _Invalid:
        return NO_ACCESS


def session_key(session_id: str) -> str:
    """A session id as it is kept and recorded: lone surrogates (undecodable bytes) escaped, and
    one longer than :data:`MAX_SESSION_ID_CHARS` replaced by its first 64 characters and the
    SHA-256 of the whole (``<prefix>...sha256:<hex>``, 139 characters): still one stable
    session, at a bounded cost in memory and in the record."""
    text = escape_surrogates(session_id)
    if len(text) <= MAX_SESSION_ID_CHARS:
        return text
    return f"{text[:64]}...sha256:{hashlib.sha256(text.encode('utf-8')).hexdigest()}"


def _plain(value: Any, name: str) -> str:
    """A string as its plain ``str`` (a subclass's own methods are never called)."""
    if not isinstance(value, str):
        raise _Invalid(f"{name} must be a string, not {type(value).__name__}")
    return str.__str__(value)


def _query(value: Any, max_chars: int) -> str:
    query = _plain(value, "the query")
    if not query.strip():
        raise _Invalid("the query is empty")
    if len(query) > max_chars:
        limit = f"the limit is {max_chars} (retrieval.max_query_chars)"
        raise _Invalid(f"the query has {len(query)} characters; {limit}")
    if _SURROGATE.search(query):
        raise _Invalid("the query is not valid UTF-8 text")
    if _CONTROL.search(query):
        raise _Invalid("the query contains control characters")
    if not any(not ch.isspace() and unicodedata.category(ch) != "Cf" for ch in query):
        raise _Invalid("the query has only invisible (format) characters")
    return fold_width(unicodedata.normalize("NFC", query.strip()))


def _optional_text(value: Any, name: str, kept_as: Callable[[str], str]) -> str | None:
    return None if value is None else kept_as(_plain(value, name))


def _scope(principals: Any, default: tuple[str, ...] | None) -> AccessScope:
    if isinstance(principals, AccessScope):
        return principals
    if principals is None:
        return AccessScope.of(default)
    names = [principals] if isinstance(principals, str) else principals
    if not isinstance(names, list | tuple | set | frozenset) or not all(
        isinstance(name, str) and name.strip() and not _SURROGATE.search(name) for name in names
    ):
        raise _Invalid("the principals must be a list of nonblank names")
    return AccessScope.of(str.__str__(name).strip() for name in names)


def _echo(query: Any) -> str:
    """The refused query as it can be echoed in JSON: short, and encodable as UTF-8.

    Only a string is echoed (another object's ``__str__`` may raise or lie); a lone surrogate
    (e.g. from ``surrogateescape`` decoding) is echoed as its escape sequence rather than
    making the whole result unserializable.
    """
    if not isinstance(query, str):
        return f"<{type(query).__name__}>"
    return escape_surrogates(str.__str__(query)[:200])
