"""Generated parts of a docs file, rewritten in place: a benchmark owns the section its heading
names (:func:`replace_section`) or the tables between its markers (:func:`replace_table`), and
the rest of the file (other benchmarks' parts, the prose) is kept. A generated part holds the
current figures only: history lives in git, so no commit hash or load average is written."""

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


def markers(name: str) -> tuple[str, str]:
    """The HTML comments around the table ``name`` in a doc (invisible when rendered)."""
    return f"<!-- table:{name} (written by its benchmark script) -->", f"<!-- /table:{name} -->"


def replace_table(doc: Path, name: str, text: str) -> None:
    """Write ``text`` between the markers of table ``name`` (:func:`markers`), replacing what
    stood there. The doc places the markers where the table goes; a doc without them is an
    error, so a table never lands where no prose explains it."""
    start, end = markers(name)
    current = doc.read_text(encoding="utf-8")
    head, found, rest = current.partition(start)
    if not found or end not in rest:
        raise SystemExit(f"{doc} has no markers for table {name!r}: put {start} and {end} where it goes")
    tail = rest[rest.index(end) :]
    doc.write_text(f"{head}{start}\n{text.strip()}\n{tail}", encoding="utf-8")


def measured(load: float) -> dict[str, Any]:
    """When, at which commit and on what a run measured (``load``: the load average at its start),
    kept in the run's JSON; the doc shows only the machine (:func:`machine_line`)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit.stdout.strip() or "?",
        "machine": f"{cpu_model()}, {os.cpu_count()} CPUs",
        "load": load,
    }


def machine_line(ran: dict[str, Any], script: str) -> str:
    """The line a generated part opens with: the script that measured it and on what CPU (times
    differ by CPU and load; ratios measured side by side hold)."""
    where = ran.get("machine") or ran.get("cpu") or "machine not recorded"
    return f"Measured by `python benchmarks/{script}` on {where}."
