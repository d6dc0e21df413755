"""One lookup's input, validated alike at every entry point, and the ``found=false`` results of
a call that cannot run the dataflow (the query refused, or the store or model unavailable)."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from lookup_knowledge.adapters.redaction import mask_secrets
from lookup_knowledge.adapters.text import escape_surrogates
from lookup_knowledge.contract import EvidenceStatus, LookupResult

_SURROGATE = re.compile("[\ud800-\udfff]")  # Unicode category Cs: what invalid UTF-8 decodes to
_FIELD_NAMES = {"query": "the query", "session_id": "the session id", "pinned_category": "the category"}
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # category Cc except tab, LF, CR
MAX_SESSION_ID_CHARS = 200  # a longer session id is kept (and recorded) as a prefix and its hash


def session_key(session_id: str) -> str:
    """A session id as it is kept and recorded: lone surrogates (undecodable bytes) escaped, and
    one longer than :data:`MAX_SESSION_ID_CHARS` replaced by its first 64 characters and the
    SHA-256 of the whole (``<prefix>...sha256:<hex>``, 139 characters): still one stable
    session, at a bounded cost in memory and in the record."""
    text = escape_surrogates(session_id)
    if len(text) <= MAX_SESSION_ID_CHARS:
        return text
    return f"{text[:64]}...sha256:{hashlib.sha256(text.encode('utf-8')).hexdigest()}"


class LookupRequest(BaseModel):
    """One lookup's input, validated alike at every entry point (API, MCP, CLI, evaluation).

    A ``str`` subclass (``numpy.str_``) is read as its plain string; any other type is refused
    without calling its methods. The query must hold visible text (not only whitespace or
    format characters such as U+200B), valid UTF-8 (no lone surrogates) and no control
    characters, within ``max_query_chars`` (validation context). A session id or pinned
    category with lone surrogates (undecodable bytes) is kept with them escaped; a session id
    over :data:`MAX_SESSION_ID_CHARS` is kept as its prefix and hash (:func:`session_key`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    query: str
    session_id: str | None = None
    pinned_category: str | None = None
    principals: tuple[str, ...] | None = None

    @field_validator("principals", mode="before")
    @classmethod
    def _principal_names(cls, value: Any) -> Any:
        """A list (or tuple, set) of nonblank names; one string is one principal."""
        if value is None:
            return None
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list | tuple | set | frozenset) or not all(
            isinstance(name, str) and name.strip() and not _SURROGATE.search(name) for name in names
        ):
            raise PydanticCustomError("principals", "the principals must be a list of nonblank names")
        return tuple(sorted({plain_string(name).strip() for name in names}))

    @field_validator("query", "session_id", "pinned_category", mode="before")
    @classmethod
    def _plain_string(cls, value: Any, info: ValidationInfo) -> Any:
        if type(value) is str or (value is None and info.field_name != "query"):
            return value
        if isinstance(value, str):
            return plain_string(value)
        name = _FIELD_NAMES[str(info.field_name)]
        kind = type(value).__name__
        raise PydanticCustomError(
            "not_a_string", "{name} must be a string, not {kind}", {"name": name, "kind": kind}
        )

    @field_validator("query")
    @classmethod
    def _readable_query(cls, query: str, info: ValidationInfo) -> str:
        max_chars = (info.context or {}).get("max_query_chars", len(query))
        if not query.strip():
            raise PydanticCustomError("empty", "the query is empty")
        if len(query) > max_chars:
            raise PydanticCustomError(
                "too_long",
                "the query has {n} characters; the limit is {limit} (retrieval.max_query_chars)",
                {"n": len(query), "limit": max_chars},
            )
        if _SURROGATE.search(query):
            raise PydanticCustomError("not_utf8", "the query is not valid UTF-8 text")
        if _CONTROL.search(query):
            raise PydanticCustomError("control", "the query contains control characters")
        if not any(not ch.isspace() and unicodedata.category(ch) != "Cf" for ch in query):
            raise PydanticCustomError("invisible", "the query has only invisible (format) characters")
        return query.strip()

    @field_validator("session_id")
    @classmethod
    def _session_key(cls, value: str | None) -> str | None:
        return None if value is None else session_key(value)

    @field_validator("pinned_category")
    @classmethod
    def _encodable(cls, value: str | None) -> str | None:
        return None if value is None else escape_surrogates(value)


def plain_string(value: Any) -> Any:
    """A ``str`` subclass as its plain string (its own methods are never called); else ``value``."""
    return str.__str__(value) if isinstance(value, str) and type(value) is not str else value


def valid_principals(principals: Any) -> tuple[str, ...] | None | bool:
    """``principals`` as a lookup takes them (sorted, stripped), ``None`` when not given, or
    ``False`` when they are not a list of nonblank names."""
    try:
        return LookupRequest.model_validate({"query": "-", "principals": principals}).principals
    except ValidationError:
        return False


def lookup_request(
    query: Any, max_chars: int, session_id: Any = None, pinned_category: Any = None, principals: Any = None
) -> LookupRequest | str:
    """The validated request, or why it cannot be looked up."""
    data = {
        "query": query,
        "session_id": session_id,
        "pinned_category": pinned_category,
        "principals": principals,
    }
    try:
        return LookupRequest.model_validate(data, context={"max_query_chars": max_chars})
    except ValidationError as exc:
        return exc.errors()[0]["msg"]


def query_problem(query: Any, max_chars: int) -> str | None:
    """Why a query cannot be looked up, or ``None`` when it is fine."""
    request = lookup_request(query, max_chars)
    return request if isinstance(request, str) else None


def rejected_result(query: Any, problem: str, session_domains: list[str]) -> LookupResult:
    """The ``invalid_input`` result saying why ``query`` was refused."""
    return failure_result(_echo(query), "invalid_input", f"Invalid query: {problem}.", session_domains)


def _echo(query: Any) -> str:
    """The rejected query as it can be echoed in JSON: short, and encodable as UTF-8.

    Only a string is echoed (another object's ``__str__`` may raise or lie); a lone surrogate
    (e.g. from ``surrogateescape`` decoding) is echoed as its escape sequence rather than
    making the whole result unserializable.
    """
    if not isinstance(query, str):
        return f"<{type(query).__name__}>"
    return escape_surrogates(str.__str__(query)[:200])


def failure_result(
    query: str, status: EvidenceStatus, message: str, session_domains: list[str]
) -> LookupResult:
    """A ``found=false`` result for a call that could not run the dataflow (credentials in
    the message masked)."""
    return LookupResult(
        query=query,
        found=False,
        evidence_status=status,
        evidence_blocks=[],
        context_pack=None,
        retrieval_trace=None,
        rerank_trace=None,
        relevance_level="none",
        completeness_hint="none: no evidence was returned",
        retrieved_domains_this_session=session_domains,
        message=mask_secrets(message),
    )
