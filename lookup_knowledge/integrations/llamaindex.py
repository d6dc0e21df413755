"""LlamaIndex: a retriever of one ``NodeWithScore`` per evidence block, for a query engine.

``pip install 'lookup-knowledge[llamaindex]'`` (``llama-index-core``).

>>> with AgentLookup.from_config(load_config()) as agent:  # doctest: +SKIP
...     retriever = LookupKnowledgeRetriever(agent, session_id="s1")
...     retriever.retrieve("Who must approve a refund above 500 EUR?")[0].node.node_id
'payments-refund-policy#chunk-2'
"""

# ruff: noqa: E402  (the extra is checked before its imports)
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from lookup_knowledge.extras import require

require("llamaindex", __name__)

from llama_index.core.callbacks import CallbackManager
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from lookup_knowledge.agent.lookup import AgentLookup
from lookup_knowledge.contract import LookupResult
from lookup_knowledge.integrations.common import SessionTools, block_metadata, verdict

dispatcher = get_dispatcher(__name__)
# what the model reads of a node besides its text (the rest is for code: scores, verdict, location)
LLM_METADATA = ("evidenceKey", "title", "breadcrumb", "source")


class LookupVerdictEvent(BaseEvent):
    """The verdict of one retrieval (``query``, ``found``, ``evidenceStatus``, ``relevanceLevel``,
    ``completenessHint``, ``message``), dispatched to LlamaIndex's instrumentation handlers."""

    verdict: dict[str, Any]

    @classmethod
    def class_name(cls) -> str:
        return "LookupVerdictEvent"


class LookupKnowledgeRetriever(BaseRetriever):
    """``lookup_knowledge`` as a LlamaIndex retriever: a ``NodeWithScore`` per evidence block (node
    id = evidence key, score = its rerank score, in rank order; metadata as
    :func:`~lookup_knowledge.integrations.common.block_metadata`, of which the model reads
    :data:`LLM_METADATA`), none unless the verdict is ``evidence``. Each retrieval dispatches a
    :class:`LookupVerdictEvent`, so an empty one still says why. Calls are recorded in
    ``session_id`` (``None``: a fresh session) as a caller of ``principals``. Never raises."""

    def __init__(
        self,
        agent: AgentLookup,
        session_id: str | None = None,
        *,
        principals: Sequence[str] | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        self.tools = SessionTools.of(agent, session_id, principals, prefix="llamaindex")
        super().__init__(callback_manager=callback_manager)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        result = self.tools.lookup(query_bundle.query_str)
        dispatcher.event(
            LookupVerdictEvent(verdict={"query": result.query, **verdict(result), "message": result.message})
        )
        return nodes(result)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """The lookup in a worker thread, off the event loop."""
        return await asyncio.to_thread(self._retrieve, query_bundle)


def nodes(result: LookupResult) -> list[NodeWithScore]:
    """One ``NodeWithScore`` per evidence block of ``result``."""
    scored = []
    for block in result.evidence_blocks:
        metadata = block_metadata(block, result)
        node = TextNode(
            id_=block.evidence_key,
            text=block.content,
            metadata=metadata,
            excluded_llm_metadata_keys=[key for key in metadata if key not in LLM_METADATA],
            excluded_embed_metadata_keys=list(metadata),
        )
        scored.append(NodeWithScore(node=node, score=block.rerank_score))
    return scored
