"""Delta file statistics from Parquet footers.

Spark writes the Parquet files; the embedded engine reads each file's footer (a few KB, never the
data) to build the Delta `add` action's `stats`, which later reads use to skip files.
"""

from __future__ import annotations

import json
import math
from datetime import date, datetime, timezone
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq

#: Longer strings are left without min/max (a truncated max would be wrong for skipping).
MAX_STRING_STAT = 64

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def _stat_value(value: Any) -> Any:
    """A footer min/max as Delta stats JSON, or None when it cannot be represented exactly."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.strftime("%Y-%m-%dT%H:%M:%S.%f")
        return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):
        return value if len(value) <= MAX_STRING_STAT else None
    return None


def footer_stats(meta: pq.FileMetaData) -> dict[str, Any]:
    """`numRecords`, `minValues`, `maxValues` and `nullCount` of the top-level primitive columns."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    schema = meta.schema
    for i in range(meta.num_columns):
        column = schema.column(i)
        if "." in column.path:  # nested field: no top-level stats
            continue
        name = column.path
        lo = hi = None
        exact = True
        null_count = 0
        for rg in range(meta.num_row_groups):
            chunk = meta.row_group(rg).column(i)
            st = chunk.statistics
            if st is None:
                exact = False
                break
            null_count += st.null_count or 0
            if st.has_min_max:
                vlo, vhi = _stat_value(st.min), _stat_value(st.max)
                if vlo is None or vhi is None:
                    exact = False
                    break
                lo = vlo if lo is None else min(lo, vlo)
                hi = vhi if hi is None else max(hi, vhi)
            elif (st.null_count or 0) < chunk.num_values:
                exact = False
                break
        if not exact:
            continue
        nulls[name] = null_count
        if lo is not None:
            mins[name], maxs[name] = lo, hi
    return {"numRecords": meta.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}


def stats_json(meta: pq.FileMetaData) -> str:
    return json.dumps(footer_stats(meta), separators=(",", ":"))


def partition_values(relative_path: str) -> dict[str, str | None]:
    """Hive-style partition values from a data file's relative path (``partition=3/part-0.parquet``)."""
    values: dict[str, str | None] = {}
    for part in relative_path.split("/")[:-1]:
        if "=" in part:
            key, _, raw = part.partition("=")
            value = unquote(raw)
            values[unquote(key)] = None if value == HIVE_NULL else value
    return values
