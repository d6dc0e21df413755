"""LlamaIndex (``llama-index-core``): the retriever queried, and in a query engine whose LLM is the
framework's own ``MockLLM`` (it echoes the prompt it is given), on the real framework."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
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

llamaindex = integration("llamaindex", "llamaindex")
from llama_index.core.instrumentation import get_dispatcher  # noqa: E402
from llama_index.core.instrumentation.event_handlers import BaseEventHandler  # noqa: E402
from llama_index.core.llms import MockLLM  # noqa: E402
from llama_index.core.query_engine import RetrieverQueryEngine  # noqa: E402

LookupKnowledgeRetriever = llamaindex.LookupKnowledgeRetriever


class Verdicts(BaseEventHandler):
    """The verdict events dispatched while it is registered."""

    seen: list[dict[str, Any]] = []

    @classmethod
    def class_name(cls) -> str:
        return "Verdicts"

    def handle(self, event: Any, **_: Any) -> None:
        if isinstance(event, llamaindex.LookupVerdictEvent):
            self.seen.append(event.verdict)


@pytest.fixture
def verdicts() -> Iterator[list[dict[str, Any]]]:
    handler = Verdicts(seen=[])
    root = get_dispatcher()
    root.add_event_handler(handler)
    yield handler.seen
    root.event_handlers.remove(handler)


def test_a_query_returns_a_node_per_block_keyed_by_its_evidence_key(
    restricted_agent: AgentLookup, verdicts: list[dict[str, Any]]
) -> None:
    scored = LookupKnowledgeRetriever(restricted_agent, "li-query").retrieve(REFUND_QUESTION)
    top = scored[0]
    assert top.node.node_id == top.node.metadata["evidenceKey"] == REFUND_KEY
    assert top.node.metadata["title"] == "Refund Policy" and top.node.metadata["hitReasons"]
    assert top.node.metadata["location"]["headingPath"] == ["Refund Policy", "Approval thresholds"]
    assert top.node.metadata["evidenceStatus"] == verdicts[-1]["evidenceStatus"] == "evidence"
    assert [s.score for s in scored] == sorted((s.score for s in scored), reverse=True)
    assert [s.node.metadata["rank"] for s in scored] == list(range(1, len(scored) + 1))
    model_view = top.node.get_content(metadata_mode="llm")
    assert f"evidenceKey: {REFUND_KEY}" in model_view and "hitReasons" not in model_view


def test_an_async_retrieval_gives_the_same_nodes(restricted_agent: AgentLookup) -> None:
    retriever = LookupKnowledgeRetriever(restricted_agent, "li-async")
    scored = asyncio.run(retriever.aretrieve(REFUND_QUESTION))
    assert [s.node.node_id for s in scored] == [s.node.node_id for s in retriever.retrieve(REFUND_QUESTION)]


def test_a_query_engine_answers_from_the_nodes_with_their_keys_in_the_prompt(
    restricted_agent: AgentLookup, verdicts: list[dict[str, Any]]
) -> None:
    engine = RetrieverQueryEngine.from_args(LookupKnowledgeRetriever(restricted_agent), llm=MockLLM())
    response = engine.query(REFUND_QUESTION)
    assert response.source_nodes[0].node.node_id == REFUND_KEY
    assert f"evidenceKey: {REFUND_KEY}" in str(response) and "Finance on-call" in str(response)  # the prompt
    empty = engine.query(NO_EVIDENCE_QUESTION)
    assert empty.source_nodes == [] and verdicts[-1]["evidenceStatus"] == "no_evidence"


@pytest.mark.parametrize("query", ["   ", "x" * 5000, "\u200b"], ids=["blank", "huge", "invisible"])
def test_bad_input_is_no_nodes_and_invalid_input(
    restricted_agent: AgentLookup, verdicts: list[dict[str, Any]], query: str
) -> None:
    assert LookupKnowledgeRetriever(restricted_agent).retrieve(query) == []
    assert verdicts[-1]["evidenceStatus"] == "invalid_input" and verdicts[-1]["found"] is False


def test_an_outage_is_no_nodes_and_retrieval_failed(
    restricted_agent: AgentLookup, verdicts: list[dict[str, Any]]
) -> None:
    with store_down(restricted_agent):
        assert LookupKnowledgeRetriever(restricted_agent).retrieve(REFUND_QUESTION) == []
    assert verdicts[-1]["evidenceStatus"] == "retrieval_failed"


def test_session_and_principals_pass_through(restricted_agent: AgentLookup) -> None:
    hidden = LookupKnowledgeRetriever(restricted_agent, principals=SUPPORT).retrieve(REFUND_QUESTION)
    assert all(s.node.metadata["docId"] != REFUND_DOC for s in hidden)
    LookupKnowledgeRetriever(restricted_agent, "li-session", principals=FINANCE).retrieve(REFUND_QUESTION)
    answer = f"A refund above 500 EUR needs the Finance on-call [{REFUND_KEY}]."
    verdict = restricted_agent.verify_answer(answer, "li-session", principals=FINANCE)
    assert verdict.verified and verdict.citations[0].status == "ok"
    assert restricted_agent.verify_answer(answer, "li-session").citations[0].status == "not_returned"
