"""Documents (PDF, DOCX, HTML, PPTX, XLSX): conversion quality, speed, memory, hard cases, retrieval.

    python benchmarks/documents.py [--questions 3] [--top-k 5]

Reads the 39 source documents of ``../shared/data/documents`` (exits 0 without it) and, in one
run:

* converts each in the conversion worker (the product's :class:`ConversionWorker`, one fresh
  worker per format) and compares the converted text with the reference markdown (Docling's
  own expected output, ``groundtruth/<file>.md``): token recall (share of the reference's word
  tokens, as a multiset, that the conversion holds) and precision, the reference's headings
  found as headings, tables kept (a reference with a table gets a markdown table); files and
  pages per second; the worker's peak memory (VmHWM);
* the worker's cost: the same files converted in-process, per-file difference, and its start;
* ingests a copy of the 39 files with the default configuration (real model) in one run and
  lists every file's outcome (ingested with N characters, or skipped and why) against what
  the data's README says each hard case should give;
* retrieval on the converted documents: per document with a reference, ``--questions``
  sentences of the reference (its first 12 words as the query), ``lookup`` with the default
  configuration; a hit is the document among the returned blocks, and for a PDF the right page:
  the page whose text (by pypdf, an independent extractor) holds most of the sentence's words
  is the page of the document's first returned block.

Writes ``benchmarks/results/documents.json`` and prints tables.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import resource
import shutil
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from lookup_knowledge import KnowledgeTool, load_config
from lookup_knowledge.adapters.documents import (
    DOCUMENT_SUFFIXES,
    ConversionWorker,
    DocumentLimits,
    DocumentSkip,
)
from lookup_knowledge.adapters.documents import convert as convert_in_process
from lookup_knowledge.ingestion import ingest

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "documents"
RESULTS = Path(__file__).parent / "results" / "documents.json"
ROUNDS = 3  # conversions of each file, in the worker and in-process
FORMATS = ("pdf", "docx", "html", "pptx", "xlsx")
WORD = re.compile(r"\w+")
EXPECTED = {  # the data README's hard cases and what each should give
    "pdf/corrupted.pdf": "skipped: not a PDF",
    "pdf/empty_page.pdf": "skipped: no text (or empty)",
    "pdf/2206.01062_pg3.pdf": "skipped: password required",
    "pdf/ocr_test.pdf": "skipped: needs OCR",
    "pdf/skipped_1page.pdf": "ingested (partly garbled text)",
    "docx/Strict.docx": "ingested: 'Some text'",
    "pptx/powerpoint_malformed_pictures.pptx": "ingested: 3 slide titles",
    "xlsx/xlsx_04_inflated.xlsx": "ingested, no run-away",
    "xlsx/xlsx_06_edge_cases_.xlsx": "ingested",
    "html/wiki_duck.html": "ingested: the article",
}


def tokens(text: str) -> Counter[str]:
    return Counter(w.lower() for w in WORD.findall(re.sub(r"<!--.*?-->", " ", text)))


def headings(text: str) -> list[str]:
    return [
        " ".join(WORD.findall(line.lstrip("#").lower()))
        for line in text.splitlines()
        if re.match(r"#{1,6} ", line)
    ]


def has_table(text: str) -> bool:
    return bool(re.search(r"^\| *:?-+ *\|", text, re.M))


def sources() -> list[Path]:
    return sorted(
        p for fmt in FORMATS for p in (DATA / fmt).iterdir() if p.suffix.lower() in DOCUMENT_SUFFIXES
    )


def pages_of(path: Path) -> int:
    if path.suffix == ".pdf":
        import pypdf

        try:
            return len(pypdf.PdfReader(path).pages)
        except Exception:
            return 0
    return 1


def peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def conversion(files: list[Path]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per file: converted text or skip reason, seconds; per format: totals and the worker's peak."""
    per_file: dict[str, Any] = {}
    per_format: dict[str, Any] = {}
    limits = DocumentLimits()
    for fmt in FORMATS:
        mine = [f for f in files if f.parent.name == fmt]
        worker = ConversionWorker(limits)
        started = time.perf_counter()
        with contextlib.suppress(DocumentSkip):  # the first file: the worker's start and imports
            worker.convert(mine[0].read_bytes(), mine[0].suffix)
        start_s = time.perf_counter() - started
        with contextlib.suppress(Exception):  # the same imports here, for the in-process timings
            convert_in_process(mine[0].read_bytes(), mine[0].suffix, limits)
        total = 0.0
        for file in mine:
            raw = file.read_bytes()
            in_worker, in_process = [], []
            for _ in range(ROUNDS):  # alternating, medians: the worker's cost against the same work here
                began = time.perf_counter()
                try:
                    converted = worker.convert(raw, file.suffix)
                    outcome = {"text": converted.text, "parts": len(converted.parts), "skip": None}
                except DocumentSkip as skip:
                    outcome = {"text": "", "parts": 0, "skip": str(skip)}
                in_worker.append(time.perf_counter() - began)
                began = time.perf_counter()
                with contextlib.suppress(Exception):
                    convert_in_process(raw, file.suffix, limits)
                in_process.append(time.perf_counter() - began)
            outcome |= {"s": statistics.median(in_worker), "in_process_s": statistics.median(in_process)}
            total += outcome["s"]
            per_file[f"{fmt}/{file.name}"] = outcome
        peak = peak_kib(worker._process.pid) if worker._process else 0  # noqa: SLF001
        worker.close()
        per_format[fmt] = {
            "files": len(mine),
            "seconds": total,
            "worker_start_s": start_s,
            "peak_mib": peak / 1024,
        }
    return per_file, per_format


