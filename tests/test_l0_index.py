"""The L0 hint index: Unicode-aware matching, domains, persistence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lookup_knowledge.adapters.l0_index import L0Document, L0Hints, L0Index, normalize

KAFKA = L0Document(
    doc_id="kafka-runbook",
    title="Kafka Operations Runbook",
    keywords=("kafka", "consumer lag"),
    domains=("infrastructure",),
    entities=("Confluent Cloud",),
)
PCI = L0Document(
    doc_id="pci-scope",
    title="PCI DSS Scope",
    keywords=("pci", "cardholder data"),
    domains=("payments", "security"),
)
FAPIAO = L0Document(
    doc_id="support-fapiao-requests-zh",
    title="中国客户发票申请流程",
    keywords=("发票", "增值税专用发票"),
    domains=("customer-support",),
    entities=("百望云",),
)


@pytest.fixture
def index() -> L0Index:
    return L0Index([KAFKA, PCI, FAPIAO])


def test_match_is_case_insensitive(index: L0Index) -> None:
    hints = index.match("Our KAFKA cluster is down")
    assert hints.matched_keywords == ["kafka"]
    assert hints.matched_doc_ids == ["kafka-runbook"]


def test_full_width_query_matches_after_nfkc(index: L0Index) -> None:
    assert index.match("ＫＡＦＫＡ broker").matched_keywords == ["kafka"]


def test_normalize_is_nfkc_casefold() -> None:
    assert normalize("ＫＡＦＫＡ") == "kafka"
    assert normalize("Straße") == "strasse"


def test_keyword_matches_whole_words_only(index: L0Index) -> None:
    assert index.match("is this specific to one region?").is_empty
    assert index.match("kafkaesque bureaucracy").is_empty


def test_keyword_matches_next_to_punctuation(index: L0Index) -> None:
    assert index.match("what is in PCI-DSS scope?").matched_keywords == ["pci"]


@pytest.mark.parametrize(
    ("query", "keyword"),
    [
        ("who approves refunds?", "refund"),  # plural query, singular keyword
        ("refunding a duplicate charge", "refund"),
        ("consumers lagging behind", "consumer lag"),  # each word of a phrase by its stem
        ("Kafka's brokers", "kafka"),
    ],
)
def test_simple_inflections_match_the_keyword(query: str, keyword: str) -> None:
    refund = L0Document("refund-policy", "Refund Policy", ("refund",), ("payments",))
    assert keyword in L0Index([KAFKA, refund]).match(query).matched_keywords


def test_stemming_does_not_merge_different_words(index: L0Index) -> None:
    assert index.match("the consumer's lagoon").is_empty
    assert index.match("cards and holders of data").is_empty


def test_multi_word_keyword_needs_all_words_in_sequence(index: L0Index) -> None:
    assert index.match("consumer   lag keeps growing").matched_keywords == ["consumer lag"]
    assert index.match("the consumer is slow").is_empty
    assert index.match("lag of the consumer").is_empty


def test_terms_sharing_a_first_word_match_at_each_of_their_lengths() -> None:
    index = L0Index(
        [
            L0Document("lag", "Lag", keywords=("consumer", "consumer lag", "consumer lag alert runbook")),
            L0Document("alerts", "Alerting", keywords=("lag alert",)),
        ]
    )
    hints = index.match("Where is the consumer lag alert runbook?")
    assert hints.matched_keywords == ["consumer", "consumer lag", "consumer lag alert runbook", "lag alert"]
    # a term longer than what is left of the query is not matched, and a shorter one still is
    assert index.match("page on consumer lag").matched_keywords == ["consumer", "consumer lag"]


def test_title_is_matched_as_a_phrase(index: L0Index) -> None:
    hints = index.match("open the kafka operations runbook")
    assert hints.matched_titles == ["Kafka Operations Runbook"]


def test_a_title_of_stop_words_only_is_not_matched() -> None:
    index = L0Index(
        [
            L0Document("abstract-in", "In", (), ("biomedical",), ()),
            L0Document("where-function", "where", ("where",), ("functions",), ()),
            L0Document("sids", "Sudden infant death syndrome.", (), ("biomedical",), ()),
            L0Document("and-or", "And / Or", (), ("logic",), ()),
            L0Document("in-vivo", "In vivo", (), ("methods",), ()),
        ]
    )
    assert index.match("1 in 5 million in UK have abnormal PrP positivity.") == L0Hints()
    assert index.match("this and or that").matched_titles == []
    assert index.match("results in vivo").matched_titles == ["In vivo"]  # one word kept: a title
    hints = index.match("Deaths from sudden infant death syndrome happen in newborns")
    assert (hints.matched_titles, hints.domains) == (["Sudden infant death syndrome."], ["biomedical"])
    keyword = index.match("filter pages with where")  # a keyword is curated frontmatter: it still matches
    assert (keyword.matched_titles, keyword.matched_keywords) == ([], ["where"])


def test_entity_is_matched(index: L0Index) -> None:
    hints = index.match("is confluent cloud billing affected")
    assert hints.entities == ["Confluent Cloud"]
    assert hints.domains == ["infrastructure"]


def test_chinese_keyword_matches_as_substring(index: L0Index) -> None:
    hints = index.match("我想申请增值税专用发票，需要什么资料？")
    assert hints.matched_keywords == ["发票", "增值税专用发票"]
    assert hints.matched_doc_ids == ["support-fapiao-requests-zh"]
    assert hints.domains == ["customer-support"]


def test_chinese_title_matches_inside_longer_query(index: L0Index) -> None:
    hints = index.match("请给我中国客户发票申请流程的文档")
    assert hints.matched_titles == ["中国客户发票申请流程"]


def test_chinese_query_without_terms_does_not_match(index: L0Index) -> None:
    assert index.match("今天天气很好").is_empty


def test_domains_come_from_matched_documents(index: L0Index) -> None:
    hints = index.match("where does cardholder data live")
    assert hints.domains == ["payments", "security"]


def test_domain_name_in_query_is_a_domain_hint_without_a_document(index: L0Index) -> None:
    hints = index.match("anything about payments?")
    assert hints.domains == ["payments"]
    assert hints.matched_doc_ids == []


def test_blank_domains_are_ignored() -> None:
    index = L0Index([L0Document("d", "Widget Guide", ("widget",), ("", "  ", "tools"))])
    hints = index.match("widget setup")
    assert hints.domains == ["tools"]


def test_no_match_gives_empty_hints(index: L0Index) -> None:
    hints = index.match("how do I bake bread")
    assert hints.is_empty
    assert hints == L0Hints()


def test_hints_serialize_in_camel_case(index: L0Index) -> None:
    dumped = index.match("kafka").model_dump(by_alias=True)
    assert dumped["matchedKeywords"] == ["kafka"]
    assert "matchedDocIds" in dumped


def test_upsert_replaces_a_document(index: L0Index) -> None:
    index.match("kafka")  # builds the cached tables
    index.upsert([L0Document("kafka-runbook", "Kafka Runbook", ("redpanda",), ("streaming",))])
    assert index.match("kafka runbook").domains == ["streaming"]
    assert index.match("kafka lag").matched_keywords == []
    assert index.match("redpanda").matched_doc_ids == ["kafka-runbook"]


def test_remove_forgets_a_document(index: L0Index) -> None:
    index.match("kafka")
    index.remove(["kafka-runbook", "not-there"])
    assert len(index) == 2
    assert index.match("kafka").is_empty


def test_save_and_load_round_trip(index: L0Index, tmp_path: Path) -> None:
    path = tmp_path / "nested" / "knowledge.l0.json"
    index.upsert([L0Document("restricted", "Payroll Runbook", ("payroll",), ("hr",), (), access=("hr",))])
    index.save(path)
    loaded = L0Index.load(path)
    assert loaded.documents == index.documents  # every field, access (None or a tuple) included
    assert loaded.documents["restricted"].access == ("hr",)
    assert loaded.match("增值税专用发票").matched_doc_ids == ["support-fapiao-requests-zh"]
    assert not path.with_suffix(".json.tmp").exists()


def test_saved_file_keeps_unicode_readable(index: L0Index, tmp_path: Path) -> None:
    path = tmp_path / "l0.json"
    index.save(path)
    text = path.read_text(encoding="utf-8")
    assert "发票" in text
    assert json.loads(text)["version"] == 1


def test_missing_file_loads_as_empty_index(tmp_path: Path) -> None:
    index = L0Index.load(tmp_path / "absent.l0.json")
    assert len(index) == 0
    assert index.match("kafka").is_empty


def test_unknown_format_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "l0.json"
    path.write_text(json.dumps({"version": 99, "documents": []}), encoding="utf-8")
    with pytest.raises(ValueError, match="format"):
        L0Index.load(path)
