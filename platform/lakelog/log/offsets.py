"""The partitioned log: appending with offsets, reading by offset or time, log-partition state.

A record's log partition is ``pmod(xxhash64(key), partitions)`` — Spark's xxhash64 with its fixed
seed, stable across runs, machines and Spark versions. Offsets are contiguous per log partition
from 0. Every append carries the application transaction ``lakelog.append`` versioned by the
table version it read: two appends planned on the same version conflict, the loser re-reads the
heads and assigns its offsets again, so offsets never duplicate or skip.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import reduce

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from lakelog.errors import ConcurrentWriteError, UnknownTopicError
from lakelog.lake import (
    AppTxn, CommitMetadata, DataFile, Lake, Snapshot, already_committed, driver_write, held_read,
)
from lakelog.lake.pages import LOG_PAGE_ROWS, PAGE_ROWS
from lakelog.log import held_records
from lakelog.log.held_batch import per_partition, with_offsets
from lakelog.log.topics import Topic
from lakelog.spark import literals

APPEND_GUARD = "lakelog.append"
#: Table property: per log partition, a head that holds even when the head's record is removed.
HEAD_FLOORS = "lakelog.log.heads"
#: The heads joined in by `assign_offsets` (a type, not DDL text Spark Connect would parse).
HEADS_SCHEMA = T.StructType([T.StructField("partition", T.IntegerType()),
                             T.StructField("_head", T.LongType())])


@dataclass(frozen=True)
class PartitionState:
    partition: int
    start_offset: int  # log-start offset: the first offset still retained
    head: int  # the next offset to be assigned
    records: int
    bytes: int


@dataclass(frozen=True)
class AppendResult:
    version: int
    records: int
    #: Per log partition, the offsets appended: ``[first, end)``.
    ranges: Mapping[int, tuple[int, int]]


def ensure_topic_table(lake: Lake, topic: Topic) -> Snapshot:
    """The topic's log, created if it does not exist: its latest snapshot."""
    return lake.create_table(topic.path, topic.table_schema, partition_by=["partition"],
                             properties={PAGE_ROWS: str(LOG_PAGE_ROWS)})


def topic_snapshot(lake: Lake, topic: Topic | str) -> Snapshot:
    path = topic.path if isinstance(topic, Topic) else f"log/{topic}"
    name = topic.name if isinstance(topic, Topic) else topic
    if not lake.exists(path):
        raise UnknownTopicError(f"unknown topic {name!r}: no log at {path}")
    return lake.snapshot(path)


def head_floors(snapshot: Snapshot) -> dict[int, int]:
    """Per log partition, the head kept in the table's properties (`keep_heads`), if any."""
    kept = snapshot.properties.get(HEAD_FLOORS)
    return {int(p): int(h) for p, h in json.loads(kept).items()} if kept else {}


def keep_heads(lake: Lake, path: str) -> None:
    """Record each log partition's head in the table's properties before records are removed
    from anywhere in the log (an erasure): the head stays where it is even if its record goes,
    so an offset is never assigned twice and no consumer's committed offset runs ahead."""
    snapshot = lake.snapshot(path)
    floors = {str(p): s.head for p, s in sorted(partition_states(snapshot, 0).items())}
    lake.set_properties(path, {HEAD_FLOORS: json.dumps(floors)})


def partition_states(snapshot: Snapshot, partitions: int) -> dict[int, PartitionState]:
    """Log-start offset, head, records and bytes per log partition, from file statistics (and
    the heads kept by `keep_heads`) only."""
    by_partition: dict[int, list[DataFile]] = {p: [] for p in range(partitions)}
    for f in snapshot.files():
        by_partition.setdefault(int(f.partition_values["partition"]), []).append(f)
    floors = head_floors(snapshot)
    for p in floors:
        by_partition.setdefault(p, [])
    states = {}
    for p, files in sorted(by_partition.items()):
        floor = floors.get(p, 0)
        if not files:
            states[p] = PartitionState(p, floor, floor, 0, 0)
            continue
        states[p] = PartitionState(
            partition=p,
            start_offset=min(f.min_values["offset"] for f in files),
            head=max(max(f.max_values["offset"] for f in files) + 1, floor),
            records=sum(f.num_records for f in files),
            bytes=sum(f.size for f in files),
        )
    return states


