"""`agent/verify.py`: verify_answer against the record of what a session's lookups returned."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lookup_knowledge import AgentLookup
from lookup_knowledge.adapters.recorder import SCHEMA_VERSION, InvocationRecorder
from lookup_knowledge.agent.verify import (
    ReturnedBlock,
    content_sha256,
    file_version,
    verify_answer,
)
from lookup_knowledge.cli.app import app
from lookup_knowledge.config import Config
from lookup_knowledge.contract import EvidenceBlock

REFUND_QUERY = "Who must approve a refund above 500 EUR?"
KAFKA_QUERY = "kafka consumer lag"


def _block(key: str, content: str, **extra: object) -> ReturnedBlock:
    return ReturnedBlock(key=key, sha256=content_sha256(content), content=content, **extra)  # type: ignore[arg-type]


def _quote(block: EvidenceBlock, start: int = 2, words: int = 6) -> str:
    """A verbatim run of words from the block (its whitespace collapsed, as quotes are compared)."""
    return " ".join(block.content.split()[start : start + words])


# --- the answer's citations and quotes (no store) ------------------------------------------------

REFUNDS = _block("payments#chunk-0", "Refunds above 500 EUR need\n  the approval of a finance lead.")
LAG = _block("kafka#chunk-3", "Consumer lag grows when partitions are unbalanced.")


@pytest.mark.parametrize(
    "answer",
    [
        'Big refunds "need the approval of a finance lead" [payments#chunk-0].',
        "Per payments#chunk-0, \u201cRefunds above 500 EUR need the approval\u201d.",
        '"Refunds above ... finance lead" [payments#chunk-0]',
        "> Refunds above 500 EUR need the approval\n> of a finance lead.\n\n[payments#chunk-0]",
        '"Consumer lag grows" and approvals [kafka#chunk-3], [payments#chunk-0].',
    ],
)
def test_verbatim_quotes_next_to_their_key_verify(answer: str) -> None:
    verdict = verify_answer(answer, returned=[REFUNDS, LAG])
    assert verdict.verified, verdict
    assert all(c.status == "ok" for c in verdict.citations)
    assert sum(len(c.quotes) for c in verdict.citations) >= 1


def test_an_altered_quote_and_a_quote_from_another_block_mismatch() -> None:
    altered = verify_answer('"need the approval of any finance lead" [payments#chunk-0]', returned=[REFUNDS])
    elsewhere = verify_answer('Refunds: "Consumer lag grows" [payments#chunk-0]', returned=[REFUNDS, LAG])
    for verdict in (altered, elsewhere):
        [citation] = verdict.citations
        assert (verdict.verified, citation.status) == (False, "quote_mismatch")
        assert citation.quotes[0].found_in is None


def test_keys_not_returned_are_not_returned_when_known_else_unknown() -> None:
    verdict = verify_answer(
        "Lag [kafka#chunk-3] and refunds [payments#chunk-0] and [made-up#chunk-9].",
        returned=[LAG],
        known_keys=lambda keys: keys & {"payments#chunk-0"},
    )
    assert [(c.evidence_key, c.status) for c in verdict.citations] == [
        ("kafka#chunk-3", "ok"),
        ("payments#chunk-0", "not_returned"),
        ("made-up#chunk-9", "unknown_key"),
    ]
    assert not verdict.verified
    assert "made-up#chunk-9: unknown_key" in verdict.message


def test_a_block_whose_source_file_changed_or_vanished_is_stale(tmp_path: Path) -> None:
    source = tmp_path / "refunds.md"
    source.write_text("Refunds above 500 EUR need the approval of a finance lead.\n")
    block = _block(
        "payments#chunk-0", REFUNDS.content, source_path=str(source), source_version=file_version(source)
    )
    answer = '"finance lead" [payments#chunk-0]'
    assert verify_answer(answer, returned=[block]).verified
    source.write_text("Refunds above 900 EUR need the approval of a finance lead.\n")
    assert verify_answer(answer, returned=[block]).citations[0].status == "stale"
    source.unlink()
    assert verify_answer(answer, returned=[block]).citations[0].status == "stale"


def test_uncited_sentences_fail_only_when_checked() -> None:
    answer = "Refunds need a finance lead [payments#chunk-0]. Lag comes from bad partition balance."
    assert verify_answer(answer, returned=[REFUNDS]).verified
    checked = verify_answer(answer, returned=[REFUNDS], check_uncited=True)
    assert checked.uncited_sentences == ["Lag comes from bad partition balance."]
    assert not checked.verified


def test_an_answer_citing_nothing_is_not_verified_and_the_syntax_is_configurable() -> None:
    assert not verify_answer("Refunds need approval.", returned=[REFUNDS]).verified
    numbered = verify_answer("Refunds need approval {{payments#chunk-0}}.", returned=[REFUNDS],
                             citation_pattern=r"\{\{(?P<key>[^}]+)\}\}")  # fmt: skip
    assert [c.status for c in numbered.citations] == ["ok"]


# --- the record: lookups and verdicts of real sessions -------------------------------------------


def test_each_fault_kind_through_the_api(agent: AgentLookup) -> None:
    refund = agent.call(REFUND_QUERY, "verify-a").evidence_blocks
    kafka = agent.call(KAFKA_QUERY, "verify-b").evidence_blocks  # another session's keys
    first, second = refund[0], refund[1]
    never = f"{first.doc_id}#chunk-{max(b.chunk_index or 0 for b in refund) + 40}"
    correct = f'Approval: "{_quote(first)}" [{first.evidence_key}].'
    cases = {
        correct: "ok",
        f'Approval: "{_quote(first)} extra words" [{first.evidence_key}].': "quote_mismatch",
        f'Approval: "{_quote(second)}" [{first.evidence_key}].': "quote_mismatch",
        f"Lag: [{kafka[0].evidence_key}].": "not_returned",
        f"Approval: [{never}].": "not_returned",
        "Approval: [refund-handbook-2031#chunk-0].": "unknown_key",
    }
    if _quote(second) in " ".join(first.content.split()):
        del cases[f'Approval: "{_quote(second)}" [{first.evidence_key}].']
    for answer, status in cases.items():
        verdict = agent.verify_answer(answer, "verify-a")
        assert [c.status for c in verdict.citations] == [status], answer
        assert verdict.verified is (status == "ok")
        assert verdict.invocation_record is not None and verdict.invocation_record.written

    assert agent.recorder is not None
    rows = agent.recorder.list(session_id="verify-a", last=50)
    lookup_row = rows[0]
    assert [e["key"] for e in lookup_row.returned_evidence or []] == [b.evidence_key for b in refund]
    assert lookup_row.returned_evidence[0]["sha256"] == content_sha256(first.content)  # type: ignore[index]
    verdicts = [row for row in rows if row.tool_name == "verify_answer"]
    assert [row.status for row in verdicts][:2] == ["verified", "not_verified"]
    assert verdicts[0].retrieval_details["invocationIds"] == [lookup_row.id]


def test_cli_verifies_an_answer_from_stdin_and_a_file(
    agent: AgentLookup, store_config: Config, tmp_path: Path
) -> None:
    block = agent.call(REFUND_QUERY, "verify-cli").evidence_blocks[0]
    overrides = ["--set", f"store.path={store_config.store.path}"]
    good = f'"{_quote(block)}" [{block.evidence_key}]'
    runner = CliRunner()
    ok = runner.invoke(app, ["verify", "--session", "verify-cli", "--json", *overrides], input=good)
    assert ok.exit_code == 0, ok.output
    assert '"verified": true' in ok.output.replace('"verified":true', '"verified": true')
    answer_file = tmp_path / "answer.md"
    answer_file.write_text(good + " and [invented#chunk-1]")
    bad = runner.invoke(app, ["verify", str(answer_file), "--session", "verify-cli", *overrides])
    assert bad.exit_code == 1
    assert "unknown_key invented#chunk-1" in bad.output


# --- the record's migration ---------------------------------------------------------------------

V1_SCHEMA = """
CREATE TABLE tool_invocation (
    id INTEGER NOT NULL PRIMARY KEY, created_at DATETIME NOT NULL, session_id TEXT,
    tool_name VARCHAR(64) NOT NULL, input TEXT NOT NULL, status VARCHAR(32) NOT NULL,
    evidence_count INTEGER NOT NULL, retrieval_layer VARCHAR(16), fallback_reason VARCHAR(64),
    latency_ms FLOAT NOT NULL, retrieval_details JSON NOT NULL);
