"""``verify_answer``: check an agent's answer against the evidence the tool returned to it.

Deterministic, no model. Each citation of an evidence key in the answer (by default the bare
key ``docId#chunk-N`` or ``[docId#chunk-N]``; any regex with a ``key`` group) gets one status:

- ``ok``: returned to this session; its attributed quotes occur in it; its source unchanged;
- ``not_returned``: a real key (another session got it, or its document is in the knowledge
  base) that no lookup of this session returned;
- ``unknown_key``: a key nothing knows (fabricated);
- ``quote_mismatch``: a quote attributed to it (quotation marks or a block quote next to the key)
  occurs in none of the blocks its citation group names (whitespace-normalized);
- ``stale``: its source file changed or vanished since it was ingested.

>>> verdict = verify_answer('Refunds "need approval" [refunds#chunk-0].', results=[result])  # doctest: +SKIP
>>> verdict.verified, verdict.citations[0].status  # doctest: +SKIP
(True, 'ok')

An answer holds at most :data:`MAX_ANSWER_CHARS` characters (:class:`AnswerTooLongError`
beyond), and every scan of it is linear in its length: an answer is client text, checked inside
a server that serves other requests meanwhile.
"""

from __future__ import annotations

import hashlib
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from lookup_knowledge.adapters.source_files import file_version
from lookup_knowledge.adapters.text import escape_surrogates
from lookup_knowledge.contract import ContractModel, InvocationRecordStatus, LookupResult

_KEY_CHARS = r"[^\s\[\]()<>\"'`,;]"  # what a key is made of
# A key starts where a run of key characters starts (the lookbehind): without it a run holding
# no "#chunk-" was scanned again from each of its characters, quadratic in its length.
CITATION_PATTERN = rf"\[?(?<!{_KEY_CHARS})(?P<key>{_KEY_CHARS}+#chunk-\d+)\]?"
MAX_ANSWER_CHARS = 100_000  # the longest answer verify_answer takes (API, CLI, MCP)
MAX_LISTED_QUOTES = 20  # quotes listed per citation; its status counts all of them
MIN_UNCITED_WORDS = 4  # shorter sentences ("In short:") carry no claim worth a citation
CitationStatus = Literal["ok", "not_returned", "unknown_key", "quote_mismatch", "stale"]

# A curly quote ends at the next opening one too: an opening quote never closed must not make
# every later one scan to the end of the answer.
_INLINE_QUOTE = re.compile(r'"(?P<a>[^"\n]+)"|\u201c(?P<b>[^\u201c\u201d]+)\u201d')
_ELLIPSIS = re.compile(r"\.\.\.|\u2026")  # the parts around it are whitespace-normalized
_GROUP_GAP = re.compile(r"[\s,;]*(?:and\s+)?")  # what may separate the keys of one citation group
_SENTENCE_END = re.compile(r"[.!?](?=\s)|\n\s*\n")
_PARAGRAPH_END = re.compile(r"\n\s*\n")
_BLOCK_QUOTE = re.compile(r"(?:^[ \t]*>.*(?:\n|$))+", re.MULTILINE)
_QUOTE_MARKER = re.compile(r"^[ \t]*> ?", re.MULTILINE)
_REST_OF_NEXT_LINE = re.compile(r"\s*[^\n]*")


class AnswerTooLongError(ValueError):
    """An answer longer than :data:`MAX_ANSWER_CHARS`: refused before it is read."""

    def __init__(self, length: int, limit: int = MAX_ANSWER_CHARS) -> None:
        super().__init__(
            f"the answer has {length:,} characters; verify_answer takes at most {limit:,} "
            "(verify each part of a longer answer separately)"
        )


