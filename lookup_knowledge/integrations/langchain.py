"""LangChain: a retriever of one ``Document`` per evidence block, and the two tools.

``pip install 'lookup-knowledge[langchain]'`` (``langchain-core``).

>>> with AgentLookup.from_config(load_config()) as agent:  # doctest: +SKIP
...     retriever = LookupKnowledgeRetriever(agent=agent, session_id="s1")
...     retriever.invoke("Who must approve a refund above 500 EUR?")[0].id
'payments-refund-policy#chunk-2'
"""

# ruff: noqa: E402  (the extra is checked before its imports)
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lookup_knowledge.extras import require

require("langchain", __name__)

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic import Field

from lookup_knowledge.agent.lookup import AgentLookup, invalid_arguments, new_session_id
from lookup_knowledge.agent.tool_definition import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
    VERIFY_DESCRIPTION,
    VERIFY_TOOL_NAME,
    LookupArguments,
    VerifyArguments,
)
from lookup_knowledge.contract import LookupResult
from lookup_knowledge.integrations.common import (
    SessionTools,
    block_metadata,
    contract_json,
    is_tool_error,
    verdict,
)

VERDICT_EVENT = "lookup_knowledge_verdict"  # the custom event each retrieval dispatches


class LookupKnowledgeRetriever(BaseRetriever):
    """``lookup_knowledge`` as a LangChain retriever: one ``Document`` per evidence block (``id`` and
    ``metadata["evidenceKey"]`` its key; ``metadata`` also its source, title, breadcrumb, location,
    scores, rank, hit reasons and the lookup's verdict), none unless the verdict is ``evidence``.

    Every retrieval dispatches the custom event :data:`VERDICT_EVENT` with the verdict and the
    ``query`` and ``message`` (to callbacks' ``on_custom_event`` and ``astream_events``), so a
    ``no_evidence``, ``invalid_input`` or ``retrieval_failed`` lookup, which returns no documents,
    still says which it was. Never raises.
    """

    agent: AgentLookup
    session_id: str = Field(default_factory=lambda: new_session_id("langchain"))
    principals: Sequence[str] | None = None

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        result = SessionTools(self.agent, self.session_id, self.principals).lookup(query)
        event = {"query": result.query, **verdict(result), "message": result.message}
        run_manager.get_child().on_custom_event(VERDICT_EVENT, event, run_id=run_manager.run_id)
        return documents(result)


def documents(result: LookupResult) -> list[Document]:
    """One ``Document`` per evidence block of ``result``."""
    return [
        Document(id=block.evidence_key, page_content=block.content, metadata=block_metadata(block, result))
        for block in result.evidence_blocks
    ]


def lookup_tools(
    agent: AgentLookup, session_id: str | None = None, *, principals: Sequence[str] | None = None
) -> list[BaseTool]:
    """``lookup_knowledge`` (the contract JSON) and ``verify_answer`` (the verdict JSON) as LangChain
    tools of one session (``None``: a fresh one) and one caller's ``principals``, their names,
    descriptions and argument schemas from the tool definition. A call that fails
    (``invalid_input``, ``retrieval_failed``, an answer that cannot be checked, arguments that are
    not the tool's) is a ``ToolException`` the tool handles: a tool message with status
    ``error`` carrying the same JSON or why. Never raises."""
    tools = SessionTools.of(agent, session_id, principals, prefix="langchain")

    def lookup_knowledge(query: str) -> dict[str, Any]:
        result = tools.lookup(query)
        if is_tool_error(result):
            raise ToolException(result.model_dump_json(by_alias=True))
        return contract_json(result)

    def verify_answer(answer: str, check_uncited: bool = False) -> dict[str, Any]:
        checked = tools.verify(answer, check_uncited)
        if isinstance(checked, str):
            raise ToolException(checked)
        return checked.model_dump(by_alias=True, mode="json")

    return [
        _tool(lookup_knowledge, TOOL_NAME, TOOL_DESCRIPTION, LookupArguments),
        _tool(verify_answer, VERIFY_TOOL_NAME, VERIFY_DESCRIPTION, VerifyArguments),
    ]


def _tool(function: Any, name: str, description: str, arguments: type) -> StructuredTool:
    return StructuredTool.from_function(
        function,
        name=name,
        description=description,
        args_schema=arguments,
        handle_tool_error=True,  # the exception's text becomes the tool's (error) result
        handle_validation_error=invalid_arguments,
    )
