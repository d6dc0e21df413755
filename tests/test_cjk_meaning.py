"""A CJK question's meaning, read by the multilingual encoder on the pages in its own script
(docs/cjk.md): the 0.30 multilingual rescue reads only hits in another script, words a best hit
holds need the CJK floor, and words held in part pass with one sentence at the CJK sentence bar
(real engine, real MiniLM and USE multilingual, real jieba)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args

import numpy as np
import pytest
from conftest import write_markdown
from test_cjk import REFUND_ZH

from lookup_knowledge import KnowledgeTool, load_config
from lookup_knowledge.adapters.cjk_words import passage_sentences
from lookup_knowledge.adapters.multilingual import MultilingualEmbedder
from lookup_knowledge.adapters.payload import LANGUAGE_FIELD
from lookup_knowledge.adapters.search import SearchHit
from lookup_knowledge.contract import VerdictReason
from lookup_knowledge.dataflows.abstention import (
    AbstentionPolicy,
    cjk_meaning_reason,
    cjk_multilingual_top,
    foreign_multilingual_top,
    multilingual_reason,
    sentence_cosine,
)
from lookup_knowledge.ingestion import ingest
from lookup_knowledge.review.inspection import VERDICT_WORDS

POLICY = AbstentionPolicy()
FLOOR, BAR = POLICY.cjk_multilingual_floor, POLICY.cjk_sentence_bar
ROOM_ZH = """# 会议室预订

通过内部系统预订会议室，每次最长四小时。

## 设备

每间会议室都有投影仪和白板。需要视频会议设备的，请在预订备注里写明。

## 取消预订

