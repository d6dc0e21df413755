"""Each chunk's language (docs/multilingual.md, "The language of a chunk"): detected at ingest
into the payload, carried by its evidence block, marked in the context pack when it is not the
question's; a store without languages still answers, and ingesting it again adds them by a
payload update, without writing or embedding a chunk."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from conftest import make_config, write_corpus
from dataflow_fixtures import FAPIAO_QUERY, REFUND_QUERY, SampleKB, make_tool

from lookup_knowledge import KnowledgeTool, ingest
from lookup_knowledge.adapters.multilingual import chunk_languages, language_of
from lookup_knowledge.cli.info import describe
from lookup_knowledge.contract import LookupResult
from lookup_knowledge.stores import open_store

CHINESE_DOC = "support-fapiao-requests-zh"  # the sample knowledge base's page in Chinese
ENGLISH_QUESTION_CHINESE_PAGE = "Which team issues invoices on the 百望云 platform?"  # names its platform
PAGES = {
    "refunds": ("Refund approvals", "Refunds above 500 EUR need approval from the Finance on-call before "
                "they are paid out. Smaller refunds are approved by the support agent."),
    "kafka": ("Consumer lag", "When a Kafka consumer group lags, check the partition assignment first, "
              "then the consumer's processing time per batch."),
    "fapiao": ("发票申请流程", "发票申请必须在付款完成后 180 天内提出，逾期不予受理。"
               "单张发票金额超过人民币 10 万元时，需上海财务负责人复核。"
               "审核通过后，发票在 5 个工作日内开具。"),
}  # fmt: skip


def _headers(pack_text: str) -> list[str]:
    """The context pack's block headers, each on one line."""
    return [line for line in pack_text.splitlines() if line.startswith("[")]


def test_the_sample_knowledge_base_chunks_carry_their_language(sample_kb: SampleKB) -> None:
    documents = sample_kb.store.documents()
    chinese = documents.pop(CHINESE_DOC)
    assert set(chinese.languages) == {"zh"}
    assert documents and all(set(document.languages) == {"en"} for document in documents.values())


def test_a_chinese_block_for_an_english_question_is_marked_in_the_pack(sample_kb: SampleKB, embedder) -> None:
    assert language_of(ENGLISH_QUESTION_CHINESE_PAGE) == "en"
    result = make_tool(sample_kb, embedder).lookup(ENGLISH_QUESTION_CHINESE_PAGE)
    assert result.found and result.context_pack is not None
    blocks = result.evidence_blocks
    assert any(block.doc_id == CHINESE_DOC for block in blocks)
    assert {block.doc_id == CHINESE_DOC: block.language for block in blocks} == {True: "zh", False: "en"}
    headers = _headers(result.context_pack.text)
    assert len(headers) == len(result.context_pack.items) >= 2
    for header in headers:
        assert header.endswith(" [language: zh]") == (f"] {CHINESE_DOC}#" in header)
    _assert_valid(result)


def _assert_valid(result: LookupResult) -> None:
    """The result's contract JSON validates against the contract's own JSON schema."""
    schema = LookupResult.model_json_schema(by_alias=True, mode="serialization")
    jsonschema.Draft202012Validator(schema).validate(result.model_dump(by_alias=True, mode="json"))
    assert schema["$defs"]["EvidenceBlock"]["properties"]["language"]["anyOf"] == [
        {"type": "string"},
        {"type": "null"},
    ]


def test_an_english_lookup_on_english_pages_has_no_marker(sample_kb: SampleKB, embedder) -> None:
    result = make_tool(sample_kb, embedder).lookup(REFUND_QUERY)
    assert result.found and result.context_pack is not None
    assert {block.language for block in result.evidence_blocks} == {"en"}
    assert "[language:" not in result.context_pack.text


def test_a_chinese_question_marks_the_english_blocks_not_the_chinese_ones(
    sample_kb: SampleKB, embedder
) -> None:
    result = make_tool(sample_kb, embedder).lookup(FAPIAO_QUERY)
    assert result.found and result.context_pack is not None
    assert result.evidence_blocks[0].doc_id == CHINESE_DOC
    for header, item in zip(_headers(result.context_pack.text), result.context_pack.items, strict=True):
        chinese = item.evidence_key.startswith(f"{CHINESE_DOC}#")
        assert header.endswith(" [language: en]") is not chinese
        assert "[language: zh]" not in header