CREATE INDEX ix_tool_invocation_session ON tool_invocation (session_id, id);
CREATE TABLE schema_version (version INTEGER NOT NULL PRIMARY KEY, applied_at DATETIME NOT NULL);
INSERT INTO schema_version VALUES (1, '2026-11-01 10:00:00');
INSERT INTO tool_invocation VALUES (1, '2026-11-01 10:00:00', 's-old', 'lookup_knowledge', 'refunds?',
    'evidence', 1, 'L1', NULL, 12.0, '{"evidenceDomains": ["payments"]}');
"""


def test_a_version_1_database_migrates_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "invocations.sqlite"
    with sqlite3.connect(path) as connection:
        connection.executescript(V1_SCHEMA)
    recorder = InvocationRecorder(f"sqlite:///{path}")
    try:
        assert recorder.schema_version() == SCHEMA_VERSION == 2
        [old] = recorder.list()
        assert (old.session_id, old.returned_evidence) == ("s-old", None)
        assert recorder.session_domains("s-old") == ["payments"]
        verdict = verify_answer("[payments#chunk-0]", returned=[])  # an old row offers no evidence
        assert verdict.citations[0].status == "unknown_key"
        assert recorder.session_evidence("s-old")[0].returned_evidence is None
    finally:
        recorder.close()
    with sqlite3.connect(path) as connection:
        versions = [row[0] for row in connection.execute("SELECT version FROM schema_version ORDER BY 1")]
    assert versions == [1, 2]
