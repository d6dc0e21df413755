"""The context pack: character budget, truncation that spares metadata, omissions, duplicates."""

from __future__ import annotations

import pytest
from dataflow_fixtures import (
    REFUND_QUERY,
    as_json,
    make_tool,
)

from lookup_knowledge.contract import EvidenceBlock
from lookup_knowledge.dataflows.context import ELLIPSIS, MIN_CONTENT_CHARS
from lookup_knowledge.dataflows.context import context_pack as pack_with


def block(
    key: str,
    rank: int,
    content: str,
    *,
    source: str | None = None,
    breadcrumb: str | None = None,
    reasons: tuple[str, ...] = ("vector:filtered",),
    language: str | None = None,
) -> EvidenceBlock:
    doc_id, _, chunk = key.partition("#chunk-")
    return EvidenceBlock(
        evidence_key=key,
        doc_id=doc_id if chunk else None,
        chunk_index=int(chunk) if chunk else None,
        source=source,
        title=f"Title of {doc_id}",
        breadcrumb=breadcrumb,
        category="payments",
        content=content,
        score=0.5,
        normalized_score=0.5,
        rerank_score=0.5,
        rank=rank,
        hit_reasons=list(reasons),
        language=language,
    )


def words(n: int, word: str) -> str:
    return " ".join(f"{word}{i}" for i in range(n))


BLOCKS = [
    block(
        "refunds#chunk-0",
        1,
        words(60, "alpha"),
        source="payments/refund-policy.md",
        breadcrumb="Refund Policy > Approval thresholds",
        reasons=("vector:filtered", "l0_keyword:refund", "l0_domain:payments"),
    ),
    block(
        "refunds#chunk-1",
        2,
        words(40, "beta"),
        source="payments/refund-policy.md",
        breadcrumb="Refund Policy > Timelines",
    ),
    block(
        "chargebacks#chunk-4",
        3,
        words(80, "gamma"),
        source="payments/chargeback-runbook.md",
        breadcrumb="Chargebacks > Evidence",
    ),
    block("vector:7f3a", 4, words(30, "delta"), source=None, breadcrumb=None),
]


def context_pack(blocks: list[EvidenceBlock], budget: int, hit_reasons: bool = True, language: str = "en"):
    """The pack with hit reasons in each header (the longer header: the harder budget), for a
    question in ``language``."""
    return pack_with(blocks, budget, hit_reasons, language)


FULL = context_pack(BLOCKS, 100_000)
TOP_BLOCK_LEAST = len(context_pack(BLOCKS[:1], 1).text)  # the top block's header and its least content


def within_budget(pack) -> bool:
    """Under the budget, or only the top block, cut to its least content."""
    return pack.summary.chars_used <= pack.summary.budget_chars or (
        len(pack.items) == 1 and pack.summary.chars_used == TOP_BLOCK_LEAST
    )


def test_everything_fits_under_a_large_budget():
    assert [item.evidence_key for item in FULL.items] == [b.evidence_key for b in BLOCKS]
    assert [item.content for item in FULL.items] == [b.content for b in BLOCKS]
    assert not any(item.truncated for item in FULL.items)
    assert FULL.summary.omitted_sources == []
    assert FULL.summary.included_sources == [
        "payments/refund-policy.md",  # two chunks, one source: listed once
        "payments/chargeback-runbook.md",
        "vector:7f3a",  # no source: listed by its evidence key
    ]
    assert len(FULL.text) == FULL.summary.chars_used
    assert FULL.summary.budget_chars == 100_000


@pytest.mark.parametrize("budget", [1, 39, 80, 150, 333, 512, 700, 901, 1200, 1750, 2400])
def test_budget_is_respected_exactly(budget):
    pack = context_pack(BLOCKS, budget)
    assert len(pack.text) == pack.summary.chars_used
    assert pack.summary.chars_used <= budget or budget < TOP_BLOCK_LEAST
    assert within_budget(pack)
    assert pack.summary.budget_chars == budget


def test_budget_smaller_than_full_text_shortens_the_pack():
    budget = len(FULL.text) - 100
    pack = context_pack(BLOCKS, budget)
    assert budget - pack.summary.chars_used < 100  # the leftover room is used, not wasted
    assert pack.items[-1].truncated or pack.summary.omitted_sources


