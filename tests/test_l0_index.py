"""The L0 hint index: Unicode-aware matching, domains, persistence."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from lookup_knowledge.adapters import l0_index
from lookup_knowledge.adapters.l0_index import L0Document, L0Hints, L0Index, L0IndexError, normalize

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


def test_a_document_given_twice_in_one_upsert_is_indexed_as_last_given(index: L0Index) -> None:
    first = L0Document("vault", "Vault Secrets", ("vault",), ("security",), ())
    index.upsert([first, dataclasses.replace(first, keywords=("hashicorp",))])
    assert index.documents["vault"].keywords == ("hashicorp",)
    assert index.match("vault secrets").matched_doc_ids == ["vault"]  # by its title
    assert index.match("hashicorp").matched_doc_ids == ["vault"] and index.match("the vault").is_empty


@pytest.mark.parametrize(
    "query",
    [
        "Kafka consumers lagging on Confluent Cloud",
        "what is in the pci dss scope for cardholder data",
        "如何申请增值税专用发票",
        "kafka operations runbook for payments",
        "nothing here matches",
    ],
)
def test_an_index_too_large_for_memory_matches_from_the_database_alike(
    index: L0Index, query: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = [index.match(query), index.match(query, ("public",))]
    monkeypatch.setattr(l0_index, "_MEMORY_TERMS", 0)
    large = L0Index([KAFKA, PCI, FAPIAO])
    assert [large.match(query), large.match(query, ("public",))] == expected
    assert large._small_table() is None  # it asked the database


def test_remove_forgets_a_document(index: L0Index) -> None:
    index.match("kafka")
    index.remove(["kafka-runbook", "not-there"])
    assert len(index) == 2
    assert index.match("kafka").is_empty


def test_save_and_load_round_trip(index: L0Index, tmp_path: Path) -> None:
    path = tmp_path / "nested" / "knowledge.l0.sqlite"
    index.upsert([L0Document("restricted", "Payroll Runbook", ("payroll",), ("hr",), (), access=("hr",))])
    index.save(path)
    loaded = L0Index.load(path)
    assert loaded.documents == index.documents  # every field, access (None or a tuple) included
    assert loaded.documents["restricted"].access == ("hr",)
    assert loaded.match("增值税专用发票").matched_doc_ids == ["support-fapiao-requests-zh"]
    assert not path.with_suffix(".json.tmp").exists()


def test_saved_file_is_an_sqlite_database_that_keeps_unicode(index: L0Index, tmp_path: Path) -> None:
    path = tmp_path / "knowledge.l0.sqlite"
    index.save(path)
    with closing(sqlite3.connect(path)) as db:
        titles = {row[0] for row in db.execute("SELECT title FROM documents")}
        assert db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone() == ("2",)
    assert "中国客户发票申请流程" in titles


def test_missing_file_loads_as_empty_index(tmp_path: Path) -> None:
    index = L0Index.load(tmp_path / "absent.l0.sqlite")
    assert len(index) == 0
    assert index.match("kafka").is_empty
    assert not (tmp_path / "absent.l0.sqlite").exists()  # reading creates nothing


def test_unknown_format_version_is_refused(index: L0Index, tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite"
    index.save(path)
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE meta SET value = '99' WHERE key = 'version'")
    with pytest.raises(L0IndexError, match="format '?99'?.*ingest the knowledge base again"):
        L0Index.load(path)


@pytest.mark.parametrize(
    "content", [b"not a database at all", b'{"version": 1, "documents": []}', b"\xff" * 4096]
)
def test_a_file_that_is_not_an_l0_database_is_refused_naming_the_repair(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "l0.sqlite"
    path.write_bytes(content)
    with pytest.raises(L0IndexError, match="ingest the knowledge base again"):
        L0Index.load(path).match("kafka")


def test_saved_writes_reach_the_file_and_unsaved_ones_do_not(index: L0Index, tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite"
    index.save(path)
    on_file = L0Index.load(path)
    on_file.upsert([L0Document("vault", "Vault Secrets", ("vault",), ("security",), ())])
    on_file.remove(["kafka-runbook"])
    assert on_file.match("vault").matched_doc_ids == ["vault"]  # its own writes, before the save
    assert sorted(L0Index.load(path).documents) == sorted(index.documents)  # another reader: not yet
    on_file.save(path)
    reread = L0Index.load(path)
    assert reread.match("vault").matched_doc_ids == ["vault"] and "kafka-runbook" not in reread.documents
    unsaved = L0Index.load(path)
    unsaved.upsert([L0Document("lost", "Lost Runbook", ("lost",), (), ())])
    unsaved.close()  # as a crash before the save
    assert "lost" not in L0Index.load(path).documents


def test_a_reader_keeps_its_version_while_a_writer_saves_a_new_one(index: L0Index, tmp_path: Path) -> None:
    """Writes go to a copy moved over the file at the save: a reader (a serving process) never
    waits on a writer (an ingest) and reads its version until it loads the file again."""
    path = tmp_path / "l0.sqlite"
    index.save(path)
    reader = L0Index.load(path)
    assert reader.match("rotate the vault token").is_empty
    writer = L0Index.load(path)
    writer.upsert([L0Document("vault", "Vault Secrets", ("vault token",), ("security",), ())])
    assert path.with_name("l0.sqlite.tmp").is_file()  # the copy that holds the write
    inode = path.stat().st_ino
    writer.save(path)
    assert path.stat().st_ino != inode and not path.with_name("l0.sqlite.tmp").exists()
    assert reader.match("rotate the vault token").is_empty  # its version
    assert L0Index.load(path).match("rotate the vault token").matched_doc_ids == ["vault"]
    writer.remove(["vault"])  # a second write after a save: a new copy
    writer.save(path)
    assert L0Index.load(path).match("rotate the vault token").is_empty
    assert writer.match("rotate the vault token").is_empty


def test_an_unchanged_document_is_not_written_again(index: L0Index, tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite"
    index.save(path)
    before = path.stat().st_mtime_ns, path.read_bytes()
    again = L0Index.load(path)
    again.upsert(list(index.documents.values()))  # what an ingest of an unchanged corpus passes
    again.save(path)
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before


def test_a_legacy_json_index_is_read_until_the_next_save_replaces_it(index: L0Index, tmp_path: Path) -> None:
    legacy = tmp_path / "knowledge.l0.json"
    documents = [
        {"doc_id": d.doc_id, "title": d.title, "keywords": list(d.keywords), "domains": list(d.domains),
         "entities": list(d.entities), "access": d.access}
        for d in index.documents.values()
    ]  # fmt: skip
    legacy.write_text(json.dumps({"version": 1, "documents": documents}), encoding="utf-8")
    path = tmp_path / "knowledge.l0.sqlite"
    read = L0Index.load(path)
    assert dict(read.documents) == dict(index.documents)
    assert read.match("kafka").matched_doc_ids == ["kafka-runbook"]
    read.save(path)
    assert path.is_file() and not legacy.exists()
    assert dict(L0Index.load(path).documents) == dict(index.documents)
