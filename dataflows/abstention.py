"""Abstention: whether the hits plausibly answer the question, read from signals that carry
across corpora (``docs/trust.md``).

A knowledge base that has nothing on a question still returns nearest neighbours, at cosines
that mean different things on different stores (an off-topic question's best cosine is 0.25 on
one store, 0.45 on another). So the lookup's best dense cosine is read against *this store's*
null distribution: the best cosines it gives the probe set (``lookup_knowledge.probes``),
questions it cannot answer, in the query's script. The verdict's ``margin`` is how far the
lookup's best lies above the probes' median, in units of their spread (median to 90th
percentile); a lookup is evidence when that margin reaches the store's bar and (sparse, hybrid)
the best hits hold at least one of the query's informative words. Near the bar the share of the
query's information those words carry (the store's IDF) decides: a margin just short passes with
much of it, one just above fails with almost none.

Each step is a node: the store reads (``probe_null``, ``query_term_idf``, ``word_idf``) are the
only nodes that take the search port; the rest read what they return. The trace also shows where the top
block (the first returned) lies in the dense and the BM25 search, and how much of the query it
holds: the relevance level reads them (both searches ranking it first is what, measured, tells a
relevant top block from a wrong one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import pandas as pd
from hamilton.function_modifiers import config

from lookup_knowledge.adapters.answerability import AnswerabilityReader
from lookup_knowledge.adapters.cjk_words import passage_sentences
from lookup_knowledge.adapters.embedder import Embedder, EmbedderError
from lookup_knowledge.adapters.payload import LANGUAGE_FIELD, TITLE_FIELD
from lookup_knowledge.adapters.search import KnowledgeSearchPort, SearchHit, SearchRequest
from lookup_knowledge.adapters.sparse import code_of, distinctive, made_of_codes
from lookup_knowledge.calibration import ProbeCalibration, ProbeNull, Script, script_of
from lookup_knowledge.contract import EvidenceBlock, EvidenceVerdict, VerdictReason
from lookup_knowledge.frames import column_values

from .retrieval import SearchAttempt

EVIDENCE_REASONS = (
    "plausible",
    "exact_code",
    "named_title",
    "informative_terms",
    "multilingual_match",
    "sentence_match",
)
CJK_LANGUAGES = ("zh", "ja", "ko")
_TOPICAL = ("plausible", "informative_terms")  # what the reader may refuse: read from nearness and words
_SAME = 1 - 1e-9  # an IDF read back at the unheld term's value, float rounding aside


@dataclass(frozen=True, slots=True)
class AbstentionPolicy:
    """How sure the evidence must be: ``abstention.*`` from the config, and the thresholds the
    verdict's nodes read (set on the benchmarks of ``docs/trust.md``)."""

    enabled: bool = True
    strictness: float = 1.5
    own_questions: bool = True  # the bar rises to the margin 95% of the store's own-text questions reach
    coverage_hits: int = 3  # the best hits whose matched terms count toward the query's coverage
    # a CJK query's words (docs/cjk.md): the share of their information (IDF) one of the best hits
    # must hold (chosen on the dev half of benchmarks/sets/cjk-*), and whether a Latin-script name
    # no chunk holds ("kubectl" of "怎么用 kubectl 查看日志") refuses it
    cjk_informative: float = 0.4
    cjk_unheld_names: bool = True
    # (share of the query's IDF weight the best hits hold, by how much in margin units it lowers the bar)
    informative_reliefs: tuple[tuple[float, float], ...] = ((0.4, 0.5), (0.9, 1.0))
    informative_floor: float = 0.1  # the share the best hits must hold under twice the bar
    near_bar: tuple[float, float] = (0.3, 1.0)  # the share they must hold less than a unit above the bar
    unheld_share: float = 0.5  # the information in words no chunk holds that refuses under 2x the bar
    # the multilingual cosine a question's best hit (a CJK question's best not written in CJK) needs
    # when that question is not in English and the dense and word readings refused it: above the
    # 200 written off-topic and chit-chat questions' best on the tldr store (0.297) and the sample
    # knowledge base (0.245); docs/multilingual.md
    multilingual_bar: float = 0.30
    # the multilingual cosine a question asked across languages needs of one kept block's best line
    # (the rerank's line_scores) where the readings above refused it: above the best that the 200
    # written off-topic and chit-chat questions reached on the tldr store and the sample knowledge
    # base (0.52, over their 400 lookups); docs/multilingual.md
    multilingual_line_bar: float = 0.55
    # a question the multilingual bars pass is still refused when it lies as near one probe
    # question (lookup_knowledge.probes: greetings, recipes, weather) as this and no nearer its
    # evidence: a greeting, a thank-you. Unrelated questions of one form ("How often should I water
    # tomato plants?", "How often are salaries reviewed?") lie at 0.30-0.45; chit-chat lines near a
    # probe greeting at 0.55-0.9. 0.40 refused 8 of 141 answerable translated handbook questions
    # (benchmarks/sets/handbook), 0.50 let 5 of 12 chit-chat lines through there; docs/multilingual.md
    multilingual_probe_bar: float = 0.45
    # a CJK question on pages in its own script (docs/cjk.md), chosen on the dev half of
    # benchmarks/sets/cjk-*: the multilingual cosine of those pages' best hit that words a best hit
    # holds need, between the word-held chit-chat line (0.18, "お名前は？") and the lowest answerable
    # question found by its words (0.22); and the cosine one sentence of a best hit needs to find a
    # question whose words the hits hold only in part, above the best unanswerable one's (0.535;
    # 0.50 let two in)
    cjk_multilingual_floor: float = 0.2
    cjk_sentence_bar: float = 0.55
    # the same floor for a question in any other language but English read on pages in its own
    # language (docs/multilingual.md): the dense model reads such a question's language more than
    # its meaning, and its function words ("que", "de", "un") are words the pages hold. The CJK
    # floor's value, not refitted: on FastAPI's translated pages answerable questions' best
    # multilingual cosines lie at 0.27 and above, the chit-chat lines those readings passed at 0.10-0.26
    own_language_floor: float = 0.2

    def bar(self, probe_null: ProbeNull) -> float:
        """The margin a lookup needs on this store: ``strictness``, raised (``own_questions``) to
        the margin that 95% of questions made from the store's own text reach."""
        own = probe_null.own_questions_p5() if self.own_questions else None
        return max(self.strictness, own) if own is not None else self.strictness

    @property
    def max_relief(self) -> float:
        """The most a bar is lowered: no informative share helps a margin further below it."""
        return max(relief for _, relief in self.informative_reliefs)

    def relief(self, informative: float) -> float:
        """How far below the bar a lookup passes whose best hits hold ``informative`` of the
        query's information (:attr:`informative_reliefs`: 40% half a unit, 90% one)."""
        return max(
            (relief for share, relief in self.informative_reliefs if informative >= share), default=0.0
        )

    def uninformative(self, margin: Any, informative: Any, bar: Any) -> Any:
        """Whether a margin that clears ``bar`` has best hits holding too little of the query's
        information to count: under :attr:`informative_floor` up to twice the bar, under
        :attr:`near_bar`'s share within its band above the bar (floats, or pandas Series alike)."""
        share, band = self.near_bar
        return ((margin < 2 * bar) & (informative < self.informative_floor)) | (
            (margin < bar + band) & (informative < share)
        )

    def cjk_reason(self, words: WordShare) -> VerdictReason:
        """The verdict on a CJK query's words: none held, ``no_shared_terms``; a Latin-script
        name no chunk holds (:attr:`cjk_unheld_names`), ``unheld_terms``; one best hit holding
        under :attr:`cjk_informative` of their information, ``uninformative_terms``."""
        if not words.held_words:
            return "no_shared_terms"
        if self.cjk_unheld_names and words.unheld_names:
            return "unheld_terms"
        return "plausible" if words.held >= self.cjk_informative else "uninformative_terms"

    def cjk_meaning(
        self, reason: VerdictReason, cjk_multilingual_top: float | None, sentence_cosine: float | None
    ) -> VerdictReason:
        """A CJK question's verdict once its meaning is read on the pages in its own script: words
        a best hit holds (``plausible``) where those pages' best multilingual cosine stays under
        :attr:`cjk_multilingual_floor`, ``below_multilingual_floor``; words held in part
        (``uninformative_terms``) by a hit one of whose sentences reaches :attr:`cjk_sentence_bar`,
        ``sentence_match``; else ``reason`` (``None`` readings: the leg did not run)."""
        top = cjk_multilingual_top
        if reason == "plausible" and top is not None:
            return reason if top >= self.cjk_multilingual_floor else "below_multilingual_floor"
        if reason == "uninformative_terms" and sentence_cosine is not None:
            return "sentence_match" if sentence_cosine >= self.cjk_sentence_bar else reason
        return reason

    def own_language_meaning(
        self, reason: VerdictReason, own_language_top: float | None, probe_cosine: float | None
    ) -> VerdictReason:
        """A question in another language than English that the dense and word readings pass
        (``plausible``, ``informative_terms``) on pages in its own language: kept where those
        pages' best multilingual cosine reaches :attr:`own_language_floor` and the question reads
        less like a probe question than like them (:meth:`like_a_probe`), else
        ``below_multilingual_floor``; any other ``reason`` as it is."""
        if reason not in ("plausible", "informative_terms") or own_language_top is None:
            return reason
        if own_language_top < self.own_language_floor or self.like_a_probe(probe_cosine, own_language_top):
            return "below_multilingual_floor"
        return reason

    def like_a_probe(self, probe_cosine: float | None, evidence_cosine: float) -> bool:
        """Whether a question lies as near one probe question as :attr:`multilingual_probe_bar`
        and no further from it than from its evidence (``evidence_cosine``)."""
        probe = probe_cosine or 0.0
        return probe >= self.multilingual_probe_bar and probe >= evidence_cosine

    def unheld_subject(self, margin: float, unheld: float | None, bar: float) -> bool:
        """Whether words no chunk holds carry what the question turns on ("maternity" of "What is
        the maternity leave policy?"): :attr:`unheld_share` of it, the margin under twice the bar."""
        return unheld is not None and unheld >= self.unheld_share and margin < 2 * bar


