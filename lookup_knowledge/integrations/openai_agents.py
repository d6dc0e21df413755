"""OpenAI Agents SDK (``openai-agents``): ``lookup_knowledge`` and ``verify_answer`` as function tools.

``pip install 'lookup-knowledge[openai-agents]'``.

>>> with AgentLookup.from_config(load_config()) as lookup:  # doctest: +SKIP
...     agent = Agent(name="support", tools=lookup_tools(lookup, session_id="s1"))
"""

# ruff: noqa: E402  (the extra is checked before its imports)
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from lookup_knowledge.extras import require

require("openai-agents", __name__)

from agents import FunctionTool
from agents.tool_context import ToolContext
from pydantic import ValidationError

from lookup_knowledge.agent.lookup import AgentLookup, invalid_arguments
from lookup_knowledge.agent.tool_definition import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
    VERIFY_DESCRIPTION,
    VERIFY_TOOL_NAME,
    LookupArguments,
    VerifyArguments,
    input_schema,
)
from lookup_knowledge.integrations.common import SessionTools


def lookup_tools(
    agent: AgentLookup, session_id: str | None = None, *, principals: Sequence[str] | None = None
) -> list[FunctionTool]:
    """``lookup_knowledge`` and ``verify_answer`` as the SDK's function tools of one session
    (``None``: a fresh one) and one caller's ``principals``, their names, descriptions and
    parameter schemas from the tool definition. Each returns JSON text: the contract JSON (an
    ``invalid_input`` or ``retrieval_failed`` result included, its ``message`` saying why) or the
    verdict; a call it cannot run (arguments that are not the tool's, an answer that cannot be
    checked) returns the error message, the SDK's way of reporting a tool error to the model.
    The lookup runs in a worker thread, off the event loop. Never raises."""
    tools = SessionTools.of(agent, session_id, principals, prefix="openai-agents")

    async def lookup_knowledge(_: ToolContext[Any], arguments: str) -> str:
        try:
            query = LookupArguments.model_validate_json(arguments).query
        except ValidationError as exc:
            return invalid_arguments(exc)
        result = await asyncio.to_thread(tools.lookup, query)
        return result.model_dump_json(by_alias=True)

    async def verify_answer(_: ToolContext[Any], arguments: str) -> str:
        try:
            parsed = VerifyArguments.model_validate_json(arguments)
        except ValidationError as exc:
            return invalid_arguments(exc)
        checked = await asyncio.to_thread(tools.verify, parsed.answer, parsed.check_uncited)
        return checked if isinstance(checked, str) else checked.model_dump_json(by_alias=True)

    lookup_schema, verify_schema = input_schema(LookupArguments), input_schema(VerifyArguments)
    return [
        FunctionTool(TOOL_NAME, TOOL_DESCRIPTION, lookup_schema, lookup_knowledge, strict_json_schema=True),
        # not strict: strict mode would make the optional check_uncited required
        FunctionTool(
            VERIFY_TOOL_NAME, VERIFY_DESCRIPTION, verify_schema, verify_answer, strict_json_schema=False
        ),
    ]
