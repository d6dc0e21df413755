"""L1 dense retrieval through the search port, with the filtered-then-unfiltered fallback."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from hamilton.function_modifiers import config
from lookup_knowledge.adapters.search import KnowledgeSearchPort, SearchHit, SearchRequest

from lookup_knowledge.contract import FallbackReason


@dataclass(frozen=True, slots=True)
class SearchAttempt:
    """One search through the port: its request shape, hits (usable or not) and error, if any."""

    kind: Literal["filtered", "unfiltered"]
    filter: str | None
    width: int
    hits: list[SearchHit] = field(default_factory=list)
    usable: list[SearchHit] = field(default_factory=list)
    error: str | None = None

    @property
    def top_normalized_score(self) -> float | None:
        return max((hit.normalized_score for hit in self.hits), default=None)


@dataclass(frozen=True, slots=True)
class FallbackDecision:
    """Whether the unfiltered retry runs, and why."""

    retry: bool
    reason: FallbackReason | None = None


def _attempt(
    kind: Literal["filtered", "unfiltered"],
    query: str,
    query_vector: np.ndarray,
    category: str | None,
    search_port: KnowledgeSearchPort,
    retrieve_k: int,
    min_evidence_score: float,
) -> SearchAttempt:
    request = SearchRequest(query, query_vector, retrieve_k, category)
    try:
        hits = search_port.search(request)
    except Exception as exc:  # any backend failure is traced and answered by the fallback
        return SearchAttempt(kind, category, retrieve_k, error=f"{type(exc).__name__}: {exc}")
    usable = [hit for hit in hits if _is_usable(hit, min_evidence_score)]
    return SearchAttempt(kind, category, retrieve_k, hits, usable)


def _is_usable(hit: SearchHit, min_evidence_score: float) -> bool:
    return hit.normalized_score >= min_evidence_score and bool(hit.content.strip())


@config.when_not(l1_enabled=False)
def filtered_hits(
    query: str,
    query_vector: np.ndarray,
    category_filter: str | None,
    search_port: KnowledgeSearchPort,
    retrieve_k: int,
    min_evidence_score: float,
) -> SearchAttempt:
    """L1 dense retrieval, ``retrieve_k`` wide, with the category filter when there is one."""
    kind = "filtered" if category_filter is not None else "unfiltered"
    return _attempt(kind, query, query_vector, category_filter, search_port, retrieve_k, min_evidence_score)


@config.when_not(l1_enabled=False)
def fallback_decision(
    filtered_hits: SearchAttempt, reference_threshold: float, fallback_enabled: bool = True
) -> FallbackDecision:
    """Retry unfiltered when a filtered search erred, found nothing usable, or scored too low."""
    if filtered_hits.kind == "unfiltered" or not fallback_enabled:
        return FallbackDecision(retry=False)
    if filtered_hits.error is not None:
        return FallbackDecision(retry=True, reason="filtered_vector_error")
    if not filtered_hits.usable:
        return FallbackDecision(retry=True, reason="filtered_vector_no_evidence")
    if (filtered_hits.top_normalized_score or 0.0) < reference_threshold:
        return FallbackDecision(retry=True, reason="filtered_vector_low_quality")
    return FallbackDecision(retry=False)


@config.when_not(l1_enabled=False)
def unfiltered_hits(
    fallback_decision: FallbackDecision,
    query: str,
    query_vector: np.ndarray,
    search_port: KnowledgeSearchPort,
    retrieve_k: int,
    min_evidence_score: float,
) -> SearchAttempt | None:
    """The unfiltered retry with the raw query, run at most once and only when decided."""
    if not fallback_decision.retry:
        return None
    return _attempt("unfiltered", query, query_vector, None, search_port, retrieve_k, min_evidence_score)


@config.when_not(l1_enabled=False)
def retrieval_attempts(
    filtered_hits: SearchAttempt, unfiltered_hits: SearchAttempt | None
) -> list[SearchAttempt]:
    """The searches that ran, in order."""
    return [filtered_hits] if unfiltered_hits is None else [filtered_hits, unfiltered_hits]


@config.when(l1_enabled=False)
def retrieval_attempts__l1_disabled() -> list[SearchAttempt]:
    """No searches: L1 is disabled by configuration, so nothing can become evidence."""
    return []


@config.when(l1_enabled=False)
def fallback_decision__l1_disabled() -> FallbackDecision:
    """No fallback without L1."""
    return FallbackDecision(retry=False)
