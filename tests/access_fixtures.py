"""A generated knowledge base for access-control tests: documents whose every string that a
result could carry holds a marker of its own, random access assignments, and the leak check.

A *leak* is any string or count derived from a document the caller may not see, anywhere in
the serialized result, its trace or its recorded row:

* strings: each document's id, source, title, domain, entity and content carry a marker no query
  and no other document holds (``d07x``, ``src-07``, ``ttl07q``, ...), so finding one of an
  invisible document in the serialized output is a leak (:func:`leaked_markers`);
* counts: the same lookup against a store holding only the documents the caller may see, made
  unrestricted, must give the same result (:func:`comparable`), hit counts, cuts, completeness,
  verdict and session domains included (dense mode: BM25's IDF is computed by the engine over
  the whole collection, so sparse and fused scores differ between the two stores by design).

:func:`check_lookups` runs both checks; ``tests/test_access.py`` runs a few hypothesis examples
of it, ``benchmarks/access_leaks.py`` 20,000 lookups.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lookup_knowledge import AgentLookup, KnowledgeTool, ingest, load_config
from lookup_knowledge.adapters.embedder import Embedder
from lookup_knowledge.adapters.recorder import InvocationRecorder
from lookup_knowledge.agent.lookup import invocation_db_url
from lookup_knowledge.config import Config

GROUPS = ("hr", "finance", "secops", "eng")
TOPICS = ("refund", "payroll", "incident", "vacation", "expense", "deploy", "rotation", "onboarding")
FILLER = ("policy", "approval", "request", "team", "process", "review", "limit", "manager")
# what two stores of the same visible documents may differ in: node timings, the caller's own
# filter, record ids, ingest times and where the source files lie
VOLATILE = {"executedNodes", "accessFilter", "invocationRecord", "coldStartMs", "ingestedAt", "sourcePath"}

Access = tuple[str, ...] | None  # a document's access field; None: unset (access.default applies)


@dataclass(frozen=True)
class Doc:
    """One generated document: its number, topics and access field."""

    number: int
    topics: tuple[str, ...]
    access: Access
    paragraphs: int

    @property
    def doc_id(self) -> str:
        return f"doc-d{self.number:02d}x"

    @property
    def hook(self) -> str:
        """A keyword of the document that queries use: an L0 keyword match (not a marker)."""
        return f"hook{self.number:02d}"

    def markers(self) -> list[str]:
        """Strings that only this document's own data (never a query) holds."""
        n = f"{self.number:02d}"
        return [f"d{n}x", f"src-{n}", f"ttl{n}q", f"dom{n}z", f"ent{n}v", f"body{n}k"]

    def record(self) -> dict[str, Any]:
        """The document as a JSONL corpus record."""
        n = f"{self.number:02d}"
        paragraphs = [  # every sentence holds a word of its own: no two chunks score alike
            " ".join(
                f"Step w{n}{p}{s}: the {' and '.join(self.topics)} "
                f"{FILLER[(self.number + p + s) % len(FILLER)]} "
                f"for body{n}k is handled as described here; {self.topics[s % 2]} requests need a "
                f"{FILLER[(p + s) % len(FILLER)]} first."
                for s in range(3)
            )
            for p in range(self.paragraphs)
        ]
        record: dict[str, Any] = {
            "_id": self.doc_id,
            "source": f"kb/src-{n}.md",
            "title": f"{self.topics[0].title()} handbook ttl{n}q",
            "text": "\n\n".join(paragraphs),
            "category": [f"dom{n}z"],
            "keywords": [self.hook, *self.topics],
            "entities": [f"ent{n}v"],
        }
        if self.access is not None:
            record["access"] = list(self.access)
        return record


def random_access(rng: random.Random) -> Access:
    """An access field: unset, public, no one, or some groups (with public, now and then)."""
    roll = rng.random()
    if roll < 0.2:
        return None
    if roll < 0.3:
        return ("public",)
    if roll < 0.35:
        return ()
    groups = tuple(rng.sample(GROUPS, rng.randint(1, 2)))
    return (*groups, "public") if rng.random() < 0.1 else groups


def random_corpus(rng: random.Random, documents: int = 10) -> list[Doc]:
    return [
        Doc(i, tuple(rng.sample(TOPICS, 2)), random_access(rng), rng.randint(1, 3)) for i in range(documents)
    ]