@dataclass(frozen=True, slots=True)
class TermIdf:
    """The store's BM25 IDF of each query token (by token id), and that of a term no chunk holds
    (``None``: the store cannot tell)."""

    by_token: dict[int, float]
    unheld: float | None


@dataclass(frozen=True, slots=True)
class InformativeShare:
    """Two shares of the query's information (its terms' IDF): the best hits' (``held``), and
    that of words no chunk holds (``unheld``; ``None``: the store cannot tell)."""

    held: float
    unheld: float | None


@dataclass(frozen=True, slots=True)
class WordShare:
    """What the best hit for a CJK query's words holds: their words (``held_words``) and share of
    the words' information (``held``); the share in words no chunk holds (``unheld``; ``None``:
    the store cannot tell) and those of them written in Latin script (``unheld_names``)."""

    held_words: tuple[str, ...]
    held: float
    unheld: float | None
    unheld_names: tuple[str, ...] = ()


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


def evidence_hits(retrieval_attempts: list[SearchAttempt]) -> list[SearchHit]:
    """The usable hits of the searches whose hits were used, each once, best first: the chosen
    search's, then the search over other languages' (``other_language_hits``): what the verdict
    reads."""
    hits: dict[str, SearchHit] = {}
    for attempt in retrieval_attempts:  # the fallback's choice comes before the other languages'
        for hit in sorted(attempt.usable, key=lambda hit: -hit.score) if attempt.used else ():
            hits.setdefault(hit.point_id, hit)
    return list(hits.values())


