"""Documents (PDF, DOCX, HTML, PPTX, XLSX) read, converted and ingested; each test builds its own
small files (python-docx, python-pptx, openpyxl, a hand-written PDF, pypdf to encrypt one)."""

from __future__ import annotations

import io
import json
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import make_config
from dataflow_fixtures import searched
from hashing_embedder import HashingEmbedder

from lookup_knowledge.adapters import documents
from lookup_knowledge.adapters.corpus import read_corpus
from lookup_knowledge.adapters.documents import ConversionWorker, DocumentLimits
from lookup_knowledge.adapters.search import SearchRequest
from lookup_knowledge.adapters.source_files import SourceFile, is_stale
from lookup_knowledge.chunking import chunk_document
from lookup_knowledge.extras import EXTRAS
from lookup_knowledge.ingestion import ingest
from lookup_knowledge.stores import converted_dir, open_store

for _converter in ("markitdown", "pypdfium2"):  # the documents extra (in `all`, which CI installs)
    pytest.importorskip(_converter)
docx = pytest.importorskip("docx")  # the writers: dev extra (python-docx, pypdf) and the documents extra
openpyxl = pytest.importorskip("openpyxl")
pptx = pytest.importorskip("pptx")
pypdf = pytest.importorskip("pypdf")

HANG_GUARD_S = 120.0  # a conversion that takes this long hangs: a guard, not a speed limit
FILLER = "Ducks paddle across the pond while the keeper counts them at dawn. " * 4
GUIDE = [  # three pages, the last one without a heading of its own
    f"# Opening hours\n{FILLER}",
    f"# Refunds\nRefund window is 30 days.\n{FILLER}",
    f"Late refunds need the manager's approval.\n{FILLER}",
]


def _pdf_line(line: str) -> str:
    """One line of text (Helvetica 10 pt; a line written ``# Title`` at 20 pt), then a line break."""
    size, line = (20, line[2:]) if line.startswith("# ") else (10, line)
    escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return f"/F1 {size} Tf {size + 4} TL ({escaped}) Tj T*"


def pdf_bytes(pages: list[str | None]) -> bytes:
    """A minimal PDF: one page per text (Helvetica, one line each, ``# `` a heading drawn larger);
    ``None``: a page that holds only an image, no text."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    kids = []
    for text in pages:
        page, content = len(objects) + 1, len(objects) + 2
        kids.append(f"{page} 0 R")
        if text is None:
            image = len(objects) + 3
            resources = f"/XObject << /Im1 {image} 0 R >>"
            stream = "q 100 0 0 100 72 600 cm /Im1 Do Q"
        else:
            resources = "/Font << /F1 3 0 R >>"
            stream = "BT 40 750 Td " + " ".join(map(_pdf_line, text.split("\n"))) + " ET"
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << {resources} >> "
            f"/Contents {content} 0 R >>".encode()
        )
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream".encode())
        if text is None:
            objects.append(
                b"<< /Type /XObject /Subtype /Image /Width 1 /Height 1 /ColorSpace /DeviceGray "
                b"/BitsPerComponent 8 /Length 1 >>\nstream\n\x80\nendstream"
            )
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>".encode()
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    return out + f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()


def write_docx(path: Path) -> Path:
    document = docx.Document()
    document.add_heading("Pond Handbook", level=1)
    document.add_paragraph(FILLER)
    document.add_heading("Feeding", level=2)
    document.add_paragraph("Feed the ducks oats and peas, never bread. " + FILLER)
    table = document.add_table(rows=3, cols=2)
    for row, (food, grams) in zip(
        table.rows, [("Food", "Grams"), ("Oats", "40"), ("Peas", "25")], strict=True
    ):
        row.cells[0].text, row.cells[1].text = food, grams
    document.save(path)
    return path


def write_pptx(path: Path) -> Path:
    deck = pptx.Presentation()
    for title, body in [("Pond Survey", "Mallards counted in spring."), ("Results", "Teal numbers doubled.")]:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    deck.save(path)
    return path


def write_xlsx(path: Path) -> Path:
    book = openpyxl.Workbook()
    book.active.title = "Counts"
    for row in [("Species", "Count"), ("Mallard", 12), ("Teal", 7)]:
        book.active.append(row)
    book.create_sheet("Prices").append(("Feed", "EUR"))
    book["Prices"].append(("Oats", 3.5))
    book.save(path)
    return path


def zip_bomb(path: Path, main_part: str, unpacked: int) -> Path:
    """An Office-looking zip whose main part unpacks to ``unpacked`` bytes of zeros."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr(main_part, b"\0" * unpacked)
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("documents")
    (root / "guide.pdf").write_bytes(pdf_bytes(GUIDE))
    write_docx(root / "handbook.docx")
    write_pptx(root / "survey.pptx")
    write_xlsx(root / "counts.xlsx")
    (root / "page.html").write_text(
        "<html><head><title>Pond FAQ</title></head><body><h1>FAQ</h1><h2>Hours</h2>"
        f"<p>The pond opens at nine. {FILLER}</p><table><tr><th>Day</th><th>Open</th></tr>"
        "<tr><td>Monday</td><td>9:00</td></tr></table></body></html>",
        encoding="utf-8",
    )
    (root / "notes.md").write_text("# Notes\n\nPlain markdown beside the documents.\n", encoding="utf-8")
    (root / "fake.pdf").write_text("This is not a PDF at all.", encoding="utf-8")
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(pdf_bytes(["Secret plans"]))))
    writer.encrypt("secret", algorithm="RC4-128")
    with (root / "locked.pdf").open("wb") as handle:
        writer.write(handle)
    (root / "scan.pdf").write_bytes(pdf_bytes([None]))
    return root