不再需要会议室时，请至少提前一小时在系统里取消，以便同事使用。
"""


def _hit(point: str, content: str, multilingual: float | None, language: str | None) -> SearchHit:
    payload = {LANGUAGE_FIELD: language} if language else {}
    return SearchHit(point, content, 0.5, 0.2, payload, multilingual_score=multilingual)


ZH_HIT = _hit("zh", REFUND_ZH, 0.41, "zh")
EN_HIT = _hit("en", "Refunds are paid back to the original payment method.", 0.36, "en")
OLD_ZH_HIT = _hit("old", "支付宝退款通常在一到三个工作日内到账。", 0.52, None)  # a store without languages


# --- the sentences of a passage -----------------------------------------------------------------


def test_a_passage_is_read_by_its_sentences_headings_left_out() -> None:
    sentences = passage_sentences(REFUND_ZH)
    assert sentences == (
        "本文说明客户申请退款后，财务团队如何审核并原路退回款项。",
        '客户在订单详情页点击"申请退款"，填写退款原因并上传凭证。',
        "客服在两个工作日内完成审核。",
        "审核通过后，款项按原支付方式退回。",
        # a wrapped line is joined again
        "支付宝退款通常在一到三个工作日内到账；银行卡退款需要 五到七个工作日，具体以发卡银行为准。",
    )
    assert "如何申请退款" not in sentences  # a heading: a topic's name, not an answer
    tldr = "# tar\n\n> 归档实用程序。\n\n- 创建存档并将其写入文件：\n\n`tar cf {{目标文件.tar}}`\n"
    assert passage_sentences(tldr) == ("归档实用程序。", "创建存档并将其写入文件", "tar cf {{目标文件.tar}}")
    assert passage_sentences("") == () and passage_sentences("# 标题\n\n- a\n") == ()


# --- which hits each cosine reads ---------------------------------------------------------------


def test_a_cjk_question_reads_the_multilingual_rescue_on_hits_in_another_script_only() -> None:
    hits = [OLD_ZH_HIT, ZH_HIT, EN_HIT]
    assert foreign_multilingual_top(hits, "cjk") == pytest.approx(0.36)  # the English hit alone
    assert cjk_multilingual_top(hits, "cjk") == pytest.approx(0.52)  # its language read from its script
    assert foreign_multilingual_top([ZH_HIT], "cjk") is None  # pages in its script: no rescue at 0.30
    # any other question: every hit, as before
    assert foreign_multilingual_top(hits, "alphabetic") == pytest.approx(0.52)
    assert cjk_multilingual_top(hits, "alphabetic") is None


def test_the_multilingual_rescue_of_a_cjk_question_on_its_own_script_is_gone() -> None:
    """The chunk cosine of a page in the question's script does not find it at the 0.30 bar: on
    the judged sets that bar found 67% of the Chinese unanswerable questions (docs/cjk.md)."""
    same_script = foreign_multilingual_top([ZH_HIT], "cjk")
    assert multilingual_reason("uninformative_terms", same_script, POLICY) == "uninformative_terms"
    other_script = foreign_multilingual_top([ZH_HIT, EN_HIT], "cjk")
    assert multilingual_reason("no_shared_terms", other_script, POLICY) == "multilingual_match"


# --- the verdict on the meaning ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "top", "sentence", "expected"),
    [
        ("plausible", 0.45, None, "plausible"),
        ("plausible", FLOOR, None, "plausible"),
        ("plausible", FLOOR - 0.01, None, "below_multilingual_floor"),  # chit-chat a page's words hold
        ("plausible", None, None, "plausible"),  # no multilingual leg, or no hit in its script
        ("uninformative_terms", 0.45, BAR, "sentence_match"),
        ("uninformative_terms", 0.45, BAR - 0.01, "uninformative_terms"),
        ("uninformative_terms", 0.45, None, "uninformative_terms"),
        ("no_shared_terms", 0.9, 0.9, "no_shared_terms"),  # a sentence never stands for no word held
        ("unheld_terms", 0.9, 0.9, "unheld_terms"),  # nor for a name no chunk holds
        ("multilingual_match", 0.05, None, "multilingual_match"),
        ("exact_code", 0.05, None, "exact_code"),
    ],
)
def test_the_cjk_meaning_reads_the_floor_and_the_sentence_bar(
    reason: str, top: float | None, sentence: float | None, expected: str
) -> None:
    assert POLICY.cjk_meaning(reason, top, sentence) == expected
    assert cjk_meaning_reason(reason, top, sentence, "cjk", POLICY) == expected


def test_every_verdict_reason_is_worded_for_the_review_pages() -> None:
    assert set(VERDICT_WORDS) == set(get_args(VerdictReason))


def test_the_cjk_meaning_leaves_every_other_question_alone() -> None:
    assert cjk_meaning_reason("plausible", 0.01, None, "alphabetic", POLICY) == "plausible"
    assert cjk_meaning_reason("uninformative_terms", 0.9, 0.9, "alphabetic", POLICY) == "uninformative_terms"


@pytest.fixture(scope="module")
def encoder() -> MultilingualEmbedder:
    return MultilingualEmbedder()


def test_the_sentence_cosine_is_the_best_sentence_of_the_best_cjk_hits(encoder: MultilingualEmbedder) -> None:
    question = encoder.embed_query("退款多久到账？")
    cosine = sentence_cosine("uninformative_terms", [ZH_HIT, EN_HIT], "cjk", POLICY, question, encoder)
    sentences = encoder.embed_documents(list(passage_sentences(REFUND_ZH)))
    assert cosine == pytest.approx(float(np.max(sentences @ question)), abs=1e-5)
    answer = encoder.embed_documents([passage_sentences(REFUND_ZH)[-1]])[0]  # "支付宝退款通常在…到账"
    assert cosine == pytest.approx(float(answer @ question), abs=1e-5)


@pytest.mark.parametrize(
    ("reason", "hits", "script", "leg"),
    [
        ("plausible", [ZH_HIT], "cjk", True),  # the words decide: nothing to read
        ("below_probe_null", [ZH_HIT], "alphabetic", True),  # not a CJK question
        ("uninformative_terms", [ZH_HIT], "cjk", False),  # no multilingual leg
        ("uninformative_terms", [EN_HIT], "cjk", True),  # no best hit in its script
    ],
)
def test_the_sentence_cosine_is_read_only_where_it_can_change_the_verdict(
    encoder: MultilingualEmbedder, reason: str, hits: list[SearchHit], script: str, leg: bool
) -> None:
    vector = encoder.embed_query("退款多久到账？") if leg else None
    assert sentence_cosine(reason, hits, script, POLICY, vector, encoder) is None


# --- whole lookups on a store of Chinese pages ---------------------------------------------------


@pytest.fixture(scope="module")
def chinese_tool(tmp_path_factory: pytest.TempPathFactory, embedder) -> Iterator[KnowledgeTool]:
    """A knowledge base of two Chinese pages (meeting rooms, refunds), ingested once: no page in
    another script to rescue a question by the 0.30 multilingual bar."""
    pages = tmp_path_factory.mktemp("zh-kb")
    write_markdown(
        pages, "office/room.md", {"id": "room-zh", "title": "会议室预订", "domain": "office"}, ROOM_ZH
    )
    front = {"id": "refund-zh", "title": "退款处理流程", "domain": "payments"}
    write_markdown(pages, "payments/refund.md", front, REFUND_ZH)
    config = load_config(overrides={"store.path": str(tmp_path_factory.mktemp("zh-store"))})
    ingest(pages, config, embedder=embedder)
    with KnowledgeTool(config, embedder=embedder) as tool:
        yield tool


def test_a_near_topic_question_is_not_found_by_its_page_cosine_alone(chinese_tool: KnowledgeTool) -> None:
    """The room page holds 会议室 but says nothing of printers; its chunk is near the question
    (above the 0.30 bar that found it before) and none of its sentences is."""
    result = chinese_tool.lookup("怎么在会议室里连接打印机？")
    verdict = result.retrieval_trace.evidence_verdict
    assert not result.found, verdict
    assert verdict.reason == "uninformative_terms"
    assert verdict.cjk_multilingual_top >= POLICY.multilingual_bar
    assert verdict.sentence_cosine is not None and verdict.sentence_cosine < BAR


def test_a_question_whose_words_the_page_holds_is_found_with_its_meaning(chinese_tool: KnowledgeTool) -> None:
    result = chinese_tool.lookup("会议室有投影仪吗？")
    verdict = result.retrieval_trace.evidence_verdict
    assert result.found and verdict.reason == "plausible", verdict
    assert result.evidence_blocks[0].doc_id == "room-zh"
    assert verdict.cjk_multilingual_top >= FLOOR
    assert verdict.sentence_cosine is None  # the words decided: no sentence read
    refund = chinese_tool.lookup("退款多久到账？")
    assert refund.found and refund.evidence_blocks[0].doc_id == "refund-zh"


def test_an_english_question_reads_no_cjk_meaning(chinese_tool: KnowledgeTool) -> None:
    verdict = chinese_tool.lookup("How long until a refund arrives?").retrieval_trace.evidence_verdict
    assert verdict.cjk_multilingual_top is None and verdict.sentence_cosine is None
