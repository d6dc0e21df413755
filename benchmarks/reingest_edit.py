"""Re-ingest after a one-paragraph edit: the chunks embedded and the seconds, with the unchanged
chunks' vectors reused (the product) against every chunk of the edited page embedded again.

The 20 longest hugo-docs pages are copied to a temporary folder and ingested; then, for each
page in turn, one paragraph in its middle gets a sentence appended and the folder is ingested
again, alternately with reuse and with the store's ``stored_vectors`` answering nothing (the
behaviour before reuse: the whole page embedded). Medians over the pages; prints a table and
writes JSON.

    python benchmarks/reingest_edit.py [--pages 20] [--out benchmarks/results/reingest_edit.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from doc_sections import replace_table
from rich.console import Console
from rich.table import Table

from lookup_knowledge import load_config
from lookup_knowledge.adapters.search import KnowledgeStore
from lookup_knowledge.ingestion import ingest
from lookup_knowledge.stores import build_embedder, open_store

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "hugo-docs"


def edited(text: str, n: int) -> str:
    """``text`` with a sentence appended to the paragraph in its middle (blank-line separated)."""
    paragraphs = text.split("\n\n")
    middle = len(paragraphs) // 2
    paragraphs[middle] += f" Edited for the re-ingest benchmark, round {n}."
    return "\n\n".join(paragraphs)


def forgetful(store: KnowledgeStore) -> KnowledgeStore:
    """The store with ``stored_vectors`` answering nothing: every chunk is embedded again."""

    class Forgetful(type(store)):  # type: ignore[misc, valid-type]
        def stored_vectors(self, doc_ids: Sequence[str], source: str) -> dict:
            return {}

    store.__class__ = Forgetful
    return store


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/reingest_edit.json"))
    parser.add_argument("--doc", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument("--from-json", action="store_true", help="rewrite the doc's table from --out")
    args = parser.parse_args()
    if args.from_json:
        write_doc(args.doc, json.loads(args.out.read_text(encoding="utf-8")))
        return 0
    if not DATA.is_dir():
        print(f"skipped: {DATA} not found (benchmark data lives in ../shared/data)")
        return 0
    console = Console()
    pages = sorted(DATA.rglob("*.md"), key=lambda p: -p.stat().st_size)[: args.pages]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "kb"
        for page in pages:
            target = folder / page.relative_to(DATA)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(page, target)
        config = load_config(overrides=[f"store.path={Path(tmp) / 'store'}"])
        embedder = build_embedder(config)
        first = ingest(folder, config, embedder=embedder)
        console.print(f"{first.documents} pages, {first.chunks_written} chunks, {first.seconds:.1f} s")
        rows: dict[str, list[tuple[int, int, float]]] = {"reuse": [], "embed all": []}
        edits = 0
        for n, page in enumerate(pages):
            target = folder / page.relative_to(DATA)
            for way in ("reuse", "embed all") if n % 2 else ("embed all", "reuse"):
                edits += 1
                target.write_text(edited(page.read_text(encoding="utf-8"), edits), "utf-8")
                store = open_store(config, embedder.dimension)
                if way == "embed all":
                    forgetful(store)
                try:
                    report = ingest(folder, config, embedder=embedder, store=store)
                finally:
                    store.close()
                rows[way].append((report.chunks_written, report.chunks_embedded, report.seconds))
    summary = {
        way: {
            "chunks_written_median": statistics.median(r[0] for r in runs),
            "chunks_embedded_median": statistics.median(r[1] for r in runs),
            "seconds_median": statistics.median(r[2] for r in runs),
        }
        for way, runs in rows.items()
    }
    table = Table(title=f"Re-ingest after a one-paragraph edit, {len(pages)} longest hugo-docs pages")
    for column in ("", "chunks written", "chunks embedded", "seconds"):
        table.add_column(column)
    for way, figures in summary.items():
        table.add_row(
            way,
            f"{figures['chunks_written_median']:.0f}",
            f"{figures['chunks_embedded_median']:.0f}",
            f"{figures['seconds_median']:.2f}",
        )
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "pages": len(pages),
                "summary": summary,
                "runs": rows,
                "load_average": os.getloadavg(),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            },
            indent=2,
        )
    )
    console.print(f"wrote {args.out}")
    write_doc(args.doc, json.loads(args.out.read_text(encoding="utf-8")))
    return 0


WAYS = {"reuse": "reuse (the product)", "embed all": "embed the page whole"}


def markdown_table(results: dict) -> str:
    """The re-ingest table of docs/benchmarks.md: medians over the edited pages, per way."""
    rows = [f"| medians over {results['pages']} pages | chunks written | chunks embedded | seconds |"]
    rows.append("|---|---:|---:|---:|")
    for way, f in results["summary"].items():
        rows.append(
            f"| {WAYS.get(way, way)} | {f['chunks_written_median']:.0f} | {f['chunks_embedded_median']:.0f} "
            f"| {f['seconds_median']:.2f} |"
        )
    return "\n".join(rows)


def write_doc(doc: Path, results: dict) -> None:
    """This benchmark's table of ``doc`` rewritten whole from ``results``; the prose kept."""
    replace_table(doc, "reingest-edit", markdown_table(results))


if __name__ == "__main__":
    raise SystemExit(main())