@dataclass(frozen=True, slots=True)
class ReturnedBlock:
    """One block a lookup returned, as the invocation record keeps it."""

    key: str
    sha256: str
    content: str
    source: str | None = None
    invocation_id: int | None = None
    source_path: str | None = None  # the file it was ingested from (file sources)
    source_version: str | None = None  # that file's hash at ingest

    @classmethod
    def from_record(cls, entry: Mapping[str, Any], invocation_id: int | None) -> ReturnedBlock:
        values = {
            f.name: entry[name] if f.default is MISSING else entry.get(name)
            for f in _RECORD_FIELDS
            for name in [_RECORD_NAMES.get(f.name, f.name)]
        }
        return cls(**values, invocation_id=invocation_id)

    def to_record(self) -> dict[str, Any]:
        """The ``returned_evidence`` entry of this block."""
        return {_RECORD_NAMES.get(f.name, f.name): getattr(self, f.name) for f in _RECORD_FIELDS}


_RECORD_NAMES = {"source_path": "sourcePath", "source_version": "sourceVersion"}  # the others as named
_RECORD_FIELDS = [f for f in fields(ReturnedBlock) if f.name != "invocation_id"]  # what a record keeps


class QuoteCheck(ContractModel):
    text: str = Field(description="the quote as the answer has it")
    found_in: str | None = Field(description="the evidence key whose content holds it; null: none")


class CitationVerdict(ContractModel):
    evidence_key: str
    status: CitationStatus
    offset: int = Field(description="where the citation starts in the answer (characters)")
    quotes: list[QuoteCheck] = Field(default_factory=list, description="the quotes attributed to it")
    invocation_id: int | None = Field(None, description="the recorded lookup that returned it (latest)")
    detail: str = ""


class AnswerVerdict(ContractModel):
    """What ``verify_answer`` found; ``verified`` only when every citation is ``ok`` (and, when
    uncited sentences are checked, none is uncited)."""

    verified: bool
    session_id: str | None
    citations: list[CitationVerdict]
    uncited_sentences: list[str] = Field(
        default_factory=list, description="sentences without a citation (only when checked)"
    )
    unattributed_quotes: list[str] = Field(
        default_factory=list, description="quotes with no citation in their sentence or paragraph"
    )
    invocation_ids: list[int] = Field(default_factory=list, description="the lookups it checked against")
    message: str
    invocation_record: InvocationRecordStatus | None = None


@dataclass(frozen=True, slots=True)
class _Citation:
    key: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class _Quote:
    text: str
    start: int
    end: int
    keys: tuple[str, ...]  # the citation group it is attributed to; empty: none


def content_sha256(content: str) -> str:
    """The hash the record keeps of a block's content."""
    return hashlib.sha256(escape_surrogates(content).encode("utf-8")).hexdigest()


def returned_blocks(results: Iterable[LookupResult | Mapping[str, Any]]) -> list[ReturnedBlock]:
    """The blocks of lookup results (models or their contract JSON), in call order."""
    blocks = []
    for result in results:
        model = result if isinstance(result, LookupResult) else LookupResult.model_validate(result)
        blocks.extend(block_record(block) for block in model.evidence_blocks)
    return blocks


def block_record(block: Any) -> ReturnedBlock:
    """The :class:`ReturnedBlock` of an evidence block."""
    return ReturnedBlock(
        key=block.evidence_key,
        sha256=content_sha256(block.content),
        content=block.content,
        source=block.source,
        source_path=getattr(block, "source_path", None),
        source_version=getattr(block, "source_version", None),
    )


