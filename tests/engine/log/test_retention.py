"""Retention: the log start advances by whole files, never past the active file or a consumer."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from engine_helpers import drop, make_topic, record
from pyspark.sql import types as T

from lakelog import consumers
from lakelog.consumers import Consumer, Output
from lakelog.log import ingest, retention
from lakelog.log.topics import Retention

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
OUT = Output("streams/ids", T.StructType([T.StructField("event_id", T.StringType())]))


def reader(max_records=1000):
    return Consumer(
        "reader", ("events",), (OUT,),
        lambda b: {OUT.path: b.records["events"].select("event_id")},
        max_records_per_batch=max_records,
    )


def load_three_files(lake, spark, topic):
    """Three ingests a day apart into one log partition: three files, 10 records each."""
    for day in range(3):
        ids = range(day * 10, day * 10 + 10)
        drop(lake.root, topic.name, f"d{day}.ndjson", [record(i, user="same") for i in ids])
        ingest.ingest(lake, spark, topic, now=T0 + timedelta(days=day))


def test_time_retention_removes_expired_files_but_not_the_active_one(lake, spark):
    topic = make_topic(partitions=1, retention=Retention(time=timedelta(hours=1)))
    load_three_files(lake, spark, topic)
    result = retention.enforce_retention(lake, topic, [], now=T0 + timedelta(days=30), vacuum_after=timedelta(0))
    assert (result.removed_files, result.removed_records) == (2, 20)
    assert result.start_offsets == {0: 20}
    assert result.vacuumed == 2  # the removed files are gone from storage too
    remaining = sorted(r.offset for r in lake.read(lake.snapshot(topic.path)).collect())
    assert remaining == list(range(20, 30))
    # Appends continue from the head, not from the log start.
    drop(lake.root, topic.name, "d3.ndjson", [record(99, user="same")])
    assert ingest.ingest(lake, spark, topic, now=T0).ranges == {0: (30, 31)}


def test_time_retention_keeps_young_files(lake, spark):
    topic = make_topic(partitions=1, retention=Retention(time=timedelta(days=1, hours=12)))
    load_three_files(lake, spark, topic)
    result = retention.enforce_retention(lake, topic, [], now=T0 + timedelta(days=2), vacuum_after=None)
    assert result.removed_files == 1 and result.start_offsets == {0: 10}


def test_size_retention(lake, spark):
    topic = make_topic(partitions=1, retention=Retention(bytes=1))
    load_three_files(lake, spark, topic)
    result = retention.enforce_retention(lake, topic, [], now=T0, vacuum_after=None)
    assert result.removed_files == 2 and result.start_offsets == {0: 20}


def test_retention_waits_for_consumers_unless_told_not_to(lake, spark):
    topic = make_topic(partitions=1, retention=Retention(time=timedelta(hours=1)))
    load_three_files(lake, spark, topic)
    later = T0 + timedelta(days=30)
    blocked = retention.enforce_retention(lake, topic, [reader()], now=later, vacuum_after=None)
    assert blocked.removed_files == 0  # the reader has consumed nothing yet
    consumers.run_batch(lake, reader(max_records=15), {"events": topic}, now=later)
    partial = retention.enforce_retention(lake, topic, [reader()], now=later, vacuum_after=None)
    assert partial.removed_files == 1 and partial.start_offsets == {0: 10}

    careless = make_topic(partitions=1, retention=Retention(time=timedelta(hours=1), ignore_consumers=True))
    forced = retention.enforce_retention(lake, careless, [reader()], now=later, vacuum_after=None)
    assert forced.start_offsets == {0: 20}
    # The consumer skips what retention removed and says so.
    result = consumers.run_batch(lake, reader(), {"events": careless}, now=later)
    assert result.ranges == {("events", 0): (20, 30)} and result.lost_to_retention == 5
