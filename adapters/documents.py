"""Documents (PDF, DOCX, HTML, PPTX, XLSX) converted to markdown text, in a worker process that
a time limit can kill; the extra ``documents`` installs the converters (docs/documents.md).

PDF pages come from pypdfium2 (PDFium's text layer), XLSX sheets from openpyxl (read-only, as
markdown tables), DOCX, HTML and PPTX from markitdown's converters (mammoth, BeautifulSoup and
markdownify, python-pptx). A converted document is its text plus the parts it is made of
(pages, slides, sheets) as character ranges of that text, so each chunk knows its page.

>>> with ConversionWorker(DocumentLimits()) as worker:  # doctest: +SKIP
...     converted = worker.convert(Path("handbook.pdf").read_bytes(), ".pdf")
>>> converted.parts[0].kind, converted.parts[0].number  # doctest: +SKIP
('page', 1)
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import pickle
import re
import select
import subprocess
import sys
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, Literal

DOCUMENT_SUFFIXES = {
    ".pdf": "pdf", ".docx": "docx", ".html": "html", ".htm": "html", ".pptx": "pptx", ".xlsx": "xlsx",
}  # fmt: skip
CONVERSION = "pdfium-headings+openpyxl-tables+markitdown/3"  # a change here converts every file again
INSTALL_HINT = "pip install 'lookup-knowledge[documents]'"
_OOXML_MAIN = {".docx": "word/", ".pptx": "ppt/", ".xlsx": "xl/"}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_MARKUP_LINE = re.compile(r"#|=+\s*$|-+\s*$")  # would read as a heading (ATX, setext underline)
_SLIDE_MARK = re.compile(r"^<!-- Slide number: (\d+) -->\n", re.M)

PartKind = Literal["page", "slide", "sheet"]
TextFormat = Literal["markdown", "text"]  # how a document's text is read: Markdown, or plain


class DocumentSkip(Exception):
    """A document that is not converted, and why (the message is the reason shown)."""


@dataclass(frozen=True, slots=True)
class Part:
    """A page, slide or sheet: characters ``[start, end)`` of the converted text."""

    kind: PartKind
    number: int  # 1-based
    start: int
    end: int
    name: str | None = None  # a sheet's name


@dataclass(frozen=True, slots=True)
class Converted:
    """A document as markdown (or plain) text, with its pages, slides or sheets."""

    text: str
    format: TextFormat
    parts: tuple[Part, ...] = ()
    title: str | None = None


@dataclass(frozen=True, slots=True)
class DocumentLimits:
    """What one document may cost: bytes on disk, bytes unpacked (DOCX, PPTX, XLSX are zip
    files), seconds of conversion and memory of the worker."""

    max_bytes: int = 50_000_000
    max_unpacked_bytes: int = 300_000_000
    timeout_s: float = 60.0
    max_memory_mb: int = 2048


def missing_extra() -> str | None:
    """The skip reason when the converters are not installed; ``None`` when they are."""
    from lookup_knowledge.extras import EXTRAS

    missing = [name for name in EXTRAS["documents"] if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return f"needs the 'documents' extra ({', '.join(missing)} not installed): {INSTALL_HINT}"


def convert(raw: bytes, suffix: str, limits: DocumentLimits) -> Converted:
    """The document in ``raw`` (a file with ``suffix``) converted; :class:`DocumentSkip` if it cannot be."""
    kind = DOCUMENT_SUFFIXES[suffix.lower()]
    if kind == "pdf":
        return _pdf(raw)
    if kind == "html":
        return _html(raw)
    _check_zip(raw, suffix.lower(), limits)
    return {"docx": _docx, "pptx": _pptx, "xlsx": _xlsx}[kind](raw)


def _check_zip(raw: bytes, suffix: str, limits: DocumentLimits) -> None:
    """An Office file must be a zip holding its main part, unpacking to at most the limit."""
    if not raw.startswith(b"PK"):
        raise DocumentSkip(f"not a {suffix[1:].upper()} file (no zip header)")
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise DocumentSkip(f"corrupt {suffix[1:].upper()} file: {exc}") from None
    if not any(m.filename.startswith(_OOXML_MAIN[suffix]) for m in members):
        raise DocumentSkip(f"not a {suffix[1:].upper()} file (no {_OOXML_MAIN[suffix]} part)")
    unpacked = sum(m.file_size for m in members)
    if unpacked > limits.max_unpacked_bytes:
        raise DocumentSkip(
            f"zip bomb: unpacks to {unpacked:,} bytes "
            f"(> ingest.documents.max_unpacked_bytes {limits.max_unpacked_bytes:,})"
        )


def _pdf(raw: bytes) -> Converted:
    import pypdfium2 as pdfium

    if b"%PDF" not in raw[:1024]:
        raise DocumentSkip("not a PDF file (no %PDF header)")
    try:
        pdf = pdfium.PdfDocument(raw)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise DocumentSkip("encrypted PDF: a password is needed to open it") from None
        raise DocumentSkip(f"corrupt PDF: {exc}") from None
    try:
        pages, images = [], 0
        for page in pdf:
            pages.append(_page_lines(page))
            if not any(line.text for line in pages[-1]):
                images += any(obj.type == pdfium.raw.FPDF_PAGEOBJ_IMAGE for obj in page.get_objects())
        title = (pdf.get_metadata_dict().get("Title") or "").strip() or None
    finally:
        pdf.close()
    if not any(line.text for lines in pages for line in lines):
        if images:
            raise DocumentSkip("image-only PDF (no text layer): needs OCR, which is not supported")
        raise DocumentSkip(f"no text: {len(pages)} blank page(s)")
    return _joined(_marked_headings(pages), "page", "markdown", title)


@dataclass(frozen=True, slots=True)
class _Line:
    text: str
    size: float  # the most common height of its characters' boxes (font size as drawn)


def _page_lines(page: Any) -> list[_Line]:
    """The page's text lines (PDFium's reading order) with the size they are drawn at; PDFium's
    line-end hyphen (``\x02``) as ``-``, other control characters dropped."""
    import pypdfium2.raw as pdfium_c

    textpage = page.get_textpage()  # held: the handle is valid while it lives
    handle = textpage.raw
    lines: list[_Line] = []
    chars: list[str] = []
    sizes: list[float] = []
    high = 0  # a UTF-16 high surrogate waiting for its pair

    def flush() -> None:
        text = "".join(chars).strip()
        lines.append(_Line(text, max(set(sizes), key=sizes.count) if sizes else 0.0))
        chars.clear()
        sizes.clear()

    box = pdfium_c.FS_RECTF()
    for index in range(pdfium_c.FPDFText_CountChars(handle)):
        code = pdfium_c.FPDFText_GetUnicode(handle, index)
        if code == 0x0A:
            flush()
            continue
        if 0xD800 <= code < 0xDC00:
            high = code
            continue
        if 0xDC00 <= code < 0xE000:
            char, high = (chr(0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00)) if high else ""), 0
        elif code == 0x02:
            char = "-"
        else:
            char = chr(code) if code >= 0x20 or code == 0x09 else ""
        if not char:
            continue
        chars.append(char)
        if not char.isspace() and pdfium_c.FPDFText_GetLooseCharBox(handle, index, box):
            sizes.append(round(box.top - box.bottom, 1))
    flush()
    textpage.close()
    return [line for line in lines if line.text]


HEADING_SIZE = 1.1  # a line drawn this much larger than the body text is a heading
HEADING_WORDS = 14  # and has at most this many words (several lines of one heading together)


def _marked_headings(pages: list[list[_Line]]) -> list[str]:
    """Each page as markdown: lines drawn larger than the body text (the size most characters
    have), short and not ending a sentence, become headings, one level per size; consecutive
    lines of one size form one heading. A PDF has no structure to read headings from: this is
    the usual heuristic (docs/documents.md measures it)."""
    weights: dict[float, int] = {}
    for line in (line for lines in pages for line in lines):
        weights[line.size] = weights.get(line.size, 0) + len(line.text)
    body = max(weights, key=lambda size: weights[size])
    heading_sizes = sorted({round(line.size) for lines in pages for line in lines if _heading(line, body)})
    levels = {size: min(6, len(heading_sizes) - rank) for rank, size in enumerate(heading_sizes)}
    texts = []
    for lines in pages:
        out: list[str] = []
        last: _Line | None = None
        for line in lines:
            if not _heading(line, body):
                out.append("\\" + line.text if _MARKUP_LINE.match(line.text) else line.text)
                last = None
            elif (
                last
                and abs(last.size - line.size) < 0.6
                and len((out[-1] + line.text).split()) <= HEADING_WORDS + 1
            ):
                out[-1] += " " + line.text
            else:
                out.append("#" * levels[round(line.size)] + " " + line.text)
                last = line
        texts.append("\n".join(out))
    return texts


def _heading(line: _Line, body: float) -> bool:
    words = len(line.text.split())
    return (
        line.size >= HEADING_SIZE * body
        and 1 <= words <= HEADING_WORDS
        and not line.text.endswith((".", ",", ";"))
        and any(char.isalpha() for char in line.text)
    )


def _normalized(text: str) -> str:
    """Text with ``\\n`` line ends, no control characters but tabs, no trailing blank space."""
    text = _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n").replace("\x0c", "\n"))
    return "\n".join(line.rstrip() for line in text.split("\n")).strip()


def _joined(
    texts: list[str],
    kind: PartKind,
    fmt: TextFormat,
    title: str | None,
    names: list[str] | None = None,
) -> Converted:
    """Parts' texts joined by blank lines, each part its range (empty parts have none)."""
    body, parts, at = [], [], 0
    for number, text in enumerate(texts, 1):
        if not text:
            continue
        if body:
            at += 2
        parts.append(Part(kind, number, at, at + len(text), names[number - 1] if names else None))
        body.append(text)
        at += len(text)
    return Converted("\n\n".join(body), fmt, tuple(parts), title)


