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
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from lookup_knowledge.adapters.source_files import file_version
from lookup_knowledge.adapters.text import escape_surrogates
from lookup_knowledge.contract import ContractModel, InvocationRecordStatus, LookupResult

CITATION_PATTERN = r"\[?(?P<key>[^\s\[\]()<>\"'`,;]+#chunk-\d+)\]?"
MIN_UNCITED_WORDS = 4  # shorter sentences ("In short:") carry no claim worth a citation
CitationStatus = Literal["ok", "not_returned", "unknown_key", "quote_mismatch", "stale"]

_INLINE_QUOTE = re.compile(r'"(?P<a>[^"\n]+)"|\u201c(?P<b>[^\u201d]+)\u201d')
_ELLIPSIS = re.compile(r"\s*(?:\.\.\.|\u2026)\s*")
_GROUP_GAP = re.compile(r"[\s,;]*(?:and\s+)?")  # what may separate the keys of one citation group
_SENTENCE_END = re.compile(r"[.!?](?=\s)|\n\s*\n")
_PARAGRAPH_END = re.compile(r"\n\s*\n")


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
) -> AnswerVerdict:
    """Check ``answer`` against the blocks of ``results`` and ``returned`` (later ones win).

    ``known_keys(keys)`` says which of the keys not returned exist elsewhere (``not_returned``
    rather than ``unknown_key``); ``is_current`` whether a block's source is unchanged (default:
    :func:`source_is_current`).
    """
    by_key = {block.key: block for block in [*returned, *returned_blocks(results)]}
    pattern = re.compile(citation_pattern)
    citations = [_Citation(m.group("key"), m.start(), m.end()) for m in pattern.finditer(answer)]
    quotes = _attributed_quotes(answer, citations)
    absent = {c.key for c in citations} - by_key.keys()
    known = known_keys(absent) if known_keys and absent else set()
    current = _cached(is_current or source_is_current)
    verdicts = [_citation_verdict(c, quotes, by_key, known, current) for c in citations]
    uncited = _uncited_sentences(answer, citations) if check_uncited else []
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


