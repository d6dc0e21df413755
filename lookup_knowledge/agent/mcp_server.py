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
import re
import sys
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from importlib.metadata import version
from io import TextIOWrapper
from typing import Annotated, Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    CallToolResult,
    ErrorData,
    JSONRPCError,
    TextContent,
    jsonrpc_message_adapter,
)
from pydantic import BaseModel, ValidationError

from lookup_knowledge.agent.lookup import AgentLookup, new_session_id, verified_or_why
from lookup_knowledge.agent.tool_definition import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
    VERIFY_DESCRIPTION,
    VERIFY_TOOL_NAME,
    LookupArguments,
    VerifyArguments,
    input_schema,
)
from lookup_knowledge.agent.verify import AnswerVerdict
from lookup_knowledge.config import Config
from lookup_knowledge.contract import LookupResult

logger = logging.getLogger(__name__)

SERVER_NAME = "lookup-knowledge"
MAX_LOG_CHARS = 500  # the most of one log message that reaches stderr
INSTRUCTIONS = (
    "Evidence-first knowledge retrieval. Call lookup_knowledge(query) when an answer depends on "
    "the knowledge base, and cite the evidenceKey of every block you use. Before answering, call "
    "verify_answer(answer) with your draft and repair what it flags."
)


def build_server(
    agent: AgentLookup, session_id: str | None = None, *, principals: Sequence[str] | None = None
) -> MCPServer:
    """An MCP server exposing ``lookup_knowledge(query)`` and ``verify_answer(answer)``; their calls
    share ``session_id`` (default: fresh), each made as a caller of ``principals`` (``None``:
    ``access.principals``)."""
    session = session_id or new_session_id("mcp")

    def lookup_knowledge(query: str) -> Annotated[CallToolResult, LookupResult]:
        return lookup_tool_result(agent.call(query, session, principals=principals))

    def verify_answer(answer: str, check_uncited: bool = False) -> Annotated[CallToolResult, AnswerVerdict]:
        return verify_tool_result(
            lambda: agent.verify_answer(answer, session, check_uncited=check_uncited, principals=principals)
        )

    return tool_server(lookup_knowledge, verify_answer)


def tool_server(lookup_knowledge: Callable[..., Any], verify_answer: Callable[..., Any]) -> MCPServer:
    """The MCP server of the two tools, run by these functions (sync or async; a parameter typed
    ``Context`` gets the call's MCP context): what ``mcp`` serves over stdio and ``serve`` over
    streamable HTTP, with the same names, descriptions, schemas and instructions."""
    tools = [
        _defined_tool(lookup_knowledge, TOOL_NAME, TOOL_DESCRIPTION, LookupArguments),
        _defined_tool(verify_answer, VERIFY_TOOL_NAME, VERIFY_DESCRIPTION, VerifyArguments),
    ]
    return MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, version=version("lookup-knowledge"), tools=tools)


def lookup_tool_result(result: LookupResult) -> CallToolResult:
    """A lookup's contract JSON as the tool's result: structured and as text; a tool error
    (``isError``) when the query was refused (``invalid_input``)."""
    payload = result.model_dump(by_alias=True, mode="json")
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))],
        structured_content=payload,
        is_error=result.evidence_status == "invalid_input",
    )


def verify_tool_result(verify: Callable[[], AnswerVerdict]) -> CallToolResult:
    """The verdict ``verify()`` gives as the tool's result, or a tool error saying why there is none
    (an answer too long, no invocation record): the server serves on."""
    verdict = verified_or_why(verify)
    if isinstance(verdict, str):
        return tool_error(verdict)
    payload = verdict.model_dump(by_alias=True, mode="json")
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))],
        structured_content=payload,
    )


def tool_error(message: str) -> CallToolResult:
    """A tool error result the agent reads (``isError``), carrying ``message`` as text."""
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def _defined_tool(fn: Callable[..., Any], name: str, description: str, arguments: type[BaseModel]) -> Tool:
    """``fn`` as an MCP tool taking the ``arguments`` of its definition
    (:mod:`~lookup_knowledge.agent.tool_definition`): calls are validated by that model (arguments
    it does not declare refused) and the tool lists its schema, as the Python exports give it;
    the function's signature gives only the output schema."""
    tool = Tool.from_function(fn, name=name, description=description)
    validated = type(f"{name}Arguments", (arguments, ArgModelBase), {})
    metadata = tool.fn_metadata.model_copy(update={"arg_model": validated})
    return tool.model_copy(update={"fn_metadata": metadata, "parameters": input_schema(arguments)})


