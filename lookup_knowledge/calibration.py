"""How a store scores questions it has nothing on: the probe set's null distribution.

The absolute cosine of a small embedding model means different things on different corpora (an
off-topic question scores 0.45 on one store and 0.25 on another), so a lookup's top score is
read against what *this* store gives the probe set (``lookup_knowledge.probes``): the share of
probes it beats. The probes run once per store and search configuration, lazily at the first
lookup (one batched embedding, one batched search), and again after the store was reopened (the
search only: the probes' vectors are kept for the process, they depend on the model alone). What
they measured is kept in a file next to the store (:class:`KeptNulls`) for the store version it
was measured on: a new process on an unchanged store reads it instead of measuring again.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from lookup_knowledge.adapters.embedder import Embedder
from lookup_knowledge.adapters.search import AccessFilter, KnowledgeSearchPort, SearchHit, SearchRequest
from lookup_knowledge.adapters.sparse import bm25_encoder
from lookup_knowledge.probes import PROBE_QUERIES
from lookup_knowledge.ranking import searched_hits

logger = logging.getLogger(__name__)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_OTHER_WORD = re.compile(r"[^\W\d_]+")  # a run of letters (CJK ones taken out first)
Script = Literal["cjk", "alphabetic"]
MIN_SPREAD = 0.01  # a null whose probes all score alike still gives a finite margin
OWN_SAMPLE = 900  # chunks read to make questions from the store's own text (one per document) ...
OWN_QUESTIONS = 300  # ... at most this many (100 put the bar's 5th percentile anywhere in +-0.4 units)
MIN_OWN_QUESTIONS = 20  # fewer: the store's own questions say nothing about its bar
OWN_VECTORS = 8 * OWN_QUESTIONS  # own questions' vectors kept per process (384 floats each: 3.7 MB)
_HEADING = re.compile(r"^#+ .*$", re.MULTILINE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@lru_cache(maxsize=4096)  # a lookup reads its query's script twice (its null, its verdict)
def script_of(text: str) -> Script:
    """``cjk`` when the text's CJK characters outnumber its other words (a
    Chinese question naming ``kubectl`` is Chinese), else ``alphabetic``: the model scores the
    two differently (MiniLM reads CJK text as a few rare tokens), so each has its own null."""
    cjk = len(_CJK.findall(text))
    return "cjk" if cjk > len(_OTHER_WORD.findall(_CJK.sub(" ", text))) else "alphabetic"


@dataclass(frozen=True, slots=True)
class ProbeNull:
    """The top dense cosines the store gave the probes of one script, sorted (empty: no calibration);
    and the best cosine it gave each question made from its own text (:func:`own_question`) among
    the other documents' chunks (``own_tops``): how it answers questions it can answer."""

    dense_tops: tuple[float, ...] = ()
    own_tops: tuple[float, ...] = ()
    _quantiles: dict[float, float] = field(default_factory=dict, init=False, compare=False, repr=False)
    _own_p5: list[float | None] = field(default_factory=list, init=False, compare=False, repr=False)

    def dense_percentile(self, score: float) -> float | None:
        """The share of probes whose top cosine is below ``score``; ``None`` without probes."""
        if not self.dense_tops:
            return None
        return bisect.bisect_left(self.dense_tops, score) / len(self.dense_tops)

    def margin(self, score: float) -> float | None:
        """How far ``score`` lies above the probes' median, in units of their spread (median to
        90th percentile): 0 is a typical probe, 1 the top tenth; ``None`` without probes."""
        median, high = self.quantile(0.5), self.quantile(0.9)
        if median is None or high is None:
            return None
        return (score - median) / max(high - median, MIN_SPREAD)

    def quantile(self, share: float) -> float | None:
        """The probes' top cosine at ``share`` (0.9: nine probes in ten score at most this)."""
        if not self.dense_tops:
            return None
        if share not in self._quantiles:  # every lookup reads the median and the 90th percentile
            self._quantiles[share] = float(np.quantile(self.dense_tops, share))
        return self._quantiles[share]

    def own_questions_p5(self) -> float | None:
        """The margin that 95% of the store's own-text questions reach (their 5th percentile;
        ``None``: under :data:`MIN_OWN_QUESTIONS` of them, or no probes). Computed once."""
        if not self._own_p5:
            margins = [m for top in self.own_tops if (m := self.margin(top)) is not None]
            self._own_p5.append(
                float(np.quantile(margins, 0.05)) if len(margins) >= MIN_OWN_QUESTIONS else None
            )
        return self._own_p5[0]


