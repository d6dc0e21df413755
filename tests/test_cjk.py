"""Chinese and Japanese questions read by their words (issue 57): the segmenters' content words,
the verdict on them, and whole lookups on the sample knowledge base with a Chinese and a
Japanese refund page added (real engine, real model, real jieba and janome)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from conftest import write_markdown

from lookup_knowledge import KnowledgeTool, load_config, sample_knowledge_base
from lookup_knowledge.adapters.cjk_words import cjk_words, language_of
from lookup_knowledge.adapters.sparse import held_as_written
from lookup_knowledge.calibration import script_of
from lookup_knowledge.dataflows.abstention import AbstentionPolicy, WordShare
from lookup_knowledge.dataflows.query_understanding import query_terms, query_words
from lookup_knowledge.ingestion import ingest

POLICY = AbstentionPolicy()
REFUND_ZH = """# 退款处理流程

本文说明客户申请退款后，财务团队如何审核并原路退回款项。

## 如何申请退款

客户在订单详情页点击"申请退款"，填写退款原因并上传凭证。客服在两个工作日内完成审核。

## 到账时间

审核通过后，款项按原支付方式退回。支付宝退款通常在一到三个工作日内到账；银行卡退款需要
五到七个工作日，具体以发卡银行为准。
"""
REFUND_JA = """# 返金の手続き

お客様から返金の申請があった場合の、経理チームによる審査と返金の流れを説明します。

## 返金の申請

お客様は注文詳細ページから返金を申請し、理由と証明書類をアップロードします。

## 入金までの期間

