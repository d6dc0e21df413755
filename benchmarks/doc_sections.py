"""One generated section of a docs file, rewritten in place: each benchmark owns the section its
heading names, and the rest of the file (other benchmarks' sections, prose) is kept."""

from __future__ import annotations

from pathlib import Path


def replace_section(doc: Path, heading: str, text: str, title: str = "# Retrieval quality") -> None:
    """Write ``text`` (which starts with ``heading``) in place of the section under ``heading``,
    up to the next ``## `` heading; appended when the doc has no such section, and a new doc
    starts with ``title``."""
    current = doc.read_text(encoding="utf-8") if doc.is_file() else f"{title}\n"
    head, _, rest = current.partition(heading)
    tail = rest[rest.find("\n## ") + 1 :] if "\n## " in rest else ""
    doc.write_text(head.rstrip("\n") + "\n\n" + text + ("\n" + tail if tail else ""), encoding="utf-8")
