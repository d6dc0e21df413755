"""Eval query files: parquet validation, relevance judgments (column or qrels), BEIR conversion.

An eval query parquet has ``query_id`` and ``query`` (strings), optionally ``relevant`` (a list
of relevant doc ids, or a map doc id -> graded relevance), ``category`` (a pinned category
filter for that query, overriding L0) and ``true_category`` (the query's own category, when the
pins were written to measure the filter: see :func:`beir_to_parquet`).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

REQUIRED_COLUMNS = ("query_id", "query")
Qrels = dict[str, dict[str, int]]


class EvalDataError(ValueError):
    """An eval query file or qrels file that cannot be used; the message says what is wrong."""


def load_eval_queries(path: str | Path) -> pd.DataFrame:
    """Read and validate an eval query parquet file."""
    path = Path(path)
    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise EvalDataError(f"eval query file not found: {path}") from None
    except (pa.ArrowInvalid, OSError) as exc:
        raise EvalDataError(f"{path} is not a readable parquet file: {exc}") from None
    _check_schema(table.schema, path)
    frame = table.to_pandas()
    if frame.empty:
        raise EvalDataError(f"{path} has no queries")
    duplicated = frame["query_id"][frame["query_id"].duplicated()].unique().tolist()
    if duplicated:
        raise EvalDataError(f"{path}: duplicate query_id values: {duplicated[:5]}")
    if frame["query_id"].isna().any() or frame["query"].isna().any():
        raise EvalDataError(f"{path}: query_id and query must not be null")
    return frame


def _check_schema(schema: pa.Schema, path: Path) -> None:
    missing = [name for name in REQUIRED_COLUMNS if name not in schema.names]
    if missing:
        raise EvalDataError(f"{path}: missing required column(s) {missing}; found {schema.names}")
    for name in ("query_id", "query", "category", "true_category"):
        if name in schema.names and not _is_string(schema.field(name).type):
            raise EvalDataError(f"{path}: column {name!r} must be strings, not {schema.field(name).type}")
    if "relevant" in schema.names:
        kind = schema.field("relevant").type
        ok = (pa.types.is_list(kind) and _is_string(kind.value_type)) or (
            pa.types.is_map(kind) and _is_string(kind.key_type) and pa.types.is_integer(kind.item_type)
        )
        if not ok:
            raise EvalDataError(
                f"{path}: column 'relevant' must be list<string> or map<string, int>, not {kind}"
            )


def _is_string(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def load_qrels(path: str | Path) -> Qrels:
    """A BEIR ``qrels.tsv`` (header ``query-id corpus-id score``) as query id -> doc id -> grade."""
    path = Path(path)
    if not path.is_file():
        raise EvalDataError(f"qrels file not found: {path}")
    qrels: Qrels = {}
    with path.open(encoding="utf-8", newline="") as handle:
        rows = csv.reader(handle, delimiter="\t")
        header = next(rows, None)
        if header is None or len(header) < 3:
            raise EvalDataError(f"{path}: expected a header 'query-id<TAB>corpus-id<TAB>score'")
        for number, row in enumerate(rows, start=2):
            try:
                query_id, doc_id, score = row[0], row[1], int(float(row[2]))
            except (IndexError, ValueError):
                raise EvalDataError(f"{path}:{number}: expected query-id, corpus-id, score") from None
            qrels.setdefault(query_id, {})[doc_id] = score
    return qrels


def relevance(queries: pd.DataFrame, qrels: Qrels | None = None) -> Qrels:
    """Judgments per query: a ``--qrels`` file when given, else the ``relevant`` column."""
    if qrels is not None:
        return {qid: dict(judged) for qid, judged in qrels.items() if qid in set(queries["query_id"])}
    if "relevant" not in queries.columns:
        return {}
    judged: Qrels = {}
    for query_id, value in zip(queries["query_id"], queries["relevant"], strict=True):
        grades = _grades(value)
        if grades:
            judged[query_id] = grades
    return judged


def _grades(value: Any) -> dict[str, int]:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return {}
    if isinstance(value, Mapping):
        return {str(k): int(v) for k, v in value.items()}
    items = list(value)
    if items and isinstance(items[0], tuple):  # pyarrow maps arrive as (key, value) pairs
        return {str(k): int(v) for k, v in items}
    return {str(doc_id): 1 for doc_id in items}


CategoryPins = Literal["true", "wrong", "none"]


def beir_to_parquet(
    corpus_dir: str | Path,
    out: str | Path,
    qrels_file: str | Path | None = None,
    categories: CategoryPins = "none",
) -> int:
    """Convert a BEIR ``queries.jsonl`` (+ qrels) to an eval query parquet; returns the row count.

    Only judged queries are written (BEIR evaluates those). ``categories`` pins a filter per
    query from its ``category`` field: ``true`` pins its own category, ``wrong`` deliberately
    pins another one (see :func:`wrong_category`); both also write ``true_category``, which the
    eval report reads for its filter headline. ``none`` pins nothing.
    """
    folder = Path(corpus_dir)
    queries_file = folder / "queries.jsonl"
    if not queries_file.is_file():
        raise EvalDataError(f"no queries.jsonl in {folder}")
    qrels = load_qrels(Path(qrels_file) if qrels_file else folder / "qrels.tsv")
    records = [
        record
        for line in queries_file.read_text(encoding="utf-8").splitlines()
        if line.strip() and str((record := json.loads(line))["_id"]) in qrels
    ]
    known = _categories(folder, records) if categories != "none" else []
    rows = []
    for record in records:
        query_id = str(record["_id"])
        true = _text_or_none(record.get("category")) if categories != "none" else None
        if categories != "none" and true is None:
            raise EvalDataError(f"{queries_file}: query {query_id!r} has no category to pin")
        pinned = wrong_category(true, known) if categories == "wrong" else true
        rows.append(
            {
                "query_id": query_id,
                "query": record["text"],
                "relevant": list(qrels[query_id].items()),
                "category": pinned,
                "true_category": true,
            }
        )
    schema = pa.schema(
        [
            ("query_id", pa.string()),
            ("query", pa.string()),
            ("relevant", pa.map_(pa.string(), pa.int64())),
            ("category", pa.string()),
            ("true_category", pa.string()),
        ]
    )
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), out)
    return len(rows)


def wrong_category(true: str | None, known: list[str]) -> str:
    """A deliberately wrong category: the next known category after ``true`` in sorted order
    (cyclic), so every query is pinned to a category that exists but is not its own."""
    others = sorted(set(known) - {true})
    if not others:
        raise EvalDataError(f"no category other than {true!r} to pin as a wrong one")
    later = [c for c in others if true is None or c > true]
    return (later or others)[0]


def _categories(folder: Path, queries: list[dict[str, Any]]) -> list[str]:
    """Categories the documents carry (``corpus.jsonl``), else those of the queries."""
    corpus = folder / "corpus.jsonl"
    source = queries
    if corpus.is_file():
        source = [
            json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()
        ]
    return sorted({c for record in source if (c := _text_or_none(record.get("category")))})


def _text_or_none(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None
