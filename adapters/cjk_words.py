"""The words of a Chinese or Japanese question, as a segmenter reads them.

Chinese and Japanese write no spaces between words. BM25 indexes their text as characters and
character pairs (:func:`~lookup_knowledge.adapters.sparse.cjk_spaced`): good for finding a
page, but a question's pairs are not its words ("退款多久到账" gives "款多", "久到", which no
answer holds). The verdict reads what a question asks by its content words instead: nouns,
verbs, adjectives and Latin-script names, the question and function words left out ("多久",
"怎么", "の", "ますか"). Chinese is segmented by ``jieba`` (its part-of-speech tagger), Japanese
(a question with kana) by ``janome`` (a pure-Python morphological analyser shipping the IPA
dictionary). Both are loaded at the first CJK question; without them installed (the ``cjk``
extra) :func:`cjk_words` returns ``None`` and the verdict reads character pairs. The sentences
of a passage (:func:`passage_sentences`) are what the multilingual encoder reads against a CJK
question whose words a page holds only in part.

>>> cjk_words("退款多久到账？")  # doctest: +SKIP
('退款', '到', '账')
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from functools import cache

logger = logging.getLogger(__name__)
_KANA = re.compile("[\u3040-\u30ff]")
_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff]")
_CJK_PART = re.compile("([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff]+)")
_WORD = re.compile(r"[^\W_]+")
_WORDY = re.compile(r"[^\W_]")  # a letter, digit or CJK character: punctuation and spaces are no word
_KANA_END = re.compile("[\u3040-\u309f]+$")  # a verb's hiragana ending (作る -> 作, 並べる -> 並べ)
# a katakana word of 4 or more marks ending in the long-vowel mark, written with and without it
# (サーバー and サーバ, ユーザー and ユーザ): Lucene's JapaneseKatakanaStemFilter, its minimum length
_KATAKANA_LONG_END = re.compile("(?<=[\u30a1-\u30ff]{3})\u30fc$")
_KATAKANA = re.compile("[\u30a1-\u30ff]+")
# a paragraph, a Markdown line (a list item, quote, heading, table row, code), or a CJK sentence
_SENTENCE_END = re.compile(r"\n\s*\n|\n(?=\s*(?:[-*+>#|`]|\d+\.))|(?<=[。！？])")
_MARKUP = re.compile(r"^(?:[\s>*`|+-]|\d+\.)+|[\s`|：:]+$")  # a Markdown line's markers and closing colon
_HEADING = re.compile(r"\s*#")

# jieba part-of-speech tags whose words carry no subject: pronouns and question words (r: 怎么,
# 如何, 哪个), numerals and measures (m: 多久, 几个; q), adverbs (d), prepositions (p),
# conjunctions (c), particles (u*), modal particles (y: 吗, 呢), locatives (f: 上), interjections
# (e), onomatopoeia (o), punctuation and spaces (x, w)
_ZH_FUNCTION_TAGS = ("r", "m", "q", "d", "p", "c", "u", "y", "f", "e", "o", "x", "w")
_ZH_LIGHT = frozenset(
    [
        "是",
        "有",
        "能",
        "会",
        "要",
        "想",
        "做",
        "弄",
        "搞",
        "让",
        "给",
        "请",
        "请问",
        "可以",
        "可能",
        "不能",
        "能不能",
        "成",
        "需要",
        "应该",
        "知道",
        "告诉",
        "帮",
        "帮忙",
        "办",
        "一下",
        "时候",
        "方法",
        "办法",
        "问题",
    ]
)  # verbs and nouns every question may hold ("可以", "方法")
# janome: kept parts of speech, and the kinds of noun that are no subject
_JA_KEPT = ("名詞", "動詞", "形容詞")
_JA_NOUN_LEFT_OUT = ("代名詞", "非自立", "数", "接尾", "副詞可能")
_JA_LIGHT = frozenset(
    [
        "する",
        "ある",
        "いる",
        "なる",
        "できる",
        "出来る",
        "いう",
        "言う",
        "思う",
        "教える",
        "やる",
        "行う",
        "使う",
        "知る",
        "わかる",
        "分かる",
        "方法",
        "やり方",
        "こと",
        "もの",
        "ため",
        "いい",
        "よい",
        "良い",
        "ない",
        "ほしい",
    ]
)


def language_of(text: str) -> str | None:
    """``ja`` when the text holds kana, ``zh`` when it holds Han characters (and no kana),
    else ``None`` (Korean, and every alphabetic script: no segmenter here)."""
    if _KANA.search(text):
        return "ja"
    return "zh" if _HAN.search(text) else None


def cjk_words(text: str) -> tuple[str, ...] | None:
    """The content words of a Chinese or Japanese ``text`` in order, each once (Latin-script
    words lowercased); ``None`` when it is neither or its segmenter is not installed."""
    language = language_of(text)
    if language is None:
        return None
    segment = _chinese_words if language == "zh" else _japanese_words
    try:
        words = [word for part in _CJK_PART.split(text) for word in _words_of(part, segment)]
        return tuple(dict.fromkeys(words))
    except ImportError as missing:  # the cjk extra: the verdict reads character pairs instead
        _warn_once(str(missing))
        return None


def passage_sentences(text: str) -> tuple[str, ...]:
    """A passage's sentences as the multilingual encoder reads them against a question: its
    paragraphs and Markdown lines (a wrapped line joined again), split after a CJK full stop,
    their Markdown markers and closing colon stripped. Headings are left out (a topic's name,
    often worded as a question: "如何申请退款" is as near "退款被拒绝了怎么办？" as to any refund
    question), and so is a piece without two letters or characters.

    >>> passage_sentences("## 如何申请退款\\n\\n- 创建存档并将其写入文件：\\n\\n`tar cf 目标.tar`")
    ('创建存档并将其写入文件', 'tar cf 目标.tar')
    """
    pieces = (" ".join(piece.split()) for piece in _SENTENCE_END.split(text) if not _HEADING.match(piece))
    return tuple(s for piece in pieces if len(_WORDY.findall(s := _MARKUP.sub("", piece))) >= 2)


def _words_of(part: str, segment: Callable[[str], Iterator[str]]) -> Iterator[str]:
    """A CJK run's words (``segment``), or the Latin-script words between runs (a name such as
    ``7z`` or ``md5sum`` whole: a segmenter splits letters from digits), lowercased."""
    if _CJK_PART.fullmatch(part):
        yield from segment(part)
    else:
        yield from (word.lower() for word in _WORD.findall(part) if not word.isdigit())


def _chinese_words(text: str) -> Iterator[str]:
    for word, tag in _jieba_tagger().cut(text):
        word = word.strip().lower()
        function = tag.startswith(_ZH_FUNCTION_TAGS) and tag != "eng"  # eng: a Latin-script word
        if _WORDY.search(word) and not function and word not in _ZH_LIGHT:
            yield word


def _japanese_words(text: str) -> Iterator[str]:
    for token in _janome_tokenizer().tokenize(text):
        kind, sub = token.part_of_speech.split(",")[:2]
        base = token.base_form if token.base_form != "*" else token.surface
        if kind not in _JA_KEPT or base in _JA_LIGHT or not _WORDY.search(token.surface):
            continue
        if kind == "名詞" and sub in _JA_NOUN_LEFT_OUT or kind != "名詞" and sub != "自立":
            continue
        # a verb or adjective is held in any of its forms: by its stem (取り出す: 取り出)
        stem = _KANA_END.sub("", base) if kind != "名詞" else katakana_stem(token.surface)
        yield (stem or base).lower()


def katakana_stem(word: str) -> str:
    """A katakana ``word`` of four or more marks without its closing long-vowel mark, so that
    either spelling holds it (サーバー -> サーバ); any other word as it is.

    >>> katakana_stem("サーバー"), katakana_stem("ルー"), katakana_stem("サーバ")
    ('サーバ', 'ルー', 'サーバ')
    """
    return _KATAKANA_LONG_END.sub("", word) if _KATAKANA.fullmatch(word) else word


_LOCK = threading.Lock()  # both segmenters build their dictionaries on first use


@cache
def _jieba_tagger():  # type: ignore[no-untyped-def]
    import jieba
    import jieba.posseg

    with _LOCK:
        jieba.setLogLevel(logging.WARNING)
        tagger = jieba.posseg.POSTokenizer(jieba.Tokenizer())
        tagger.tokenizer.initialize()
    return tagger


@cache
def _janome_tokenizer():  # type: ignore[no-untyped-def]
    from janome.tokenizer import Tokenizer

    with _LOCK:
        return Tokenizer()


@cache
def _warn_once(missing: str) -> None:
    logger.warning(
        "CJK questions are read by character pairs: %s (pip install 'lookup-knowledge[cjk]')", missing
    )
