"""Nonsense queries answer ``no_evidence`` under the default absolute evidence floor, real ones do not.

``retrieval.min_evidence_score`` (0.2, measured by ``benchmarks/evidence_threshold.py``, see
``docs/reliability.md``) is the normalized score below which a hit is not evidence. On the
sample knowledge base these strings score 0.11-0.13 at best; its 31 questions score 0.50 and up.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import make_config

from lookup_knowledge import KnowledgeTool, sample_knowledge_base
from lookup_knowledge.config import RetrievalConfig

GARBAGE = ["vicofi", "uro rhytun", "ytrewytrewytrew", "1 37778 1"]


@pytest.fixture(scope="module")
def tool(sample_store: Path):
    with KnowledgeTool.from_config(make_config(sample_store)) as tool:
        yield tool


@pytest.mark.parametrize("query", GARBAGE)
def test_garbage_gets_a_clean_no_evidence(tool: KnowledgeTool, query: str) -> None:
    result = tool.lookup(query)
    assert (result.found, result.evidence_status, result.relevance_level) == (False, "no_evidence", "none")
    [attempt] = result.retrieval_trace.attempts
    assert attempt.hit_count > 0 and attempt.usable_count == 0  # hits came back, none scored enough
    assert attempt.top_normalized_score < RetrievalConfig().min_evidence_score
    assert result.retrieval_trace.min_evidence_score == RetrievalConfig().min_evidence_score


def test_the_sample_questions_keep_their_evidence(tool: KnowledgeTool) -> None:
    questions = Path(sample_knowledge_base()).with_name("sample-eval") / "queries.jsonl"
    texts = [json.loads(line)["text"] for line in questions.read_text(encoding="utf-8").splitlines()]
    assert len(texts) == 31
    assert [tool.lookup(text).evidence_status for text in texts] == ["evidence"] * len(texts)