def random_principals(rng: random.Random) -> list[str]:
    return rng.sample(GROUPS, rng.randint(0, len(GROUPS)))


def random_query(rng: random.Random, docs: Sequence[Doc]) -> str:
    """A question of topic words, fillers and (often) some documents' L0 keywords."""
    words = rng.sample(TOPICS, rng.randint(1, 2)) + rng.sample(FILLER, rng.randint(0, 2))
    if rng.random() < 0.7:
        words += [doc.hook for doc in rng.sample(list(docs), rng.randint(1, 3))]
    if rng.random() < 0.1:
        words = ["asteroid", "banana", "telescope"]  # nothing in the knowledge base
    rng.shuffle(words)
    return " ".join(words) + "?"


def may_see(doc: Doc, principals: Iterable[str] | None, default: str) -> bool:
    """The rule the store must enforce, written out independently of the product's code."""
    if principals is None:
        return True
    access = doc.access if doc.access is not None else (("public",) if default == "public" else ())
    return bool(set(access) & {*principals, "public"})


def write_corpus(path: Path, docs: Iterable[Doc]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(doc.record()) + "\n" for doc in docs), encoding="utf-8")
    return path


def leaked_markers(serialized: str, invisible: Iterable[Doc]) -> list[str]:
    """The markers of invisible documents found in ``serialized`` (empty: no string leaked)."""
    return [marker for doc in invisible for marker in doc.markers() if marker in serialized]


def comparable(data: Any) -> Any:
    """A serialized result (or recorded row) without what may differ between two stores holding
    the same visible documents: node timings, the caller's own access filter, record ids."""
    if isinstance(data, dict):
        return {key: comparable(value) for key, value in data.items() if key not in VOLATILE}
    if isinstance(data, list):
        return [comparable(item) for item in data]
    return data


def differences(left: Any, right: Any, path: str = "") -> list[str]:
    """Where two comparable results differ (floats within 1e-5: the model's vectors of a chunk
    differ in the 7th decimal with the batch it was embedded in); empty: the same."""
    if isinstance(left, dict) and isinstance(right, dict):
        keys = sorted(set(left) | set(right))
        return [d for key in keys for d in differences(left.get(key), right.get(key), f"{path}.{key}")]
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        return [
            d
            for i, pair in enumerate(zip(left, right, strict=True))
            for d in differences(*pair, f"{path}[{i}]")
        ]
    if isinstance(left, float) and isinstance(right, float) and math.isclose(left, right, abs_tol=1e-5):
        return []
    return [] if left == right else [f"{path}: {left!r} != {right!r}"]