def heads(snapshot: Snapshot, partitions: int) -> dict[int, int]:
    return {p: s.head for p, s in partition_states(snapshot, partitions).items()}


def partition_of(key: Column, partitions: int) -> Column:
    return F.pmod(F.xxhash64(key.cast("string")), F.lit(partitions)).cast("int")


def assign_offsets(
    df: DataFrame, *, partitions: int, heads: Mapping[int, int], order_by: Sequence[str]
) -> DataFrame:
    """Add `partition` (hash of `key`) and `offset` (contiguous after each partition's head).

    `order_by` must order the records totally, so that a retry assigns the same offsets.
    """
    with_partition = df.withColumn("partition", partition_of(F.col("key"), partitions))
    # The heads join in as data, not literals, so the generated code is the same every batch.
    head_rows = [(p, heads.get(p, 0)) for p in range(partitions)]
    head_df = df.sparkSession.createDataFrame(head_rows, HEADS_SCHEMA)
    order = Window.partitionBy("partition").orderBy(*order_by)
    return (
        with_partition.join(F.broadcast(head_df), "partition")
        .withColumn("offset", F.col("_head") + F.row_number().over(order) - 1)
        .drop("_head")
    )


#: The records to append (Arrow: held here, `partition` given) and the commit metadata.
Prepared = tuple[DataFrame | pa.Table, CommitMetadata]


def append(
    lake: Lake,
    topic: Topic,
    prepare: Callable[[Snapshot], Prepared],
    *,
    order_by: Sequence[str],
    txns: Sequence[AppTxn] = (),
    attempts: int = 12,
    rows_hint: int | None = None,
) -> tuple[AppendResult, CommitMetadata] | None:
    """Append envelope-shaped records (no offset yet; no partition yet unless held here as
    Arrow, `lakelog.log.held_batch`) as one Delta commit.

    `prepare(snapshot)` returns the records and the commit metadata given the log as it is now
    (an ingest drops records already in that snapshot); after a lost race it is called again on
    the new snapshot. Returns None if one of `txns` was already committed (the work was done).
    `rows_hint` is about how many records there are, when known (`Lake.write`).
    """
    snapshot = ensure_topic_table(lake, topic)
    for attempt in range(attempts):
        if attempt:  # the race was lost to a newer version
            snapshot = lake.snapshot(topic.path)
        if any(already_committed(snapshot, t) for t in txns):
            return None
        records, metadata = prepare(snapshot)
        collected = None
        if not isinstance(records, pa.Table) and driver_write.is_small_write(rows_hint):
            # A small append is collected to be written here all the same: collected with its
            # log partitions instead, its offsets are assigned here (no window and join in
            # Spark), and the new heads are known without loading the new version.
            records, collected = driver_write.collect(
                records.withColumn("partition", partition_of(F.col("key"), topic.partitions)))
        before = heads(snapshot, topic.partitions)
        guard = AppTxn(APPEND_GUARD, snapshot.version + 1)
        try:
            if isinstance(records, pa.Table):  # held here, with their log partition
                rows = with_offsets(records, before, order_by)
                if collected is not None:  # checked and cast as a write of Spark's rows is
                    rows = driver_write.conformed(snapshot, rows, _with_offset(collected, snapshot))
                version = lake.write_table(snapshot, rows, txns=[guard, *txns], metadata=metadata)
                # Offsets were assigned here from `before`: each partition's head moved by its
                # records (known without loading the new version to read them).
                after = {**before, **{p: before.get(p, 0) + n
                                      for p, n in per_partition(records).items()}}
            else:
                assigned = assign_offsets(
                    records, partitions=topic.partitions, heads=before, order_by=order_by
                ).select(*topic.table_schema.fieldNames())
                version = lake.write(snapshot, assigned, txns=[guard, *txns], metadata=metadata,
                                     rows_hint=rows_hint)
                after = heads(lake.snapshot(topic.path, version), topic.partitions)
        except ConcurrentWriteError:
            if attempt == attempts - 1:
                raise
            time.sleep(random.uniform(0, min(2.0, 0.05 * 2**attempt)))  # back off, desynchronise
            continue
        ranges = {p: (before.get(p, 0), h) for p, h in after.items() if h > before.get(p, 0)}
        result = AppendResult(version, sum(e - s for s, e in ranges.values()), ranges)
        return result, metadata
    raise AssertionError("unreachable")