def own_question(content: str) -> str | None:
    """A question made from a chunk's text: its first sentence of at least six words (headings
    left out), cut at 30 words; ``None`` when it has none."""
    for sentence in _SENTENCE_END.split(_HEADING.sub("", content).strip()):
        words = sentence.split()
        if len(words) >= 6:
            return " ".join(words[:30])
    return None


def _top_cosine(hits: list[SearchHit]) -> float:
    return max((hit.normalized_score for hit in hits), default=0.0)


MAX_SHAPES = 1024  # nulls kept: a search shape per access scope, so a server's callers add up
MAX_TERMS = 100_000  # token IDFs kept per store and access scope (then forgotten and read again)


class KeptNulls:
    """Probe nulls kept in a JSON file next to the store, for the store version they were
    measured on (``version()``: what changes with every write to the store; ``None``, nothing
    kept). A new process on an unchanged store reads its null instead of measuring it (its own
    questions cost about 1.3 s per hundred on a 2-core CPU). A file that cannot be read or
    written is measured around, never an error: it only saves time."""

    def __init__(self, path: Path, version: Callable[[], Hashable | None]) -> None:
        self.path = path
        self.version = version
        self._lock = threading.Lock()

    def get(self, key: str, version: Hashable | None) -> dict[Script, ProbeNull] | None:
        """The nulls kept under ``key`` for the store at ``version`` (:meth:`version`), else ``None``."""
        data = self._read() if version is not None else {}
        entry = data.get("nulls", {}).get(key) if data.get("version") == _plain(version) else None
        try:
            return {
                script: ProbeNull(tuple(map(float, dense)), tuple(map(float, own)))
                for script, (dense, own) in entry.items()
            }
        except (AttributeError, TypeError, ValueError):  # none kept, or a file not written by this class
            return None

    def put(self, key: str, nulls: dict[Script, ProbeNull], version: Hashable | None) -> None:
        """Keep ``nulls`` under ``key``, when the store is still at the ``version`` they were
        measured on (an ingest meanwhile: they describe neither store)."""
        if version is None or self.version() != version:
            return
        with self._lock:
            data = self._read()
            kept = data.get("nulls", {}) if data.get("version") == _plain(version) else {}
            kept = dict(list(kept.items())[-(MAX_SHAPES - 1) :]) if isinstance(kept, dict) else {}
            kept[key] = {script: [null.dense_tops, null.own_tops] for script, null in nulls.items()}
            text = json.dumps({"version": _plain(version), "nulls": kept})
            temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            try:
                temporary.write_text(text, encoding="utf-8")
                temporary.replace(self.path)
            except OSError as exc:  # a read-only or full store directory: measured again next time
                logger.debug("probe null not kept in %s: %s", self.path, exc)
                temporary.unlink(missing_ok=True)

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}


def _plain(version: Hashable | None) -> Any:
    """A version as JSON gives it back (tuples as lists)."""
    return json.loads(json.dumps(version))


