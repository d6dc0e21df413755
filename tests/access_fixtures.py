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

Used by ``tests/test_access.py`` (a few hypothesis examples) and ``benchmarks/access_leaks.py``
(at least 10,000 lookups).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
