"""The judged sets built here (``benchmarks/sets/``): real public sites nobody here wrote, with
questions written before the pages were read, never used to fit any choice.

Each set is a folder: ``pages/`` (the markdown pages to ingest), ``queries.jsonl`` (every
question, ``answerable`` true or false; an unanswerable one lists the ``checked_absent`` terms
no page holds), ``qrels.tsv`` (the pages that answer each answerable question) and
``answers.jsonl`` (where on the page: one record per located answer, ``query-id``, ``page``,
``heading``, empty for a page's text before its first heading, and ``answer``, the page's own
words; ``pooled`` where it was added on reading a baseline run's top blocks). ``SOURCE.md``
names the repository, commit and licence.

A block *holds* a located answer (:func:`holds_answer`) when it comes from the answer's page and
its text (title, breadcrumb and content) holds a run of at least ``HELD_SHARE`` of the answer's
words in order, both sides normalized (:func:`words`): Unicode NFKC, typographic quotes made
plain, markdown emphasis and code marks dropped, lower case. A run shorter than the whole answer
still counts, so an answer cut by a chunk boundary is held by the block holding most of it.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path

SETS = Path(__file__).with_name("sets")
OWN_SETS = ("docs-site", "handbook", "benefits")
HELD_SHARE = 0.8
_PLAIN = str.maketrans(
    {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "*": " ", "`": " ", "_": " "}
)


@dataclass(frozen=True)
class Answer:
    """Where one answer to a question stands: its page, section heading and words."""

    query_id: str
    page: str
    heading: str
    text: str


def words(text: str) -> list[str]:
    """``text``'s words, normalized for comparing a located answer with a block."""
    return re.findall(r"\w+", unicodedata.normalize("NFKC", text).translate(_PLAIN).lower())


def held_share(block_text: str, answer: str) -> float:
    """The longest run of ``answer``'s words, in order, that ``block_text`` holds, as a share."""
    wanted, held = words(answer), words(block_text)
    if not wanted:
        return 0.0
    match = SequenceMatcher(None, held, wanted, autojunk=False).find_longest_match(
        0, len(held), 0, len(wanted)
    )
    return match.size / len(wanted)


def holds_answer(doc_id: str, block_text: str, answers: list[Answer]) -> bool:
    """Whether a block of page ``doc_id`` holds one of a question's located ``answers``."""
    return any(a.page == doc_id and held_share(block_text, a.text) >= HELD_SHARE for a in answers)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def located_answers(folder: Path) -> dict[str, list[Answer]]:
    """Each answerable question's located answers (``answers.jsonl``)."""
    out: dict[str, list[Answer]] = {}
    for r in read_jsonl(folder / "answers.jsonl"):
        out.setdefault(r["query-id"], []).append(Answer(r["query-id"], r["page"], r["heading"], r["answer"]))
    return out


def unanswerable_questions(folder: Path) -> list[str]:
    """The questions of ``queries.jsonl`` that no page of the set answers."""
    return [r["text"] for r in read_jsonl(folder / "queries.jsonl") if not r["answerable"]]