class ProbeCalibration:
    """The store's :class:`ProbeNull`, computed on first use for a search shape and kept (the
    ``max_shapes`` last used: one not used since is measured again when it comes back); and the
    store's IDF of each query token read so far (:meth:`term_idf`), per access scope.

    ``reset`` forgets both (the tool calls it when the store was reopened or its L0 index file
    changed: it may hold new data).
    """

    def __init__(
        self,
        probes: tuple[str, ...] = PROBE_QUERIES,
        max_shapes: int = MAX_SHAPES,
        kept: KeptNulls | None = None,
    ) -> None:
        self.probes = probes
        self.max_shapes = max_shapes
        self.kept = kept  # nulls kept next to the store, read before measuring
        self._probes_digest = hashlib.sha256("\n".join(probes).encode()).hexdigest()[:16]
        # Keyed by the id of the port and the embedder, each entry holding the object itself: an
        # id is never reused by another object while its entry lives.
        self._nulls: OrderedDict[tuple, tuple[KnowledgeSearchPort, dict[Script, ProbeNull]]] = OrderedDict()
        self._vectors: dict[int, tuple[Embedder, np.ndarray]] = {}  # per model, not per store
        # own questions' vectors by (model id, text): another scope's or version's sample shares many
        self._own_vectors: OrderedDict[tuple[int, str], tuple[Embedder, np.ndarray]] = OrderedDict()
        self._idf: OrderedDict[tuple, tuple[KnowledgeSearchPort, dict[int, float]]] = OrderedDict()
        self._unheld: dict[int, tuple[KnowledgeSearchPort, float | None]] = {}  # per port: unheld_term_idf
        self._generation = 0  # resets so far: a null measured across one is not kept
        self._lock = threading.Lock()

    def null_for(
        self, request: SearchRequest, search_port: KnowledgeSearchPort, embedder: Embedder
    ) -> ProbeNull:
        """The null of the probes in the request's script, for searches shaped like it (mode,
        fusions, width, and the caller's access: the probes search only what it may see); a failed
        measurement raises and is tried again at the next lookup."""
        shape = (id(search_port), request.mode, request.fusion, request.few_matches_fusion)
        shape += (request.prefetch_k, request.top_k, request.access)
        script = script_of(request.query_text)
        with self._lock:
            entry, generation = self._nulls.get(shape), self._generation
            if entry is not None:
                self._nulls.move_to_end(shape)
        known = entry[1] if entry is not None else None
        if known is None:
            # Measured without the lock: the probes' search may reopen the store, whose reopen
            # hook calls reset (same thread or another one waiting on the store): holding the
            # lock here deadlocked. Two first lookups may both measure; one result is kept, and
            # a null measured across a reset is used once but not kept.
            known = self._kept_or_measured(request, search_port, embedder)
            with self._lock:
                if generation == self._generation:
                    known = self._nulls.setdefault(shape, (search_port, known))[1]
                    while len(self._nulls) > self.max_shapes:
                        self._nulls.popitem(last=False)
        return known[script]

    def _kept_or_measured(
        self, request: SearchRequest, search_port: KnowledgeSearchPort, embedder: Embedder
    ) -> dict[Script, ProbeNull]:
        """The nulls kept for this search shape and store version, else measured (and kept)."""
        if self.kept is None:
            return self._measure(request, search_port, embedder)
        key = json.dumps([
            embedder.model_name, request.mode, request.fusion, request.prefetch_k, request.top_k,
            request.access, self._probes_digest, OWN_QUESTIONS, request.few_matches_fusion,
        ])  # fmt: skip
        version = self.kept.version()
        if (known := self.kept.get(key, version)) is None:
            known = self._measure(request, search_port, embedder)
            self.kept.put(key, known, version)
        return known

    def _measure(
        self, request: SearchRequest, search_port: KnowledgeSearchPort, embedder: Embedder
    ) -> dict[Script, ProbeNull]:
        answers = searched_hits(search_port, _shaped_like(request, self.probes, self.probe_vectors(embedder)))
        tops: dict[Script, list[float]] = {"cjk": [], "alphabetic": []}
        for probe, hits in zip(self.probes, answers, strict=True):
            tops[script_of(probe)].append(_top_cosine(hits))
        own = _own_tops(request, search_port, lambda texts: self._own_question_vectors(embedder, texts))
        return {
            script: ProbeNull(tuple(sorted(scores)), own if script == "alphabetic" else ())
            for script, scores in tops.items()
        }

    def probe_vectors(self, embedder: Embedder) -> np.ndarray:
        """The probes embedded by ``embedder``: once per model (a new search shape costs one
        search; the multilingual encoder's are what a question asked in another language is
        compared with, ``probe_cosine``)."""
        kept = self._vectors.get(id(embedder))
        if kept is None:
            embedded = embedder.embed_queries(list(self.probes))
            with self._lock:
                kept = self._vectors.setdefault(id(embedder), (embedder, embedded))
        return kept[1]

    def _own_question_vectors(self, embedder: Embedder, texts: list[str]) -> np.ndarray:
        """The vectors of own questions, embedding only those not embedded for this model before
        (the :data:`OWN_VECTORS` last used are kept: a new access scope's or store version's
        sample holds many of the questions an earlier one asked)."""
        with self._lock:
            known = {t: entry[1] for t in texts if (entry := self._own_vectors.get((id(embedder), t)))}
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing:
            known.update(zip(missing, embedder.embed_queries(missing), strict=True))
        with self._lock:
            for text in texts:
                self._own_vectors[(id(embedder), text)] = (embedder, known[text])
                self._own_vectors.move_to_end((id(embedder), text))
            while len(self._own_vectors) > OWN_VECTORS:
                self._own_vectors.popitem(last=False)
        return np.stack([known[text] for text in texts])

    def term_idf(
        self, search_port: KnowledgeSearchPort, token_ids: Sequence[int], access: AccessFilter | None = None
    ) -> dict[int, float]:
        """The port's :meth:`~KnowledgeSearchPort.term_idf` of ``token_ids``, asking the store
        only for tokens not read since the last reset (a question's common words recur: the
        store is asked for its rare ones); raises what the store raises."""
        key = (id(search_port), access)
        with self._lock:
            entry, generation = self._idf.get(key), self._generation
            known = {t: idf for t in token_ids if entry is not None and (idf := entry[1].get(t)) is not None}
        missing = [t for t in dict.fromkeys(token_ids) if t not in known]
        if not missing:
            return known
        read = search_port.term_idf(missing, access)
        with self._lock:
            if generation == self._generation:  # not across a reset: the store may have changed
                kept = self._idf.setdefault(key, (search_port, {}))[1]
                if len(kept) + len(read) > MAX_TERMS:
                    kept.clear()
                kept.update(read)
                self._idf.move_to_end(key)
                while len(self._idf) > self.max_shapes:
                    self._idf.popitem(last=False)
        return {**known, **read}

    def unheld_term_idf(self, search_port: KnowledgeSearchPort) -> float | None:
        """The port's :meth:`~KnowledgeSearchPort.unheld_term_idf`, read once per reset."""
        with self._lock:
            entry, generation = self._unheld.get(id(search_port)), self._generation
        if entry is not None:
            return entry[1]
        unheld = search_port.unheld_term_idf()
        with self._lock:
            if generation == self._generation:
                self._unheld[id(search_port)] = (search_port, unheld)
        return unheld

    def reset(self) -> None:
        """Forget every null and IDF: the next lookup measures the store again."""
        with self._lock:
            self._nulls.clear()
            self._idf.clear()
            self._unheld.clear()
            self._generation += 1


