"""Text that can always be stored, printed and shown: lone surrogates escaped, file names
printable, an exception as its first line (credentials masked); a query's width forms folded."""

from __future__ import annotations

import os
import re
import unicodedata

from .redaction import mask_secrets

MAX_ID_CHARS = 1024  # the longest document id (frontmatter ``id``, JSONL ``_id``, relative path)
# C0 and C1 control characters (DEL included) and the bidirectional controls that reorder what a
# terminal or a page shows (U+061C, U+200E/F, U+202A-E, U+2066-9)
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# full-width Latin letters and digits (an input method's full-width mode: ｄｏｃｋｅｒ) and runs of
# half-width katakana with their sound marks (ﾃﾞｨｽｸ)
_WIDTH_FORMS = re.compile("[\uff10-\uff19\uff21-\uff3a\uff41-\uff5a\uff66-\uff9f]+")


def escape_surrogates(text: str) -> str:
    """``text`` with each lone surrogate (undecodable bytes read with ``surrogateescape``, or a
    JSON ``"\\ud800"``) written as its escape (``\\udcff``), so it encodes as UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def fold_width(text: str) -> str:
    """``text`` with full-width Latin letters and digits written as ASCII and half-width katakana
    as katakana (NFKC on those forms alone, as Lucene's CJK width filter folds them), so a
    question typed in either form reads as the pages write it; other characters, full-width
    punctuation included, as they are.

    >>> fold_width("ｄｏｃｋｅｒ のメモリを１ＧＢに"), fold_width("ﾃﾞｨｽｸの空き容量は？")
    ('docker のメモリを1GBに', 'ディスクの空き容量は？')
    """
    return _WIDTH_FORMS.sub(lambda run: unicodedata.normalize("NFKC", run.group()), text)


def printable_path(name: str) -> str:
    """A file name as text that can be stored and printed: bytes that are not UTF-8 (which
    Python holds as lone surrogates) written as ``\\xff``, control characters as
    :func:`printable_id` writes them, the same on every run."""
    return printable_id(os.fsencode(name).decode("utf-8", "backslashreplace"))


def printable_id(text: str) -> str:
    """``text`` with each control character (C0, DEL, C1) and bidirectional control written as
    its escape: ``\\x1b`` up to U+00FF, ``\\u202e`` above; a stable form an agent host can print
    (an ESC, OSC or U+202E in an id would reach its terminal or page)."""
    return _CONTROLS.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def first_line(exc: BaseException, *, with_type: bool = False) -> str:
    """The first line of an exception's message (URL credentials masked), after its type name
    when ``with_type``; the type name alone when the message is empty."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    line = mask_secrets(text.splitlines()[0])
    return f"{type(exc).__name__}: {line}" if with_type else line
