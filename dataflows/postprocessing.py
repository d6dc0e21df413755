"""Post-processing: evidence candidates, evidence-key dedup, per-document cap, rule-based rerank."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from lookup_knowledge.adapters.answerability import AnswerabilityReader, passage_text
from lookup_knowledge.adapters.embedder import Embedder, EmbedderError
from lookup_knowledge.adapters.l0_index import normalize
from lookup_knowledge.adapters.multilingual import prose_lines
from lookup_knowledge.adapters.payload import (
    BREADCRUMB_FIELD,
    CATEGORY_FIELD,
    DOC_TYPE_FIELD,
    ENTITIES_FIELD,
    HEADING_PATH_FIELD,
    INGESTED_AT_FIELD,
    KEYWORDS_FIELD,
    LANGUAGE_FIELD,
    LOCATION_FIELD,
    SOURCE_FIELD,
    TITLE_FIELD,
)
from lookup_knowledge.adapters.search import SearchHit, identity_key
from lookup_knowledge.adapters.source_files import SourceFile
from lookup_knowledge.adapters.sparse import MAX_MATCHED_TERMS, distinctive, made_of_codes
from lookup_knowledge.config import RerankConfig
from lookup_knowledge.contract import BlockLocation, CappedChunk, EvidenceBlock, EvidenceCuts, L0Hints
from lookup_knowledge.frames import column_values, frame_columns, object_frame, records
from lookup_knowledge.instruction_flag import payload_instruction_like

from .retrieval import HybridFusion, SearchAttempt

# L0 hint kind -> (the candidate payload field it is compared with, the rerank weight it earns)
_HINT_KINDS = {
    "domain": (CATEGORY_FIELD, "domain_match"),  # the payload's category field holds the list
    "entity": (ENTITIES_FIELD, "entity_match"),
    "keyword": (KEYWORDS_FIELD, "keyword_match"),
    "title": (TITLE_FIELD, "title_match"),
}
CANDIDATE_COLUMNS = frame_columns([
    "evidence_key", "doc_id", "chunk_index", "point_id", "source", "title", "breadcrumb",
    "categories", "doc_type", "content", "score", "normalized_score", "rank_score", "dense_score",
    "sparse_score", "fused_score", "multilingual_score", "original_rank", "hit_reasons", "exact_codes",
    "l0_matches", "instruction_like", "ingested_at", "payload",
])  # fmt: skip
SCREENED_COLUMNS = frame_columns([*CANDIDATE_COLUMNS, "left_out"])
RERANK_COLUMNS = frame_columns([*CANDIDATE_COLUMNS, "line_score", "boosts", "rerank_score", "rank"])
MAX_LISTED_CUTS = 10  # capped chunks named in the trace; the counts cover all of them


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


def _final_hits(
    retrieval_attempts: list[SearchAttempt], retrieval_mode: str, weight: float, leader: SearchHit | None
) -> list[tuple[str, SearchHit, float, int]]:
    """Usable hits of the attempt(s) whose hits were used (the fallback decision's, and the
    search over other languages), each with the attempt that found them, its rank score and its
    place in that search, best first.

    The rank score is what post-processing orders and reranks by, in [0, 1]: the normalized
    cosine in dense mode; in sparse and hybrid mode, whose scores (BM25, rank fusion) have no
    fixed scale, the store's score as a share of the search's best, times ``weight``
    (:func:`_other_languages_weight`) for the search over other languages, whose ``leader``
    (:func:`_other_languages_leader`) ranks first.
    """
    ranked = []
    for attempt in retrieval_attempts:
        if not attempt.used:
            continue
        best = max((hit.score for hit in attempt.hits), default=0.0)
        places = {hit.point_id: place for place, hit in enumerate(attempt.hits, start=1)}
        for hit in attempt.usable:
            trust = weight if attempt.kind == "other_languages" else 1.0
            share = 1.0 if hit is leader else (hit.score / best if best > 0 else 0.0) * trust
            rank_score = hit.normalized_score if retrieval_mode == "dense" else share
            ranked.append((attempt.kind, hit, rank_score, places[hit.point_id]))
    return sorted(ranked, key=lambda row: (-row[2], row[1] is not leader))


def _used_hits(retrieval_attempts: list[SearchAttempt]) -> tuple[list[SearchHit], list[SearchHit]]:
    """The usable hits of the search the fallback decision chose, and of the search over other
    languages (none when it did not run)."""
    used = [attempt for attempt in retrieval_attempts if attempt.used]
    chosen = [hit for a in used if a.kind != "other_languages" for hit in a.usable]
    others = [hit for a in used if a.kind == "other_languages" for hit in a.usable]
    return chosen, others


def _other_languages_weight(chosen: list[SearchHit], others: list[SearchHit]) -> float:
    """How far the search over other languages is trusted beside the one the fallback chose: its
    best multilingual cosine as a share of that one's (at most 1). On pages in the question's
    language, what it finds in another (a code block taken for English) lies far from the
    question and ranks below the pages' own answer."""
    best_other, best_chosen = _best_multilingual(others), _best_multilingual(chosen)
    return min(1.0, best_other / best_chosen) if best_other and best_chosen else 1.0