def evidence_bar(abstention_policy: AbstentionPolicy, probe_null: ProbeNull) -> float:
    """The margin a lookup needs on this store (:meth:`AbstentionPolicy.bar`)."""
    return abstention_policy.bar(probe_null)


def dense_top(evidence_hits: list[SearchHit]) -> float | None:
    """The best normalized (dense) score among the hits; ``None`` without hits."""
    return max((hit.normalized_score for hit in evidence_hits), default=None)


def evidence_margin(dense_top: float | None, probe_null: ProbeNull) -> float | None:
    """How far ``dense_top`` lies above the probes' median, in units of their spread."""
    return probe_null.margin(dense_top) if dense_top is not None else None


def top_block_hit(evidence_hits: list[SearchHit], reranked_df: pd.DataFrame) -> SearchHit | None:
    """The hit of the first returned block (the rerank may put another first than the store's
    best hit), the best hit when none is returned: what the relevance level speaks of."""
    first = next(iter(column_values(reranked_df, "point_id")), None)
    return next((hit for hit in evidence_hits if hit.point_id == first), next(iter(evidence_hits), None))


def matched_terms(
    evidence_hits: list[SearchHit],
    query_terms: dict[str, int],
    retrieval_mode: str,
    abstention_policy: AbstentionPolicy,
) -> tuple[str, ...]:
    """The query's terms the best hits hold (sparse, hybrid; none in dense mode)."""
    if retrieval_mode == "dense":
        return ()
    best = evidence_hits[: abstention_policy.coverage_hits]
    held = {term for hit in best for term in hit.matched_terms}
    return tuple(term for term in query_terms if term in held)


def lexical_coverage(
    matched_terms: tuple[str, ...], query_terms: dict[str, int], retrieval_mode: str
) -> float | None:
    """The share of the query's terms the best hits hold (``None``: dense mode, or no terms)."""
    if retrieval_mode == "dense" or not query_terms:
        return None
    return len(matched_terms) / len(query_terms)


