"""LangChain (``langchain-core``): the retriever in a runnable chain without a model, its verdict
event, and the tools invoked as a model's tool calls, on the real framework."""

from __future__ import annotations

import asyncio
import json
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
from lookup_knowledge.agent.tool_definition import (
    TOOL_DESCRIPTION,
    VERIFY_DESCRIPTION,
    LookupArguments,
    VerifyArguments,
)
from lookup_knowledge.agent.verify import MAX_ANSWER_CHARS

langchain = integration("langchain", "langchain")
from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.messages import ToolMessage  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_core.runnables import RunnableLambda, RunnablePassthrough  # noqa: E402

LookupKnowledgeRetriever = langchain.LookupKnowledgeRetriever


class Verdicts(BaseCallbackHandler):
    """The verdict events a run dispatched."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def on_custom_event(self, name: str, data: Any, **_: Any) -> None:
        if name == langchain.VERDICT_EVENT:
            self.seen.append(data)


def retrieve(retriever: Any, query: Any) -> tuple[list[Any], dict[str, Any]]:
    """The documents of one retrieval and the verdict it dispatched."""
    verdicts = Verdicts()
    documents = retriever.invoke(query, config={"callbacks": [verdicts]})
    assert len(verdicts.seen) == 1
    return documents, verdicts.seen[0]


def tool_call(tool: Any, args: dict[str, Any]) -> ToolMessage:
    """The tool run as a model's tool call runs it: a ``ToolMessage`` back."""
    return tool.invoke({"type": "tool_call", "id": "call-1", "name": tool.name, "args": args})


def test_a_chain_without_a_model_puts_the_evidence_and_its_keys_in_the_prompt(
    restricted_agent: AgentLookup,
) -> None:
    retriever = LookupKnowledgeRetriever(agent=restricted_agent, session_id="lc-chain")
    prompt = ChatPromptTemplate.from_template(
        "Answer from the evidence only.\n{context}\nQuestion: {question}"
    )
    cite = RunnableLambda(lambda docs: "\n".join(f"[{d.id}] {d.page_content}" for d in docs))
    chain = {"context": retriever | cite, "question": RunnablePassthrough()} | prompt
    text = chain.invoke(REFUND_QUESTION).to_string()
    assert f"[{REFUND_KEY}]" in text and "Approval thresholds" in text

    documents, verdict = retrieve(retriever, REFUND_QUESTION)
    top = documents[0]
    assert top.id == top.metadata["evidenceKey"] == REFUND_KEY
    assert top.metadata["title"] == "Refund Policy" and top.metadata["source"] == "payments/refund-policy.md"
    assert top.metadata["breadcrumb"] == "Refund Policy > Approval thresholds"
    assert top.metadata["location"]["startLine"] >= 1 and top.metadata["hitReasons"]
    assert top.metadata["score"] > 0 and top.metadata["rank"] == 1
    assert {k: top.metadata[k] for k in ("found", "evidenceStatus")} == {
        "found": True,
        "evidenceStatus": "evidence",
    }
    assert top.metadata["relevanceLevel"] == verdict["relevanceLevel"] in {"high", "medium", "low"}
    assert top.metadata["completenessHint"] == verdict["completenessHint"]
    assert top.page_content == restricted_agent.call(REFUND_QUESTION).evidence_blocks[0].content


def test_an_async_retrieval_gives_the_documents_and_the_verdict(restricted_agent: AgentLookup) -> None:
    verdicts = Verdicts()
    retriever = LookupKnowledgeRetriever(agent=restricted_agent, session_id="lc-async")
    documents = asyncio.run(retriever.ainvoke(REFUND_QUESTION, config={"callbacks": [verdicts]}))
    assert documents[0].id == REFUND_KEY and verdicts.seen[0]["evidenceStatus"] == "evidence"


def test_no_evidence_returns_no_documents_and_the_verdict_says_so(restricted_agent: AgentLookup) -> None:
    documents, verdict = retrieve(LookupKnowledgeRetriever(agent=restricted_agent), NO_EVIDENCE_QUESTION)
    assert documents == []
    assert verdict["evidenceStatus"] == "no_evidence" and verdict["found"] is False
    assert verdict["query"] == NO_EVIDENCE_QUESTION


