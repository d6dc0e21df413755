"""Pydantic AI (``pydantic-ai-slim``): agents whose model is one the framework ships for tests
(``TestModel`` calls every tool with arguments made from its schema; ``FunctionModel`` makes the
calls a test scripts) running the toolset, on the real framework."""

from __future__ import annotations

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
    INPUT_SCHEMA,
    TOOL_DESCRIPTION,
    VERIFY_DESCRIPTION,
    VERIFY_INPUT_SCHEMA,
)

pydantic_ai = integration("pydantic-ai", "pydantic_ai")
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402


def returns(
    agent: AgentLookup, calls: list[tuple[str, dict[str, Any]]], **toolset: Any
) -> list[ToolReturnPart]:
    """What the tools returned to a model that made ``calls`` (one turn, then a final answer)."""

    def model(messages: list[ModelMessage], _: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart(name, args) for name, args in calls])
        return ModelResponse(parts=[TextPart("done")])

    run = Agent(FunctionModel(model), toolsets=[pydantic_ai.lookup_toolset(agent, **toolset)]).run_sync("go")
    assert run.output == "done"
    return [p for m in run.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]


def test_the_test_model_sees_the_definition_and_calls_the_tool(restricted_agent: AgentLookup) -> None:
    model = TestModel(call_tools=["lookup_knowledge"])
    run = Agent(model, toolsets=[pydantic_ai.lookup_toolset(restricted_agent)]).run_sync("question")
    seen = {
        t.name: (t.description, t.parameters_json_schema)
        for t in model.last_model_request_parameters.function_tools
    }
    assert seen == {
        "lookup_knowledge": (TOOL_DESCRIPTION, INPUT_SCHEMA),
        "verify_answer": (VERIFY_DESCRIPTION, VERIFY_INPUT_SCHEMA),
    }
    (returned,) = [p for m in run.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    assert returned.outcome == "success" and returned.content["query"] == "a"  # what TestModel sends
    assert returned.content["evidenceStatus"] in {"evidence", "no_evidence"}
    assert json.loads(run.output)["lookup_knowledge"]["query"] == "a"


def test_a_lookup_then_verify_in_one_session(restricted_agent: AgentLookup) -> None:
    answer = f"Refunds over 500 EUR need the Finance on-call [{REFUND_KEY}]."
    (found,) = returns(
        restricted_agent, [("lookup_knowledge", {"query": REFUND_QUESTION})], session_id="pa-1"
    )
    assert found.outcome == "success" and found.content["evidenceBlocks"][0]["evidenceKey"] == REFUND_KEY
    (verdict,) = returns(restricted_agent, [("verify_answer", {"answer": answer})], session_id="pa-1")
    assert verdict.content["verified"] is True and verdict.content["sessionId"] == "pa-1"
    (elsewhere,) = returns(restricted_agent, [("verify_answer", {"answer": answer})], session_id="pa-2")
    assert elsewhere.content["citations"][0]["status"] == "not_returned"


def test_no_evidence_returns_no_blocks_and_the_verdict(restricted_agent: AgentLookup) -> None:
    (nothing,) = returns(restricted_agent, [("lookup_knowledge", {"query": NO_EVIDENCE_QUESTION})])
    assert nothing.outcome == "success"
    assert (nothing.content["evidenceStatus"], nothing.content["evidenceBlocks"]) == ("no_evidence", [])


@pytest.mark.parametrize(
    ("tool", "args", "says"),
    [
        ("lookup_knowledge", {"query": "   "}, '"evidenceStatus":"invalid_input"'),
        ("lookup_knowledge", {"query": 7}, "Invalid arguments: query"),
        ("lookup_knowledge", {}, "Invalid arguments: query: Field required"),
        ("lookup_knowledge", {"query": "a", "top_k": 3}, "Invalid arguments: top_k"),
        ("verify_answer", {"answer": "x" * 100_001}, "Invalid answer:"),
    ],
    ids=["blank", "int", "missing", "extra", "too-long"],
)
def test_bad_input_is_a_failed_tool_result_and_the_run_goes_on(
    restricted_agent: AgentLookup, tool: str, args: dict[str, Any], says: str
) -> None:
    (failed,) = returns(restricted_agent, [(tool, args)])
    assert failed.outcome == "failed" and says in failed.content


def test_an_outage_is_a_failed_tool_result_carrying_retrieval_failed(restricted_agent: AgentLookup) -> None:
    with store_down(restricted_agent):
        (failed,) = returns(restricted_agent, [("lookup_knowledge", {"query": REFUND_QUESTION})])
    assert failed.outcome == "failed" and json.loads(failed.content)["evidenceStatus"] == "retrieval_failed"


def test_principals_pass_through(restricted_agent: AgentLookup) -> None:
    call = [("lookup_knowledge", {"query": REFUND_QUESTION})]
    (hidden,) = returns(restricted_agent, call, principals=SUPPORT)
    assert REFUND_DOC not in json.dumps(hidden.content)
    (seen,) = returns(restricted_agent, call, principals=FINANCE)
    assert seen.content["evidenceBlocks"][0]["evidenceKey"] == REFUND_KEY