def _with_offset(collected: T.StructType, snapshot: Snapshot) -> T.StructType:
    """The schema of collected records (`append`) once `with_offsets` gave them their offset:
    the table's columns among them, then the offset."""
    names = set(snapshot.schema.fieldNames()) - {"offset"}
    return T.StructType([f for f in collected.fields if f.name in names]
                        + [snapshot.schema["offset"]])


def _range_filter(ranges: Mapping[int, tuple[int, int]]) -> Column:
    conditions = [
        (F.col("partition") == p) & (F.col("offset") >= start) & (F.col("offset") < end)
        for p, (start, end) in sorted(ranges.items())
    ]
    return reduce(lambda a, b: a | b, conditions)


def _range_files(
    snapshot: Snapshot, ranges: Mapping[int, tuple[int, int]]
) -> list[DataFile]:
    """The files of `snapshot` holding records of the (non-empty) `ranges`."""
    return [
        f
        for f in snapshot.files()
        if (r := ranges.get(int(f.partition_values["partition"])))
        and f.overlaps("offset", r[0], r[1] - 1)
    ]


def read_offsets(
    lake: Lake, snapshot: Snapshot, ranges: Mapping[int, tuple[int, int]]
) -> DataFrame:
    """Records with ``start <= offset < end`` per log partition; only overlapping files are
    read, by pyarrow when they are few (`lakelog.log.held_records`)."""
    return read_range(lake, snapshot, ranges)[0]


def read_range(
    lake: Lake, snapshot: Snapshot, ranges: Mapping[int, tuple[int, int]]
) -> tuple[DataFrame, RangeStats | None]:
    """The records of `ranges` (`read_offsets`) and their `RangeStats`: from the files'
    statistics when the ranges cover their files whole, else from the records themselves when
    they were read here (a microbatch cut short inside a file), else None."""
    stats = range_stats(snapshot, ranges)
    wanted = {p: r for p, r in ranges.items() if r[1] > r[0]}
    files = _range_files(snapshot, wanted)
    if held_records.holds(snapshot, files, wanted):
        held = held_records.read(lake, snapshot, files, wanted)
        if held is not None:
            return held_read.frame(lake.spark, held, snapshot.schema), (
                stats if stats is not None else RangeStats.of(held))
    df = lake.read(snapshot, files=files)
    return df.where(_range_filter(wanted)) if wanted else df.limit(0), stats


