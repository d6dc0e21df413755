"""One generated section of a docs file, rewritten in place: each benchmark owns the section its
heading names, and the rest of the file (other benchmarks' sections, prose) is kept."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from machine import cpu_model


def replace_section(doc: Path, heading: str, text: str, title: str = "# Retrieval quality") -> None:
    """Write ``text`` (which starts with ``heading``) in place of the section under ``heading``,
    up to the next ``## `` heading; appended when the doc has no such section, and a new doc
    starts with ``title``."""
    current = doc.read_text(encoding="utf-8") if doc.is_file() else f"{title}\n"
    head, _, rest = current.partition(heading)
    tail = rest[rest.find("\n## ") + 1 :] if "\n## " in rest else ""
    doc.write_text(head.rstrip("\n") + "\n\n" + text + ("\n" + tail if tail else ""), encoding="utf-8")


def measured(load: float) -> dict[str, Any]:
    """When, at which commit and on what a run measured (``load``: the load average at its start),
    for the line each generated section opens with."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit.stdout.strip() or "?",
        "machine": f"{cpu_model()}, {os.cpu_count()} CPUs",
        "load": load,
    }
