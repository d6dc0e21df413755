"""OpenAI Agents SDK (``openai-agents``): the function tools invoked through the SDK's function-tool
interface (``on_invoke_tool`` with a ``ToolContext``, as its runner calls them), on the real SDK."""

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
    INPUT_SCHEMA,
    TOOL_DESCRIPTION,
    VERIFY_DESCRIPTION,
    VERIFY_INPUT_SCHEMA,
)
from lookup_knowledge.agent.verify import MAX_ANSWER_CHARS

openai_agents = integration("openai-agents", "openai_agents")
from agents import Agent, FunctionTool  # noqa: E402
from agents.tool_context import ToolContext  # noqa: E402


def call(tool: FunctionTool, arguments: str) -> str:
    """The tool's output for a model's call with ``arguments`` (JSON text), as the runner invokes it."""
    context = ToolContext(context=None, tool_name=tool.name, tool_call_id="call-1", tool_arguments=arguments)
    return asyncio.run(tool.on_invoke_tool(context, arguments))


def lookup(tool: FunctionTool, query: Any) -> dict[str, Any]:
    return json.loads(call(tool, json.dumps({"query": query})))


def test_the_tools_are_the_definition_and_an_agent_takes_them(restricted_agent: AgentLookup) -> None:
    lookup_tool, verify_tool = openai_agents.lookup_tools(restricted_agent)
    assert (lookup_tool.name, lookup_tool.description) == ("lookup_knowledge", TOOL_DESCRIPTION)
    assert lookup_tool.params_json_schema == INPUT_SCHEMA and lookup_tool.strict_json_schema
    assert (verify_tool.name, verify_tool.description) == ("verify_answer", VERIFY_DESCRIPTION)
    assert verify_tool.params_json_schema == VERIFY_INPUT_SCHEMA
    assert Agent(name="support", tools=[lookup_tool, verify_tool]).tools == [lookup_tool, verify_tool]


def test_a_call_returns_the_contract_and_verify_checks_it_in_the_same_session(
    restricted_agent: AgentLookup,
) -> None:
    lookup_tool, verify_tool = openai_agents.lookup_tools(restricted_agent, "oa-session")
    result = lookup(lookup_tool, REFUND_QUESTION)
    assert result["evidenceStatus"] == "evidence" and result["evidenceBlocks"][0]["evidenceKey"] == REFUND_KEY
    answer = f'Refunds over 500 EUR need "approval from the Finance on-call" [{REFUND_KEY}].'
    verdict = json.loads(call(verify_tool, json.dumps({"answer": answer, "check_uncited": True})))
    assert verdict["verified"] is True and verdict["sessionId"] == "oa-session"
    _, other_session = openai_agents.lookup_tools(restricted_agent, "oa-other")
    elsewhere = json.loads(call(other_session, json.dumps({"answer": answer})))
    assert elsewhere["citations"][0]["status"] == "not_returned"


def test_no_evidence_returns_no_blocks_and_the_verdict(restricted_agent: AgentLookup) -> None:
    result = lookup(openai_agents.lookup_tools(restricted_agent)[0], NO_EVIDENCE_QUESTION)
    assert (result["found"], result["evidenceStatus"], result["evidenceBlocks"]) == (False, "no_evidence", [])


@pytest.mark.parametrize(
    "arguments",
    ['{"query": "   "}', '{"query": "bad\\u0000query"}', json.dumps({"query": "x" * 5000})],
    ids=["blank", "nul", "huge"],
)
def test_an_invalid_query_is_the_invalid_input_result(restricted_agent: AgentLookup, arguments: str) -> None:
    result = json.loads(call(openai_agents.lookup_tools(restricted_agent)[0], arguments))
    assert result["evidenceStatus"] == "invalid_input" and result["message"].startswith("Invalid query:")


@pytest.mark.parametrize(
    "arguments", ["not json", '{"query": 7}', "{}", '{"query": "a", "extra": 1}'], ids=str
)
def test_arguments_that_are_not_the_tools_are_an_error_message_never_an_exception(
    restricted_agent: AgentLookup, arguments: str
) -> None:
    lookup_tool, verify_tool = openai_agents.lookup_tools(restricted_agent)
    assert call(lookup_tool, arguments).startswith("Invalid arguments:")
    assert call(verify_tool, arguments).startswith("Invalid arguments:")


def test_an_outage_and_an_answer_too_long_are_reported_not_raised(restricted_agent: AgentLookup) -> None:
    lookup_tool, verify_tool = openai_agents.lookup_tools(restricted_agent)
    with store_down(restricted_agent):
        assert lookup(lookup_tool, REFUND_QUESTION)["evidenceStatus"] == "retrieval_failed"
    too_long = call(verify_tool, json.dumps({"answer": "x" * (MAX_ANSWER_CHARS + 1)}))
    assert too_long.startswith("Invalid answer:")


def test_principals_pass_through(restricted_agent: AgentLookup) -> None:
    hidden = lookup(openai_agents.lookup_tools(restricted_agent, principals=SUPPORT)[0], REFUND_QUESTION)
    assert REFUND_DOC not in json.dumps(hidden)
    seen = lookup(openai_agents.lookup_tools(restricted_agent, principals=FINANCE)[0], REFUND_QUESTION)
    assert seen["evidenceBlocks"][0]["evidenceKey"] == REFUND_KEY


def test_verify_without_an_invocation_record_says_so(restricted_agent: AgentLookup) -> None:
    unrecorded = AgentLookup(restricted_agent.tool, recorder=None)  # shares the tool: not closed here
    _, verify_tool = openai_agents.lookup_tools(unrecorded)
    said = call(verify_tool, json.dumps({"answer": f"Refunds need approval [{REFUND_KEY}]."}))
    assert said.startswith("verify_answer needs the invocation record")
