"""lookup-knowledge: evidence-first knowledge retrieval for LLM agents.

Importing the package is light: each public name loads its module on first use, so an agent
that only builds a :class:`KnowledgeTool` never imports the SQL recorder, plotting, Dask or MCP.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lookup_knowledge.agent.knowledge_tool import KnowledgeTool
    from lookup_knowledge.agent.lookup import AgentLookup
    from lookup_knowledge.agent.tool_definition import tool_definition
    from lookup_knowledge.agent.verify import AnswerVerdict, verify_answer
    from lookup_knowledge.config import Config, ConfigError, load_config
    from lookup_knowledge.contract import EvidenceBlock, LookupResult
    from lookup_knowledge.ingestion import IngestReport, ingest

__all__ = [
    "AgentLookup",
    "AnswerVerdict",
    "Config",
    "ConfigError",
    "EvidenceBlock",
    "IngestReport",
    "KnowledgeTool",
    "LookupResult",
    "ingest",
    "load_config",
    "sample_knowledge_base",
    "tool_definition",
    "verify_answer",
]
_HOMES = {
    "AgentLookup": "agent.lookup",
    "tool_definition": "agent.tool_definition",
    "Config": "config",
    "ConfigError": "config",
    "load_config": "config",
    "EvidenceBlock": "contract",
    "LookupResult": "contract",
    "IngestReport": "ingestion",
    "ingest": "ingestion",
    "KnowledgeTool": "agent.knowledge_tool",
    "AnswerVerdict": "agent.verify",
    "verify_answer": "agent.verify",
}


def __getattr__(name: str) -> Any:
    """Load a public name's module on first use (PEP 562)."""
    if name not in _HOMES:
        raise AttributeError(f"module 'lookup_knowledge' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"lookup_knowledge.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])


def sample_knowledge_base() -> Path:
    """The folder of the bundled sample knowledge base (markdown with frontmatter)."""
    return Path(__file__).parent / "sample-kb"