def test_content_is_truncated_but_never_metadata():
    for budget in range(1, len(FULL.text) + 40, 7):
        assert_metadata_intact(context_pack(BLOCKS, budget))


def assert_metadata_intact(pack):
    by_key = {b.evidence_key: b for b in BLOCKS}
    assert within_budget(pack)
    for item in pack.items:
        original = by_key[item.evidence_key]
        assert f"[{original.rank}] {item.evidence_key}" in pack.text
        for metadata in (item.source, item.breadcrumb):
            if metadata:
                assert metadata in pack.text
        assert f"hit reasons: {', '.join(item.hit_reasons)}" in pack.text
        assert (item.source, item.title, item.breadcrumb, item.hit_reasons) == (
            original.source,
            original.title,
            original.breadcrumb,
            original.hit_reasons,
        )
        assert item.content in pack.text
        if item.truncated:
            assert item.content.endswith(ELLIPSIS)
            assert original.content.startswith(item.content[: -len(ELLIPSIS)])
            assert len(item.content) < len(original.content)
        else:
            assert item.content == original.content


def test_truncated_block_fills_the_remaining_room():
    first_only = context_pack(BLOCKS[:1], 100_000)
    budget = len(first_only.text) + 150  # room for the second header and part of its content
    pack = context_pack(BLOCKS, budget)
    assert [item.evidence_key for item in pack.items] == ["refunds#chunk-0", "refunds#chunk-1"]
    assert not pack.items[0].truncated
    assert pack.items[1].truncated
    assert "refunds#chunk-1" not in pack.summary.duplicate_keys
    assert pack.summary.omitted_sources == [
        "payments/chargeback-runbook.md",
        "vector:7f3a",
    ]


def test_blocks_that_do_not_fit_are_omitted_and_listed():
    first_only = context_pack(BLOCKS[:1], 100_000)
    pack = context_pack(BLOCKS, len(first_only.text) + 5)
    assert [item.evidence_key for item in pack.items] == ["refunds#chunk-0"]
    assert pack.text == first_only.text
    assert pack.summary.included_sources == ["payments/refund-policy.md"]
    assert pack.summary.partially_included_sources == ["payments/refund-policy.md"]  # chunk 2 cut
    assert pack.summary.omitted_sources == ["payments/chargeback-runbook.md", "vector:7f3a"]
    for omitted in ("beta0", "gamma0", "delta0", "chargebacks#chunk-4"):
        assert omitted not in pack.text


def test_budget_below_the_top_header_still_packs_the_top_block():
    """An empty pack would leave the model nothing while the result says found=true: the top
    block keeps its metadata whole and some content, the others are omitted."""
    pack = context_pack(BLOCKS, 10)
    assert [item.evidence_key for item in pack.items] == ["refunds#chunk-0"]
    assert pack.items[0].truncated
    assert len(pack.items[0].content) == MIN_CONTENT_CHARS
    assert_metadata_intact(pack)
    assert pack.summary.chars_used == len(pack.text) == TOP_BLOCK_LEAST > 10
    assert pack.summary.included_sources == ["payments/refund-policy.md"]
    assert pack.summary.omitted_sources == ["payments/chargeback-runbook.md", "vector:7f3a"]


def test_hit_reasons_join_the_header_only_when_configured():
    terse = context_pack(BLOCKS[:1], 100_000, False)
    assert "hit reasons" not in terse.text
    assert terse.text.startswith("[1] refunds#chunk-0 | payments/refund-policy.md > Refund Policy > Approval")
    assert terse.items[0].hit_reasons == list(BLOCKS[0].hit_reasons)  # kept in the structured items
    assert "hit reasons: vector:filtered, l0_keyword:refund" in context_pack(BLOCKS[:1], 100_000).text