def _other_languages_leader(chosen: list[SearchHit], others: list[SearchHit]) -> tuple[SearchHit, str] | None:
    """The search over other languages' best hit, with its hit reason, when it means the question
    better (a higher multilingual cosine) than the first hit of the search the fallback chose: it
    ranks first. Both legs of that search favour the question's language (BM25 matches its words
    only on pages written in it), so a page in it that does not answer led the answer written in
    another (``docs/multilingual.md``, a knowledge base in two languages)."""
    if not others or not chosen:
        return None
    best = max(others, key=lambda hit: hit.multilingual_score or 0.0)
    first = max(chosen, key=lambda hit: hit.score).multilingual_score
    if first is None:  # ranked by its words alone (not in the multilingual search's top): no cosine
        return None
    cosine = best.multilingual_score or 0.0
    if cosine <= first:
        return None
    return best, f"other_languages:first (multilingual {cosine:.2f} > the first search's first {first:.2f})"


def _best_multilingual(hits: list[SearchHit]) -> float:
    return max((hit.multilingual_score or 0.0 for hit in hits), default=0.0)


def _shown_terms(hit: SearchHit) -> list[str]:
    """The first :data:`MAX_MATCHED_TERMS` matched terms, each marked ``~`` when the block holds
    it only in another form of its stem (BM25's English stemmer: ``parental~`` for "parent")."""
    shown = hit.matched_terms[:MAX_MATCHED_TERMS]
    written = set(hit.written_terms(shown))
    return [term if term in written else f"{term}~" for term in shown]


def _signal_reasons(hit: SearchHit, place: int, retrieval_mode: str, fusion: str) -> list[str]:
    """Which searches found a hit, at which place (sparse: with the query terms it matched)."""
    if retrieval_mode == "dense":
        return []
    reasons = []
    if hit.dense_rank is not None:
        reasons.append(f"vector:dense rank {hit.dense_rank}")
    if hit.sparse_rank is not None:
        terms = f" ({', '.join(_shown_terms(hit))})" if hit.matched_terms else ""
        reasons.append(f"vector:sparse rank {hit.sparse_rank}{terms}")
    if hit.multilingual_rank is not None:
        reasons.append(f"vector:multilingual rank {hit.multilingual_rank}")
    if retrieval_mode == "hybrid":
        reasons.append(f"fused rank {place} ({hit.fusion or fusion})")
    return reasons + [f"exact_code:{code}" for code in hit.exact_codes]


