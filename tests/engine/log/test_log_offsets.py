"""The partitioned log: partition assignment, contiguous offsets, reads by offset and time."""

from __future__ import annotations

import random
import threading
from datetime import datetime, timedelta

import pytest
from engine_helpers import BASE, make_topic, session_time_zone
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from lakelog.errors import SchemaMismatchError, UnknownTopicError
from lakelog.log import held_records, offsets
from lakelog.log.topics import Topic


def envelope(spark, topic, ids, *, user=None):
    rows = [
        (
            user or f"u{i % 11}", f"e{i}", BASE + timedelta(seconds=i), f"u{i % 11}", "p", 1.0,
            BASE, BASE, BASE, {"n": str(i)}, BASE + timedelta(seconds=i), f"f{i:06d}",
        )
        for i in ids
    ]
    names = ["key", "event_id", "event_time", "user_id", "product_id", "amount", "device_time",
             "sent_time", "received_time", "headers", "ingest_time", "_order"]
    return spark.createDataFrame(rows, names).select(
        *[F.col(n).cast(topic.table_schema[n].dataType) if n in topic.table_schema.fieldNames()
          else F.col(n) for n in names]
    )


def do_append(lake, topic, df):
    return offsets.append(lake, topic, lambda snapshot: (df, {}), order_by=["_order"])[0]


def offsets_by_partition(lake, topic):
    rows = lake.read(lake.snapshot(topic.path)).select("partition", "offset").collect()
    found = {}
    for r in rows:
        found.setdefault(r.partition, []).append(r.offset)
    return {p: sorted(v) for p, v in found.items()}


def assert_contiguous(lake, topic):
    for partition, found in offsets_by_partition(lake, topic).items():
        assert found == list(range(len(found))), f"partition {partition} has gaps or repeats"


def test_offsets_contiguous_per_partition_and_stable_partitioning(lake, spark, topic):
    result = do_append(lake, topic, envelope(spark, topic, range(50)))
    assert result.records == 50
    do_append(lake, topic, envelope(spark, topic, range(50, 80)))
    assert_contiguous(lake, topic)
    df = lake.read(lake.snapshot(topic.path))
    # Same key, same partition; the assignment is Spark's xxhash64, not Python's hash.
    per_key = df.groupBy("key").agg(F.countDistinct("partition").alias("n")).collect()
    assert all(r.n == 1 for r in per_key)
    expected = {r.key: r.p for r in df.select("key", offsets.partition_of(F.col("key"), 3).alias("p")).collect()}
    assert {r.key: r.partition for r in df.collect()} == expected
    states = offsets.partition_states(lake.snapshot(topic.path), 3)
    assert sum(s.head for s in states.values()) == 80
    assert all(s.start_offset == 0 for s in states.values())


def test_offsets_follow_the_given_order(lake, spark):
    topic = make_topic(partitions=1)
    do_append(lake, topic, envelope(spark, topic, [5, 3, 9, 1], user="same"))
    rows = lake.read(lake.snapshot(topic.path)).orderBy("offset").collect()
    assert [(r.offset, r.event_id) for r in rows] == [(0, "e1"), (1, "e3"), (2, "e5"), (3, "e9")]


def test_a_small_append_assigned_here_equals_sparks(lake, spark, monkeypatch):
    """An append whose records are few (`rows_hint`) is collected with its log partitions and
    given its offsets here: the same rows, partitions, offsets and reported ranges as the
    append by Spark (a window and a join) of the same records after the same head, nulls of
    the order first as in Spark's window."""
    by_spark, here = make_topic("by_spark"), make_topic("here")
    spark_window = offsets.assign_offsets

    def assign_offsets(df, **kwargs):
        assert not here_running, "the small append went through Spark's window"
        return spark_window(df, **kwargs)

    monkeypatch.setattr(offsets, "assign_offsets", assign_offsets)

    def records(topic, ids):  # every third record without an `_order`: ordered by its id then
        return envelope(spark, topic, ids).withColumn(
            "_order", F.when(F.col("event_id").substr(2, 9).cast("int") % 3 != 0,
                             F.col("_order")))

    order_by = ["_order", "event_id"]
    for chunk in range(3):
        ids = range(chunk * 25, chunk * 25 + 25)
        here_running = False
        spark_result = offsets.append(
            lake, by_spark, lambda s: (records(by_spark, ids), {}), order_by=order_by)
        here_running = True
        here_result = offsets.append(
            lake, here, lambda s: (records(here, ids), {}), order_by=order_by, rows_hint=25)
        assert spark_result[0].ranges == here_result[0].ranges
        assert spark_result[0].records == here_result[0].records == 25
    assert_contiguous(lake, here)
    assertDataFrameEqual(lake.read(lake.snapshot(here.path)),
                         lake.read(lake.snapshot(by_spark.path)))