審査が承認されると、元の支払い方法で返金されます。クレジットカードへの返金は通常五営業日以内に
口座に反映されます。
"""


@pytest.fixture(scope="module")
def cjk_tool(tmp_path_factory: pytest.TempPathFactory, embedder) -> Iterator[KnowledgeTool]:
    """The sample knowledge base (five domains, one Chinese page) with a Chinese and a Japanese
    refund page added in ``payments``, ingested once for the module."""
    pages = tmp_path_factory.mktemp("cjk-kb") / "kb"
    shutil.copytree(sample_knowledge_base(), pages)
    front = {"domain": "payments", "doc_type": "procedure"}
    write_markdown(
        pages,
        "payments/refund-process-zh.md",
        {"id": "refund-zh", "title": "退款处理流程", **front},
        REFUND_ZH,
    )
    write_markdown(
        pages,
        "payments/refund-process-ja.md",
        {"id": "refund-ja", "title": "返金の手続き", **front},
        REFUND_JA,
    )
    config = load_config(overrides={"store.path": str(tmp_path_factory.mktemp("cjk-store"))})
    ingest(pages, config, embedder=embedder)
    with KnowledgeTool(config, embedder=embedder) as tool:
        yield tool


# --- the words of a question ----------------------------------------------------------------------


def test_a_chinese_question_is_read_by_its_content_words() -> None:
    assert cjk_words("退款多久到账？") == ("退款", "到", "账")  # not "款多", "多久", "久到"
    assert cjk_words("如何申请增值税专用发票") == ("申请", "增值税", "专用发票")
    assert cjk_words("怎么用 kubectl 查看 pod 的日志？") == ("kubectl", "查看", "pod", "日志")  # names kept
    assert cjk_words("你能做什么？") == ()  # question and function words alone


def test_a_japanese_question_is_read_by_its_content_words() -> None:
    assert language_of("返金はいつ口座に届きますか？") == "ja"
    # particles and auxiliaries left out; a verb by its stem (届く: 届), held in any of its forms
    assert cjk_words("返金はいつ口座に届きますか？") == ("返金", "口座", "届")
    assert cjk_words("ディスクの空き容量を確認したい") == ("ディスク", "空き", "容量", "確認")
    assert cjk_words("何ができますか？") == ()


def test_a_katakana_word_is_held_with_or_without_its_closing_long_vowel_mark() -> None:
    # サーバー and サーバ are one word (Lucene's katakana stem): the shorter spelling is held by both
    assert cjk_words("サーバーにログインしたい") == ("サーバ", "ログイン")
    assert cjk_words("ユーザー名を変更したい") == ("ユーザ", "変更")
    assert held_as_written("httpサーバを起動する", "サーバ") and held_as_written("サーバーを起動", "サーバ")
    assert cjk_words("データをコピーしたい") == ("データ", "コピー")  # three marks: kept whole


def test_only_chinese_and_japanese_text_is_segmented() -> None:
    assert cjk_words("How long until a refund arrives?") is None
    assert language_of("환불은 언제 되나요?") is None  # Korean: read by its BM25 terms
    assert cjk_words("") is None


def test_query_words_map_each_word_to_the_tokens_that_index_it() -> None:
    words = query_words("退款多久到账？", "cjk", query_terms("退款多久到账？"))
    assert set(words) == {"退款", "账"}  # "到" is a Chinese stop word: BM25 drops it
    terms = query_terms("退款")
    assert words["退款"] == (terms["退款"],)  # a two-character word: its one pair
    assert query_words("refund arrival time", "alphabetic", query_terms("refund arrival time")) == {}
    korean = query_words("환불 기간", "cjk", query_terms("환불 기간"))
    assert set(korean) == set(query_terms("환불 기간"))  # no segmenter: its BM25 terms


def test_a_chinese_question_naming_a_command_is_cjk() -> None:
    assert script_of("怎么用 kubectl 查看 pod 的日志？") == "cjk"
    assert script_of("What is 发票?") == "alphabetic"  # an English question quoting a word


# --- the verdict on them ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("share", "reason"),
    [
        (WordShare(("退款", "账"), 1.0, 0.0), "plausible"),
        (WordShare(("退款",), POLICY.cjk_informative, 0.0), "plausible"),
        (WordShare(("查看",), POLICY.cjk_informative - 0.01, 0.2), "uninformative_terms"),
        (WordShare((), 0.0, 0.5), "no_shared_terms"),
        (WordShare(("查看", "日志"), 0.6, 0.4, ("kubectl",)), "unheld_terms"),
    ],
)
def test_the_cjk_verdict_reads_the_share_one_hit_holds(share: WordShare, reason: str) -> None:
    assert POLICY.cjk_reason(share) == reason


def test_an_unheld_name_refuses_only_when_the_policy_says_so() -> None:
    share = WordShare(("查看", "日志"), 0.6, 0.4, ("kubectl",))
    assert AbstentionPolicy(cjk_unheld_names=False).cjk_reason(share) == "plausible"


# --- whole lookups ------------------------------------------------------------------------------


def test_a_chinese_refund_question_finds_the_chinese_refund_page(cjk_tool: KnowledgeTool) -> None:
    result = cjk_tool.lookup("退款多久到账？")
    verdict = result.retrieval_trace.evidence_verdict
    assert result.found, verdict
    assert result.evidence_blocks[0].doc_id == "refund-zh"
    assert verdict.query_terms == ["退款", "账"] and set(verdict.matched_terms) == {"退款", "账"}
    assert verdict.informative_coverage == pytest.approx(1.0)


def test_a_japanese_refund_question_finds_the_japanese_refund_page(cjk_tool: KnowledgeTool) -> None:
    result = cjk_tool.lookup("返金はいつ口座に反映されますか？")
    assert result.found, result.retrieval_trace.evidence_verdict
    assert result.evidence_blocks[0].doc_id == "refund-ja"


@pytest.mark.parametrize(
    "question",
    [
        "クレジットカードへの返金はいつ反映されますか？",
        "ｸﾚｼﾞｯﾄｶｰﾄﾞへの返金はいつ反映されますか？",  # half-width katakana, as some input methods type it
    ],
)
def test_a_question_in_half_width_katakana_reads_as_written_in_katakana(
    cjk_tool: KnowledgeTool, question: str
) -> None:
    result = cjk_tool.lookup(question)
    assert result.found, result.retrieval_trace.evidence_verdict
    assert result.evidence_blocks[0].doc_id == "refund-ja"
    assert "クレジットカード" in result.retrieval_trace.evidence_verdict.query_terms


def test_the_readme_chinese_question_still_finds_the_fapiao_page(cjk_tool: KnowledgeTool) -> None:
    result = cjk_tool.lookup("如何申请增值税专用发票")
    assert result.found
    assert result.evidence_blocks[0].doc_id == "support-fapiao-requests-zh"


@pytest.mark.parametrize("question", ["员工每年有多少天年假？", "怎么用 kubectl 查看 pod 的日志？"])
def test_a_chinese_question_the_pages_do_not_answer_is_not_found(
    cjk_tool: KnowledgeTool, question: str
) -> None:
    result = cjk_tool.lookup(question)
    assert not result.found, result.retrieval_trace.evidence_verdict
    assert result.evidence_status == "no_evidence"


def test_chinese_chitchat_is_not_found(cjk_tool: KnowledgeTool) -> None:
    assert not cjk_tool.lookup("你好，谢谢你！").found
    result = cjk_tool.lookup("你是谁？")  # no content word: nothing to hold
    assert not result.found
    assert result.retrieval_trace.evidence_verdict.reason == "no_shared_terms"
