"""Small-DataFrame helpers for the per-query hot path (tens of rows, where pandas' per-call
overhead, not the data, dominates).

The frames these build are values, as every node output is: never changed in place. A frame
keeps the rows it was built from (copies), so :func:`records` of it, which several nodes read
(the screened candidates three times), copies dicts instead of rebuilding them from cells.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np
import pandas as pd

_OBJECT = np.dtype(object)  # a numpy dtype, not ``object``: pandas then skips its dtype-registry lookup
_BUILT_FROM: dict[int, list[dict[str, Any]]] = {}  # id of a live object_frame -> its rows


def frame_columns(names: Iterable[str]) -> pd.Index:
    """A column index to build frames with: object dtype, so no string inference per frame."""
    return pd.Index(list(names), dtype=object)


def object_frame(rows: list[dict[str, Any]], columns: pd.Index) -> pd.DataFrame:
    """A DataFrame that keeps values as given (None stays None, ints stay ints, lists stay lists).

    One object block filled from a flat iterator: no per-column inference (~10x slower at tens
    of rows) and no numpy broadcasting of list-valued cells.
    """
    row_values = itemgetter(*columns) if len(columns) > 1 else lambda row: (row[columns[0]],)
    cells = chain.from_iterable(map(row_values, rows))
    values = np.fromiter(cells, dtype=_OBJECT, count=len(rows) * len(columns))
    frame = pd.DataFrame(values.reshape(len(rows), len(columns)), columns=columns, dtype=_OBJECT, copy=False)
    if all(len(row) == len(columns) for row in rows):  # each row exactly the frame's cells
        _BUILT_FROM[id(frame)] = [row.copy() for row in rows]
        weakref.finalize(frame, _BUILT_FROM.pop, id(frame), None)
    return frame


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts (fresh ones: a caller may change them): copies of the rows an
    :func:`object_frame` was built from, else via one array conversion (``to_dict("records")``
    indexes every cell: ~30x slower)."""
    if (rows := _BUILT_FROM.get(id(frame))) is not None:
        return [row.copy() for row in rows]
    columns = frame.columns.tolist()
    return [dict(zip(columns, row, strict=False)) for row in frame.to_numpy(dtype=_OBJECT).tolist()]


def column_values(frame: pd.DataFrame, column: str) -> list[Any]:
    """One column's values, without building a Series."""
    return frame.to_numpy(dtype=_OBJECT)[:, frame.columns.get_loc(column)].tolist()
