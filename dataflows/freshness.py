"""Freshness: whether each returned block's source file still holds the text it was ingested from.

Only the returned blocks are checked, one ``stat`` per source file (a hash only when its time or
size changed); a block from a store ingested before versions, or from a JSONL record, stays
``stale = None``.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from lookup_knowledge.adapters.source_files import SourceFile, is_stale
from lookup_knowledge.contract import EvidenceBlock
from lookup_knowledge.frames import records


def evidence_blocks(
    ranked_evidence_blocks: list[EvidenceBlock],
    reranked_df: pd.DataFrame,
    source_staleness: Callable[[SourceFile], bool] = is_stale,
) -> list[EvidenceBlock]:
    """The returned blocks, each marked ``stale`` when its source file changed or vanished since ingest."""
    stamps = {row["evidence_key"]: SourceFile.from_payload(row["payload"]) for row in records(reranked_df)}
    checked: dict[str, bool] = {}  # one check per file: several blocks often share one
    blocks = []
    for block in ranked_evidence_blocks:
        stamp = stamps.get(block.evidence_key)
        if stamp is None:
            blocks.append(block)
            continue
        if stamp.path not in checked:
            checked[stamp.path] = source_staleness(stamp)
        blocks.append(block.model_copy(update={"stale": checked[stamp.path]}))
    return blocks