@pytest.mark.parametrize(
    "query", ["   ", 42, "x" * 5000, "bad\x00query"], ids=["blank", "int", "huge", "nul"]
)
def test_bad_input_is_no_documents_and_invalid_input_never_an_exception(
    restricted_agent: AgentLookup, query: Any
) -> None:
    documents, verdict = retrieve(LookupKnowledgeRetriever(agent=restricted_agent), query)
    assert documents == [] and verdict["evidenceStatus"] == "invalid_input"
    assert verdict["message"].startswith("Invalid query:")


def test_an_outage_is_no_documents_and_retrieval_failed(restricted_agent: AgentLookup) -> None:
    with store_down(restricted_agent):
        documents, verdict = retrieve(LookupKnowledgeRetriever(agent=restricted_agent), REFUND_QUESTION)
    assert documents == [] and verdict["evidenceStatus"] == "retrieval_failed"


def test_principals_pass_through_a_hidden_document_is_never_returned(restricted_agent: AgentLookup) -> None:
    hidden, _ = retrieve(
        LookupKnowledgeRetriever(agent=restricted_agent, principals=SUPPORT), REFUND_QUESTION
    )
    assert all(d.metadata["docId"] != REFUND_DOC for d in hidden)
    seen, _ = retrieve(LookupKnowledgeRetriever(agent=restricted_agent, principals=FINANCE), REFUND_QUESTION)
    assert seen[0].id == REFUND_KEY


def test_the_tools_carry_the_definition_and_share_the_retrievers_session(
    restricted_agent: AgentLookup,
) -> None:
    lookup, verify = langchain.lookup_tools(restricted_agent, "lc-tools")
    assert (lookup.name, lookup.description, lookup.args_schema) == (
        "lookup_knowledge",
        TOOL_DESCRIPTION,
        LookupArguments,
    )
    assert (verify.name, verify.description, verify.args_schema) == (
        "verify_answer",
        VERIFY_DESCRIPTION,
        VerifyArguments,
    )
    answer = f"A refund above 500 EUR needs approval [{REFUND_KEY}]."
    assert (
        json.loads(tool_call(verify, {"answer": answer}).content)["citations"][0]["status"] == "not_returned"
    )
    retrieve(LookupKnowledgeRetriever(agent=restricted_agent, session_id="lc-tools"), REFUND_QUESTION)
    verified = tool_call(verify, {"answer": answer})
    assert verified.status == "success" and json.loads(verified.content)["verified"] is True

    found = tool_call(lookup, {"query": REFUND_QUESTION})
    payload = json.loads(found.content)
    assert found.status == "success" and payload["evidenceBlocks"][0]["evidenceKey"] == REFUND_KEY
    assert payload["retrievedDomainsThisSession"] == ["payments"]
    nothing = json.loads(tool_call(lookup, {"query": NO_EVIDENCE_QUESTION}).content)
    assert (nothing["evidenceStatus"], nothing["evidenceBlocks"]) == ("no_evidence", [])


def test_the_tools_report_failures_as_tool_errors_never_exceptions(restricted_agent: AgentLookup) -> None:
    lookup, verify = langchain.lookup_tools(restricted_agent, principals=SUPPORT)
    refused = tool_call(lookup, {"query": "   "})
    assert refused.status == "error" and json.loads(refused.content)["evidenceStatus"] == "invalid_input"
    with store_down(restricted_agent):
        failed = tool_call(lookup, {"query": REFUND_QUESTION})
    assert failed.status == "error" and json.loads(failed.content)["evidenceStatus"] == "retrieval_failed"
    not_a_query = tool_call(lookup, {"query": ["a", "list"]})
    assert not_a_query.status == "error" and not_a_query.content.startswith("Invalid arguments")
    too_long = tool_call(verify, {"answer": "x" * (MAX_ANSWER_CHARS + 1)})
    assert too_long.status == "error" and too_long.content.startswith("Invalid answer:")
    hidden = json.loads(tool_call(lookup, {"query": REFUND_QUESTION}).content)
    assert REFUND_DOC not in json.dumps(hidden)
