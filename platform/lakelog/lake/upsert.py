"""Keyed upserts into a Delta table by copy-on-write of the files that may hold the keys.

Only files whose key statistics overlap the incoming keys are read and rewritten; the rest of the
table is untouched, so an upsert costs what the changed keys' files cost, not the table size.
Tables written with `rows_per_file` are clustered by key range (each file holds a narrow range of
the first key column), which is what makes those statistics prune. A small table is rewritten
whole instead: finding its files would cost a Spark job of its own, more than rewriting it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lakelog.lake import AppTxn, DataFile, Lake, Snapshot, driver_write, held_merge
from lakelog.lake.base import is_small, overlapping
from lakelog.lake.nulls_apart import null_flag, nulls_apart


def candidate_files(snapshot: Snapshot, rows: DataFrame, keys: Sequence[str]) -> list[DataFile]:
    """Files that may contain a key of `rows` (by min/max statistics of the first key column);
    all of a small table's (`is_small`), for which a pass over `rows` would cost more."""
    files = snapshot.files()
    if not files or is_small(files):
        return files
    first = keys[0]
    bounds = rows.agg(F.min(first).alias("lo"), F.max(first).alias("hi")).first()
    return overlapping(files, first, bounds["lo"], bounds["hi"])


def held_rows(
    snapshot: Snapshot,
    rows: DataFrame,
    *,
    keys: Sequence[str],
    newer_by: str | None = None,
    deletes: DataFrame | None = None,
    candidates: Sequence[DataFile] | None = None,
    rows_hint: int | None = None,
) -> DataFrame | None:
    """The frame an `upsert` with these arguments collects to merge its rows here
    (`held_merge`), for a caller that collects it with others in one job
    (`driver_write.collect_together`) and hands the rows back as `upsert`'s `collected`; None
    when the upsert merges by Spark or passes over its rows first."""
    known = _known_candidates(snapshot, candidates)
    if known is None or not held_merge.holds(snapshot, known, rows_hint, keys=keys,
                                             newer_by=newer_by):
        return None
    return held_merge.collected_frame(snapshot, rows, deletes, keys)


def _known_candidates(
    snapshot: Snapshot, candidates: Sequence[DataFile] | None
) -> Sequence[DataFile] | None:
    """The files an upsert rewrites without a pass over its rows: the caller's `candidates`,
    else all of a small table's (`is_small`); None when a pass must find them."""
    if candidates is not None:
        return candidates
    files = snapshot.files()
    return files if is_small(files) else None


def read_keys(lake: Lake, snapshot: Snapshot, rows: DataFrame, keys: Sequence[str]) -> DataFrame:
    """The table's rows with a key of `rows`, reading only the candidate files."""
    return lake.read(snapshot, files=candidate_files(snapshot, rows, keys),
                     keys=rows.select(*keys).distinct(), key_columns=keys)


def write_clustered(
    lake: Lake,
    snapshot: Snapshot,
    df: DataFrame,
    *,
    keys: Sequence[str],
    rows_per_file: int | None,
    rows: int,
    rows_hint: int | None = None,
    remove: Sequence[DataFile] = (),
    txns: Sequence[AppTxn] = (),
    metadata: Mapping[str, Any] | None = None,
) -> int:
    """Write `df` (about `rows` rows) and commit it with `remove`: with `rows_per_file`, sorted
    by the key in files of key ranges of at most `rows_per_file` rows, however the engine
    writes it; else as it is. `rows_hint`: the one the write is given (`Lake.write`).

    A Spark write cuts each task's sorted rows into files: `df` is sorted within key ranges
    first, `rows` (an estimate, even a low one) choosing how many tasks share the work (one,
    without a shuffle, for few rows). A write that collects the rows and writes them here
    (`driver_write.is_small_write`) gets `df` as it is and sorts the rows it collects
    (`sort_by`), so neither a range partitioning (a sampling job of its own) nor one task for
    the whole last stage of `df`'s plan is needed.
    """
    if not rows_per_file:
        return lake.write(snapshot, df, remove=remove, txns=txns, metadata=metadata,
                          rows_hint=rows_hint)
    if not driver_write.is_small_write(rows_hint):
        files = max(1, math.ceil(rows / rows_per_file))
        apart = nulls_apart(snapshot.properties)
        # A table keeping nulls apart (`lakelog.lake.nulls_apart`) gets them in tasks and files
        # of their own: the few rows of one kind (a history's newly closed versions) in one
        # file rather than a file per task, and no sort of the write's own.
        order = [*([null_flag(apart)] if apart else []), *keys]
        spread = df.coalesce(1) if files == 1 else df.repartitionByRange(files, *order)
        df = spread.sortWithinPartitions(*order)
    return lake.write(snapshot, df, remove=remove, txns=txns, metadata=metadata,
                      max_records_per_file=rows_per_file, rows_hint=rows_hint, sort_by=keys)