def _citation_verdict(
    citation: _Citation,
    quotes: list[_Quote],
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
    mine = [q for q in quotes if citation.key in q.keys]
    checks = [QuoteCheck(text=q.text, found_in=_holder(q, by_key)) for q in mine]
    if any(check.found_in is None for check in checks):
        status, detail = "quote_mismatch", "a quote attributed to it is not in its content"
    elif not is_current(block):
        status, detail = "stale", f"its source {block.source or ''} changed or vanished since it was ingested"
    else:
        status, detail = "ok", ""
    return CitationVerdict(
        evidence_key=citation.key,
        status=status,
        offset=citation.start,
        quotes=checks,
        invocation_id=block.invocation_id,
        detail=detail,
    )


def _holder(quote: _Quote, by_key: dict[str, ReturnedBlock]) -> str | None:
    """The first key of the quote's citation group whose content holds the quote."""
    for key in quote.keys:
        block = by_key.get(key)
        if block is not None and _occurs(quote.text, block.content):
            return key
    return None


def _normalized(text: str) -> str:
    return " ".join(text.split())


def _occurs(quote: str, content: str) -> bool:
    """Whether ``quote`` (its parts around ``...`` in order) occurs in ``content``, whitespace-normalized."""
    haystack = _normalized(content)
    position = 0
    for part in (_normalized(p) for p in _ELLIPSIS.split(quote)):
        if not part:
            continue
        found = haystack.find(part, position)
        if found < 0:
            return False
        position = found + len(part)
    return True


def _groups(citations: list[_Citation], answer: str) -> list[list[_Citation]]:
    """Citations next to each other (``[a] [b]``, ``a, b``) as one group."""
    groups: list[list[_Citation]] = []
    for citation in citations:
        if groups and _GROUP_GAP.fullmatch(answer[groups[-1][-1].end : citation.start]):
            groups[-1].append(citation)
        else:
            groups.append([citation])
    return groups


def _attributed_quotes(answer: str, citations: list[_Citation]) -> list[_Quote]:
    """Block quotes and inline quotes, each with the citation group it is attributed to."""
    groups = _groups(citations, answer)
    block_quotes, covered = _block_quotes(answer, citations, groups)
    inline = []
    for match in _INLINE_QUOTE.finditer(answer):
        if any(start <= match.start() < end for start, end in covered):
            continue
        text = match.group("a") or match.group("b")
        keys = _nearest_group(answer, match.start(), match.end(), groups)
        inline.append(_Quote(text, match.start(), match.end(), keys))
    return [*block_quotes, *inline]


def _block_quotes(
    answer: str, citations: list[_Citation], groups: list[list[_Citation]]
) -> tuple[list[_Quote], list[tuple[int, int]]]:
    """Runs of ``>`` lines: attributed to the keys inside them, else to the group on the next
    non-blank line, else on the line before."""
    quotes, covered = [], []
    for match in re.finditer(r"(?:^[ \t]*>.*(?:\n|$))+", answer, re.MULTILINE):
        start, end = match.start(), match.end()
        inside = [c for c in citations if start <= c.start < end]
        text = re.sub(r"^[ \t]*> ?", "", match.group(), flags=re.MULTILINE)
        for citation in sorted(inside, key=lambda c: -c.start):  # the keys are not part of the quote
            offset = citation.start - start
            text = _cut(text, match.group(), offset, citation.end - citation.start)
        keys = tuple(c.key for c in inside) or _adjacent_line_group(answer, start, end, groups)
        quotes.append(_Quote(text.strip(), start, end, keys))
        covered.append((start, end))
    return quotes, covered


def _cut(stripped: str, raw: str, raw_offset: int, length: int) -> str:
    """``stripped`` (``raw`` without its ``>`` markers) without the key found at ``raw_offset``."""
    key = raw[raw_offset : raw_offset + length]
    return stripped.replace(key, " ", 1)


def _adjacent_line_group(answer: str, start: int, end: int, groups: list[list[_Citation]]) -> tuple[str, ...]:
    rest = answer[end:]
    next_line = re.match(r"\s*[^\n]*", rest)
    next_span = (end, end + next_line.end()) if next_line else (end, end)
    line_before_start = answer.rfind("\n", 0, max(start - 1, 0)) + 1
    for lo, hi in (next_span, (line_before_start, start)):
        for group in groups:
            if lo <= group[0].start < hi:
                return tuple(c.key for c in group)
    return ()


def _nearest_group(answer: str, start: int, end: int, groups: list[list[_Citation]]) -> tuple[str, ...]:
    """The first group after the quote in its sentence, else the last before it in the sentence,
    else the same in its paragraph."""
    for lo, hi in (
        _span(answer, start, end, _SENTENCE_END),
        _span(answer, start, end, re.compile(r"\n\s*\n")),
    ):
        after = [g for g in groups if end <= g[0].start < hi]
        before = [g for g in groups if lo <= g[-1].start < start]
        if after or before:
            group = after[0] if after else before[-1]
            return tuple(c.key for c in group)
    return ()


def _span(answer: str, start: int, end: int, boundary: re.Pattern[str]) -> tuple[int, int]:
    """The unit (sentence or paragraph) holding ``answer[start:end]``: boundaries inside it ignored."""
    lo = 0
    for match in boundary.finditer(answer, 0, start):
        lo = match.end()
    after = boundary.search(answer, end)
    return lo, after.end() if after else len(answer)


def _uncited_sentences(answer: str, citations: list[_Citation]) -> list[str]:
    """Sentences of at least :data:`MIN_UNCITED_WORDS` words holding no citation (headings and
    block quotes aside)."""
    uncited, lo = [], 0
    for match in [*_SENTENCE_END.finditer(answer), None]:
        hi = match.end() if match else len(answer)
        sentence = answer[lo:hi].strip()
        cited = any(lo <= c.start < hi for c in citations)
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