def _markitdown(converter: Any, raw: bytes, extension: str, charset: str | None = None) -> Any:
    from markitdown import StreamInfo

    return converter.convert(io.BytesIO(raw), StreamInfo(extension=extension, charset=charset))


def _docx(raw: bytes) -> Converted:
    from markitdown.converters import DocxConverter

    text = _normalized(_markitdown(DocxConverter(), raw, ".docx").markdown)
    if not text:
        raise DocumentSkip("no text")
    return Converted(text, "markdown", (), _core_title(raw))


def _html(raw: bytes) -> Converted:
    from charset_normalizer import from_bytes
    from markitdown.converters import HtmlConverter

    try:
        raw.decode("utf-8")
        charset = "utf-8"
    except UnicodeDecodeError:
        best = from_bytes(raw).best()
        charset = best.encoding if best else "latin-1"
    result = _markitdown(HtmlConverter(), raw, ".html", charset)
    text = _normalized(result.markdown)
    if not text:
        raise DocumentSkip("no text")
    return Converted(text, "markdown", (), (result.title or "").strip() or None)


def _pptx(raw: bytes) -> Converted:
    from markitdown.converters import PptxConverter

    text = _normalized(_markitdown(PptxConverter(), raw, ".pptx").markdown)
    marks = list(_SLIDE_MARK.finditer(text))
    parts = tuple(
        Part("slide", int(mark[1]), mark.end(), _end(text, mark.end(), after.start() if after else len(text)))
        for mark, after in zip(marks, [*marks[1:], None], strict=True)
    )
    parts = tuple(p for p in parts if p.end > p.start)
    if not parts:
        raise DocumentSkip("no text")
    return Converted(text, "markdown", parts, _core_title(raw))