def top_hit_coverage(
    top_block_hit: SearchHit | None, query_terms: dict[str, int], retrieval_mode: str
) -> float | None:
    """The share of the query's terms the top block holds by itself, as written: a neighbouring
    field's block often holds the question's words in another sense ("leavers" for "leave")."""
    if retrieval_mode == "dense" or not query_terms or top_block_hit is None:
        return None
    written = set(top_block_hit.written_terms())
    return sum(term in written for term in query_terms) / len(query_terms)


def code_holders(
    evidence_hits: list[SearchHit], reranked_df: pd.DataFrame, abstention_policy: AbstentionPolicy
) -> list[SearchHit]:
    """The hits whose codes and titles may answer for themselves: the best ones and every one the
    result returns (the rerank lifts a block holding the query's code, ``rerank.exact_code``, and
    the per-document cap keeps it: the verdict vouches for the blocks an agent reads)."""
    returned = set(column_values(reranked_df, "point_id"))
    best, rest = (
        evidence_hits[: abstention_policy.coverage_hits],
        evidence_hits[abstention_policy.coverage_hits :],
    )
    return best + [hit for hit in rest if hit.point_id in returned]


def named_evidence(
    query: str, query_terms: dict[str, int], code_holders: list[SearchHit]
) -> VerdictReason | None:
    """``exact_code`` when a holder holds a distinctive code of the query verbatim (``E4471``, not
    ``GitHub``), or every code of a query made of codes alone (``what does baseURL do``);
    ``named_title`` when the query puts a holder's title in code (`` `with` ``); else ``None``."""
    codes = [code for hit in code_holders for code in hit.exact_codes]
    if any(distinctive(code) for code in codes) or made_of_codes(query_terms, codes):
        return "exact_code"
    named = {name for span in code_of(query) if (name := span.strip().lower())}
    titles = (str(hit.payload.get(TITLE_FIELD) or "").strip().lower() for hit in code_holders)
    return "named_title" if named and any(title in named for title in titles if title) else None


def margin_reason(
    named_evidence: VerdictReason | None,
    lexical_coverage: float | None,
    word_share: WordShare | None,
    evidence_margin: float | None,
    evidence_bar: float,
    abstention_policy: AbstentionPolicy,
) -> VerdictReason:
    """The verdict before the informative share: a code or title the query names answers for
    itself; otherwise the best hits must hold one of the query's terms (an off-topic question
    often shares none), and the margin must reach the bar (no null: the evidence floors alone
    decide). A CJK query is read by its words alone (MiniLM embeds CJK as a few rare tokens: the
    dense null tells nothing): :meth:`AbstentionPolicy.cjk_reason` of ``word_share``."""
    if named_evidence is not None:
        return named_evidence
    if word_share is not None:
        return abstention_policy.cjk_reason(word_share)
    if lexical_coverage is not None and lexical_coverage == 0.0:
        return "no_shared_terms"
    if evidence_margin is not None and evidence_margin < evidence_bar:
        return "below_probe_null"
    return "plausible"


def informative_share_needed(
    margin_reason: VerdictReason,
    evidence_margin: float | None,
    lexical_coverage: float | None,
    query_script: Script,
    evidence_bar: float,
    abstention_policy: AbstentionPolicy,
) -> bool:
    """Whether the informative share can change the verdict (the store's IDF is read only then):
    a margin short of the bar by at most the largest relief, or above it where
    :meth:`AbstentionPolicy.uninformative` can refuse; never for a CJK query (its words decide)."""
    if evidence_margin is None or not lexical_coverage or query_script == "cjk":
        return False
    if margin_reason == "below_probe_null":
        return evidence_margin >= evidence_bar - abstention_policy.max_relief
    reach = evidence_bar + max(evidence_bar, abstention_policy.near_bar[1])
    return margin_reason == "plausible" and evidence_margin < reach


def query_term_idf(
    informative_share_needed: bool,
    query_terms: dict[str, int],
    search_port: KnowledgeSearchPort,
    access_scope: tuple | None = None,
    store_calibration: ProbeCalibration | None = None,
) -> TermIdf | None:
    """The store's IDF of the query's terms and of a term no chunk holds, among the chunks the
    caller may see (kept by the store's calibration), read only when needed; ``None`` then, or
    when the store fails now (the margin alone decides)."""
    if not informative_share_needed:
        return None
    ids = list(query_terms.values())
    try:
        if store_calibration is None:
            idf = search_port.term_idf(ids, access_scope)
            return TermIdf(idf, search_port.unheld_term_idf() if idf else None)
        idf = store_calibration.term_idf(search_port, ids, access_scope)
        return TermIdf(idf, store_calibration.unheld_term_idf(search_port) if idf else None)
    except Exception:  # the store failed after the search: the margin alone decides
        return None