def candidates_df(
    retrieval_attempts: list[SearchAttempt],
    l0_hints: L0Hints,
    retrieval_mode: str,
    hybrid_fusion: HybridFusion,
) -> pd.DataFrame:
    """The final hit list as evidence candidates: identity fields, scores and hit reasons
    (vector attempt, the searches that found it, L0 matches), best first."""
    hint_terms = _hint_terms(l0_hints)
    fusion = hybrid_fusion.method
    rows = []
    chosen, others = _used_hits(retrieval_attempts)
    leader, leader_reason = _other_languages_leader(chosen, others) or (None, "")
    weight = _other_languages_weight(chosen, others)
    ranked = _final_hits(retrieval_attempts, retrieval_mode, weight, leader)
    for rank, (attempt, hit, rank_score, place) in enumerate(ranked, start=1):
        matches = _l0_matches(hit, hint_terms)
        signals = _signal_reasons(hit, place, retrieval_mode, fusion)
        if hit is leader:
            signals.append(leader_reason)
        payload = hit.payload
        rows.append({
            "evidence_key": identity_key(hit, rank), "doc_id": hit.doc_id,
            "chunk_index": hit.chunk_index, "point_id": hit.point_id,
            "source": payload.get(SOURCE_FIELD), "title": payload.get(TITLE_FIELD),
            "breadcrumb": payload.get(BREADCRUMB_FIELD),
            "categories": tuple(payload.get(CATEGORY_FIELD) or ()), "doc_type": payload.get(DOC_TYPE_FIELD),
            "content": hit.content, "score": hit.score, "normalized_score": hit.normalized_score,
            "rank_score": rank_score, "dense_score": hit.dense_score,
            "sparse_score": hit.sparse_score, "fused_score": hit.fused_score, "original_rank": rank,
            "multilingual_score": hit.multilingual_score,
            "hit_reasons": [f"vector:{attempt}", *signals]
            + [f"l0_{kind}:{term}" for kind, term in matches],
            "exact_codes": hit.exact_codes,  # the query's codes it holds verbatim (its exact_code: reasons)
            "l0_matches": matches,
            "instruction_like": payload_instruction_like(payload, payload.get(BREADCRUMB_FIELD), hit.content),
            "ingested_at": payload.get(INGESTED_AT_FIELD),
            "payload": payload,  # location and source file are read for the returned blocks only
        })  # fmt: skip
    return object_frame(rows, CANDIDATE_COLUMNS)


def screened_df(
    candidates_df: pd.DataFrame,
    max_chunks_per_document: int | None,
    return_n: int,
    relative_evidence_floor: float,
) -> pd.DataFrame:
    """Distinct candidates, score-sorted, each with why it was left out (``None``: kept).

    Reasons: ``below_evidence_floor`` (under ``relative_evidence_floor`` times the query's best
    on every signal it has: the normalized dense score and, from a sparse search, the BM25
    score), ``document_cap`` (``max_chunks_per_document`` reached: a document's places go to
    its chunks that hold one of the query's codes first, then by score), ``return_n`` (but a
    distinctive code of the query that no kept block holds gets a place for its best holder:
    :func:`_code_places`).
    """
    ordered = sorted(records(candidates_df), key=lambda c: (-c["rank_score"], c["original_rank"]))
    below = _below_floor(ordered, relative_evidence_floor)
    placed = _document_places(ordered, max_chunks_per_document)
    screened: dict[str, dict] = {}
    kept = 0
    for candidate in ordered:
        key = candidate["evidence_key"]
        if key in screened:  # a lower-ranked copy of a block: only its reasons count
            reasons = screened[key]["hit_reasons"]
            reasons += [r for r in candidate["hit_reasons"] if r not in reasons]
            continue
        if below(candidate):
            left_out = "below_evidence_floor"
        elif key not in placed:
            left_out = "document_cap"
        elif kept >= return_n:
            left_out = "return_n"
        else:
            left_out, kept = None, kept + 1
        screened[key] = {**candidate, "hit_reasons": list(candidate["hit_reasons"]), "left_out": left_out}
    return object_frame(_code_places(list(screened.values())), SCREENED_COLUMNS)


def _code_places(screened: list[dict]) -> list[dict]:
    """Give each distinctive code of the query (``--editor``, ``os.PathError``:
    :func:`distinctive`) that a candidate cut by ``return_n`` holds, and no kept candidate does,
    a place: its best holder takes the place of the last kept candidate holding no code, which
    ``return_n`` cuts instead. The store may rank the one chunk a question names below five that
    share its other words, and the rerank's boosts order only what is kept."""
    kept = [row for row in screened if row["left_out"] is None]
    held = {code.lower() for row in kept for code in row["exact_codes"]}
    for row in screened:
        codes = {code.lower() for code in row["exact_codes"] if distinctive(code)}
        if row["left_out"] != "return_n" or not codes - held:
            continue
        uncoded = [other for other in kept if not other["exact_codes"]]
        if not uncoded:
            break
        uncoded[-1]["left_out"], row["left_out"] = "return_n", None
        kept = [other for other in kept if other is not uncoded[-1]] + [row]
        held |= codes
    return screened