@pytest.fixture(scope="module")
def corpus(folder: Path):
    return read_corpus(folder)


def chunks_of(corpus, source: str):
    doc = next(d for d in corpus.documents if d.source == source)
    return doc, chunk_document(doc, 1000)


def test_a_folder_of_documents_is_read_and_bad_files_are_named(corpus) -> None:
    assert sorted(d.source for d in corpus.documents) == [
        "counts.xlsx", "guide.pdf", "handbook.docx", "notes.md", "page.html", "survey.pptx",
    ]  # fmt: skip
    reasons = {s.path: s.reason for s in corpus.skipped}
    assert reasons == {
        "fake.pdf": "not a PDF file (no %PDF header)",
        "locked.pdf": "encrypted PDF: a password is needed to open it",
        "scan.pdf": "image-only PDF (no text layer): needs OCR, which is not supported",
    }


def test_word_headings_become_breadcrumbs_and_its_table_stays_a_table(corpus) -> None:
    doc, chunks = chunks_of(corpus, "handbook.docx")
    feeding = next(c for c in chunks if "never bread" in c.content)
    assert feeding.heading_path == ("Pond Handbook", "Feeding")
    assert feeding.breadcrumb == "handbook > Pond Handbook > Feeding"
    table = next(c for c in chunks if "| Oats | 40 |" in c.content)
    assert "| Food | Grams |" in table.content and "| Peas | 25 |" in table.content
    for chunk in chunks:  # verbatim from the converted text
        assert doc.body[chunk.location.start_char : chunk.location.end_char] == chunk.content


def test_each_pdf_chunk_knows_its_page_and_its_larger_lines_are_headings(corpus) -> None:
    doc, chunks = chunks_of(corpus, "guide.pdf")
    refund = next(c for c in chunks if "Refund window is 30 days." in c.content)
    assert refund.location.page == 2
    assert (refund.heading_path, refund.breadcrumb) == (("Refunds",), "guide > Refunds")  # drawn larger
    late = next(c for c in chunks if "Late refunds" in c.content)
    assert (late.location.page, late.heading_path) == (3, ("Refunds",))  # still under page 2's heading
    assert {c.location.page for c in chunks if "Opening hours" in c.content} == {1}
    assert all(doc.body[c.location.start_char : c.location.end_char] == c.content for c in chunks)