def word_idf(
    query_words: dict[str, tuple[int, ...]],
    search_port: KnowledgeSearchPort,
    access_scope: tuple | None = None,
    store_calibration: ProbeCalibration | None = None,
) -> TermIdf | None:
    """The store's IDF of a CJK query's words' tokens (:func:`query_term_idf`'s reading), and of
    a term no chunk holds; ``None`` for an alphabetic query, or when the store fails."""
    ids = list(dict.fromkeys(token for tokens in query_words.values() for token in tokens))
    return query_term_idf(
        bool(ids), {str(token): token for token in ids}, search_port, access_scope, store_calibration
    )


def _word_weights(
    query_words: dict[str, tuple[int, ...]], word_idf: TermIdf | None
) -> tuple[dict[str, float], float | None]:
    """Each word's IDF (its rarest token's; 1 each when the store cannot tell), and that of a
    term no chunk holds."""
    if word_idf is None or not word_idf.by_token:
        return dict.fromkeys(query_words, 1.0), None
    idf = word_idf.by_token
    return {w: max(idf.get(t, 0.0) for t in tokens) for w, tokens in query_words.items()}, word_idf.unheld


def word_share(
    evidence_hits: list[SearchHit],
    query_words: dict[str, tuple[int, ...]],
    query_script: Script,
    word_idf: TermIdf | None,
    abstention_policy: AbstentionPolicy,
) -> WordShare | None:
    """Of the best hits (``coverage_hits``), the one holding (as written) most of a CJK query's
    words' IDF (:func:`_word_weights`; no words: none held); ``None`` for an alphabetic query.
    One hit: a question near a page's topic ("限制 docker 容器的内存") has its words on several."""
    if query_script != "cjk":
        return None
    weight, unheld = _word_weights(query_words, word_idf)
    total = sum(weight.values()) or 1.0
    holdings = [
        hit.written_terms(tuple(query_words)) for hit in evidence_hits[: abstention_policy.coverage_hits]
    ]
    held = max(holdings, key=lambda words: sum(weight[w] for w in words), default=())
    absent = [w for w in query_words if unheld is not None and weight[w] >= unheld * _SAME]
    return WordShare(
        held_words=held,
        held=sum(weight[w] for w in held) / total,
        unheld=sum(weight[w] for w in absent) / total if unheld is not None else None,
        unheld_names=tuple(w for w in absent if w.isascii() and w.isalnum()),
    )


def informative_share(
    query_term_idf: TermIdf | None, query_terms: dict[str, int], matched_terms: tuple[str, ...]
) -> InformativeShare | None:
    """The share of the query's information (its terms' IDF) the best hits hold, and the share
    in words no chunk holds; ``None`` where the store's IDF was not read or cannot tell."""
    if query_term_idf is None:
        return None
    idf, unheld, ids = query_term_idf.by_token, query_term_idf.unheld, list(query_terms.values())
    total = sum(idf.get(token, 0.0) for token in ids)
    if not idf or total <= 0:
        return None
    held = sum(idf.get(query_terms[term], 0.0) for term in matched_terms) / total
    if unheld is None:
        return InformativeShare(held, None)
    return InformativeShare(held, sum(v for t in ids if (v := idf.get(t, 0.0)) >= unheld * _SAME) / total)


def verdict_reason(
    margin_reason: VerdictReason,
    informative_share: InformativeShare | None,
    evidence_margin: float | None,
    evidence_bar: float,
    abstention_policy: AbstentionPolicy,
) -> VerdictReason:
    """The reason once the informative share is read: a margin short of the bar passes when the
    best hits hold enough of the query's information (:meth:`AbstentionPolicy.relief`); one just
    above it fails when they hold too little (:meth:`AbstentionPolicy.uninformative`); either
    fails when words no chunk holds carry the question (:meth:`AbstentionPolicy.unheld_subject`)."""
    share, margin, bar, policy = informative_share, evidence_margin, evidence_bar, abstention_policy
    if share is None or margin is None:
        return margin_reason
    reason = margin_reason
    if reason == "below_probe_null" and margin >= bar - policy.relief(share.held):
        reason = "informative_terms"
    elif reason == "plausible" and policy.uninformative(margin, share.held, bar):
        return "uninformative_terms"
    if reason in ("plausible", "informative_terms") and policy.unheld_subject(margin, share.unheld, bar):
        return "unheld_terms"
    return reason


