"""Haystack (``haystack-ai``): the component in a ``Pipeline`` feeding the framework's own
``PromptBuilder`` (no model), on the real framework."""

from __future__ import annotations

from typing import Any

import pytest
from integration_fixtures import (
    FINANCE,
    NO_EVIDENCE_QUESTION,
    REFUND_DOC,
    REFUND_KEY,
    REFUND_QUESTION,
    SUPPORT,
    integration,
    store_down,
)

from lookup_knowledge import AgentLookup

haystack = integration("haystack", "haystack")
from haystack import Pipeline  # noqa: E402
from haystack.components.builders import PromptBuilder  # noqa: E402

TEMPLATE = "{% for d in documents %}[{{ d.id }}] {{ d.content }}\n{% endfor %}Question: {{ question }}"


def rag_pipeline(agent: AgentLookup, session_id: str | None = None, principals: Any = None) -> Pipeline:
    """The lookup's documents rendered into a prompt, as a retriever's are in a RAG pipeline."""
    pipeline = Pipeline()
    pipeline.add_component("lookup", haystack.LookupKnowledge(agent, session_id, principals=principals))
    pipeline.add_component("prompt", PromptBuilder(TEMPLATE, required_variables=["documents", "question"]))
    pipeline.connect("lookup.documents", "prompt.documents")
    return pipeline


def run(pipeline: Pipeline, query: Any) -> tuple[str, list[Any], dict[str, Any]]:
    """The prompt, the documents and the result of one run."""
    out = pipeline.run({"lookup": {"query": query}, "prompt": {"question": str(query)}}, {"lookup"})
    return out["prompt"]["prompt"], out["lookup"]["documents"], out["lookup"]["result"]


def test_a_pipeline_renders_the_evidence_with_its_keys_and_outputs_the_contract(
    restricted_agent: AgentLookup,
) -> None:
    prompt, documents, result = run(rag_pipeline(restricted_agent, "hs-run"), REFUND_QUESTION)
    assert prompt.startswith(f"[{REFUND_KEY}] ## Approval thresholds")
    assert [d.id for d in documents] == [b["evidenceKey"] for b in result["evidenceBlocks"]]
    top = documents[0]
    assert top.meta["evidenceKey"] == REFUND_KEY and top.meta["breadcrumb"].endswith("Approval thresholds")
    assert top.meta["evidenceStatus"] == result["evidenceStatus"] == "evidence"
    assert top.meta["relevanceLevel"] == result["relevanceLevel"]
    assert top.score == pytest.approx(result["evidenceBlocks"][0]["rerankScore"])
    assert result["retrievedDomainsThisSession"] == ["payments"]


def test_no_evidence_outputs_no_documents_and_the_verdict_in_the_result(
    restricted_agent: AgentLookup,
) -> None:
    prompt, documents, result = run(rag_pipeline(restricted_agent), NO_EVIDENCE_QUESTION)
    assert documents == [] and prompt == f"Question: {NO_EVIDENCE_QUESTION}"
    assert (result["found"], result["evidenceStatus"]) == (False, "no_evidence")


@pytest.mark.parametrize("query", ["   ", 42, None, "x" * 5000], ids=["blank", "int", "none", "huge"])
def test_bad_input_is_invalid_input_in_the_result_never_an_exception(
    restricted_agent: AgentLookup, query: Any
) -> None:
    _, documents, result = run(rag_pipeline(restricted_agent), query)
    assert documents == [] and result["evidenceStatus"] == "invalid_input"
    assert result["message"].startswith("Invalid query:")


def test_an_outage_is_retrieval_failed_in_the_result(restricted_agent: AgentLookup) -> None:
    with store_down(restricted_agent):
        _, documents, result = run(rag_pipeline(restricted_agent), REFUND_QUESTION)
    assert documents == [] and result["evidenceStatus"] == "retrieval_failed"


def test_session_and_principals_pass_through(restricted_agent: AgentLookup) -> None:
    _, hidden, result = run(rag_pipeline(restricted_agent, principals=SUPPORT), REFUND_QUESTION)
    assert all(d.meta["docId"] != REFUND_DOC for d in hidden)
    assert result["retrievalTrace"]["accessFilter"] == ["public", "support"]
    _, seen, _ = run(rag_pipeline(restricted_agent, "hs-finance", principals=FINANCE), REFUND_QUESTION)
    assert seen[0].id == REFUND_KEY
    answer = f"Refunds over 500 EUR need the Finance on-call [{REFUND_KEY}]."
    assert restricted_agent.verify_answer(answer, "hs-finance", principals=FINANCE).verified