def test_a_small_append_of_the_wrong_schema_is_refused(lake, spark, topic):
    """Records collected for an append are checked as a write of Spark's rows is: a clear
    error, and nothing committed."""
    offsets.ensure_topic_table(lake, topic)
    before = lake.snapshot(topic.path).version
    wrong = envelope(spark, topic, range(3)).withColumn("amount", F.lit("a lot"))
    with pytest.raises(SchemaMismatchError, match="amount is string, expected double"):
        offsets.append(lake, topic, lambda s: (wrong, {}), order_by=["_order"], rows_hint=3)
    assert lake.snapshot(topic.path).version == before


def test_concurrent_appends_never_duplicate_or_skip_offsets(lake, spark, topic):
    offsets.ensure_topic_table(lake, topic)
    errors = []

    def writer(start):
        try:
            for k in range(3):
                ids = range(start + k * 20, start + k * 20 + 20)
                do_append(lake, topic, envelope(spark, topic, ids))
        except Exception as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(s,)) for s in (0, 1000, 2000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert lake.read(lake.snapshot(topic.path)).count() == 180
    assert_contiguous(lake, topic)


def test_read_by_offset_range_reads_only_overlapping_files(lake, spark):
    topic = make_topic(partitions=1)
    for chunk in range(4):
        do_append(lake, topic, envelope(spark, topic, range(chunk * 10, chunk * 10 + 10), user="k"))
    snapshot = lake.snapshot(topic.path)
    got = offsets.read_offsets(lake, snapshot, {0: (12, 25)})
    assert sorted(r.offset for r in got.collect()) == list(range(12, 25))
    files = [f for f in snapshot.files() if f.overlaps("offset", 12, 24)]
    assert len(files) == 2 and len(snapshot.files()) == 4


def test_a_held_read_of_offset_ranges_equals_sparks(lake, spark, topic, monkeypatch):
    """`read_offsets` reads a few files' records by pyarrow (`held_records`): the same rows,
    columns and types as Spark's read of the same files (nulls, a map, timestamps, every log
    partition), over ranges that start and end inside files, span several, or are empty."""
    for chunk in range(4):
        rows = envelope(spark, topic, range(chunk * 15, chunk * 15 + 15))
        rows = rows.withColumn("product_id", F.when(F.col("event_id") != "e7", F.col("product_id")))
        do_append(lake, topic, rows)
    snapshot = lake.snapshot(topic.path)
    heads = {p: s.head for p, s in offsets.partition_states(snapshot, 3).items()}
    rng = random.Random(7)
    cases = [{p: (0, h) for p, h in heads.items()}, {0: (3, 3)}, {}]
    for _ in range(6):
        cases.append({p: tuple(sorted(rng.sample(range(h + 1), 2)))
                      for p, h in heads.items() if rng.random() < 0.8 and h})
    for ranges in cases:
        files = offsets._range_files(snapshot, {p: r for p, r in ranges.items() if r[1] > r[0]})
        assert held_records.holds(snapshot, files, ranges)
        held = offsets.read_offsets(lake, snapshot, ranges)
        monkeypatch.setattr(held_records, "HELD_RECORDS", 0)  # Spark's read
        assert not held_records.holds(snapshot, files, ranges) or not files
        by_spark = offsets.read_offsets(lake, snapshot, ranges)
        monkeypatch.undo()
        assert held.schema == by_spark.schema == snapshot.schema
        assertDataFrameEqual(held, by_spark)
        expected = sum(max(e - s, 0) for s, e in ranges.values())
        assert held.count() == expected, ranges
    # Records that take more memory than the held read allows are read by Spark.
    every = {p: (0, h) for p, h in heads.items()}
    files = offsets._range_files(snapshot, every)
    assert held_records.read(lake, snapshot, files, every) is not None
    monkeypatch.setattr(held_records, "HELD_ARROW_BYTES", 0)
    assert held_records.read(lake, snapshot, files, every) is None
    assert offsets.read_offsets(lake, snapshot, every).count() == sum(heads.values())


def test_a_held_read_keeps_wall_clock_times_in_a_zone_that_skips_them(lake, spark, monkeypatch):
    """A log's ``timestamp_ntz`` values read by pyarrow are the wall-clock times Spark reads,
    in a session (one lakelog did not build) whose time zone has no such times: New York's
    clocks skip from 2:00 to 3:00 on 2026-03-08."""
    schema = T.StructType([T.StructField("event_id", T.StringType()),
                           T.StructField("user_id", T.StringType()),
                           T.StructField("local_time", T.TimestampNTZType())])
    topic = Topic("local_times", schema, key="user_id", partitions=2)
    gap = datetime(2026, 3, 8, 2, 0)
    rows = spark.createDataFrame(
        [(f"u{i % 3}", f"e{i}", f"u{i % 3}", gap + timedelta(minutes=10 * i), BASE, {}, f"{i:03d}")
         for i in range(8)],
        "key string, event_id string, user_id string, local_time timestamp_ntz, "
        "event_time timestamp, headers map<string,string>, _order string")
    do_append(lake, topic, rows.withColumn("ingest_time", F.col("event_time")))
    snapshot = lake.snapshot(topic.path)
    every = {p: (0, s.head) for p, s in offsets.partition_states(snapshot, 2).items()}
    files = offsets._range_files(snapshot, every)
    with session_time_zone(spark, "America/New_York"):
        assert held_records.holds(snapshot, files, every)
        held = offsets.read_offsets(lake, snapshot, every)
        monkeypatch.setattr(held_records, "HELD_RECORDS", 0)  # Spark's read
        by_spark = offsets.read_offsets(lake, snapshot, every)
        assert held.schema == by_spark.schema == snapshot.schema
        assertDataFrameEqual(held, by_spark)
        assert sorted(r.local_time for r in held.collect()) == [
            gap + timedelta(minutes=10 * i) for i in range(8)]


def three_files(lake, spark):
    """A one-partition topic's log of offsets 0-9, 10-19 and 20-29 in a file each; event e5
    (offset 5) has no product."""
    topic = make_topic(partitions=1)
    for chunk in range(3):
        rows = envelope(spark, topic, range(chunk * 10, chunk * 10 + 10), user="k")
        rows = rows.withColumn("product_id", F.when(F.col("event_id") != "e5", F.col("product_id")))
        do_append(lake, topic, rows)
    return lake.snapshot(topic.path)


def test_range_stats_are_exact_for_whole_files_and_unknown_inside_one(lake, spark):
    snapshot = three_files(lake, spark)

    stats = offsets.range_stats(snapshot, {0: (0, 20)})
    assert stats.records == 20
    assert stats.event_time == (BASE, BASE + timedelta(seconds=19))
    assert stats.nulls["product_id"] == 1 and stats.nulls["event_time"] == 0
    assert stats.latest == {0: BASE + timedelta(seconds=19)}  # per log partition
    second = offsets.range_stats(snapshot, {0: (10, 30)})
    assert second.event_time == (BASE + timedelta(seconds=10), BASE + timedelta(seconds=29))
    assert second.nulls["product_id"] == 0
    # Offsets 0-14 end inside the second file: its statistics also describe 15-19.
    assert offsets.range_stats(snapshot, {0: (0, 15)}) is None
    assert offsets.range_stats(snapshot, {0: (5, 20)}) is None
    assert offsets.range_stats(snapshot, {0: (30, 30)}).records == 0
    both = offsets.RangeStats.combined([stats, second])
    assert both.records == 40 and both.event_time == (BASE, BASE + timedelta(seconds=29))
    assert both.nulls["product_id"] == 1 and both.latest == {}  # partitions are per topic
    assert offsets.RangeStats.combined([stats, None]) is None


def test_read_range_takes_a_cut_batchs_stats_from_its_held_records(lake, spark, monkeypatch):
    """A range that ends inside a file has no statistics of its own (`range_stats` is None),
    but records read here give the same facts, exactly those Spark computes from the rows;
    read by Spark they are still unknown."""
    snapshot = three_files(lake, spark)
    for ranges in ({0: (3, 14)}, {0: (6, 7)}, {0: (11, 29)}):
        assert offsets.range_stats(snapshot, ranges) is None
        records, stats = offsets.read_range(lake, snapshot, ranges)
        start, end = ranges[0]
        row = records.agg(F.count(F.lit(1)).alias("n"),
                          F.count(F.when(F.col("product_id").isNull(), 1)).alias("nulls")).first()
        assert stats.records == row["n"] == end - start
        assert stats.event_time == (BASE + timedelta(seconds=start),
                                    BASE + timedelta(seconds=end - 1))
        assert stats.nulls["product_id"] == row["nulls"] == (start <= 5 < end)
        assert stats.nulls["event_time"] == 0
        assert stats.latest == {0: BASE + timedelta(seconds=end - 1)}
    # Whole files: the files' statistics, the same either way.
    whole = offsets.read_range(lake, snapshot, {0: (10, 30)})[1]
    assert whole == offsets.range_stats(snapshot, {0: (10, 30)})
    monkeypatch.setattr(held_records, "HELD_RECORDS", 0)  # Spark's read
    assert offsets.read_range(lake, snapshot, {0: (3, 14)})[1] is None
    assert offsets.read_range(lake, snapshot, {0: (10, 30)})[1] == whole


def test_a_held_read_is_bounded_by_the_ranges_records_and_the_files_they_cut(
    lake, spark, monkeypatch
):
    """A few records cut out of larger files are read here (their stats known, see above);
    more records than `HELD_RECORDS`, or files of more than `HELD_FILE_RECORDS`, go to Spark."""
    snapshot = three_files(lake, spark)
    monkeypatch.setattr(held_records, "HELD_RECORDS", 5)
    monkeypatch.setattr(held_records, "HELD_FILE_RECORDS", 15)

    def held(start: int, end: int) -> bool:
        records, stats = offsets.read_range(lake, snapshot, {0: (start, end)})
        assert sorted(r.offset for r in records.collect()) == list(range(start, end))
        return stats is not None

    assert held(3, 8)  # five records of one file of ten
    assert not held(3, 9)  # six records
    assert not held(8, 12)  # four records, of two files of twenty records


def test_read_by_event_time_and_offsets_for_time(lake, spark):
    topic = make_topic(partitions=1)
    do_append(lake, topic, envelope(spark, topic, range(30), user="k"))
    snapshot = lake.snapshot(topic.path)
    got = offsets.read_event_time(lake, snapshot, BASE + timedelta(seconds=10), BASE + timedelta(seconds=20))
    assert sorted(r.event_id for r in got.collect()) == sorted(f"e{i}" for i in range(10, 20))
    assert offsets.offsets_for_time(lake, snapshot, 1, BASE + timedelta(seconds=7)) == {0: 7}
    assert offsets.offsets_for_time(lake, snapshot, 1, BASE + timedelta(days=1)) == {0: 30}


def test_unknown_topic(lake):
    with pytest.raises(UnknownTopicError, match="unknown topic 'nope'"):
        offsets.topic_snapshot(lake, "nope")