def _document_places(ordered: list[dict], max_chunks_per_document: int | None) -> set[str]:
    """The evidence keys the per-document cap lets through: per document, its chunks holding an
    exact code first (a question naming ``SOME_ENV_VAR`` keeps that section, not two sibling
    ``SOME_ENV_VAR_PROTOCOL`` ones that outscore it), then the rest in score order."""
    keys = list(dict.fromkeys(c["evidence_key"] for c in ordered))
    if max_chunks_per_document is None:
        return set(keys)
    first = {c["evidence_key"]: c for c in reversed(ordered)}  # each key's best-placed copy
    coded = {c["evidence_key"] for c in ordered if _holds_code(c)}
    places: set[str] = set()
    per_document: Counter[str] = Counter()
    for key in sorted(keys, key=lambda k: k not in coded):  # stable: score order within each group
        document = first[key]["doc_id"] or key
        per_document[document] += 1
        if per_document[document] <= max_chunks_per_document:
            places.add(key)
    return places


def _holds_code(candidate: dict) -> bool:
    return bool(candidate["exact_codes"])


def _below_floor(candidates: list[dict], relative_evidence_floor: float) -> Callable[[dict], bool]:
    """Whether a candidate is under the floor on its dense score, on its sparse score and on its
    multilingual cosine (each it has)."""
    dense_floor = relative_evidence_floor * max((c["normalized_score"] for c in candidates), default=0.0)
    floors = {
        name: relative_evidence_floor * max((c[name] for c in candidates if c[name] is not None), default=0.0)
        for name in ("sparse_score", "multilingual_score")
    }

    def below(candidate: dict) -> bool:
        return candidate["normalized_score"] < dense_floor and all(
            candidate[name] is None or candidate[name] < floor for name, floor in floors.items()
        )

    return below


def deduped_df(screened_df: pd.DataFrame) -> pd.DataFrame:
    """Candidates after score sort, evidence-key dedup, evidence floor, per-document cap and
    ``return_n`` cut: the blocks that go on to the rerank."""
    kept = [row for row in records(screened_df) if row["left_out"] is None]
    return object_frame(kept, CANDIDATE_COLUMNS)


def evidence_cuts(screened_df: pd.DataFrame, deduped_df: pd.DataFrame) -> EvidenceCuts:
    """How many qualifying chunks were cut, by reason, and which capped chunks outscored a kept one."""
    rows = records(screened_df)
    weakest_kept = min(column_values(deduped_df, "rank_score"), default=None)
    counts = Counter(row["left_out"] for row in rows if row["left_out"] is not None)
    capped = [
        CappedChunk(evidence_key=row["evidence_key"], normalized_score=row["normalized_score"])
        for row in rows
        if row["left_out"] == "document_cap" and weakest_kept is not None and row["rank_score"] > weakest_kept
    ]
    return EvidenceCuts(
        below_evidence_floor=counts["below_evidence_floor"],
        document_cap=counts["document_cap"],
        return_n=counts["return_n"],
        capped_above_returned=capped[:MAX_LISTED_CUTS],
    )


def line_scores(
    deduped_df: pd.DataFrame,
    query_language: str,
    rerank_weights: RerankConfig,
    multilingual_query_vector: np.ndarray | None = None,
    multilingual_embedder: Embedder | None = None,
) -> dict[str, float] | None:
    """For a question asked across languages (its multilingual vector, and every block written
    in another language than it), each block's best multilingual cosine of one of its
    :func:`prose_lines`, by evidence key; ``None`` otherwise (an English question under
    ``multilingual.search: auto``, a block in the question's language or of unknown language,
    ``rerank.cross_language_lines`` off, or the encoder failed: the blocks keep their rank
    scores). The store ranks such a question by the chunk's one multilingual vector, which blurs
    the one line that answers it (docs/multilingual.md)."""
    vector, rows = multilingual_query_vector, records(deduped_df)
    if vector is None or multilingual_embedder is None or not rerank_weights.cross_language_lines:
        return None
    languages = [row["payload"].get(LANGUAGE_FIELD) for row in rows]
    if not rows or any(language in (None, query_language) for language in languages):
        return None
    lines = [prose_lines(row["breadcrumb"] or "", row["content"] or "") or [""] for row in rows]
    distinct = list(dict.fromkeys(line for block in lines for line in block))  # a page's chunks share lines
    try:
        cosines = multilingual_embedder.embed_documents(distinct) @ vector
    except EmbedderError:
        return None
    cosine = dict(zip(distinct, cosines, strict=True))
    return {
        row["evidence_key"]: float(max(cosine[line] for line in block))
        for row, block in zip(rows, lines, strict=True)
    }


