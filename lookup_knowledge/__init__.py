"""lookup-knowledge: evidence-first knowledge retrieval for LLM agents."""

from pathlib import Path

from lookup_knowledge.agent import AgentLookup, tool_definition
from lookup_knowledge.config import Config, ConfigError, load_config
from lookup_knowledge.contract import EvidenceBlock, LookupResult
from lookup_knowledge.ingest import IngestReport, ingest
from lookup_knowledge.tool import KnowledgeTool

__all__ = [
    "AgentLookup",
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
]


def sample_knowledge_base() -> Path:
    """The folder of the bundled sample knowledge base (markdown with frontmatter)."""
    return Path(__file__).parent / "sample-kb"