def multilingual_top(evidence_hits: list[SearchHit]) -> float | None:
    """The best multilingual cosine among the usable hits (``None``: the multilingual leg did not
    run, or ranked none of them)."""
    return max(
        (h.multilingual_score for h in evidence_hits if h.multilingual_score is not None), default=None
    )


def _in_cjk(hit: SearchHit) -> bool:
    """Whether a hit is written in CJK: its chunk's language, else (a store without languages)
    its text's script."""
    language = hit.payload.get(LANGUAGE_FIELD)
    return language in CJK_LANGUAGES if language else script_of(hit.content) == "cjk"


def foreign_multilingual_top(evidence_hits: list[SearchHit], query_script: Script) -> float | None:
    """:func:`multilingual_top` of the hits whose words the verdict could not read: for a CJK
    question those not written in CJK (it reads its words on the others, and its meaning there:
    :func:`cjk_multilingual_top`, :func:`sentence_cosine`); every hit for any other question."""
    return multilingual_top([hit for hit in evidence_hits if query_script != "cjk" or not _in_cjk(hit)])


def cjk_multilingual_top(evidence_hits: list[SearchHit], query_script: Script) -> float | None:
    """For a CJK question, :func:`multilingual_top` of its hits written in CJK (where its words
    are read); ``None`` for any other question."""
    return multilingual_top([hit for hit in evidence_hits if _in_cjk(hit)]) if query_script == "cjk" else None


def own_language_top(
    evidence_hits: list[SearchHit], query_language: str, query_script: Script
) -> float | None:
    """For a question neither English nor CJK whose best hit is written in its language,
    :func:`multilingual_top` of its hits in that language (``None``: the best hit is in another
    language or of none, or the leg did not run); ``None`` for any other question (a CJK one's:
    :func:`cjk_multilingual_top`)."""
    if query_language == "en" or query_script == "cjk" or not evidence_hits:
        return None
    if evidence_hits[0].payload.get(LANGUAGE_FIELD) != query_language:
        return None  # its evidence is in another language: read across languages
    return multilingual_top(
        [hit for hit in evidence_hits if hit.payload.get(LANGUAGE_FIELD) == query_language]
    )


def line_top(line_scores: dict[str, float] | None) -> float | None:
    """The best kept block's best line cosine for a question asked across languages (the
    rerank's ``line_scores``; ``None``: not read)."""
    return max(line_scores.values(), default=None) if line_scores else None


def top_line_lead(line_scores: dict[str, float] | None, evidence_blocks: list[EvidenceBlock]) -> float | None:
    """How far the top block's best line (the rerank's ``line_scores``) lies above the best line
    of every other returned block; ``None`` where lines were not read or no other block has one."""
    scores = [line_scores.get(b.evidence_key) for b in evidence_blocks] if line_scores else []
    others = [score for score in scores[1:] if score is not None]
    return scores[0] - max(others) if scores and scores[0] is not None and others else None


def probe_cosine(
    store_calibration: ProbeCalibration | None = None,
    multilingual_query_vector: np.ndarray | None = None,
    multilingual_embedder: Embedder | None = None,
) -> float | None:
    """The question's best multilingual cosine with one of the probe questions (what no store
    answers: greetings, recipes, capitals, gibberish, in several languages; their vectors made
    once per process); ``None`` when its multilingual leg did not run or the encoder failed."""
    vector = multilingual_query_vector
    if vector is None or multilingual_embedder is None or store_calibration is None:
        return None
    try:
        return float(np.max(store_calibration.probe_vectors(multilingual_embedder) @ vector))
    except EmbedderError:
        return None


def multilingual_reason(
    verdict_reason: VerdictReason,
    foreign_multilingual_top: float | None,
    abstention_policy: AbstentionPolicy,
    line_top: float | None = None,
    probe_cosine: float | None = None,
) -> VerdictReason:
    """``multilingual_match`` for a question the dense and word readings refused (its words are
    not the store's language) whose best multilingual cosine on hits in another script
    (:func:`foreign_multilingual_top`) reaches :attr:`AbstentionPolicy.multilingual_bar`, or one
    kept block's best line (:func:`line_top`) :attr:`AbstentionPolicy.multilingual_line_bar`,
    unless it reads like a probe question (:func:`probe_cosine` at least
    :attr:`AbstentionPolicy.multilingual_probe_bar` and no lower than both: a greeting near a
    page's words is nearer a probe greeting); else ``verdict_reason``. All are ``None`` for an
    English question: its verdict is the dense and word readings' alone."""
    refused = verdict_reason not in (*EVIDENCE_REASONS, "no_candidates")
    chunk, line, policy = foreign_multilingual_top or 0.0, line_top or 0.0, abstention_policy
    meant = chunk >= policy.multilingual_bar or line >= policy.multilingual_line_bar
    like_a_probe = policy.like_a_probe(probe_cosine, max(chunk, line))
    return "multilingual_match" if refused and meant and not like_a_probe else verdict_reason


