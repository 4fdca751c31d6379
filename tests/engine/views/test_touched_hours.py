"""The hours an hourly model recomputes, found by pyarrow from a small change feed or by Spark:
the same hours and counts, for times with and without a time zone, nulls and deletes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from pyspark.sql import types as T

from lakelog.lake import EmbeddedLake
from lakelog.views import incremental
from lakelog.views.incremental import touched_hours

START = datetime(2026, 3, 1, 22, 30, tzinfo=timezone.utc)


def schema(time_type: T.DataType) -> T.StructType:
    return T.StructType([T.StructField("id", T.LongType()), T.StructField("part", T.IntegerType()),
                         T.StructField("event_time", time_type)])


def moments(ids, time_type):
    naive = isinstance(time_type, T.TimestampNTZType)
    return [(i, i % 3, None if i % 7 == 3 else
             (START + timedelta(minutes=17 * i)).replace(tzinfo=None if naive else timezone.utc))
            for i in ids]


@pytest.mark.parametrize("partition_by", [[], ["part"]], ids=["unpartitioned", "partitioned"])
@pytest.mark.parametrize("time_type", [T.TimestampType(), T.TimestampNTZType()],
                         ids=["timestamp", "timestamp_ntz"])
def test_hours_held_equal_hours_by_spark(lake, spark, monkeypatch, time_type, partition_by):
    lake.create_table("events", schema(time_type), partition_by=partition_by)
    lake.write(lake.snapshot("events"), spark.createDataFrame(moments(range(10), time_type),
                                                                schema(time_type)))
    since = lake.snapshot("events").version
    lake.write(lake.snapshot("events"), spark.createDataFrame(moments(range(10, 30), time_type),
                                                                schema(time_type)))
    # A rewrite of the first rows' files deletes some (their hours count too) and keeps others.
    first = lake.snapshot("events")
    oldest = [f for f in first.files() if f.overlaps("id", 0, 9)]
    assert sum(f.num_records for f in oldest) == 10
    kept = spark.createDataFrame(moments(range(0, 10, 2), time_type), schema(time_type))
    lake.write(first, kept, remove=oldest)
    until = lake.snapshot("events").version
    ranges = {"events": (since, until)}
    schemas = {p: lake.snapshot(p).schema for p in ranges}

    feeds = []
    held = EmbeddedLake.changes_arrow
    monkeypatch.setattr(EmbeddedLake, "changes_arrow",
                        lambda *a: feeds.append(held(*a)) or feeds[-1])
    here = touched_hours(lake, spark, ranges, schemas)
    assert len(feeds) == 1 and feeds[0] is not None  # read here
    monkeypatch.setattr(EmbeddedLake, "changes_arrow", lambda *a, **k: None)
    by_spark = touched_hours(lake, spark, ranges, schemas)

    assert here == by_spark
    assert all(h.tzinfo is not None and h.minute == 0 for h in here)
    # 20 rows inserted, 5 deleted (the 5 rewritten unchanged are no change); a null time
    # belongs to no hour.
    changed = [i for i in [*range(10, 30), *range(1, 10, 2)] if i % 7 != 3]
    assert sum(here.values()) == len(changed)
    assert min(here) == START.replace(minute=0)


def test_a_changed_input_without_a_time_column_touches_every_hour(lake, spark, monkeypatch):
    lake.create_table("dimension", T.StructType([T.StructField("id", T.LongType())]))
    lake.write(lake.snapshot("dimension"), spark.createDataFrame([(1,)], "id long"))
    ranges, schemas = {"dimension": (0, 1)}, {"dimension": lake.snapshot("dimension").schema}
    assert touched_hours(lake, spark, ranges, schemas) is None
    monkeypatch.setattr(EmbeddedLake, "changes_arrow", lambda *a, **k: None)
    assert touched_hours(lake, spark, ranges, schemas) is None


def test_a_session_of_unknown_time_zone_finds_hours_by_spark(lake, spark, monkeypatch):
    lake.create_table("events", schema(T.TimestampType()))
    lake.write(lake.snapshot("events"), spark.createDataFrame(
        moments(range(3), T.TimestampType()), schema(T.TimestampType())))
    monkeypatch.setattr(incremental, "has_required_conf", lambda spark: False)
    monkeypatch.setattr(EmbeddedLake, "changes_arrow", lambda *a, **k: pytest.fail("held"))
    found = touched_hours(lake, spark, {"events": (0, 1)},
                          {"events": lake.snapshot("events").schema})
    assert sum(found.values()) == 3