def test_slides_and_sheets_are_in_the_location(corpus) -> None:
    _, slides = chunks_of(corpus, "survey.pptx")
    assert [(c.location.slide, "Teal numbers doubled." in c.content) for c in slides] == [
        (1, False),
        (2, True),
    ]
    _, sheets = chunks_of(corpus, "counts.xlsx")
    assert [c.location.sheet for c in sheets] == ["Counts", "Prices"]
    assert "| Mallard | 12 |" in sheets[0].content and sheets[0].heading_path == ("Counts",)


def test_html_keeps_its_title_headings_and_table(corpus) -> None:
    doc, chunks = chunks_of(corpus, "page.html")
    assert doc.title == "Pond FAQ"
    assert chunks[0].heading_path == ("FAQ", "Hours")
    assert "| Monday | 9:00 |" in doc.body


@pytest.mark.parametrize(
    ("name", "part"), [("bomb.docx", "word/document.xml"), ("bomb.xlsx", "xl/workbook.xml")]
)
def test_a_zip_bomb_is_skipped_unpacked(tmp_path: Path, name: str, part: str) -> None:
    zip_bomb(tmp_path / name, part, 3_000_000)
    limits = DocumentLimits(max_unpacked_bytes=1_000_000)
    corpus = read_corpus(tmp_path / name, document_limits=limits)
    assert corpus.documents == []
    [skipped] = corpus.skipped
    assert skipped.path == name
    assert skipped.reason.startswith("zip bomb: unpacks to 3,000,")
    assert "ingest.documents.max_unpacked_bytes 1,000,000" in skipped.reason


def test_a_sheet_declaring_a_million_rows_and_columns_converts_at_once(tmp_path: Path) -> None:
    book = openpyxl.Workbook()
    book.active["A1"], book.active["XFD1048576"] = "first cell", "last cell"  # the sheet's full extent
    book.save(tmp_path / "inflated.xlsx")
    # the limit is a hang guard (~50x a conversion's 2 s); converted at once means two rows, two
    # columns: nothing of the declared extent is filled in (that would be 1e6 x 16,384 cells)
    corpus = read_corpus(tmp_path, document_limits=DocumentLimits(timeout_s=HANG_GUARD_S))
    assert corpus.skipped == []
    [doc] = corpus.documents
    assert doc.body == "## Sheet\n\n| first cell |  |\n| --- | --- |\n|  | last cell |"


def test_a_file_over_the_size_limit_is_skipped_unread(tmp_path: Path) -> None:
    (tmp_path / "big.pdf").write_bytes(pdf_bytes(["x" * 50]))
    corpus = read_corpus(tmp_path, document_limits=DocumentLimits(max_bytes=100))
    assert corpus.skipped[0].reason.startswith("file too large (")


def _first_worker_faulted(folder: Path, monkeypatch: pytest.MonkeyPatch, fault: str) -> list[int]:
    """Two PDFs in ``folder``; the first conversion worker started runs ``fault`` (Python code)
    instead of the converter, later ones are real, under a time limit that only guards against a
    hang (a loaded machine may take seconds to start one). Returns the list of worker starts."""
    (folder / "a.pdf").write_bytes(pdf_bytes(["First file"]))
    (folder / "b.pdf").write_bytes(pdf_bytes(["Second file"]))
    real = ConversionWorker._command
    starts: list[int] = []

    def command(self: ConversionWorker) -> list[str]:
        starts.append(1)
        if len(starts) == 1:
            return [sys.executable, "-c", fault]
        self.limits = replace(self.limits, timeout_s=max(self.limits.timeout_s, HANG_GUARD_S))
        return real(self)

    monkeypatch.setattr(ConversionWorker, "_command", command)
    return starts