def sentence_cosine(
    multilingual_reason: VerdictReason,
    evidence_hits: list[SearchHit],
    query_script: Script,
    abstention_policy: AbstentionPolicy,
    written_query_vector: np.ndarray | None = None,
    multilingual_embedder: Embedder | None = None,
) -> float | None:
    """The best multilingual cosine between a CJK question (as written) and one sentence
    (:func:`passage_sentences`) of its best hits written in CJK, read only where it can change
    the verdict: the words held in part (``uninformative_terms``) and the multilingual leg ran;
    else ``None``. A chunk's vector averages its topics (an unanswerable question near a page's
    topic scores as high as one the page answers); its answering sentence stands alone."""
    vector = written_query_vector
    if multilingual_reason != "uninformative_terms" or query_script != "cjk" or vector is None:
        return None
    best = [hit for hit in evidence_hits[: abstention_policy.coverage_hits] if _in_cjk(hit)]
    sentences = list(dict.fromkeys(s for hit in best for s in passage_sentences(hit.content)))
    if not sentences or multilingual_embedder is None:
        return None
    return float(np.max(multilingual_embedder.embed_documents(sentences) @ vector))


def cjk_meaning_reason(
    multilingual_reason: VerdictReason,
    cjk_multilingual_top: float | None,
    sentence_cosine: float | None,
    query_script: Script,
    abstention_policy: AbstentionPolicy,
) -> VerdictReason:
    """For a CJK question, the verdict once the multilingual encoder read its meaning on the
    pages in its script (:meth:`AbstentionPolicy.cjk_meaning`); ``multilingual_reason`` for any
    other (its verdict is the same as without this node)."""
    if query_script != "cjk":
        return multilingual_reason
    return abstention_policy.cjk_meaning(multilingual_reason, cjk_multilingual_top, sentence_cosine)


def own_language_reason(
    cjk_meaning_reason: VerdictReason,
    own_language_top: float | None,
    abstention_policy: AbstentionPolicy,
    probe_cosine: float | None = None,
) -> VerdictReason:
    """For a question in another language than English read on pages in its own language, the
    verdict once the multilingual encoder read its meaning there
    (:meth:`AbstentionPolicy.own_language_meaning`); ``cjk_meaning_reason`` for any other."""
    return abstention_policy.own_language_meaning(cjk_meaning_reason, own_language_top, probe_cosine)


def answer_top(answer_scores: dict[str, float] | None) -> float | None:
    """The best answerability score among the returned blocks (``None``: not read)."""
    return max(answer_scores.values()) if answer_scores else None


def answerability_reason(
    own_language_reason: VerdictReason,
    answer_top: float | None,
    answer_reader: AnswerabilityReader | None = None,
) -> VerdictReason:
    """The verdict once the reader read the question with the returned blocks: a question the
    topical readings passed (``plausible``, ``informative_terms``) fails as ``not_answered`` when
    no block reaches the reader's bar; a verbatim code or a named title stands (the question is
    that code or page), and every other reason is as ``own_language_reason`` gave it."""
    if answer_top is None or answer_reader is None or own_language_reason not in _TOPICAL:
        return own_language_reason
    return own_language_reason if answer_top >= answer_reader.bar else "not_answered"


class MarginReadings(TypedDict):
    """What the verdict read of the margin: the best cosine against the store's null and bar."""

    margin: float | None
    dense_top: float | None
    dense_percentile: float | None
    null_median: float | None
    null_p90: float | None
    probes: int
    strictness: float
    own_questions_p5: float | None


class TermReadings(TypedDict):
    """What the verdict read of the query's terms in the best hits and the top block."""

    query_terms: list[str]
    matched_terms: list[str]
    lexical_coverage: float | None
    top_hit_coverage: float | None
    informative_coverage: float | None
    unheld_share: float | None


class MeaningReadings(TypedDict):
    """What the verdict read of the question's meaning by the multilingual encoder."""

    multilingual_top: float | None
    cjk_multilingual_top: float | None
    sentence_cosine: float | None
    line_top: float | None
    probe_cosine: float | None
    own_language_top: float | None
    top_line_lead: float | None