def verify_answer(
    answer: str,
    results: Iterable[LookupResult | Mapping[str, Any]] = (),
    *,
    returned: Sequence[ReturnedBlock] = (),
    known_keys: Callable[[set[str]], set[str]] | None = None,
    is_current: Callable[[ReturnedBlock], bool] | None = None,
    citation_pattern: str = CITATION_PATTERN,
    check_uncited: bool = False,
    session_id: str | None = None,
    max_chars: int | None = MAX_ANSWER_CHARS,
) -> AnswerVerdict:
    """Check ``answer`` against the blocks of ``results`` and ``returned`` (later ones win).

    ``known_keys(keys)`` says which of the keys not returned exist elsewhere (``not_returned``
    rather than ``unknown_key``); ``is_current`` whether a block's source is unchanged (default:
    :func:`source_is_current`). Raises :class:`AnswerTooLongError` for an answer longer than
    ``max_chars`` (``None``: no limit).
    """
    if max_chars is not None and len(answer) > max_chars:
        raise AnswerTooLongError(len(answer), max_chars)
    by_key = {block.key: block for block in [*returned, *returned_blocks(results)]}
    found = re.compile(citation_pattern).finditer(answer)
    layout = _Layout(answer, [_Citation(m.group("key"), m.start(), m.end()) for m in found])
    citations = layout.citations
    quotes = _attributed_quotes(answer, layout)
    absent = {c.key for c in citations} - by_key.keys()
    known = known_keys(absent) if known_keys and absent else set()
    current = _cached(is_current or source_is_current)
    listed, mismatched = _quote_checks(quotes, by_key)
    verdicts = [_citation_verdict(c, listed, mismatched, by_key, known, current) for c in citations]
    uncited = _uncited_sentences(answer, layout) if check_uncited else []
    unattributed = [q.text for q in quotes if not q.keys]
    verified = bool(verdicts) and all(v.status == "ok" for v in verdicts) and not uncited
    ids = sorted({b.invocation_id for b in by_key.values() if b.invocation_id is not None})
    return AnswerVerdict(
        verified=verified,
        session_id=session_id,
        citations=verdicts,
        uncited_sentences=uncited,
        unattributed_quotes=unattributed,
        invocation_ids=ids,
        message=_message(verdicts, uncited),
    )


def source_is_current(block: ReturnedBlock) -> bool:
    """Whether the block's source file still has the version it was ingested from (a block
    without a file source, or from a store ingested before versions, counts as current)."""
    if not block.source_path or not block.source_version:
        return True
    try:
        return file_version(Path(block.source_path)) == block.source_version
    except OSError:  # vanished or unreadable: what the block says is no longer there to check
        return False


def _cached(check: Callable[[ReturnedBlock], bool]) -> Callable[[ReturnedBlock], bool]:
    seen: dict[str, bool] = {}

    def cached(block: ReturnedBlock) -> bool:
        if block.key not in seen:
            seen[block.key] = check(block)
        return seen[block.key]

    return cached


class _Boundaries:
    """Where the matches of a boundary pattern (sentence or paragraph ends) lie in the answer."""

    def __init__(self, answer: str, boundary: re.Pattern[str]) -> None:
        spans = [match.span() for match in boundary.finditer(answer)]
        self.starts = [start for start, _ in spans]
        self.ends = [end for _, end in spans]
        self.length = len(answer)

    def around(self, start: int, end: int) -> tuple[int, int]:
        """The unit (sentence or paragraph) holding the quote ``answer[start:end]``."""
        before = bisect_right(self.ends, start) - 1
        after = bisect_left(self.starts, end)
        return (
            self.ends[before] if before >= 0 else 0,
            self.ends[after] if after < len(self.starts) else self.length,
        )


class _Layout:
    """The answer's citations, citation groups, sentences and paragraphs, searchable by position
    (bisection: each quote and sentence is placed in logarithmic time, never by a scan)."""

    def __init__(self, answer: str, citations: list[_Citation]) -> None:
        self.citations = citations
        self.starts = [c.start for c in citations]
        self.groups = _groups(citations, answer)
        self.group_keys = [tuple(c.key for c in group) for group in self.groups]  # shared by its quotes
        self.first_starts = [group[0].start for group in self.groups]
        self.last_starts = [group[-1].start for group in self.groups]
        self.sentences = _Boundaries(answer, _SENTENCE_END)
        self.paragraphs = _Boundaries(answer, _PARAGRAPH_END)

    def citations_in(self, lo: int, hi: int) -> list[_Citation]:
        """The citations starting in ``[lo, hi)``."""
        return self.citations[bisect_left(self.starts, lo) : bisect_left(self.starts, hi)]

    def first_group_in(self, lo: int, hi: int) -> tuple[str, ...] | None:
        """The keys of the first group whose first citation starts in ``[lo, hi)``."""
        i = bisect_left(self.first_starts, lo)
        return self.group_keys[i] if i < len(self.groups) and self.first_starts[i] < hi else None

    def last_group_ending_in(self, lo: int, hi: int) -> tuple[str, ...] | None:
        """The keys of the last group whose last citation starts in ``[lo, hi)``."""
        i = bisect_left(self.last_starts, hi) - 1
        return self.group_keys[i] if i >= 0 and self.last_starts[i] >= lo else None