def serve_stdio(config: Config, principals: Sequence[str] | None = None) -> None:
    """Serve the configured tool over stdio until the client disconnects, every call made as a
    caller of ``principals`` (``None``: ``access.principals``).

    A server store that is down serves anyway: each call answers ``retrieval_failed`` within
    ``store.timeout_s`` until the store is back. The query model loads before serving, so the
    first call is bounded like the others. Every frame gets an answer (:func:`read_frame`).
    """
    with AgentLookup.from_config(config, require_store=False) as agent:
        agent.warm_up(principals)  # the model loads before serving; the first call reports it (coldStartMs)
        server = build_server(agent, principals=principals)  # the SDK sets up its log handler here
        for handler in logging.getLogger().handlers:
            handler.addFilter(CappedLogText())
        anyio.run(serve_frames, server)


class CappedLogText(logging.Filter):
    """Log messages cut to :data:`MAX_LOG_CHARS`: the SDK logs client text (an unknown tool's name,
    a refused argument) in full, and one 100,000-character name filled 5,403 stderr lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: the handler reports it as it would have
            return True
        if len(message) > MAX_LOG_CHARS:
            record.msg = f"{message[:MAX_LOG_CHARS]}... ({len(message):,} characters, cut)"
            record.args = None
        return True


async def serve_frames(server: MCPServer) -> None:
    """Run ``server`` on stdio, reading the frames itself: the SDK's reader drops a frame it
    cannot parse without a reply, so its client would wait its full timeout."""
    lowlevel = server._lowlevel_server  # what MCPServer.run_stdio_async runs, on our read stream
    frames, received = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    lines = anyio.wrap_file(TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))
    async with stdio_server(stdin=_no_lines()) as (_, write_stream), anyio.create_task_group() as tasks:
        tasks.start_soon(_read_frames, lines, frames, write_stream)
        await lowlevel.run(received, write_stream, lowlevel.create_initialization_options())
        tasks.cancel_scope.cancel()


async def _no_lines() -> AsyncIterator[str]:
    """The SDK transport's own input: none (it only writes; :func:`_read_frames` reads)."""
    return
    yield


async def _read_frames(
    lines: AsyncIterable[str], frames: MemoryObjectSendStream[SessionMessage | Exception], replies: Any
) -> None:
    """Each line to the server as a message, or answered here with a JSON-RPC error."""
    async with frames:
        async for line in lines:  # parsed off the event loop: the server serves meanwhile
            frame = await anyio.to_thread.run_sync(read_frame, line)
            if isinstance(frame, JSONRPCError):
                await replies.send(SessionMessage(frame))
            elif frame is not None:
                await frames.send(frame)


def read_frame(line: str) -> SessionMessage | JSONRPCError | None:
    """One stdio line as a message, or the JSON-RPC error that answers it (``None``: a blank line).

    Beyond what the SDK parses: a string with a lone surrogate escape (``"\\ud800"``) reaches
    the tool, which refuses it as ``invalid_input``; JSON that is not a JSON-RPC message gets an
    Invalid Request error, and text that is not JSON (or nests too deeply to parse) a Parse
    error, both with the frame's ``id`` when it can be found.
    """
    if not line.strip():
        return None
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValidationError:
        pass
    try:
        data = json.loads(line)  # unlike the SDK's parser, takes lone surrogate escapes
    except RecursionError:
        return _error(_top_level_id(line), PARSE_ERROR, "Parse error: the frame nests too deeply")
    except ValueError:
        return _error(_top_level_id(line), PARSE_ERROR, "Parse error: the frame is not valid JSON")
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_python(data, by_name=False))
    except (ValidationError, RecursionError):
        message = "Invalid Request: not a JSON-RPC 2.0 request, notification or response"
        return _error(_valid_id(data.get("id") if isinstance(data, dict) else None), INVALID_REQUEST, message)


# JSON strings and runs of brackets, in order. A string not closed runs to the end of the line
# (one token): were it dropped, the scan would start a string again at each of its escaped
# quotes and read the rest of the line from each, quadratic in its length.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*+(?:"|\\?\Z)|[{\[]+|[}\]]+', re.DOTALL)
_COLON = re.compile(r"[ \t\r\n]*:[ \t\r\n]*")


def _top_level_id(line: str) -> int | str | None:
    """The ``id`` member of the frame's outermost object, found without parsing the rest, in one
    pass over the line (each token read once, the value decoded at most once)."""
    depth = 0
    for token in _TOKENS.finditer(line):
        text = token.group()
        if text[0] in "{[":
            depth += len(text)
        elif text[0] in "}]":
            depth -= len(text)
        elif depth == 1 and text == '"id"' and (colon := _COLON.match(line, token.end())):
            try:
                return _valid_id(json.JSONDecoder().raw_decode(line, colon.end())[0])
            except (ValueError, RecursionError):
                return None
    return None


def _valid_id(value: Any) -> int | str | None:
    return value if isinstance(value, int | str) and not isinstance(value, bool) else None


def _error(frame_id: int | str | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=frame_id, error=ErrorData(code=code, message=message))
