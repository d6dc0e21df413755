"""Text that can always be stored, printed and shown: lone surrogates escaped, file names
printable, an exception as its first line (credentials masked)."""

from __future__ import annotations

import os

from .redaction import mask_secrets


def escape_surrogates(text: str) -> str:
    """``text`` with each lone surrogate (undecodable bytes read with ``surrogateescape``, or a
    JSON ``"\\ud800"``) written as its escape (``\\udcff``), so it encodes as UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def printable_path(name: str) -> str:
    """A file name as text that can be stored and printed: bytes that are not UTF-8 (which
    Python holds as lone surrogates) written as ``\\xff``, the same on every run."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def first_line(exc: BaseException, *, with_type: bool = False) -> str:
    """The first line of an exception's message (URL credentials masked), after its type name
    when ``with_type``; the type name alone when the message is empty."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    line = mask_secrets(text.splitlines()[0])
    return f"{type(exc).__name__}: {line}" if with_type else line
