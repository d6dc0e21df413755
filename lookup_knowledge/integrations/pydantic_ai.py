"""Pydantic AI (``pydantic-ai-slim``): ``lookup_knowledge`` and ``verify_answer`` as a toolset.

``pip install 'lookup-knowledge[pydantic-ai]'``.

>>> with AgentLookup.from_config(load_config()) as lookup:  # doctest: +SKIP
...     agent = Agent("openai:gpt-5", toolsets=[lookup_toolset(lookup, session_id="s1")])
"""

# ruff: noqa: E402  (the extra is checked before its imports)
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from lookup_knowledge.extras import require

require("pydantic-ai", __name__)

from pydantic import BaseModel, ValidationError
from pydantic_ai import FunctionToolset, Tool, ToolFailed

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
from lookup_knowledge.integrations.common import SessionTools, contract_json, is_tool_error

_Arguments = TypeVar("_Arguments", bound=BaseModel)


def lookup_toolset(
    agent: AgentLookup, session_id: str | None = None, *, principals: Sequence[str] | None = None
) -> FunctionToolset[Any]:
    """``lookup_knowledge`` (the contract JSON) and ``verify_answer`` (the verdict) as a Pydantic AI
    toolset of one session (``None``: a fresh one) and one caller's ``principals``, their names,
    descriptions and parameter schemas from the tool definition. A call that fails
    (``invalid_input``, ``retrieval_failed``, an answer that cannot be checked, arguments that are
    not the tool's) raises ``ToolFailed`` with the same JSON or why: the model sees a failed tool
    result, without spending the tool's retries, and the run goes on."""
    tools = SessionTools.of(agent, session_id, principals, prefix="pydantic-ai")

    def lookup_knowledge(**arguments: Any) -> dict[str, Any]:
        result = tools.lookup(_parsed(LookupArguments, arguments).query)
        if is_tool_error(result):
            raise ToolFailed(result.model_dump_json(by_alias=True))
        return contract_json(result)

    def verify_answer(**arguments: Any) -> dict[str, Any]:
        parsed = _parsed(VerifyArguments, arguments)
        checked = tools.verify(parsed.answer, parsed.check_uncited)
        if isinstance(checked, str):
            raise ToolFailed(checked)
        return checked.model_dump(by_alias=True, mode="json")

    return FunctionToolset(
        [
            Tool.from_schema(lookup_knowledge, TOOL_NAME, TOOL_DESCRIPTION, input_schema(LookupArguments)),
            Tool.from_schema(
                verify_answer, VERIFY_TOOL_NAME, VERIFY_DESCRIPTION, input_schema(VerifyArguments)
            ),
        ]
    )


def _parsed(model: type[_Arguments], arguments: dict[str, Any]) -> _Arguments:
    """The arguments as the tool definition's model (``Tool.from_schema`` passes them unchecked)."""
    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        raise ToolFailed(invalid_arguments(exc)) from exc
