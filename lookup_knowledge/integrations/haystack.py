"""Haystack (``haystack-ai``): a pipeline component with the input ``query`` and the outputs
``documents`` and ``result`` (the contract JSON).

``pip install 'lookup-knowledge[haystack]'``.

>>> with AgentLookup.from_config(load_config()) as agent:  # doctest: +SKIP
...     pipeline = Pipeline()
...     pipeline.add_component("lookup", LookupKnowledge(agent, session_id="s1"))
...     out = pipeline.run({"lookup": {"query": "Who must approve a refund above 500 EUR?"}})
...     out["lookup"]["documents"][0].id, out["lookup"]["result"]["evidenceStatus"]
('payments-refund-policy#chunk-2', 'evidence')
"""

# ruff: noqa: E402  (the extra is checked before its imports)
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lookup_knowledge.extras import require

require("haystack", __name__)

from haystack import Document, component

from lookup_knowledge.agent.lookup import AgentLookup
from lookup_knowledge.contract import LookupResult
from lookup_knowledge.integrations.common import SessionTools, block_metadata, contract_json


@component
class LookupKnowledge:
    """``lookup_knowledge`` as a Haystack component. Outputs ``documents``: a ``Document`` per
    evidence block (``id`` = its evidence key, ``score`` = its rerank score, ``meta`` as
    :func:`~lookup_knowledge.integrations.common.block_metadata`), none unless the verdict is
    ``evidence``; ``result``: the contract JSON, whose ``evidenceStatus`` says why there are none
    (``no_evidence``, ``invalid_input``, ``retrieval_failed``, with its ``message``). Calls are
    recorded in ``session_id`` (``None``: a fresh session) as a caller of ``principals``. Never raises.
    """

    def __init__(
        self, agent: AgentLookup, session_id: str | None = None, *, principals: Sequence[str] | None = None
    ) -> None:
        self.tools = SessionTools.of(agent, session_id, principals, prefix="haystack")

    @component.output_types(documents=list[Document], result=dict[str, Any])
    def run(self, query: str) -> dict[str, Any]:
        result = self.tools.lookup(query)
        return {"documents": documents(result), "result": contract_json(result)}


def documents(result: LookupResult) -> list[Document]:
    """One ``Document`` per evidence block of ``result``."""
    return [
        Document(
            id=block.evidence_key,
            content=block.content,
            meta=block_metadata(block, result),
            score=block.rerank_score,
        )
        for block in result.evidence_blocks
    ]
