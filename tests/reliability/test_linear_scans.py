"""Every scan of client text is linear: a hostile megabyte is read in one pass, never rescanned
from each of its characters.

Before, ``verify_answer``'s citation pattern rescanned a long word from each start position and
the MCP frame reader's ``id`` search rescanned a run of escaped quotes from each quote: a 40k
word took 12 s, a 32k run 30 s, so a megabyte of either would take hours. Each hostile shape
runs at 1 MB in a subprocess under a hang guard (minutes, where the linear scan takes about a
second): a guard against a hang, not a speed threshold.
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lookup_knowledge.agent.verify import (
    CITATION_PATTERN,
    MAX_ANSWER_CHARS,
    AnswerTooLongError,
    ReturnedBlock,
    content_sha256,
    verify_answer,
)
from lookup_knowledge.cli.app import app

HANG_GUARD_S = 240  # a hang guard: the linear scans take seconds at 1 MB, the quadratic ones hours
MB = 1_000_000
QUADRATIC_PATTERN = r"\[?(?P<key>[^\s\[\]()<>\"'`,;]+#chunk-\d+)\]?"  # the pattern before

# name: (an expression of N building the answer, the citations it holds at N = 1 MB)
ANSWERS = {
    "one long word": ('"x" * N', 0),
    "one long word ending in a key": ('"x" * (N - 10) + "#chunk-12"', 1),
    "citations only": ('"k1#chunk-1 " * (N // 11)', MB // 11),
    "opening curly quotes never closed": ('"\\u201c" * N', 0),
    "a quote of spaces": ("'\"' + ' ' * (N - 2) + '\" k1#chunk-1'", 1),
    "block quotes, each cited": ('">a k1#chunk-1\\nb\\n" * (N // 16)', MB // 16),
    "block quotes, a key at the end": ('">a\\nb\\n" * (N // 6) + "k1#chunk-1"', 1),
    "quotes next to a key": ("'\"refund\" k1#chunk-1 ' * (N // 20)", MB // 20),
    "sentences, every other cited": ('"a b c d k1#chunk-1. e f g h. " * (N // 29)', MB // 29),
}
FRAMES = {  # name: (the frame, the id its error reply carries)
    "escaped quotes in a string never closed": ('{"jsonrpc":"2.0","x":"' + '\\"' * (MB // 2), None),
    "open brackets": ('{"jsonrpc":"2.0","x":' + "[" * MB, None),
    "bracket pairs, the id last": ('{"jsonrpc":"2.0","x":' + "[]," * (MB // 3) + '0,"id":42', 42),
    '"id" without a colon, again and again': ("{" + '"id",' * (MB // 5), None),
}
VERIFY_SCRIPT = """
import sys
from lookup_knowledge.agent.verify import ReturnedBlock, verify_answer
N = {n}
block = ReturnedBlock(key="k1#chunk-1", sha256="", content="refund need approval")
verdict = verify_answer({expression}, returned=[block], check_uncited=True, max_chars=None)
print(len(verdict.citations))
"""
FRAME_SCRIPT = """
import sys
from lookup_knowledge.agent.mcp_server import read_frame
reply = read_frame(sys.stdin.read())
print(reply.error.code, reply.id)
"""


def _run(script: str, stdin: str = "") -> str:
    """``script``'s output in a fresh interpreter; fails (never hangs) past the hang guard."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=HANG_GUARD_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the scan did not end within the {HANG_GUARD_S} s hang guard: quadratic again?")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


@pytest.mark.parametrize("name", list(ANSWERS))
def test_verify_answer_reads_a_hostile_megabyte_in_one_pass(name: str) -> None:
    expression, citations = ANSWERS[name]
    assert _run(VERIFY_SCRIPT.format(n=MB, expression=expression)) == str(citations)


@pytest.mark.parametrize("name", list(FRAMES))
def test_the_frame_reader_finds_the_id_of_a_hostile_megabyte_in_one_pass(name: str) -> None:
    frame, frame_id = FRAMES[name]
    assert _run(FRAME_SCRIPT, frame + "\n") == f"-32700 {frame_id}"


def test_the_linear_citation_pattern_finds_what_the_quadratic_one_found() -> None:
    """The lookbehind only skips start positions inside a run of key characters, where the old
    pattern could never match either: same keys, same offsets, on random text."""
    pieces = ["a", "b", " ", "\n", "[", "]", "#chunk-", "#chunk-1", "7", "\u0661", '"', "'", ",", ";",
              "(", "`", ">", ".", "x#chunk-0", "\t", "\u00a0", "]]", "[["]  # fmt: skip
    rng = random.Random(60)
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        old = [(m.group("key"), m.span()) for m in re.finditer(QUADRATIC_PATTERN, text)]
        assert [(m.group("key"), m.span()) for m in re.finditer(CITATION_PATTERN, text)] == old, text


def test_many_quotes_of_one_key_are_checked_each_once_and_listed_bounded() -> None:
    block = ReturnedBlock(key="k#chunk-1", sha256=content_sha256("refund"), content="refund")
    answer = '"refund" k#chunk-1. ' * 2000 + '"not there" k#chunk-1.'
    verdict = verify_answer(answer, returned=[block])
    assert len(verdict.citations) == 2001
    assert {c.status for c in verdict.citations} == {"quote_mismatch"}  # every quote counts
    assert {len(c.quotes) for c in verdict.citations} == {20}  # the first 20 listed per citation


def test_an_answer_over_the_limit_is_refused_in_one_line_and_one_at_it_is_read() -> None:
    block = ReturnedBlock(key="k#chunk-1", sha256=content_sha256("refund"), content="refund")
    at_limit = "k#chunk-1 " + "x" * (MAX_ANSWER_CHARS - 10)
    assert verify_answer(at_limit, returned=[block]).citations[0].status == "ok"
    with pytest.raises(AnswerTooLongError) as refused:
        verify_answer(at_limit + "x", returned=[block])
    assert str(refused.value) == (
        f"the answer has {MAX_ANSWER_CHARS + 1:,} characters; verify_answer takes at most "
        f"{MAX_ANSWER_CHARS:,} (verify each part of a longer answer separately)"
    )
    assert isinstance(refused.value, ValueError)


def test_verify_refuses_a_file_over_the_limit_in_one_line(tmp_path: Path) -> None:
    answer = tmp_path / "answer.md"
    answer.write_text("k#chunk-1 " + "x" * MAX_ANSWER_CHARS, encoding="utf-8")
    missing_store = tmp_path / "never-created"
    outcome = CliRunner().invoke(
        app, ["verify", str(answer), "--session", "s", "--set", f"store.path={missing_store}"]
    )
    assert outcome.exit_code == 2
    assert outcome.stderr.strip() == (
        f"error: the answer has more than {MAX_ANSWER_CHARS:,} characters, the most verify takes: split it"
    )
    assert outcome.stdout == ""
    assert not missing_store.exists()  # refused before the configuration or the record is opened