def quality(per_file: dict[str, Any], per_format: dict[str, Any]) -> None:
    for fmt, row in per_format.items():
        recalls, precisions, found, total, kept, tables, pages = [], [], 0, 0, 0, 0, 0
        for name, outcome in per_file.items():
            if not name.startswith(fmt + "/"):
                continue
            pages += pages_of(DATA / name) if outcome["skip"] is None else 0
            reference = DATA / fmt / "groundtruth" / f"{Path(name).name}.md"
            if not reference.exists() or outcome["skip"] is not None:
                continue
            ref, out = tokens(reference.read_text(encoding="utf-8")), tokens(outcome["text"])
            common = sum((ref & out).values())
            recalls.append(common / max(1, sum(ref.values())))
            precisions.append(common / max(1, sum(out.values())))
            wanted, got = headings(reference.read_text(encoding="utf-8")), set(headings(outcome["text"]))
            total, found = total + len(wanted), found + sum(h in got for h in wanted)
            if has_table(reference.read_text(encoding="utf-8")):
                tables, kept = tables + 1, kept + has_table(outcome["text"])
        row |= {
            "compared": len(recalls),
            "recall": sum(recalls) / max(1, len(recalls)),
            "precision": sum(precisions) / max(1, len(precisions)),
            "headings": f"{found}/{total}",
            "tables": f"{kept}/{tables}",
            "pages": pages,
            "files_per_s": row["files"] / row["seconds"],
            "pages_per_s": pages / row["seconds"] if fmt == "pdf" else None,
        }


def ingest_all(files: list[Path], folder: Path, store: Path) -> tuple[dict[str, str], dict[str, Any]]:
    for file in files:
        target = folder / file.parent.name / file.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, target)
    config = load_config(overrides={"store.path": str(store)})
    began = time.perf_counter()
    report = ingest(folder, config)
    seconds = time.perf_counter() - began
    outcomes = {s.path: f"skipped: {s.reason}" for s in report.skipped}
    summary = {
        "seconds": seconds, "documents": report.documents, "skipped": len(report.skipped),
        "chunks": report.chunks_written,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }  # fmt: skip
    began = time.perf_counter()
    again = ingest(folder, config)
    summary["reingest_seconds"] = time.perf_counter() - began
    summary["reingest_unchanged"] = again.unchanged
    return outcomes, summary | {"config": config}