@dataclass(frozen=True)
class RangeStats:
    """Facts about the records of offset ranges, known without a Spark read of them: when the
    ranges cover their files whole, from the files' statistics, which describe exactly those
    records (lakelog writes footer statistics, timestamps to the microsecond); else from the
    records themselves when they were read in this process (`of`)."""

    records: int
    #: Least and greatest `event_time`; None when there are no records (or all are null).
    event_time: tuple[datetime, datetime] | None
    #: Nulls per column, for the columns whose statistics have them.
    nulls: Mapping[str, int]
    #: Per log partition, the greatest `event_time` of its records (one topic's ranges; a
    #: partition whose records all lack one is left out).
    latest: Mapping[int, datetime] = field(default_factory=dict)

    @staticmethod
    def of(records: pa.Table) -> RangeStats:
        """The stats of records at hand (Arrow rows of a log), as the files' statistics of
        exactly those records would give them."""
        bounds = pc.min_max(records.column("event_time"))
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        latest = records.group_by("partition").aggregate([("event_time", "max")]).to_pydict()
        return RangeStats(
            records=records.num_rows,
            event_time=None if low is None else (low, high),
            nulls={name: records.column(name).null_count for name in records.column_names},
            latest={p: t for p, t in zip(latest["partition"], latest["event_time_max"])
                    if t is not None},
        )

    @staticmethod
    def combined(stats: Iterable[RangeStats | None]) -> RangeStats | None:
        """The stats of several topics' ranges together (None if one is not known), without
        `latest`, whose partitions are each topic's own."""
        found = list(stats)
        if any(s is None for s in found):
            return None
        times = [s.event_time for s in found if s.event_time is not None]
        columns = set.intersection(*(set(s.nulls) for s in found)) if found else set()
        return RangeStats(
            records=sum(s.records for s in found),
            event_time=(min(t[0] for t in times), max(t[1] for t in times)) if times else None,
            nulls={c: sum(s.nulls[c] for s in found) for c in columns},
        )


def range_stats(snapshot: Snapshot, ranges: Mapping[int, tuple[int, int]]) -> RangeStats | None:
    """`RangeStats` of `ranges`, or None when a file holds records outside them (a batch cut
    short by `max_records_per_batch`) or lacks the statistics: then only a read can tell."""
    wanted = {p: r for p, r in ranges.items() if r[1] > r[0]}
    files = _range_files(snapshot, wanted)
    nulls: dict[str, int] = {}
    lows, highs, latest = [], [], {}
    for f in files:
        partition = int(f.partition_values["partition"])
        start, end = wanted[partition]
        if f.min_values.get("offset", -1) < start or f.max_values.get("offset", end) >= end:
            return None
        if "event_time" in f.min_values:
            lows.append(f.min_values["event_time"])
            highs.append(f.max_values["event_time"])
            latest[partition] = max(highs[-1], latest.get(partition, highs[-1]))
        elif f.null_counts.get("event_time") != f.num_records:
            return None
        for column, n in f.null_counts.items():
            nulls[column] = nulls.get(column, 0) + n
    known = set.intersection(*(set(f.null_counts) for f in files)) if files else set()
    return RangeStats(
        records=sum(f.num_records for f in files),
        event_time=(min(lows), max(highs)) if lows else None,
        nulls={c: n for c, n in nulls.items() if c in known},
        latest=latest,
    )


def read_event_time(
    lake: Lake, snapshot: Snapshot, start: datetime | None, end: datetime | None
) -> DataFrame:
    """Records with ``start <= event_time < end``; files outside the range are skipped."""
    files = [f for f in snapshot.files() if f.overlaps("event_time", start, end)]
    df = lake.read(snapshot, files=files)
    if start is not None:
        df = df.where(F.col("event_time") >= literals.timestamp(start))
    if end is not None:
        df = df.where(F.col("event_time") < literals.timestamp(end))
    return df


def offsets_for_time(
    lake: Lake, snapshot: Snapshot, partitions: int, when: datetime
) -> dict[int, int]:
    """Per log partition, the first offset appended at or after `when` (else the head).

    Like Kafka's offsetsForTimes with log-append time: `ingest_time` grows with the offset.
    """
    result = heads(snapshot, partitions)
    files = [f for f in snapshot.files() if f.overlaps("ingest_time", when, None)]
    if files:
        rows = (
            lake.read(snapshot, files=files)
            .where(F.col("ingest_time") >= literals.timestamp(when))
            .groupBy("partition")
            .agg(F.min("offset").alias("offset"))
            .collect()
        )
        result.update({r["partition"]: r["offset"] for r in rows})
    return result
