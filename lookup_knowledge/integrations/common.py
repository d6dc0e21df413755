"""What every framework plug shares: one session's calls of both tools, as one caller, and what
a block and a verdict look like as a framework's document metadata.

>>> tools = SessionTools.of(agent, "s1", principals=["finance"])  # doctest: +SKIP
>>> result = tools.lookup("Who must approve a refund above 500 EUR?")  # doctest: +SKIP
>>> block_metadata(result.evidence_blocks[0], result)["evidenceKey"]  # doctest: +SKIP
'payments-refund-policy#chunk-2'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lookup_knowledge.contract import EvidenceBlock, LookupResult

if TYPE_CHECKING:
    from lookup_knowledge.agent.lookup import AgentLookup
    from lookup_knowledge.agent.verify import AnswerVerdict

# A block's own fields in its metadata (the contract's camelCase names), then the lookup's verdict.
BLOCK_FIELDS = frozenset(
    {"evidence_key", "doc_id", "source", "title", "breadcrumb", "category", "location", "score"}
    | {"normalized_score", "rerank_score", "rank", "hit_reasons", "instruction_like", "stale"}
)
VERDICT_FIELDS = frozenset({"found", "evidence_status", "relevance_level", "completeness_hint"})
TOOL_ERRORS = frozenset({"invalid_input", "retrieval_failed"})  # what a framework reports as a tool error


@dataclass(frozen=True, slots=True)
class SessionTools:
    """``lookup_knowledge`` and ``verify_answer`` as one caller (``principals``; ``None``:
    ``access.principals``) calls them in one session, recorded by ``agent``. Never raises."""

    agent: AgentLookup
    session_id: str
    principals: Sequence[str] | None = None

    @classmethod
    def of(
        cls,
        agent: AgentLookup,
        session_id: str | None = None,
        principals: Sequence[str] | None = None,
        prefix: str = "session",
    ) -> SessionTools:
        """The tools of ``session_id`` (``None``: a fresh session named ``<prefix>-<uuid>``)."""
        from lookup_knowledge.agent.lookup import new_session_id

        return cls(agent, session_id or new_session_id(prefix), principals)

    def lookup(self, query: Any) -> LookupResult:
        """The recorded lookup of ``query`` (any value: an invalid one is ``invalid_input``)."""
        return self.agent.call(query, self.session_id, principals=self.principals)

    def verify(self, answer: Any, check_uncited: Any = False) -> AnswerVerdict | str:
        """The verdict on ``answer`` against this session's lookups, or why it could not be checked
        (arguments that are not the tool's, an answer too long, no invocation record)."""
        from lookup_knowledge.agent.lookup import checked_answer

        return checked_answer(self.agent, self.session_id, answer, check_uncited, self.principals)


def contract_json(result: LookupResult) -> dict[str, Any]:
    """The contract JSON of a result."""
    return result.model_dump(by_alias=True, mode="json")


def verdict(result: LookupResult) -> dict[str, Any]:
    """The lookup's verdict: ``found``, ``evidenceStatus``, ``relevanceLevel``, ``completenessHint``."""
    return result.model_dump(by_alias=True, mode="json", include=set(VERDICT_FIELDS))


def block_metadata(block: EvidenceBlock, result: LookupResult) -> dict[str, Any]:
    """A block's metadata as a framework document carries it: its key, source, title, breadcrumb,
    location, scores, rank and hit reasons, and the verdict of the lookup that returned it."""
    return {**block.model_dump(by_alias=True, mode="json", include=set(BLOCK_FIELDS)), **verdict(result)}


def is_tool_error(result: LookupResult) -> bool:
    """Whether the call failed (``invalid_input``, ``retrieval_failed``) rather than answered."""
    return result.evidence_status in TOOL_ERRORS
