"""Keyed upserts into a Delta table by copy-on-write of the files that may hold the keys.

Only files whose key statistics overlap the incoming keys are read and rewritten; the rest of the
table is untouched, so an upsert costs what the changed keys' files cost, not the table size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakelog.lake import AppTxn, DataFile, Lake, Snapshot


def candidate_files(snapshot: Snapshot, rows: DataFrame, keys: Sequence[str]) -> list[DataFile]:
    """Files that may contain a key of `rows` (by min/max statistics of the first key column)."""
    files = snapshot.files()
    if not files:
        return []
    first = keys[0]
    bounds = rows.agg(F.min(first).alias("lo"), F.max(first).alias("hi")).first()
    if bounds is None or bounds["lo"] is None:
        return []
    return [f for f in files if f.overlaps(first, bounds["lo"], bounds["hi"])]


def upsert(
    lake: Lake,
    snapshot: Snapshot,
    rows: DataFrame,
    *,
    keys: Sequence[str],
    txns: Sequence[AppTxn] = (),
    metadata: Mapping[str, Any] | None = None,
) -> int:
    """Replace the rows of `rows`' keys (inserting new keys) in one commit. Keys must be unique."""
    rows = rows.persist()
    try:
        candidates = candidate_files(snapshot, rows, keys)
        kept = lake.read(snapshot, files=candidates).join(rows.select(*keys), list(keys), "left_anti")
        merged = kept.unionByName(rows.select(*snapshot.schema.fieldNames()))
        return lake.write(snapshot, merged, remove=candidates, txns=txns, metadata=metadata)
    finally:
        rows.unpersist()
