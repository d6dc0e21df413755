"""Post-processing: evidence candidates, evidence-key dedup, per-document cap, rule-based rerank."""

from __future__ import annotations

from collections import Counter

import pandas as pd
from lookup_knowledge.adapters.l0_index import L0Hints, normalize
from lookup_knowledge.adapters.search import SearchHit, identity_key

from lookup_knowledge.config import RerankConfig
from lookup_knowledge.contract import EvidenceBlock
from lookup_knowledge.frames import frame_columns, object_frame, records

from .retrieval import SearchAttempt

# L0 hint kind -> (the candidate payload field it is compared with, the rerank weight it earns)
_HINT_KINDS = {
    "domain": ("category", "domain_match"),  # payload field "category" holds the list
    "entity": ("entities", "entity_match"),
    "keyword": ("keywords", "keyword_match"),
    "title": ("title", "title_match"),
}
CANDIDATE_COLUMNS = frame_columns([
    "evidence_key", "doc_id", "chunk_index", "point_id", "source", "title", "breadcrumb",
    "categories", "doc_type", "content", "score", "normalized_score", "original_rank",
    "hit_reasons", "l0_matches",
])  # fmt: skip
RERANK_COLUMNS = frame_columns([*CANDIDATE_COLUMNS, "boosts", "rerank_score", "rank"])


def _hint_terms(l0_hints: L0Hints) -> list[tuple[str, str, dict[str, str]]]:
    """(hint kind, payload field, normalized term -> the term as written) for each kind with hints."""
    lists = {
        "domain": l0_hints.domains,
        "entity": l0_hints.entities,
        "keyword": l0_hints.matched_keywords,
        "title": l0_hints.matched_titles,
    }
    return [
        (kind, _HINT_KINDS[kind][0], {normalize(t): t for t in terms})
        for kind, terms in lists.items()
        if terms
    ]


def _l0_matches(hit: SearchHit, hint_terms: list[tuple[str, str, dict[str, str]]]) -> list[tuple[str, str]]:
    matches = []
    for kind, field, terms in hint_terms:
        values = hit.payload.get(field) or ()
        for value in [values] if isinstance(values, str) else values:
            if (term := terms.get(normalize(value))) is not None:
                matches.append((kind, term))
    return matches


def _final_hits(retrieval_attempts: list[SearchAttempt]) -> list[tuple[str, SearchHit]]:
    """Usable hits of the attempt(s) whose hits the fallback decision used, tagged with the
    attempt that found them, best first."""
    tagged = [(a.kind, hit) for a in retrieval_attempts if a.used for hit in a.usable]
    return sorted(tagged, key=lambda pair: -pair[1].normalized_score)


def candidates_df(retrieval_attempts: list[SearchAttempt], l0_hints: L0Hints) -> pd.DataFrame:
    """The final hit list as evidence candidates: identity fields and hit reasons (vector
    attempt + L0 matches), best first."""
    hint_terms = _hint_terms(l0_hints)
    rows = []
    for rank, (attempt, hit) in enumerate(_final_hits(retrieval_attempts), start=1):
        matches = _l0_matches(hit, hint_terms)
        payload = hit.payload
        rows.append({
            "evidence_key": identity_key(hit, rank), "doc_id": hit.doc_id,
            "chunk_index": hit.chunk_index, "point_id": hit.point_id,
            "source": payload.get("source"), "title": payload.get("title"),
            "breadcrumb": payload.get("breadcrumb"),
            "categories": tuple(payload.get("category") or ()), "doc_type": payload.get("doc_type"),
            "content": hit.content, "score": hit.score, "normalized_score": hit.normalized_score,
            "original_rank": rank,
            "hit_reasons": [f"vector:{attempt}"] + [f"l0_{kind}:{term}" for kind, term in matches],
            "l0_matches": matches,
        })  # fmt: skip
    return object_frame(rows, CANDIDATE_COLUMNS)


def deduped_df(
    candidates_df: pd.DataFrame, max_chunks_per_document: int | None, return_n: int
) -> pd.DataFrame:
    """Score-sorted candidates, one per evidence key (reasons merged), capped per document, cut."""
    ordered = sorted(records(candidates_df), key=lambda c: (-c["normalized_score"], c["original_rank"]))
    kept: dict[str, dict] = {}
    left_out: set[str] = set()
    per_document: Counter[str] = Counter()
    for candidate in ordered:
        key = candidate["evidence_key"]
        if key in kept:  # a lower-ranked copy of a kept block: only its reasons count
            reasons = kept[key]["hit_reasons"]
            reasons += [r for r in candidate["hit_reasons"] if r not in reasons]
        elif key not in left_out:
            document = candidate["doc_id"] or key
            per_document[document] += 1
            capped = max_chunks_per_document is not None and per_document[document] > max_chunks_per_document
            if capped or len(kept) >= return_n:
                left_out.add(key)
            else:
                kept[key] = {**candidate, "hit_reasons": list(candidate["hit_reasons"])}
    return object_frame(list(kept.values()), CANDIDATE_COLUMNS)


def reranked_df(deduped_df: pd.DataFrame, rerank_weights: RerankConfig) -> pd.DataFrame:
    """Rule-based rerank: weighted vector score plus recorded boosts; deterministic tie-breaks."""
    scored = []
    for candidate in records(deduped_df):
        boosts = _boosts(candidate["l0_matches"], candidate["doc_type"], rerank_weights)
        score = rerank_weights.vector * candidate["normalized_score"] + sum(c for _, c in boosts)
        scored.append({**candidate, "boosts": boosts, "rerank_score": score})
    scored.sort(key=lambda c: (-c["rerank_score"], -c["normalized_score"], c["evidence_key"]))
    for rank, candidate in enumerate(scored, start=1):
        candidate["rank"] = rank
    return object_frame(scored, RERANK_COLUMNS)


def _boosts(
    matches: list[tuple[str, str]], doc_type: str | None, weights: RerankConfig
) -> list[tuple[str, float]]:
    boosts: list[tuple[str, float]] = []
    seen: set[str] = set()
    for kind, term in matches:
        weight_name = _HINT_KINDS[kind][1]
        weight = getattr(weights, weight_name)
        if weight and weight_name not in seen:  # each kind of boost counts once per block
            seen.add(weight_name)
            boosts.append((f"{weight_name}:{term}", weight))
    if doc_type and (weight := weights.source_type.get(doc_type)):
        boosts.append((f"source_type:{doc_type}", weight))
    return boosts


def evidence_blocks(reranked_df: pd.DataFrame) -> list[EvidenceBlock]:
    """The final evidence blocks, in reranked order."""
    return [
        EvidenceBlock(
            evidence_key=row["evidence_key"],
            doc_id=row["doc_id"],
            chunk_index=row["chunk_index"],
            source=row["source"],
            title=row["title"],
            breadcrumb=row["breadcrumb"],
            category=", ".join(row["categories"]) or None,
            content=row["content"],
            score=row["score"],
            normalized_score=row["normalized_score"],
            rerank_score=row["rerank_score"],
            rank=row["rank"],
            hit_reasons=row["hit_reasons"],
        )
        for row in records(reranked_df)
    ]
