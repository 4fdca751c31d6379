"""An ingest batch held in this process: dead letters, duplicates and offsets without Spark.

A batch small enough to hold (`SMALL_INGEST_BYTES` of lines) is parsed by Spark in one job
whose rows — every line's envelope and log partition, or its error — come back as Arrow
(`lakelog.log.ingest`); the rest is worked out here on those rows. The same batch through Spark
took four to six more jobs (a count, a shuffle for the duplicates, a broadcast, a window per log
partition, each a plan and a round trip over Spark Connect) for a few thousand records.

The results are those of the Spark path: a record is a duplicate when its event id is in the log
within the topic's dedup window around the batch's event times, or came earlier in the batch
(by source file, then line); offsets follow (file, line) within each log partition from its head.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from lakelog.lake import Lake, Snapshot
from lakelog.log.topics import Topic

#: The most bytes of lines an ingest batch holds in this process (about as much again as Arrow).
SMALL_INGEST_BYTES = 32 << 20


#: The columns a held batch's rows carry besides the envelope: a bad line's error and text
#: (named apart from any payload field, which may well be called `error` or `value`).
ERROR, LINE = "_lakelog_error", "_lakelog_line"


def split(rows: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The good records and the bad lines (those with an `ERROR`)."""
    bad = pc.is_valid(rows[ERROR])
    return rows.filter(pc.invert(bad)), rows.filter(bad)


def dead_letter_rows(bad: pa.Table, *, topic: str) -> pa.Table:
    """Bad lines (columns `_src_file`, `_src_line`, `LINE`, `ERROR`, `ingest_time`) as rows
    of the dead-letter table."""
    return pa.table({
        "topic": pa.array([topic] * bad.num_rows, pa.string()),
        "source": bad["_src_file"],
        "line": bad["_src_line"].cast(pa.int64()),
        "raw": bad[LINE],
        "reason": bad[ERROR],
        "ingest_time": bad["ingest_time"],
    })


def with_headers(good: pa.Table, source: str, line: str) -> pa.Table:
    """`good` with its `headers` column made as the Spark path makes it: a map of the record's
    ``source`` (column `source`) and ``line`` (column `line`, as text), in that order."""
    n = good.num_rows
    values = pa.concat_arrays([
        good[source].combine_chunks().cast(pa.string()),
        good[line].combine_chunks().cast(pa.string()),
    ])
    pairs = np.column_stack([np.arange(n), np.arange(n) + n]).ravel()  # source i, line i, ...
    headers = pa.MapArray.from_arrays(
        pa.array(np.arange(0, 2 * n + 1, 2, dtype=np.int32)),
        pa.array(["source", "line"]).take(pa.array(np.tile([0, 1], n))),
        values.take(pa.array(pairs)),
        type=pa.map_(pa.string(), pa.string()),
    )
    return good.set_column(good.schema.get_field_index("headers"), "headers", headers)


def time_bounds(good: pa.Table) -> tuple[datetime, datetime] | None:
    """The least and greatest event time of `good` (None if it has none), as aware UTC."""
    lo, hi = (v.as_py() for v in pc.min_max(good["event_time"]).values())
    if lo is None:
        return None
    return _utc(lo), _utc(hi)


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def new_records(
    lake: Lake, topic: Topic, snapshot: Snapshot, good: pa.Table, order: Sequence[str],
    bounds: tuple[datetime, datetime] | None,
) -> pa.Table:
    """`good` without its duplicates: each event id's first record by `order`, unless the log
    holds the id within the dedup window around `bounds`."""
    good = good.sort_by([(c, "ascending") for c in order])
    logged: set = set()
    if bounds is not None:
        lo, hi = bounds[0] - topic.dedup_window, bounds[1] + topic.dedup_window
        files = [f for f in snapshot.files() if f.overlaps("event_time", lo, hi)]
        if files:  # only the batch's ids are kept from the log's, however many it has
            time = pads.field("event_time")
            ours = pads.field("event_id").isin(good["event_id"])
            seen = lake.read_arrow(snapshot, files=files, columns=["event_id"],
                                   where=(time >= lo) & (time <= hi) & ours)
            logged = set(seen["event_id"].to_pylist())
    keep = []
    for event_id in good["event_id"].to_pylist():
        keep.append(event_id not in logged)
        logged.add(event_id)
    return good.filter(pa.array(keep, pa.bool_()))


def per_partition(records: pa.Table) -> dict[int, int]:
    """How many of `records` (with `partition`) each log partition has."""
    counts = pc.value_counts(records["partition"])
    return {int(c["values"]): int(c["counts"]) for c in counts.to_pylist()}


def with_offsets(records: pa.Table, heads: Mapping[int, int], order: Sequence[str]) -> pa.Table:
    """`records` (with `partition`) with their `offset`: contiguous after each log partition's
    head, in `order` within it (nulls first, as in `offsets.assign_offsets`' Spark window)."""
    records = _nulls_first(records, ["partition", *order])
    partitions = records["partition"].to_numpy(zero_copy_only=False)
    n = len(partitions)
    starts = np.flatnonzero(np.r_[True, partitions[1:] != partitions[:-1]]) if n else []
    sizes = np.diff(np.r_[starts, n]).astype(np.int64)
    first = np.array([heads.get(int(partitions[s]), 0) for s in starts], dtype=np.int64)
    offsets = np.repeat(first - np.asarray(starts, dtype=np.int64), sizes) + np.arange(n)
    return records.append_column("offset", pa.array(offsets, pa.int64()))


#: pyarrow 25 and newer take a sort key's null placement with the key (and warn at the old form).
_PER_KEY_NULLS = int(pa.__version__.split(".")[0]) >= 25


def _nulls_first(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    """`table` sorted by `columns`, ascending, nulls first: Spark's ascending order."""
    if _PER_KEY_NULLS:
        return table.sort_by([(c, "ascending", "at_start") for c in columns])
    return table.sort_by([(c, "ascending") for c in columns], null_placement="at_start")