class MemoEmbedder(Embedder):
    """An embedder that embeds each text once: the full store and each caller's store of the same
    documents then hold the very same vectors (a batch of other texts shifts the 7th decimal),
    a document is embedded once however many stores hold it, and a question once however many
    stores it is asked of."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_name = getattr(inner, "model_name", type(inner).__name__)
        self._documents: dict[str, np.ndarray] = {}
        self._queries: dict[str, np.ndarray] = {}

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._documents))
        if missing:
            self._documents.update(zip(missing, self.inner.embed_documents(missing), strict=True))
        return np.stack([self._documents[t] for t in texts]) if texts else self.inner.embed_documents([])

    def embed_query(self, text: str) -> np.ndarray:
        if text not in self._queries:  # one question asked of several stores: one vector
            self._queries[text] = self.inner.embed_query(text)
        return self._queries[text]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_queries(texts)


SESSION_LOOKUPS = 8  # lookups per shared session id (the record is read per call: long ones cost)


def _config(store: Path, settings: dict[str, Any]) -> Config:
    return load_config(overrides={"store.path": str(store), **settings})


def _dump(result: Any) -> Any:
    return result.model_dump(by_alias=True, mode="json")


def check_lookups(
    tmp: Path,
    seed: int,
    lookups: int,
    mode: str,
    embedder: Embedder,
    principal_sets: int | None = None,
    unfiltered_every: int = 1,
    compare_every: int = 1,
) -> dict[str, Any]:
    """Random access over a generated corpus (seeded), then ``lookups`` random (principals, query)
    pairs through recorded calls that all share one session id. Each is checked for markers of
    invisible documents in its result and recorded row, and against an unrestricted lookup on a
    store holding only the documents that caller may see: the whole result (dense mode), the L0
    hints and the category filter (hybrid, whose BM25 scores read collection-wide IDF). Use the
    real model (each text embedded once, :class:`MemoEmbedder`): bag-of-words vectors tie, and
    the engine orders equal scores by where the points lie.

    ``principal_sets``: how many distinct callers to draw (each needs a store of its own; None:
    any of the 16). Every ``unfiltered_every``-th lookup also runs unrestricted, to count how
    often the same lookup without the filter would have leaked (the check's teeth). Sessions hold
    :data:`SESSION_LOOKUPS` lookups each, of any callers; every ``compare_every``-th session is
    compared with the callers' own stores (the others are checked for markers only). Returns the
    figures and the first failures."""
    rng = random.Random(seed)
    embedder = MemoEmbedder(embedder)
    docs = random_corpus(rng)
    default = rng.choice(["public", "deny"])
    settings = {
        "ingest.chunk_chars": 200,
        "context.budget_chars": rng.choice([300, 6000]),
        "retrieval.mode": mode,
        "access.default": default,
    }
    full = _config(tmp / f"full-{seed}", settings)
    ingest(write_corpus(tmp / f"corpus-{seed}.jsonl", docs), full, embedder=embedder)
    figures: dict[str, Any] = {
        "lookups": 0, "leaks": 0, "count_leaks": 0, "found": 0, "compared": 0, "unfiltered_checked": 0,
        "unfiltered_would_leak": 0,
        "failures": [],
    }  # fmt: skip
    alone: dict[tuple[str, ...], AgentLookup] = {}
    try:
        recorder = InvocationRecorder(invocation_db_url(full))
        with AgentLookup(KnowledgeTool(full, embedder=embedder), recorder) as agent:
            callers = [random_principals(rng) for _ in range(principal_sets or 0)]
            for number in range(lookups):
                principals = list(rng.choice(callers)) if callers else random_principals(rng)
                query = random_query(rng, docs)
                group = number // SESSION_LOOKUPS
                session = f"shared-session-{group}"  # every caller of the group shares it
                result = agent.call(query, session, principals=principals)
                trace = result.retrieval_trace
                row = recorder.get(trace.invocation_record.id) if trace and trace.invocation_record else None
                serialized = json.dumps([_dump(result), row.to_json() if row else None], default=str)
                invisible = [doc for doc in docs if not may_see(doc, principals, default)]
                leaks = leaked_markers(serialized, invisible)
                figures["lookups"] += 1
                figures["found"] += result.found
                figures["leaks"] += bool(leaks) or row is None
                if number % unfiltered_every == 0:  # the same lookup without the filter
                    unfiltered = json.dumps(_dump(agent.tool.lookup(query)))
                    figures["unfiltered_checked"] += 1
                    figures["unfiltered_would_leak"] += bool(leaked_markers(unfiltered, invisible))
                if group % compare_every:
                    continue
                key = tuple(sorted(principals))
                if key not in alone:
                    visible = [doc for doc in docs if may_see(doc, principals, default)]
                    path = tmp / f"alone-{seed}-{'-'.join(key) or 'none'}"
                    config = _config(path, settings)
                    ingest(write_corpus(path / "corpus.jsonl", visible), config, embedder=embedder)
                    own = InvocationRecorder(invocation_db_url(config))
                    alone[key] = AgentLookup(KnowledgeTool(config, embedder=embedder), own)
                expected = _dump(alone[key].call(query, session))
                got = comparable(_dump(result))
                if mode != "dense":  # sparse scores read IDF over the whole collection: hints only
                    parts = ("l0Hints", "categoryFilter")
                    got = {part: got["retrievalTrace"][part] for part in parts}
                    expected = {part: expected["retrievalTrace"][part] for part in parts}
                differ = differences(got, comparable(expected))
                figures["compared"] += 1
                figures["count_leaks"] += bool(differ)
                if (leaks or differ or row is None) and len(figures["failures"]) < 5:
                    figures["failures"].append({"query": query, "principals": principals, "leaks": leaks,
                                                "differences": differ[:5]})  # fmt: skip
    finally:
        for other in alone.values():
            other.close()
    return figures
