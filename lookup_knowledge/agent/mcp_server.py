"""The ``lookup_knowledge`` tool over the Model Context Protocol (the official ``mcp`` SDK).

``lookup-knowledge mcp`` serves it over stdio. The tool returns the contract JSON both as
structured content and as text; a rejected query (``invalid_input``) comes back as a tool error
result (``isError``) carrying the same JSON, so the agent reads why. Every call is recorded.

A stdio server process serves exactly one client connection, so the process is that
connection's session: ``retrievedDomainsThisSession`` accumulates over its calls, and the next
connection (a new process) starts empty.

>>> with AgentLookup.from_config(load_config()) as agent:  # doctest: +SKIP
...     build_server(agent).run("stdio")
"""

from __future__ import annotations

import json
import logging
from importlib.metadata import version
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent
from pydantic import ConfigDict, Field

from lookup_knowledge.adapters.search import first_line
from lookup_knowledge.agent.lookup import (
    QUERY_DESCRIPTION,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    AgentLookup,
    new_session_id,
)
from lookup_knowledge.config import Config
from lookup_knowledge.contract import LookupResult

logger = logging.getLogger(__name__)

SERVER_NAME = "lookup-knowledge"
INSTRUCTIONS = (
    "Evidence-first knowledge retrieval. Call lookup_knowledge(query) when an answer depends on "
    "the knowledge base, and cite the evidenceKey of every block you use."
)


def build_server(agent: AgentLookup, session_id: str | None = None) -> MCPServer:
    """An MCP server exposing ``lookup_knowledge(query)``; its calls share ``session_id`` (default: fresh)."""
    session = session_id or new_session_id("mcp")

    def lookup_knowledge(
        query: Annotated[str, Field(description=QUERY_DESCRIPTION)],
    ) -> Annotated[CallToolResult, LookupResult]:
        result = agent.call(query, session)
        payload = result.model_dump(by_alias=True, mode="json")
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))],
            structured_content=payload,
            is_error=result.evidence_status == "invalid_input",
        )

    tool = _closed_arguments(
        Tool.from_function(lookup_knowledge, name=TOOL_NAME, description=TOOL_DESCRIPTION)
    )
    return MCPServer(
        SERVER_NAME, instructions=INSTRUCTIONS, version=version("lookup-knowledge"), tools=[tool]
    )


def _closed_arguments(tool: Tool) -> Tool:
    """``tool`` refusing arguments it does not declare (``additionalProperties: false``), as the
    schema every other export of the tool says (:data:`~lookup_knowledge.agent.INPUT_SCHEMA`)."""
    arguments = tool.fn_metadata.arg_model
    closed = type(arguments.__name__, (arguments,), {"model_config": ConfigDict(extra="forbid")})
    metadata = tool.fn_metadata.model_copy(update={"arg_model": closed})
    return tool.model_copy(
        update={"fn_metadata": metadata, "parameters": closed.model_json_schema(by_alias=True)}
    )


def serve_stdio(config: Config) -> None:
    """Serve the configured tool over stdio until the client disconnects.

    A server store that is down serves anyway: each call answers ``retrieval_failed`` within
    ``store.timeout_s`` until the store is back. The query model loads before serving, so the
    first call is bounded like the others.
    """
    with AgentLookup.from_config(config, require_store=False) as agent:
        _load_model(agent)
        build_server(agent).run("stdio")


def _load_model(agent: AgentLookup) -> None:
    """Load the query model now; one that fails is reported by each call (``retrieval_failed``)."""
    try:
        agent.tool.embedder.embed_query("warm-up")
    except Exception as exc:
        logger.warning("the embedding model did not load: %s", first_line(exc))