@pytest.mark.parametrize(
    ("texts", "languages"),
    [
        (["Wie ändere ich die Zugriffsrechte einer Datei und des Ordners darüber?", "ok"], ["de", "de"]),
        (["ok", "Wie ändere ich die Zugriffsrechte einer Datei und des Ordners darüber?"], ["de", "de"]),
        (
            ["如何申请增值税专用发票", "Refunds above 500 EUR need approval from the Finance on-call."],
            ["zh", "en"],
        ),
        (["```\nls -la\n```", "12345"], ["en", "en"]),  # no confident guess in the document: English
        ([], []),
    ],
)
def test_a_weak_guess_takes_the_documents_majority_language(texts: list[str], languages: list[str]) -> None:
    assert chunk_languages(texts) == languages


def _hide_the_identifier(monkeypatch: pytest.MonkeyPatch) -> None:
    """``py3langid`` hidden from the import system, as if the ``multilingual`` extra were absent."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "py3langid" else real(name, *a)
    )


def test_without_the_identifier_only_cjk_script_is_guessed(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide_the_identifier(monkeypatch)
    texts = [
        "如何申请增值税专用发票",
        "Wie ändere ich die Zugriffsrechte?",
        "ネットワーク上のホストに到達できるか確認する",
        "환불은 언제 되나요?",
    ]
    assert chunk_languages(texts) == ["zh", None, "ja", "ko"]
    assert language_of("Wie ändere ich die Zugriffsrechte?") == "en"  # a question: English when unsure
    assert language_of("如何申请增值税专用发票") == "zh"


@pytest.fixture(scope="module")
def unlabelled(tmp_path_factory: pytest.TempPathFactory, embedder) -> Iterator[Path]:
    """A store ingested without the language identifier: its English chunks have no language
    (as in a store made before languages), its Chinese ones the script's guess."""
    kb = write_corpus(
        tmp_path_factory.mktemp("pages"),
        {f"{d}.md": ({"id": d, "title": t}, f"# {t}\n\n{b}\n") for d, (t, b) in PAGES.items()},
    )
    path = tmp_path_factory.mktemp("unlabelled-store")
    with pytest.MonkeyPatch.context() as monkeypatch:
        _hide_the_identifier(monkeypatch)
        ingest(kb, make_config(path, multilingual__vectors="off"), embedder=embedder)
    yield path, kb


def _stored(path: Path, embedder) -> tuple[dict, dict]:
    """Each document's chunks' languages, and its points' ids and texts."""
    store = open_store(make_config(path), embedder.dimension, create=False)
    try:
        documents = store.documents()
        return {d: dict(doc.languages) for d, doc in documents.items()}, store.chunk_texts(sorted(documents))
    finally:
        store.close()


def _lookup(path: Path, embedder, question: str) -> LookupResult:
    with KnowledgeTool(make_config(path), embedder=embedder) as tool:
        return tool.lookup(question)


def test_a_store_without_languages_answers_with_none_and_ingest_adds_them(unlabelled, embedder) -> None:
    path, kb = unlabelled
    languages, points = _stored(path, embedder)
    assert languages == {"refunds": {None: 1}, "kafka": {None: 1}, "fapiao": {"zh": 1}}
    assert describe(make_config(path))["store"]["chunk_languages"] == {"unknown": 2, "zh": 1}
    result = _lookup(path, embedder, "Who approves refunds above 500 EUR?")
    assert result.found and result.evidence_blocks[0].doc_id == "refunds"
    assert result.evidence_blocks[0].language is None
    assert result.context_pack is not None and "[language:" not in result.context_pack.text
    _assert_valid(result)

    report = ingest(kb, make_config(path, multilingual__vectors="off"), embedder=embedder)
    assert (report.languages_added, report.unchanged, report.chunks_written, report.chunks_embedded) == (
        2,
        3,
        0,
        0,
    )
    languages_after, points_after = _stored(path, embedder)
    assert languages_after == {"refunds": {"en": 1}, "kafka": {"en": 1}, "fapiao": {"zh": 1}}
    assert points_after == points  # the same points (ids, texts): a payload update, nothing rewritten
    assert describe(make_config(path))["store"]["chunk_languages"] == {"en": 2, "zh": 1}
    result = _lookup(path, embedder, "Who approves refunds above 500 EUR?")
    assert result.evidence_blocks[0].language == "en"
    again = ingest(kb, make_config(path, multilingual__vectors="off"), embedder=embedder)
    assert (again.languages_added, again.chunks_written) == (0, 0)