class AnswerReadings(TypedDict):
    """What the answerability reader read: the best returned block's score and the bar."""

    answer_top: float | None
    answer_bar: float | None


def answer_readings(
    answer_top: float | None, answer_reader: AnswerabilityReader | None = None
) -> AnswerReadings:
    """The reader's best score over the returned blocks and its bar (``None``: not read, reader off)."""
    return AnswerReadings(answer_top=answer_top, answer_bar=answer_reader.bar if answer_reader else None)


def margin_readings(
    probe_null: ProbeNull, dense_top: float | None, evidence_margin: float | None, evidence_bar: float
) -> MarginReadings:
    """The margin, the null it was read against (median, 90th percentile, probes, ``dense_top``'s
    percentile among them) and the store's bar."""
    return MarginReadings(
        margin=evidence_margin,
        dense_top=dense_top,
        dense_percentile=probe_null.dense_percentile(dense_top) if dense_top is not None else None,
        null_median=probe_null.quantile(0.5),
        null_p90=probe_null.quantile(0.9),
        probes=len(probe_null.dense_tops),
        strictness=evidence_bar,
        own_questions_p5=probe_null.own_questions_p5(),
    )


def term_readings(
    query_terms: dict[str, int],
    matched_terms: tuple[str, ...],
    lexical_coverage: float | None,
    top_hit_coverage: float | None,
    informative_share: InformativeShare | None,
    word_share: WordShare | None,
    query_words: dict[str, tuple[int, ...]],
) -> TermReadings:
    """The query's terms, those the best hits hold, and the shares the verdict read (a CJK
    query: its words, those the best hit holds, and their shares)."""
    terms, matched, share = list(query_terms), list(matched_terms), informative_share
    if word_share is not None:
        terms, matched, share = list(query_words), list(word_share.held_words), word_share
    return TermReadings(
        query_terms=terms,
        matched_terms=matched,
        lexical_coverage=lexical_coverage,
        top_hit_coverage=top_hit_coverage,
        informative_coverage=share.held if share else None,
        unheld_share=share.unheld if share else None,
    )


def meaning_readings(
    multilingual_top: float | None,
    cjk_multilingual_top: float | None,
    sentence_cosine: float | None,
    line_top: float | None = None,
    probe_cosine: float | None = None,
    own_language_top: float | None = None,
    top_line_lead: float | None = None,
) -> MeaningReadings:
    """The multilingual cosines the verdict read: the best hit's, a CJK question's best hit
    written in CJK, its best sentence's, a question asked across languages' best kept line's,
    the nearest probe question's, another language's question's best hit in its language, and
    the top block's lead in best line over the other returned blocks (``None``: not read)."""
    return MeaningReadings(
        multilingual_top=multilingual_top,
        cjk_multilingual_top=cjk_multilingual_top,
        sentence_cosine=sentence_cosine,
        line_top=line_top,
        probe_cosine=probe_cosine,
        own_language_top=own_language_top,
        top_line_lead=top_line_lead,
    )


def evidence_verdict(
    answerability_reason: VerdictReason,
    abstention_policy: AbstentionPolicy,
    margin_readings: MarginReadings,
    term_readings: TermReadings,
    meaning_readings: MeaningReadings,
    top_block_hit: SearchHit | None,
    answer_readings: AnswerReadings,
) -> EvidenceVerdict:
    """Whether the usable hits plausibly answer the question (``answerability_reason``, the last
    reading of the reason; any passes with ``abstention.enabled`` off), and what was read."""
    if top_block_hit is None:  # no hits: nothing read but the query's terms and the bar
        bar = {key: margin_readings[key] for key in ("strictness", "own_questions_p5")}
        return EvidenceVerdict(
            plausible=False, reason="no_candidates", query_terms=term_readings["query_terms"], **bar
        )
    return EvidenceVerdict(
        plausible=not abstention_policy.enabled or answerability_reason in EVIDENCE_REASONS,
        reason=answerability_reason,
        **_places(top_block_hit),
        **margin_readings,
        **term_readings,
        **meaning_readings,
        **answer_readings,
    )


def _places(top_block_hit: SearchHit) -> dict[str, int | None]:
    """The top block's places in the dense, BM25 and multilingual searches (trace fields)."""
    hit = top_block_hit
    return {
        "top_dense_rank": hit.dense_rank,
        "top_sparse_rank": hit.sparse_rank,
        "top_multilingual_rank": hit.multilingual_rank,
    }