def answer_scores(
    deduped_df: pd.DataFrame,
    query: str,
    query_language: str,
    answer_reader: AnswerabilityReader | None = None,
) -> dict[str, float] | None:
    """For an English question, each kept block's answerability score by evidence key: the
    reader's probability that the block answers it, read from the question and the block's
    text together (``adapters/answerability.py``); ``None`` for a question in another language, a
    block not in English (the reader is trained on English only), ``answerability.reader`` off, or
    the reader failing."""
    if answer_reader is None or query_language != "en":  # the default: nothing read, nothing built
        return None
    rows = records(deduped_df)
    if not rows or {row["payload"].get(LANGUAGE_FIELD) for row in rows} - {"en", None}:
        return None
    texts = [passage_text(row["title"], row["breadcrumb"], row["content"] or "") for row in rows]
    try:
        scores = answer_reader.scores(query, texts)
    except RuntimeError:  # onnxruntime failed: the verdict reads as without the reader
        return None
    return {row["evidence_key"]: float(score) for row, score in zip(rows, scores, strict=True)}


def reranked_df(
    deduped_df: pd.DataFrame,
    rerank_weights: RerankConfig,
    query_terms: dict[str, int],
    line_scores: dict[str, float] | None = None,
) -> pd.DataFrame:
    """Rule-based rerank: weighted rank score plus recorded boosts; ties keep the store's order
    (rank fusion ties often: two hits first in one search and second in the other), then go
    by evidence key. A block holding every code of a question made of codes alone ("what does
    baseURL do": :func:`made_of_codes`) earns ``code_question``: the question is those codes.
    A question asked across languages weighs each block's best line (:func:`line_scores`) plus
    ``cross_language_rank`` times its rank score in place of its rank score."""
    scored = []
    for candidate in records(deduped_df):
        boosts = _boosts(candidate["l0_matches"], candidate["doc_type"], rerank_weights)
        codes = candidate["exact_codes"]
        if rerank_weights.exact_code and codes:  # its first code names the boost
            boosts.append((f"exact_code:{codes[0]}", rerank_weights.exact_code))
        if rerank_weights.code_question and made_of_codes(query_terms, codes):
            boosts.append((f"code_question:{codes[0]}", rerank_weights.code_question))
        line = line_scores.get(candidate["evidence_key"]) if line_scores else None
        basis = (
            candidate["rank_score"]
            if line is None
            else line + rerank_weights.cross_language_rank * candidate["rank_score"]
        )
        score = rerank_weights.vector * basis + sum(c for _, c in boosts)
        scored.append({**candidate, "line_score": line, "boosts": boosts, "rerank_score": score})
    scored.sort(key=lambda c: (-c["rerank_score"], -c["rank_score"], c["original_rank"], c["evidence_key"]))
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


def ranked_evidence_blocks(reranked_df: pd.DataFrame) -> list[EvidenceBlock]:
    """The final evidence blocks, in reranked order, before their freshness is checked."""
    return [_evidence_block(row, SourceFile.from_payload(row["payload"])) for row in records(reranked_df)]


_BLOCK_FIELDS = (
    "evidence_key", "doc_id", "chunk_index", "source", "title", "breadcrumb", "content", "score",
    "normalized_score", "dense_score", "sparse_score", "fused_score", "rerank_score", "rank",
    "hit_reasons", "instruction_like", "ingested_at",
)  # fmt: skip  # the reranked columns an evidence block carries as they are


def _evidence_block(row: Mapping[str, Any], source_file: SourceFile | None) -> EvidenceBlock:
    return EvidenceBlock(
        **{name: row[name] for name in _BLOCK_FIELDS},
        category=", ".join(row["categories"]) or None,
        language=row["payload"].get(LANGUAGE_FIELD),
        location=_block_location(row["payload"]),
        source_path=source_file.display_path if source_file else None,
        source_version=source_file.version if source_file else None,
    )


def _block_location(payload: Mapping[str, Any]) -> BlockLocation | None:
    """The chunk's location from its payload; ``None`` for a store ingested before locations."""
    location = payload.get(LOCATION_FIELD)
    if not isinstance(location, Mapping):
        return None
    heading_path = [str(name) for name in payload.get(HEADING_PATH_FIELD) or ()]
    return BlockLocation.model_validate({**location, "heading_path": heading_path})