def _quote_checks(
    quotes: list[_Quote], by_key: dict[str, ReturnedBlock]
) -> tuple[dict[str, list[QuoteCheck]], set[str]]:
    """Each quote checked once against the returned blocks of its citation group: the checks
    listed per key (at most :data:`MAX_LISTED_QUOTES`) and the keys a quote attributed to them
    is in none of."""
    listed: dict[str, list[QuoteCheck]] = {}
    mismatched: set[str] = set()
    haystacks: dict[str, str] = {}
    returned_keys: dict[int, list[str]] = {}  # per group (its keys' tuple): its keys returned, once each
    for quote in quotes:
        if (keys := returned_keys.get(id(quote.keys))) is None:
            keys = returned_keys[id(quote.keys)] = [key for key in dict.fromkeys(quote.keys) if key in by_key]
        if not keys:
            continue
        parts = _quote_parts(quote.text)
        holder = None
        for key in keys:
            if key not in haystacks:
                haystacks[key] = _normalized(by_key[key].content)
            if _occurs(parts, haystacks[key]):
                holder = key
                break
        check = QuoteCheck(text=quote.text, found_in=holder)
        for key in keys:
            if holder is None:
                mismatched.add(key)
            entries = listed.setdefault(key, [])
            if len(entries) < MAX_LISTED_QUOTES:
                entries.append(check)
    return listed, mismatched


def _citation_verdict(
    citation: _Citation,
    listed: dict[str, list[QuoteCheck]],
    mismatched: set[str],
    by_key: dict[str, ReturnedBlock],
    known: set[str],
    is_current: Callable[[ReturnedBlock], bool],
) -> CitationVerdict:
    block = by_key.get(citation.key)
    if block is None:
        status: CitationStatus = "not_returned" if citation.key in known else "unknown_key"
        detail = (
            "exists but was not returned in this session"
            if status == "not_returned"
            else ("no lookup returned this key and the knowledge base does not hold its document")
        )
        return CitationVerdict(evidence_key=citation.key, status=status, offset=citation.start, detail=detail)
    if citation.key in mismatched:
        status, detail = "quote_mismatch", "a quote attributed to it is not in its content"
    elif not is_current(block):
        status, detail = "stale", f"its source {block.source or ''} changed or vanished since it was ingested"
    else:
        status, detail = "ok", ""
    return CitationVerdict(
        evidence_key=citation.key,
        status=status,
        offset=citation.start,
        quotes=listed.get(citation.key, []),
        invocation_id=block.invocation_id,
        detail=detail,
    )


def _normalized(text: str) -> str:
    return " ".join(text.split())


def _quote_parts(quote: str) -> list[str]:
    """The parts of a quote around ``...`` / ``…``, whitespace-normalized, empty ones dropped."""
    return [part for part in (_normalized(p) for p in _ELLIPSIS.split(quote)) if part]


def _occurs(parts: list[str], haystack: str) -> bool:
    """Whether the quote's ``parts`` occur in order in ``haystack`` (whitespace-normalized content)."""
    position = 0
    for part in parts:
        found = haystack.find(part, position)
        if found < 0:
            return False
        position = found + len(part)
    return True


def _groups(citations: list[_Citation], answer: str) -> list[list[_Citation]]:
    """Citations next to each other (``[a] [b]``, ``a, b``) as one group."""
    groups: list[list[_Citation]] = []
    for citation in citations:
        if groups and _GROUP_GAP.fullmatch(answer, groups[-1][-1].end, citation.start):
            groups[-1].append(citation)
        else:
            groups.append([citation])
    return groups


