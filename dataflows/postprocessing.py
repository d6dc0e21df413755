"""Post-processing: evidence candidates, evidence-key dedup, per-document cap, rule-based rerank."""

from __future__ import annotations

import pandas as pd
from lookup_knowledge.adapters.l0_index import L0Hints, normalize
from lookup_knowledge.adapters.search import SearchHit, identity_key

from lookup_knowledge.config import RerankConfig
from lookup_knowledge.contract import EvidenceBlock

# L0 hint kind -> (the candidate payload field it is compared with, the rerank weight it earns)
_HINT_KINDS = {
    "domain": ("category", "domain_match"),  # payload field "category" holds the list
    "entity": ("entities", "entity_match"),
    "keyword": ("keywords", "keyword_match"),
    "title": ("title", "title_match"),
}
CANDIDATE_COLUMNS = [
    "evidence_key", "doc_id", "chunk_index", "point_id", "source", "title", "breadcrumb",
    "categories", "doc_type", "content", "score", "normalized_score", "original_rank",
    "hit_reasons", "l0_matches",
]  # fmt: skip


def _hint_terms(l0_hints: L0Hints) -> dict[str, dict[str, str]]:
    """Hint kind -> normalized term -> the term as written."""
    lists = {
        "domain": l0_hints.domains,
        "entity": l0_hints.entities,
        "keyword": l0_hints.matched_keywords,
        "title": l0_hints.matched_titles,
    }
    return {kind: {normalize(t): t for t in terms} for kind, terms in lists.items()}


def _l0_matches(hit: SearchHit, hint_terms: dict[str, dict[str, str]]) -> list[tuple[str, str]]:
    matches = []
    for kind, (field, _) in _HINT_KINDS.items():
        terms = hint_terms[kind]
        if not terms:
            continue
        values = hit.payload.get(field) or ()
        for value in [values] if isinstance(values, str) else values:
            if (term := terms.get(normalize(value))) is not None:
                matches.append((kind, term))
    return matches


def candidates_df(final_hits: list[tuple[str, SearchHit]], l0_hints: L0Hints) -> pd.DataFrame:
    """Evidence candidates with identity fields and hit reasons (vector attempt + L0 matches)."""
    hint_terms = _hint_terms(l0_hints)
    rows = []
    for rank, (attempt, hit) in enumerate(final_hits, start=1):
        matches = _l0_matches(hit, hint_terms)
        payload = hit.payload
        rows.append((
            identity_key(hit, rank), hit.doc_id, hit.chunk_index, hit.point_id,
            payload.get("source"), payload.get("title"), payload.get("breadcrumb"),
            tuple(payload.get("category") or ()), payload.get("doc_type"),
            hit.content, hit.score, hit.normalized_score, rank,
            [f"vector:{attempt}"] + [f"l0_{kind}:{term}" for kind, term in matches], matches,
        ))  # fmt: skip
    return pd.DataFrame.from_records(rows, columns=CANDIDATE_COLUMNS)


def deduped_df(
    candidates_df: pd.DataFrame, max_chunks_per_document: int | None, return_n: int
) -> pd.DataFrame:
    """Score-sorted candidates, one per evidence key (reasons merged), capped per document, cut."""
    ordered = candidates_df.sort_values(
        ["normalized_score", "original_rank"], ascending=[False, True], kind="stable"
    )
    merged: dict[str, list[str]] = {}
    for key, reasons in zip(ordered["evidence_key"], ordered["hit_reasons"], strict=True):
        bucket = merged.setdefault(key, [])
        bucket.extend(reason for reason in reasons if reason not in bucket)
    unique = ordered.drop_duplicates("evidence_key").assign(
        hit_reasons=lambda df: [merged[key] for key in df["evidence_key"]]
    )
    if max_chunks_per_document is not None:
        document = unique["doc_id"].fillna(unique["evidence_key"])
        unique = unique[unique.groupby(document).cumcount() < max_chunks_per_document]
    return unique.head(return_n)


def reranked_df(deduped_df: pd.DataFrame, rerank_weights: RerankConfig) -> pd.DataFrame:
    """Rule-based rerank: weighted vector score plus recorded boosts; deterministic tie-breaks."""
    boosts = [
        _boosts(matches, doc_type, rerank_weights)
        for matches, doc_type in zip(deduped_df["l0_matches"], deduped_df["doc_type"], strict=True)
    ]
    scored = deduped_df.assign(
        boosts=boosts,
        rerank_score=rerank_weights.vector * deduped_df["normalized_score"]
        + [sum(c for _, c in b) for b in boosts],
    )
    ranked = scored.sort_values(
        ["rerank_score", "normalized_score", "evidence_key"],
        ascending=[False, False, True],
        kind="stable",
    )
    return ranked.assign(rank=range(1, len(ranked) + 1)).reset_index(drop=True)


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
            evidence_key=row.evidence_key,
            doc_id=row.doc_id,
            chunk_index=None if pd.isna(row.chunk_index) else int(row.chunk_index),
            source=row.source,
            title=row.title,
            breadcrumb=row.breadcrumb,
            category=", ".join(row.categories) or None,
            content=row.content,
            score=row.score,
            normalized_score=row.normalized_score,
            rerank_score=row.rerank_score,
            rank=row.rank,
            hit_reasons=row.hit_reasons,
        )
        for row in reranked_df.itertuples(index=False)
    ]