def upsert(
    lake: Lake,
    snapshot: Snapshot,
    rows: DataFrame,
    *,
    keys: Sequence[str],
    newer_by: str | None = None,
    rows_per_file: int | None = None,
    deletes: DataFrame | None = None,
    candidates: Sequence[DataFile] | None = None,
    rows_hint: int | None = None,
    txns: Sequence[AppTxn] = (),
    metadata: Mapping[str, Any] | None = None,
    collected: tuple[pa.Table, StructType] | None = None,
) -> int:
    """Replace the rows of `rows`' keys (inserting new keys) in one commit.

    With `newer_by`, an incoming row replaces a stored one only if its `newer_by` value is
    greater, so replayed or out-of-order input cannot move a key back in time.
    With `rows_per_file`, the rewritten files are clustered by key range.
    `deletes` (the key columns) are keys to remove in the same commit, e.g. session windows that
    a late event merged into one.

    `candidates`, when the caller knows them, are files of `snapshot` holding every stored row
    of the keys in `rows` and `deletes`, and `rows_hint` about how many rows `rows` has (to size
    the files); the upsert then skips its own pass over `rows` to find the key range and count.
    A small table (`is_small`) needs no pass either: all of it is rewritten.

    `collected`: the rows of `held_rows`' frame for the same arguments, collected already.
    """
    incoming = rows.select(*snapshot.schema.fieldNames())
    files = snapshot.files()
    options = {"keys": keys, "newer_by": newer_by, "rows_per_file": rows_per_file,
               "deletes": deletes, "small": is_small(files), "txns": txns, "metadata": metadata}
    known = _known_candidates(snapshot, candidates)
    if known is not None:
        return _merge(lake, snapshot, incoming, known, rows_hint, collected=collected, **options)
    assert collected is None, "an upsert that first passes over its rows collected nothing"
    incoming = incoming.persist()  # read twice: by the pass and by the write
    try:
        first = keys[0]
        touched = incoming.select(first, F.lit(1).alias("_incoming"))
        if deletes is not None:
            touched = touched.unionByName(deletes.select(first, F.lit(0).alias("_incoming")))
        # One pass finds the key range (the files to rewrite) and the incoming count.
        found = touched.agg(
            F.min(first).alias("lo"), F.max(first).alias("hi"),
            F.coalesce(F.sum("_incoming"), F.lit(0)).alias("n"),
        ).first()
        return _merge(lake, snapshot, incoming, overlapping(files, first, found["lo"], found["hi"]),
                      found["n"], **options)
    finally:
        incoming.unpersist()


def _merge(
    lake: Lake,
    snapshot: Snapshot,
    incoming: DataFrame,
    candidates: Sequence[DataFile],
    rows: int | None,
    *,
    keys: Sequence[str],
    newer_by: str | None,
    rows_per_file: int | None,
    deletes: DataFrame | None,
    small: bool,
    txns: Sequence[AppTxn],
    metadata: Mapping[str, Any] | None,
    collected: tuple[pa.Table, StructType] | None = None,
) -> int:
    """`upsert`'s commit: `candidates` rewritten with `incoming` (about `rows` rows) merged in;
    by `lakelog.lake.held_merge` when the rows are few (or were `collected` for it)."""
    if collected is not None or held_merge.holds(snapshot, candidates, rows, keys=keys,
                                                 newer_by=newer_by):
        return held_merge.merge(lake, snapshot, incoming, candidates, keys=keys,
                                newer_by=newer_by, rows_per_file=rows_per_file, deletes=deletes,
                                txns=txns, metadata=metadata, collected=collected)
    existing = lake.read(snapshot, files=candidates)
    if deletes is not None:
        existing = existing.join(deletes.select(*keys).distinct(), list(keys), "left_anti")
    winners = incoming
    if newer_by is not None:
        stored = existing.select(*keys, F.col(newer_by).alias("_stored"))
        winners = incoming.join(stored, list(keys), "left").where(
            F.col("_stored").isNull() | (F.col(newer_by) > F.col("_stored"))
        ).drop("_stored")
    kept = existing.join(winners.select(*keys), list(keys), "left_anti")
    merged = kept.unionByName(winners)
    estimate = sum(f.num_records for f in candidates) + (rows or 0)
    hint = None if rows is None else estimate
    if not rows_per_file and small and not driver_write.is_small_write(hint):
        merged = merged.coalesce(1)  # it stays one file, which the next upsert reads whole
    return write_clustered(lake, snapshot, merged, keys=keys, rows_per_file=rows_per_file,
                           rows=estimate, rows_hint=hint, remove=candidates, txns=txns,
                           metadata=metadata)


def rewrite(
    lake: Lake,
    snapshot: Snapshot,
    rows: DataFrame,
    *,
    files: Sequence[DataFile],
    keys: Sequence[str],
    rows_per_file: int | None = None,
    rows_hint: int | None = None,
    txns: Sequence[AppTxn] = (),
    metadata: Mapping[str, Any] | None = None,
) -> int:
    """Replace `files` by `rows`, their complete new content, in one commit (clustered by key
    range with `rows_per_file`; `rows_hint` about how many rows there are, else the files'
    count of rows)."""
    estimate = sum(f.num_records for f in files) if rows_hint is None else rows_hint
    return write_clustered(lake, snapshot, rows, keys=keys, rows_per_file=rows_per_file,
                           rows=estimate, rows_hint=rows_hint, remove=files, txns=txns,
                           metadata=metadata)