def questions(reference: str, count: int) -> list[str]:
    """Up to ``count`` queries the reference answers, spread over it: sentences of at least 8
    words (their first 12 words), then, when these are too few, lines of at least 4 words, then
    table rows of at least 3 filled cells (their cells)."""
    prose = re.sub(
        r"<!--.*?-->|!?\[([^\]]*)\]\([^)]*\)|^\|.*$|^#+ .*$|[*_`$\\]", r"\1", reference, flags=re.M
    )
    found = [s for s in re.split(r"(?<=[.!?])\s+|\n\s*\n", prose) if len(WORD.findall(s)) >= 8]
    found = [" ".join(re.sub(r"^\s*(?:[-+]|\d+\.)\s+", "", s).split()[:12]) for s in found]
    if len(found) < count:  # few sentences (slides): lines of at least 4 words too
        found += [" ".join(line.split()) for line in prose.splitlines() if len(WORD.findall(line)) >= 4]
        found = list(dict.fromkeys(found))
    if len(found) < count:  # a spreadsheet: table rows too
        rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in reference.splitlines()]
        found += [" ".join(c for c in row if c) for row in rows if line_ok(row)]
    step = max(1, len(found) // count)
    return found[::step][:count]


def line_ok(cells: list[str]) -> bool:
    filled = [c for c in cells if c and not re.fullmatch(r":?-+:?", c)]
    return len(filled) >= 3


def pdf_page_texts(path: Path) -> list[Counter[str]]:
    import pypdf

    return [tokens(page.extract_text() or "") for page in pypdf.PdfReader(path).pages]


def retrieval(config: Any, per_file: dict[str, Any], count: int, top_k: int) -> dict[str, Any]:
    rows: dict[str, dict[str, int]] = defaultdict(lambda: Counter())
    misses = []
    with KnowledgeTool.from_config(config) as tool:
        for name, outcome in per_file.items():
            reference = DATA / Path(name).parent / "groundtruth" / f"{Path(name).name}.md"
            if outcome["skip"] is not None or not reference.exists():
                continue
            fmt = name.split("/")[0]
            pages = pdf_page_texts(DATA / name) if fmt == "pdf" else []
            for question in questions(reference.read_text(encoding="utf-8"), count):
                result = tool.lookup(question)
                blocks = [b for b in result.evidence_blocks[:top_k] if b.doc_id == name]
                rows[fmt]["questions"] += 1
                rows[fmt]["not_found"] += not result.found
                rows[fmt]["document_found"] += bool(blocks)
                if not blocks:
                    misses.append({"file": name, "question": question})
                if pages:
                    words = tokens(question)
                    expected = 1 + max(range(len(pages)), key=lambda i: sum((words & pages[i]).values()))
                    rows[fmt]["page_questions"] += 1
                    got = [b.location.page for b in blocks if b.location]
                    rows[fmt]["right_page_first"] += bool(got) and got[0] == expected
                    rows[fmt]["right_page_any"] += expected in got
    return {"by_format": {k: dict(v) for k, v in rows.items()}, "misses": misses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=3)
    parser.add_argument("--top-k", type=int, default=5)
    args = parser.parse_args()
    if not DATA.is_dir():
        print(f"skipped: {DATA} not found (../shared/data/documents)")
        return
    files = sources()
    per_file, per_format = conversion(files)
    quality(per_file, per_format)
    overhead = [o["s"] - o["in_process_s"] for o in per_file.values()]
    with tempfile.TemporaryDirectory() as tmp:
        outcomes, run = ingest_all(files, Path(tmp) / "kb", Path(tmp) / "store")
        config = run.pop("config")
        found = retrieval(config, per_file, args.questions, args.top_k)
    outcomes = {
        name: outcomes.get(name, f"ingested: {len(per_file[name]['text']):,} characters") for name in per_file
    }
    hard = {name: {"expected": want, "outcome": outcomes[name]} for name, want in EXPECTED.items()}
    results = {
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "load_average": os.getloadavg()},
        "formats": per_format,
        "worker_overhead_ms_per_file": 1000 * sum(overhead) / len(overhead),
        "ingest": run,
        "files": outcomes,
        "file_seconds": {name: round(o["s"], 4) for name, o in per_file.items()},
        "hard_cases": hard,
        "retrieval": found,
    }  # fmt: skip
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
    print("| format | files | compared | recall | precision | headings | tables | files/s | pages/s | MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for fmt, r in per_format.items():
        pps = f"{r['pages_per_s']:.1f}" if r["pages_per_s"] else "-"
        print(
            f"| {fmt} | {r['files']} | {r['compared']} | {r['recall']:.3f} | {r['precision']:.3f} "
            f"| {r['headings']} | {r['tables']} | {r['files_per_s']:.1f} | {pps} | {r['peak_mib']:.0f} |"
        )
    starts = ", ".join(f"{fmt} {r['worker_start_s']:.2f} s" for fmt, r in per_format.items())
    print(
        f"\nworker: {results['worker_overhead_ms_per_file']:.1f} ms per file over in-process; start {starts}"
    )
    print(f"ingest: {json.dumps(run)}")
    print("\n| hard case | expected | outcome |\n|---|---|---|")
    for name, row in hard.items():
        print(f"| {name} | {row['expected']} | {row['outcome']} |")
    print(
        "\n| format | questions | not found | document in top-k | right page: its first block | any block |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for fmt, r in found["by_format"].items():
        n = r.get("page_questions")
        first = f"{r.get('right_page_first', 0)}/{n}" if n else "-"
        some = f"{r.get('right_page_any', 0)}/{n}" if n else "-"
        found_doc = f"{r['document_found']}/{r['questions']}"
        print(f"| {fmt} | {r['questions']} | {r['not_found']} | {found_doc} | {first} | {some} |")
    print(f"\nall files: {json.dumps(outcomes, ensure_ascii=False, indent=0)}")


if __name__ == "__main__":
    main()