def _end(text: str, start: int, end: int) -> int:
    return start + len(text[start:end].rstrip())


def _xlsx(raw: bytes) -> Converted:
    import openpyxl

    try:
        book = openpyxl.load_workbook(io.BytesIO(raw), read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises many kinds on a broken workbook
        raise DocumentSkip(f"corrupt XLSX file: {type(exc).__name__}: {exc}") from None
    try:
        sheets = [(ws.title, _sheet_table(ws)) for ws in book.worksheets]
    finally:
        book.close()
    texts = [f"## {name}\n\n{table}" if table else "" for name, table in sheets]
    if not any(texts):
        raise DocumentSkip("no text: every sheet is empty")
    return _joined(texts, "sheet", "markdown", _core_title(raw), [name for name, _ in sheets])


def _sheet_table(sheet: Any) -> str:
    """The sheet's cells as one markdown table: rows and columns with no value left out (rows
    missing from the file come through empty, so a declared million rows cost little)."""
    sheet.reset_dimensions()  # a declared A1:XFD1048576 would pad every row to 16,384 cells
    rows = [row for row in sheet.iter_rows(values_only=True) if any(_cell(v) for v in row)]
    if not rows:
        return ""
    width = max(map(len, rows))
    columns = [i for i in range(width) if any(i < len(row) and _cell(row[i]) for row in rows)]

    def line(row: tuple[Any, ...]) -> str:
        return "| " + " | ".join(_cell(row[i]) if i < len(row) else "" for i in columns) + " |"

    return "\n".join([line(rows[0]), "|" + " --- |" * len(columns), *map(line, rows[1:])])


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return " ".join(str(value).split()).replace("|", "\\|")


def _core_title(raw: bytes) -> str | None:
    """The title in an Office file's ``docProps/core.xml``, if it has one."""
    from defusedxml import ElementTree

    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            core = ElementTree.fromstring(archive.read("docProps/core.xml")[:1_000_000])
    except Exception:  # no core part, or one that does not parse: no title
        return None
    title = core.findtext("{http://purl.org/dc/elements/1.1/}title")
    return title.strip() or None if title else None


class ConversionWorker:
    """Converts documents one at a time in a worker process (``python -m`` this module); one
    that runs past the time limit is killed (and a new worker started for the next document),
    one that needs more memory than the limit fails in the worker. Either way only that
    document is skipped."""

    def __init__(self, limits: DocumentLimits) -> None:
        self.limits = limits
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ConversionWorker:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def convert(self, raw: bytes, suffix: str) -> Converted:
        """The converted document; :class:`DocumentSkip` with the reason when it cannot be."""
        limit = self.limits.max_bytes
        if len(raw) > limit:
            raise DocumentSkip(f"file too large ({len(raw):,} bytes > ingest.documents.max_bytes {limit:,})")
        process = self._started()
        try:
            _write_frame(process.stdin, (raw, suffix))
            status, value = _read_frame(process.stdout, time.monotonic() + self.limits.timeout_s)
        except TimeoutError:
            self.close()
            raise DocumentSkip(
                f"conversion took over ingest.documents.timeout_s ({self.limits.timeout_s:g} s)"
            ) from None
        except (EOFError, OSError, pickle.UnpicklingError):
            try:
                code: int | None = process.wait(5)
            except subprocess.TimeoutExpired:
                code = None
            self.close()
            raise DocumentSkip(f"the converter crashed (worker exit code {code})") from None
        if status == "skip-exit":  # the worker ends itself: the next file gets a fresh one
            self.close()
        if status != "ok":
            raise DocumentSkip(value)
        return _from_dict(value)

    def _started(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            self.close()
            self._process = subprocess.Popen(
                self._command(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        return self._process

    def _command(self) -> list[str]:
        return [sys.executable, "-m", __name__, json.dumps(asdict(self.limits))]

    def close(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            for stream in (self._process.stdin, self._process.stdout):
                if stream:
                    stream.close()
        self._process = None


def _write_frame(stream: IO[bytes] | None, value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    assert stream is not None
    stream.write(len(data).to_bytes(8, "big") + data)
    stream.flush()


def _read_frame(stream: IO[bytes] | None, deadline: float | None = None) -> Any:
    """One length-prefixed pickle; :class:`TimeoutError` past ``deadline``, :class:`EOFError` at the end."""
    assert stream is not None
    fd = stream.fileno()
    buffer = bytearray()
    size: int | None = None
    while size is None or len(buffer) < 8 + size:
        if deadline is not None and not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            raise TimeoutError
        piece = os.read(fd, 1 << 20)
        if not piece:
            raise EOFError
        buffer += piece
        if size is None and len(buffer) >= 8:
            size = int.from_bytes(buffer[:8], "big")
    return pickle.loads(bytes(buffer[8:]))


def _serve(limits: DocumentLimits) -> None:
    """The worker: convert what comes in on stdin, answer ``("ok", Converted)`` or ``("skip", reason)``
    (``"skip-exit"``, then exit, after running out of memory)."""
    import resource
    import warnings

    warnings.simplefilter("ignore")  # converters warn about every odd part; the reason says enough
    memory = limits.max_memory_mb * 2**20
    with contextlib.suppress(ValueError, OSError):  # a lower hard limit already; no RLIMIT_AS
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    while True:
        try:
            raw, suffix = _read_frame(sys.stdin.buffer)
        except EOFError:
            return
        try:
            answer: tuple[str, Any] = ("ok", asdict(convert(raw, suffix, limits)))
        except DocumentSkip as skip:
            answer = ("skip", str(skip))
        except MemoryError:  # the worker's heap may be left in pieces: it answers, then exits
            answer = (
                "skip-exit",
                f"conversion needs over ingest.documents.max_memory_mb ({limits.max_memory_mb:,} MB)",
            )
        except RecursionError:
            answer = ("skip", "unreadable: nested too deeply")
        except Exception as exc:  # a converter's own error on a file it cannot read
            answer = ("skip", f"unreadable: {type(exc).__name__}: {_first_line(exc)}")
        _write_frame(sys.stdout.buffer, answer)
        if answer[0] == "skip-exit":
            return


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else "no message"


def converter_id() -> str:
    """This conversion and the converters' versions: kept texts from another are converted again."""
    from importlib.metadata import PackageNotFoundError, version

    names = ("pypdfium2", "openpyxl", "markitdown", "mammoth", "python-pptx", "markdownify")
    try:
        return CONVERSION + " " + " ".join(f"{name}=={version(name)}" for name in names)
    except PackageNotFoundError:
        return CONVERSION


def cache_path(cache_dir: Path, version: str) -> Path:
    """Where the converted text of the file version ``version`` is kept."""
    return cache_dir / f"{version}.json"


def load_converted(cache_dir: Path | None, version: str) -> Converted | None:
    """The converted text kept for this file version by this converter, if any."""
    if cache_dir is None:
        return None
    try:
        data = json.loads(cache_path(cache_dir, version).read_text(encoding="utf-8"))
        if data.get("converter") != converter_id():
            return None
        return _from_dict(data)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _from_dict(data: dict[str, Any]) -> Converted:
    parts = tuple(Part(**part) for part in data["parts"])
    return Converted(data["text"], data["format"], parts, data.get("title"))


def save_converted(cache_dir: Path | None, version: str, converted: Converted) -> None:
    """Keep the converted text (best effort: without it the next ingest converts again)."""
    if cache_dir is None:
        return
    data = {"converter": converter_id(), **asdict(converted)}
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        target = cache_path(cache_dir, version)
        temporary = target.with_suffix(".tmp")
        temporary.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        temporary.replace(target)
    except OSError:
        pass


def forget_converted(cache_dir: Path | None, versions: set[str]) -> None:
    """Remove the kept texts of file versions no document holds any more."""
    if cache_dir is None:
        return
    for version in versions:
        cache_path(cache_dir, version).unlink(missing_ok=True)


if __name__ == "__main__":
    _serve(DocumentLimits(**json.loads(sys.argv[1])))