def test_a_block_in_another_language_than_the_question_is_marked():
    text = "发票申请必须在付款完成后 180 天内提出。"
    chinese = block(
        "fapiao#chunk-3", 2, text, source="support/fapiao.md", breadcrumb="发票申请流程", language="zh"
    )
    english = block(
        "refunds#chunk-0", 1, words(20, "alpha"), source="payments/refund-policy.md", language="en"
    )
    unknown = block("vector:7f3a", 3, words(20, "delta"))  # a store from before languages
    pack = context_pack([english, chinese, unknown], 100_000, False)
    headers = [line for line in pack.text.splitlines() if line.startswith("[")]
    assert headers == [
        "[1] refunds#chunk-0 | payments/refund-policy.md > Title of refunds",
        "[2] fapiao#chunk-3 | support/fapiao.md > 发票申请流程 [language: zh]",
        "[3] vector:7f3a | Title of vector:7f3a",
    ]
    in_chinese = context_pack([english, chinese, unknown], 100_000, False, language="zh")
    assert "[language: en]" in in_chinese.text and "[language: zh]" not in in_chinese.text
    assert "[language:" not in context_pack(BLOCKS, 100_000).text  # no languages known: no marker


def test_duplicate_content_under_two_keys_is_packed_once():
    text = "Refunds above 500 EUR need approval from the Finance on-call."
    blocks = [
        block("refunds#chunk-2", 1, text, source="payments/refund-policy.md"),
        block("refunds-copy#chunk-0", 2, text, source="archive/refund-policy-copy.md"),
        block("kafka#chunk-1", 3, "Consumer lag is checked first.", source="infra/kafka.md"),
    ]
    pack = context_pack(blocks, 100_000)
    assert pack.text.count(text) == 1
    assert [item.evidence_key for item in pack.items] == ["refunds#chunk-2", "kafka#chunk-1"]
    assert pack.summary.duplicate_keys == {"refunds-copy#chunk-0": "refunds#chunk-2"}
    assert pack.summary.omitted_sources == []
    assert "refunds-copy#chunk-0" not in pack.text


def test_items_keep_reranked_order():
    reordered = [BLOCKS[2], BLOCKS[0], BLOCKS[3], BLOCKS[1]]
    pack = context_pack(reordered, 100_000)
    assert [item.evidence_key for item in pack.items] == [b.evidence_key for b in reordered]
    positions = [pack.text.index(b.content) for b in reordered]
    assert positions == sorted(positions)


def test_context_pack_end_to_end_respects_the_configured_budget(sample_kb, embedder):
    budget = 900
    result = as_json(make_tool(sample_kb, embedder, context__budget_chars=budget).lookup(REFUND_QUERY))
    pack = result["contextPack"]
    summary = pack["summary"]
    assert summary["budgetChars"] == budget
    assert len(pack["text"]) == summary["charsUsed"] <= budget
    blocks = {b["evidenceKey"]: b for b in result["evidenceBlocks"]}
    assert len(blocks) > len(pack["items"]) or any(i["truncated"] for i in pack["items"])
    for item in pack["items"]:
        evidence = blocks[item["evidenceKey"]]
        assert item["source"] == evidence["source"] and item["source"] in pack["text"]
        assert item["breadcrumb"] == evidence["breadcrumb"] and item["breadcrumb"] in pack["text"]
        assert item["hitReasons"] == evidence["hitReasons"]
    listed = set(summary["includedSources"]) | set(summary["omittedSources"])
    assert {b["source"] for b in blocks.values()} <= listed
    assert set(summary["partiallyIncludedSources"]) <= set(summary["includedSources"])
    assert not set(summary["omittedSources"]) & set(summary["includedSources"])
    packed = {item["evidenceKey"] for item in pack["items"]}
    for key, b in blocks.items():
        if key not in packed and key not in summary["duplicateKeys"]:
            assert b["source"] in summary["omittedSources"] + summary["partiallyIncludedSources"]
    assert result["completenessHint"].startswith("partial")


def test_a_budget_smaller_than_the_top_header_still_gives_the_model_the_top_block(sample_kb, embedder):
    """Issue: `query "How do I handle a chargeback dispute?" --set context.budget_chars=300` packed
    nothing and omitted the only source while the result said found=true."""
    tool = make_tool(sample_kb, embedder, context__budget_chars=300)
    result = as_json(tool.lookup("How do I handle a chargeback dispute?"))
    assert result["found"] is True
    pack, top = result["contextPack"], result["evidenceBlocks"][0]
    assert [item["evidenceKey"] for item in pack["items"]][:1] == [top["evidenceKey"]]
    assert top["source"] in pack["text"] and top["evidenceKey"] in pack["text"]
    assert top["source"] not in pack["summary"]["omittedSources"]
    assert pack["items"][0]["content"].rstrip(ELLIPSIS) in top["content"]