def _shaped_like(request: SearchRequest, texts: Sequence[str], vectors: np.ndarray) -> list[SearchRequest]:
    """Searches of ``texts`` shaped like ``request`` (mode, fusion, widths, the caller's access),
    without its category filter, reading only the hits' scores and documents (``scores_only``:
    the same cosines, without the text)."""
    sparse = request.mode != "dense"
    return [
        replace(
            request,
            query_text=text,
            query_vector=vector,
            category=None,
            sparse_vector=bm25_encoder().embed_query(text) if sparse else None,
            scores_only=True,
            multilingual_vector=None,  # the probe null is the dense and BM25 search's
            dense_fused=True,
        )
        for text, vector in zip(texts, vectors, strict=True)
    ]


def _own_tops(
    request: SearchRequest, search_port: KnowledgeSearchPort, embed: Callable[[list[str]], np.ndarray]
) -> tuple[float, ...]:
    """For a question made from each of up to :data:`OWN_QUESTIONS` documents the caller may see
    (their first chunks in the store's id order, alphabetic text), the best cosine among the other
    documents' chunks, searched as the lookup searches: one scroll, one batched embedding (of the
    questions ``embed`` has not embedded before), one batched search. Empty when the store holds
    too few documents to tell."""
    questions: dict[str, str] = {}
    for doc_id, content in search_port.sample_chunks(OWN_SAMPLE, request.access):
        if (
            doc_id not in questions
            and (question := own_question(content))
            and script_of(question) == "alphabetic"
        ):
            questions[doc_id] = question
    questions = dict(list(questions.items())[:OWN_QUESTIONS])
    if len(questions) < MIN_OWN_QUESTIONS:
        return ()
    texts = list(questions.values())
    answers = searched_hits(search_port, _shaped_like(request, texts, embed(texts)))
    return tuple(
        _top_cosine([hit for hit in hits if hit.doc_id != doc_id])
        for doc_id, hits in zip(questions, answers, strict=True)
    )
