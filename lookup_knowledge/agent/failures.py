"""The ``found=false`` results of a call that could not run the dataflow, built here only: its
request refused (``invalid_input``), or the store or the model unavailable (``retrieval_failed``).

>>> rejected_result(lookup_request("   "), []).message  # doctest: +SKIP
'Invalid query: the query is empty.'
"""

from __future__ import annotations

from lookup_knowledge.adapters.redaction import mask_secrets
from lookup_knowledge.agent.request import RejectedRequest
from lookup_knowledge.contract import EvidenceStatus, LookupResult


def rejected_result(request: RejectedRequest, session_domains: list[str]) -> LookupResult:
    """The ``invalid_input`` result saying why ``request`` was refused."""
    return _failure(request.query, "invalid_input", f"Invalid query: {request.problem}.", session_domains)


def retrieval_failed_result(query: str, failure: object, session_domains: list[str]) -> LookupResult:
    """The ``retrieval_failed`` result of a lookup the store or the model failed (``failure``:
    the exception, or what it said)."""
    return _failure(query, "retrieval_failed", f"Knowledge retrieval failed: {failure}", session_domains)


def _failure(query: str, status: EvidenceStatus, message: str, session_domains: list[str]) -> LookupResult:
    """A ``found=false`` result without a trace (credentials in the message masked)."""
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
