"""A microbatch's writes of its outputs (step 3 of `lakelog.consumers.batch`), each one commit.

The rows of the writes done in this process (a small append or merge-on-read append, an upsert
merged here, `lakelog.lake.held_merge`) are collected first, all of them by one query
(`driver_write.collect_together`): a batch's outputs are often cut from one frame, and
collected output by output, each was a job and, over Spark Connect, a round trip of its own.
The writes then commit one by one, in the consumer's order, as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from lakelog.consumers.consumer import Changes, Output
from lakelog.errors import ConfigError
from lakelog.lake import AppTxn, Lake, Snapshot, driver_write
from lakelog.lake.upsert import held_rows, rewrite, upsert, write_clustered


def collected(
    snapshots: Mapping[str, Snapshot],
    pending: Sequence[Output],
    produced: Mapping[str, DataFrame | Changes | None],
    *,
    records: int,
) -> dict[str, tuple[pa.Table, StructType]]:
    """The rows of the `pending` outputs written here (`held_frame`), per output path,
    collected by one query; none when fewer than two are (one collects as it writes).

    Only while their estimated rows together are a small write's (`is_small_write`): each row
    of the query carries every output's columns, null but for its own. A query that fails
    collects nothing: each write then collects its own rows, and the output at fault raises
    its own error.
    """
    if len(pending) < 2:  # nothing to collect together
        return {}
    frames, hints = {}, 0
    for output in pending:
        found = held_frame(snapshots[output.path], output, produced[output.path],
                           records=records)
        if found is not None:
            frames[output.path], hint = found
            hints += hint
    if len(frames) < 2 or not driver_write.is_small_write(hints):
        return {}
    try:
        return dict(zip(frames, driver_write.collect_together(list(frames.values()))))
    except PySparkException:
        return {}


def held_frame(
    snapshot: Snapshot, output: Output, df: DataFrame | Changes | None, *, records: int,
) -> tuple[DataFrame, int] | None:
    """The frame `write_output` collects to write `df` here, and about how many rows it has: a
    small append's rows, a small merge-on-read append's, or what
    an upsert merged here collects (`lakelog.lake.upsert.held_rows`); None for a write by
    Spark, a rewrite of files (`Changes.replace`), or a write `write_output` refuses.

    A rewrite collects alone: it carries its files' unchanged rows, and each row of the query
    that collects writes together is as wide as all of them. Collected with its late rows, a
    window's rewrite was no faster for the round trip saved: 0.93 s a batch against 0.86 s
    (a 10-minute window, 9,000-16,000 rows), 0.64 s against 0.60 s (a 1-minute window,
    about 1,000; benchmarks/README.md)."""
    if df is None:
        return None
    changes, hint = _changes(df, records)
    if changes.replace:
        return None
    if output.merge_on_read:
        if changes.deletes is not None or changes.files is not None:
            return None
        frame = changes.rows  # sorted by key once collected, with `rows_per_file`
    elif output.keys:
        frame = held_rows(snapshot, changes.rows, keys=output.keys, newer_by=output.newer_by,
                          deletes=changes.deletes, candidates=changes.files, rows_hint=hint)
        return None if frame is None else (frame, hint)
    elif changes.deletes is None:
        frame = changes.rows
    else:
        return None
    return (frame, hint) if driver_write.is_small_write(hint) else None


def write_output(
    lake: Lake,
    snapshot: Snapshot,
    output: Output,
    df: DataFrame | Changes | None,
    txns: list[AppTxn],
    metadata: dict[str, Any],
    *,
    records: int,
    collected: tuple[pa.Table, StructType] | None = None,
) -> None:
    """Commit `df`, the output's rows of a batch of `records` records, against `snapshot`: if
    another run committed this batch since, this one fails. `collected`: the rows of
    `held_frame`'s frame, collected already."""
    if df is None:  # nothing to write: commit the batch's transaction alone
        lake.write(snapshot, None, txns=txns, metadata=metadata)
        return
    changes, hint = _changes(df, records)
    if changes.replace:
        if changes.files is None or changes.deletes is not None:
            raise ConfigError(f"output {output.path}: a replacing write names its files, no deletes")
        # The files' rows and about one per record, unless told: few are written by pyarrow.
        stored = sum(f.num_records for f in changes.files)
        rewrite(lake, snapshot, changes.rows, files=changes.files, keys=output.keys,
                rows_per_file=output.rows_per_file, rows_hint=changes.rows_hint or stored + records,
                txns=txns, metadata=metadata)
    elif output.merge_on_read:
        if changes.deletes is not None or changes.files is not None:
            raise ConfigError(f"output {output.path} is merge-on-read: it takes new versions "
                              "of rows, not deletes or files to replace")
        if collected is not None:
            lake.write_table(snapshot, driver_write.conformed(snapshot, *collected), txns=txns,
                             metadata=metadata, max_records_per_file=output.rows_per_file,
                             sort_by=output.keys if output.rows_per_file else ())
        else:  # at most one row per record, usually one file
            write_clustered(lake, snapshot, changes.rows, keys=output.keys,
                            rows_per_file=output.rows_per_file, rows=hint, rows_hint=hint,
                            txns=txns, metadata=metadata)
    elif output.keys:
        if (collected is None and changes.files is not None and not changes.files
                and changes.deletes is None and changes.rows_hint is None
                and not driver_write.is_small_write(hint)):
            # New keys only, how many not known, too many records to collect them here: counted
            # (one job), since a write sized by the batch's records cut, e.g., a 1M-event demo's
            # 8,000 published sessions a batch into 16 files of 500 rows.
            hint = changes.rows.count()
        upsert(
            lake, snapshot, changes.rows, keys=output.keys, newer_by=output.newer_by,
            rows_per_file=output.rows_per_file, deletes=changes.deletes,
            candidates=changes.files, rows_hint=hint, txns=txns, metadata=metadata,
            collected=collected,
        )
    elif changes.deletes is not None:
        raise ConfigError(f"output {output.path} has no keys, so nothing can be deleted from it")
    elif collected is not None:
        lake.write_table(snapshot, driver_write.conformed(snapshot, *collected), txns=txns,
                         metadata=metadata)
    else:
        lake.write(snapshot, changes.rows, txns=txns, metadata=metadata, rows_hint=hint)


def _changes(df: DataFrame | Changes, records: int) -> tuple[Changes, int]:
    """`df` as `Changes`, and about how many rows it writes: as many as its `rows_hint` says,
    else about one per record of the batch at most."""
    changes = df if isinstance(df, Changes) else Changes(df)
    return changes, changes.rows_hint or records