def test_a_conversion_past_the_time_limit_is_killed_and_the_next_file_converted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first worker hangs (a fault injected: a process that never answers); it is killed at
    the limit, its file named, and a fresh worker converts the next file."""
    starts = _first_worker_faulted(tmp_path, monkeypatch, "import time; time.sleep(60)")
    corpus = read_corpus(tmp_path, document_limits=DocumentLimits(timeout_s=1.0))
    assert [(s.path, s.reason) for s in corpus.skipped] == [
        ("a.pdf", "conversion took over ingest.documents.timeout_s (1 s)")
    ]
    assert [d.body for d in corpus.documents] == ["Second file"]
    assert len(starts) == 2


def test_a_worker_that_dies_is_named_and_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault injected: the first worker exits mid-request (as a crash in a C library would)."""
    _first_worker_faulted(tmp_path, monkeypatch, "import sys; sys.stdin.buffer.read(8); sys.exit(3)")
    corpus = read_corpus(tmp_path)
    assert [(s.path, s.reason) for s in corpus.skipped] == [
        ("a.pdf", "the converter crashed (worker exit code 3)")
    ]
    assert [d.body for d in corpus.documents] == ["Second file"]


def test_without_the_extra_documents_are_skipped_naming_the_pip_install(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(EXTRAS, "documents", ("pypdfium2", "no_such_converter_xyz"))
    corpus = read_corpus(folder)
    assert [d.source for d in corpus.documents] == ["notes.md"]
    assert {s.reason for s in corpus.skipped} == {
        "needs the 'documents' extra (no_such_converter_xyz not installed): "
        "pip install 'lookup-knowledge[documents]'"
    }
    assert "guide.pdf" in {s.path for s in corpus.skipped}


def test_a_single_document_file_is_a_source(folder: Path) -> None:
    corpus = read_corpus(folder / "guide.pdf")
    assert [d.doc_id for d in corpus.documents] == ["guide.pdf"]


def test_ingest_keeps_the_converted_text_and_reingests_incrementally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "kb"
    source.mkdir()
    (source / "guide.pdf").write_bytes(pdf_bytes(GUIDE))
    write_docx(source / "handbook.docx")
    config, embedder = make_config(tmp_path / "store"), HashingEmbedder()
    first = ingest(source, config, embedder=embedder)
    assert (first.new, first.skipped) == (2, [])

    store = open_store(config, embedder.dimension, create=False)
    try:
        hits = searched(store, SearchRequest("all", embedder.embed_query("refund").tolist(), top_k=100))
    finally:
        store.close()
    for hit in hits:  # every block an exact excerpt of its document's kept converted text
        stamp, location = hit.payload["source_file"], hit.payload["location"]
        kept = json.loads((converted_dir(config) / f"{stamp['version']}.json").read_text(encoding="utf-8"))
        assert kept["text"][location["start_char"] : location["end_char"]] == hit.content
    refund = next(h for h in hits if "Refund window" in h.content)
    assert refund.payload["location"]["page"] == 2  # the PDF page an evidence block's location names

    def no_conversion(self: ConversionWorker, raw: bytes, suffix: str) -> None:
        raise AssertionError("an unchanged document was converted again")

    monkeypatch.setattr(ConversionWorker, "convert", no_conversion)
    second = ingest(source, config, embedder=embedder)
    assert (second.unchanged, second.new, second.updated) == (2, 0, 0)

    monkeypatch.undo()
    old = {p.name for p in converted_dir(config).iterdir()}
    (source / "guide.pdf").write_bytes(pdf_bytes(["Hours changed: we open at ten."]))
    assert is_stale(SourceFile.from_payload(refund.payload))  # the changed PDF: its blocks are stale
    third = ingest(source, config, embedder=embedder)
    assert (third.updated, third.unchanged) == (1, 1)
    now = {p.name for p in converted_dir(config).iterdir()}
    assert len(now) == 2 and len(now - old) == 1  # the old version's text is gone, the new one kept


def test_the_worker_answers_a_skip_for_a_converter_error(tmp_path: Path) -> None:
    broken = b"PK\x03\x04" + b"\0" * 64  # a zip header and nothing readable after it
    with ConversionWorker(DocumentLimits()) as worker, pytest.raises(documents.DocumentSkip) as raised:
        worker.convert(broken, ".docx")
    assert str(raised.value).startswith("corrupt DOCX file")
