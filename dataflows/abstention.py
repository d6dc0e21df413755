"""Abstention: whether the hits plausibly answer the question, read from signals that carry
across corpora (``docs/trust.md``).

A knowledge base that has nothing on a question still returns nearest neighbours, at cosines
that mean different things on different stores (an off-topic question's best cosine is 0.25 on
one store, 0.45 on another). So the lookup's best dense cosine is read against *this store's*
null distribution: the best cosines it gives the probe set (``lookup_knowledge.probes``),
questions it cannot answer, in the query's script. The verdict's ``margin`` is how far the
lookup's best lies above the probes' median, in units of their spread (median to 90th
percentile); a lookup is evidence when that margin reaches ``abstention.strictness`` and (sparse,
hybrid) the best hits hold at least one of the query's informative words. Near the bar the
share of the query's information those words carry (the store's IDF) decides: a margin just
short passes with much of it, one just above fails with almost none.

The trace also shows where the top block (the first returned) lies in the dense and the BM25
search, and how much of the query it holds: the relevance level reads them (both searches
ranking it first is what, measured, tells a relevant top block from a wrong one).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pandas as pd
from hamilton.function_modifiers import config

from lookup_knowledge.adapters.embedder import Embedder
from lookup_knowledge.adapters.payload import TITLE_FIELD
from lookup_knowledge.adapters.search import KnowledgeSearchPort, SearchHit, SearchRequest
from lookup_knowledge.adapters.sparse import bm25_encoder, code_of, distinctive, made_of_codes
from lookup_knowledge.calibration import (
    NEAR_BAR,
    UNHELD_SHARE,
    ProbeCalibration,
    ProbeNull,
    information_shares,
    script_of,
    uninformative,
)
from lookup_knowledge.contract import VerdictReason
from lookup_knowledge.frames import column_values

from .retrieval import SearchAttempt

COVERAGE_HITS = 3  # the best hits whose matched terms count toward the query's coverage
CJK_COVERAGE = 0.3  # a CJK query's share of terms its best hits must hold (set on the sample KB alone)
# (share of the query's IDF weight the best hits hold, by how much in margin units it lowers the bar)
INFORMATIVE_RELIEFS = ((0.4, 0.5), (0.9, 1.0))
MAX_RELIEF = max(relief for _, relief in INFORMATIVE_RELIEFS)
EVIDENCE_REASONS = ("plausible", "exact_code", "named_title", "informative_terms")


@dataclass(frozen=True, slots=True)
class AbstentionPolicy:
    """How sure the evidence must be (``abstention.*``)."""

    enabled: bool = True
    strictness: float = 1.5
    own_questions: bool = True  # the bar rises to the margin 95% of the store's own-text questions reach

    def bar(self, probe_null: ProbeNull) -> float:
        """The margin a lookup needs on this store: ``strictness``, raised (``own_questions``) to
        the margin that 95% of questions made from the store's own text reach: a store whose own
        questions all score high (scientific abstracts) asks more of a question than one whose
        questions score little (a docs site's short pages)."""
        own = probe_null.own_questions_p5() if self.own_questions else None
        return max(self.strictness, own) if own is not None else self.strictness


@dataclass(frozen=True, slots=True)
class EvidenceVerdict:
    """Whether the candidates plausibly answer the question, and what that was read from."""

    plausible: bool
    reason: VerdictReason
    margin: float | None = None
    dense_top: float | None = None
    dense_percentile: float | None = None
    null_median: float | None = None
    null_p90: float | None = None
    probes: int = 0
    lexical_coverage: float | None = None
    top_hit_coverage: float | None = None
    informative_coverage: float | None = None
    unheld_share: float | None = None
    query_terms: tuple[str, ...] = ()
    matched_terms: tuple[str, ...] = ()
    top_dense_rank: int | None = None
    top_sparse_rank: int | None = None
    strictness: float = 1.5
    own_questions_p5: float | None = None


@config.when(l1_enabled=True)
def probe_null(
    search_request: SearchRequest,
    search_port: KnowledgeSearchPort,
    embedder: Embedder,
    store_calibration: ProbeCalibration | None = None,
) -> ProbeNull:
    """This store's top cosines for the probe set, searched as this lookup searches (measured once)."""
    if store_calibration is None:
        return ProbeNull()
    try:
        return store_calibration.null_for(search_request, search_port, embedder)
    except Exception:  # the store failed: the lookup's own searches say so; the verdict reads words alone
        return ProbeNull()


@config.when(l1_enabled=False)
def probe_null__l1_disabled() -> ProbeNull:
    """No store searched, no null."""
    return ProbeNull()


def query_terms(query: str) -> tuple[str, ...]:
    """The query's informative words: its BM25 terms (stop words removed), CJK as characters and pairs."""
    return tuple(bm25_encoder().query_terms(query))


def _used_hits(retrieval_attempts: list[SearchAttempt]) -> list[SearchHit]:
    return [hit for attempt in retrieval_attempts if attempt.used for hit in attempt.usable]


def _coverage(terms: tuple[str, ...], hits: list[SearchHit]) -> tuple[float, tuple[str, ...]]:
    """The share of the query's terms the best hits hold, and those terms."""
    matched = {term for hit in hits[:COVERAGE_HITS] for term in hit.matched_terms}
    held = tuple(term for term in terms if term in matched)
    return len(held) / len(terms), held


def _written_share(terms: tuple[str, ...], hit: SearchHit) -> float:
    """The share of the query's terms one hit holds by itself, as written: a neighbouring
    field's block often holds the question's words in another sense ("leavers" for "leave")."""
    written = set(hit.written_terms())
    return sum(term in written for term in terms) / len(terms)


def _top_block_hit(hits: list[SearchHit], returned: list[Any]) -> SearchHit:
    """The hit of the first returned block (the rerank may put another first than the store's
    best hit), the best hit when none is returned: what the relevance level speaks of."""
    first = next(iter(returned), None)
    return next((hit for hit in hits if hit.point_id == first), hits[0])


def _code_holders(hits: list[SearchHit], returned: set[Any]) -> list[SearchHit]:
    """The hits whose codes and titles may answer for themselves: the best ones and every one the
    result returns (the rerank lifts a block holding the query's code, ``rerank.exact_code``, and
    the per-document cap keeps it: the verdict vouches for the blocks an agent reads)."""
    best = hits[:COVERAGE_HITS]
    return best + [hit for hit in hits[COVERAGE_HITS:] if hit.point_id in returned]


def _reason(
    query: str,
    margin: float | None,
    coverage: float | None,
    holders: list[SearchHit],
    policy: AbstentionPolicy,
) -> VerdictReason:
    """A hit (of ``holders``: :func:`_code_holders`) that holds one of the query's distinctive
    codes verbatim (:func:`distinctive`: ``E4471``, not ``GitHub``) answers for itself, as do
    hits that hold every code of a query made of codes alone (:func:`_asks_only_codes`: ``what
    does baseURL do``) and one whose title the query puts in code (:func:`_names_a_title`);
    otherwise, when
    the query has BM25 terms, the best hits must hold at least one of them (an off-topic
    question often shares none), and the best cosine must clear the store's null by
    ``strictness`` (no null, the probes could not run: the evidence floors alone decide).

    A CJK query is read by its words instead: MiniLM embeds CJK text as a few rare tokens, so
    every CJK probe scores alike on a store and the dense null tells nothing; the best hits
    must hold :data:`CJK_COVERAGE` of its characters and pairs."""
    if any(distinctive(code) for hit in holders for code in hit.exact_codes):
        return "exact_code"
    if _asks_only_codes(query, holders):
        return "exact_code"
    if _names_a_title(query, holders):
        return "named_title"
    if coverage is not None and coverage == 0.0:
        return "no_shared_terms"
    if coverage is not None and script_of(query) == "cjk":
        return "plausible" if coverage >= CJK_COVERAGE else "no_shared_terms"
    if margin is not None and margin < policy.strictness:
        return "below_probe_null"
    return "plausible"


def _asks_only_codes(query: str, hits: list[SearchHit]) -> bool:
    """Whether every informative word of the query belongs to a code a best hit holds verbatim
    (``what does baseURL do``): the question is the code, and the hit holds it, whatever the
    model makes of a word it cuts into pieces. A code among other words (``How do I delete my
    GitHub account?``) does not answer for itself: the margin and the words decide, as usual."""
    return made_of_codes(query_terms(query), (code for hit in hits for code in hit.exact_codes))


def _names_a_title(query: str, hits: list[SearchHit]) -> bool:
    """Whether the query puts a hit's title in code (`` `with` `` for the page titled "with"):
    it names that page, whatever the model makes of a word this short."""
    named = {name for span in code_of(query) if (name := span.strip().lower())}
    titles = (str(hit.payload.get(TITLE_FIELD) or "").strip().lower() for hit in hits)
    return bool(named) and any(title in named for title in titles if title)


def _information_shares(
    query: str,
    matched: tuple[str, ...],
    search_port: KnowledgeSearchPort,
    request: SearchRequest,
    calibration: ProbeCalibration | None,
) -> tuple[float | None, float | None]:
    """:func:`information_shares` under the request's access (IDFs kept by the store's
    calibration); a store failing now leaves the margin to decide (``None``)."""
    try:
        return information_shares(query, matched, search_port, request.access, calibration)
    except Exception:  # the store failed after the search: the margin alone decides
        return None, None


def _relieved(margin: float | None, coverage: float | None, policy: AbstentionPolicy) -> bool:
    """Whether a lookup refused by its margin alone comes close enough to the bar that the
    query's informative words may decide (``MAX_RELIEF`` below ``strictness``)."""
    return margin is not None and bool(coverage) and margin >= policy.strictness - MAX_RELIEF


def _relief(informative: float) -> float:
    """How far below ``strictness`` the bar lies for hits holding ``informative`` of the query's
    information (:data:`INFORMATIVE_RELIEFS`: 40% lowers it by half a unit, 90% by one)."""
    return max((relief for share, relief in INFORMATIVE_RELIEFS if informative >= share), default=0.0)


def _informative_verdict(
    reason: VerdictReason,
    margin: float | None,
    informative: float | None,
    unheld: float | None,
    policy: AbstentionPolicy,
) -> VerdictReason:
    """The verdict once the query's informative share is read: a lookup short of the bar passes
    when its best hits hold enough of the query's information (:func:`_relief`); one just above
    it fails when they hold too little (:func:`uninformative`: the common words of a question
    the store has nothing on, "days" of "How many vacation days do I get?", or a neighbouring
    field's question whose hits share its general words, not its subject). Either fails under
    twice the bar when words no chunk holds carry :data:`UNHELD_SHARE` of the query's
    information: the store never writes what the question turns on ("maternity" of "What is
    the maternity leave policy?"), its nearness is the rest's ("leave", "policy")."""
    if informative is None or margin is None:
        return reason
    if reason == "below_probe_null" and margin >= policy.strictness - _relief(informative):
        reason = "informative_terms"
    elif reason == "plausible" and uninformative(margin, informative, policy.strictness):
        return "uninformative_terms"
    if reason in ("plausible", "informative_terms") and _unheld_subject(margin, unheld, policy):
        return "unheld_terms"
    return reason


def _unheld_subject(margin: float, unheld: float | None, policy: AbstentionPolicy) -> bool:
    return unheld is not None and unheld >= UNHELD_SHARE and margin < 2 * policy.strictness


def _reads_informative_share(
    reason: VerdictReason, margin: float | None, coverage: float | None, policy: AbstentionPolicy
) -> bool:
    """Whether the verdict depends on the informative share: near the bar from below
    (:func:`_relieved`) or above it where :func:`uninformative` can refuse (the store's IDF is
    read only then)."""
    if reason == "below_probe_null":
        return _relieved(margin, coverage, policy)
    reach = policy.strictness + max(policy.strictness, NEAR_BAR[1])  # where uninformative() can refuse
    return reason == "plausible" and margin is not None and bool(coverage) and margin < reach


def evidence_verdict(
    query: str,
    query_terms: tuple[str, ...],
    retrieval_attempts: list[SearchAttempt],
    probe_null: ProbeNull,
    abstention_policy: AbstentionPolicy,
    retrieval_mode: str,
    search_port: KnowledgeSearchPort,
    reranked_df: pd.DataFrame,
    search_request: SearchRequest | None = None,
    store_calibration: ProbeCalibration | None = None,
) -> EvidenceVerdict:
    """Whether the usable hits plausibly answer the question: the margin of their best cosine
    over the store's probe null against the store's bar (:meth:`AbstentionPolicy.bar`:
    ``abstention.strictness``, raised where the store's own questions score high); a margin short of it passes
    when the best hits hold words that carry enough of the query's information (40% for half a
    unit short, 90% for one: :data:`INFORMATIVE_RELIEFS`; the store's BM25 IDF, read only then); a
    margin just above it fails when they hold too little (:func:`uninformative`). Codes and
    titles are read from the returned blocks (``reranked_df``) as well (:func:`_code_holders`).
    No ``search_request`` (L1 disabled): no store was searched, no hits to read."""
    hits = sorted(_used_hits(retrieval_attempts), key=lambda hit: -hit.score)
    policy = replace(abstention_policy, strictness=abstention_policy.bar(probe_null))  # this store's bar
    own = probe_null.own_questions_p5()
    if not hits:
        return EvidenceVerdict(
            False,
            "no_candidates",
            query_terms=query_terms,
            strictness=policy.strictness,
            own_questions_p5=own,
        )
    dense_top = max(hit.normalized_score for hit in hits)
    margin = probe_null.margin(dense_top)
    returned = column_values(reranked_df, "point_id")
    top = _top_block_hit(hits, returned)
    coverage, matched, top_coverage = (None, (), None)
    if retrieval_mode != "dense" and query_terms:
        coverage, matched = _coverage(query_terms, hits)
        top_coverage = _written_share(query_terms, top)
    holders = _code_holders(hits, set(returned))
    reason = _reason(query, margin, coverage, holders, policy)
    informative = unheld = None
    words_decide = script_of(query) == "cjk"  # a CJK query's verdict is its words' share already
    if (
        search_request is not None
        and not words_decide
        and _reads_informative_share(reason, margin, coverage, policy)
    ):
        shares = _information_shares(query, matched, search_port, search_request, store_calibration)
        informative, unheld = shares
        reason = _informative_verdict(reason, margin, informative, unheld, policy)
    return EvidenceVerdict(
        plausible=not policy.enabled or reason in EVIDENCE_REASONS,
        reason=reason,
        margin=margin,
        dense_top=dense_top,
        dense_percentile=probe_null.dense_percentile(dense_top),
        null_median=probe_null.quantile(0.5),
        null_p90=probe_null.quantile(0.9),
        probes=len(probe_null.dense_tops),
        lexical_coverage=coverage,
        top_hit_coverage=top_coverage,
        informative_coverage=informative,
        unheld_share=unheld,
        query_terms=query_terms,
        matched_terms=matched,
        top_dense_rank=top.dense_rank,
        top_sparse_rank=top.sparse_rank,
        strictness=policy.strictness,
        own_questions_p5=own,
    )