def _attributed_quotes(answer: str, layout: _Layout) -> list[_Quote]:
    """Block quotes and inline quotes, each with the citation group it is attributed to."""
    block_quotes = _block_quotes(answer, layout)
    covered_starts = [q.start for q in block_quotes]
    inline = []
    for match in _INLINE_QUOTE.finditer(answer):
        i = bisect_right(covered_starts, match.start()) - 1
        if i >= 0 and match.start() < block_quotes[i].end:  # inside a block quote
            continue
        text = match.group("a") or match.group("b")
        keys = _nearest_group(match.start(), match.end(), layout)
        inline.append(_Quote(text, match.start(), match.end(), keys))
    return [*block_quotes, *inline]


def _block_quotes(answer: str, layout: _Layout) -> list[_Quote]:
    """Runs of ``>`` lines: attributed to the keys inside them, else to the group on the next
    non-blank line, else on the line before."""
    quotes = []
    for match in _BLOCK_QUOTE.finditer(answer):
        start, end = match.span()
        inside = layout.citations_in(start, end)
        pieces, at = [], start
        for citation in inside:  # the keys are not part of the quote
            pieces += [answer[at : citation.start], " "]
            at = max(at, min(citation.end, end))
        pieces.append(answer[at:end])
        text = _QUOTE_MARKER.sub("", "".join(pieces))
        keys = tuple(c.key for c in inside) or _adjacent_line_group(answer, start, end, layout)
        quotes.append(_Quote(text.strip(), start, end, keys))
    return quotes


def _adjacent_line_group(answer: str, start: int, end: int, layout: _Layout) -> tuple[str, ...]:
    next_line = _REST_OF_NEXT_LINE.match(answer, end)
    next_span = (end, next_line.end() if next_line else end)
    line_before_start = answer.rfind("\n", 0, max(start - 1, 0)) + 1
    for lo, hi in (next_span, (line_before_start, start)):
        group = layout.first_group_in(lo, hi)
        if group is not None:
            return group
    return ()


def _nearest_group(start: int, end: int, layout: _Layout) -> tuple[str, ...]:
    """The first group after the quote in its sentence, else the last before it in the sentence,
    else the same in its paragraph."""
    for unit in (layout.sentences, layout.paragraphs):
        lo, hi = unit.around(start, end)
        group = layout.first_group_in(end, hi) or layout.last_group_ending_in(lo, start)
        if group is not None:
            return group
    return ()


def _uncited_sentences(answer: str, layout: _Layout) -> list[str]:
    """Sentences of at least :data:`MIN_UNCITED_WORDS` words holding no citation (headings and
    block quotes aside)."""
    uncited, lo = [], 0
    for match in [*_SENTENCE_END.finditer(answer), None]:
        hi = match.end() if match else len(answer)
        sentence = answer[lo:hi].strip()
        cited = bool(layout.citations_in(lo, hi))
        if not cited and len(sentence.split()) >= MIN_UNCITED_WORDS and not sentence.startswith(("#", ">")):
            uncited.append(_normalized(sentence))
        lo = hi
    return uncited


def _message(verdicts: list[CitationVerdict], uncited: list[str]) -> str:
    if not verdicts:
        return "The answer cites no evidence key: cite the evidenceKey of each block you use."
    bad = [v for v in verdicts if v.status != "ok"]
    parts = [f"{v.evidence_key}: {v.status}" for v in bad]
    if uncited:
        parts.append(f"{len(uncited)} sentence(s) without a citation")
    if not parts:
        return f"Verified: {len(verdicts)} citation(s) returned in this session, quoted verbatim, current."
    return (
        "Not verified (" + "; ".join(parts) + "). Repair: cite only keys returned in this session "
        "(look up again if needed), quote the block's text verbatim, and look up again for a stale block."
    )
