"""History tables (SCD2): versions ordered by position, intervals right under out-of-order input."""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import functions as F
from engine_helpers import CUSTOMERS, ROW, change
from test_compacted import TOPIC

from lakelog import consumers
from lakelog.cdc.history import HistoryTable, as_of
from lakelog.log import ingest

TABLE = HistoryTable("customers", TOPIC, ROW, CUSTOMERS.primary_key, rows_per_file=2)
T0 = 1_772_366_400_000  # 2026-03-01 12:00 UTC, in ms


def apply(lake, spark, now, lines):
    ingest.produce(lake, spark, TOPIC, lines, source="test", now=now)
    consumers.run_until_caught_up(lake, TABLE.consumer, {TOPIC.name: TOPIC}, now=lambda: now)


def at(minutes):
    return datetime.fromtimestamp((T0 + minutes * 60_000) / 1000).replace(tzinfo=None)


def versions(lake, key):
    df = lake.read(lake.snapshot(TABLE.path)).where(F.col("customer_id") == key)
    return [
        (r["name"], r["valid_from"], r["valid_to"], r["is_current"], r["_deleted"])
        for r in df.orderBy("_position").collect()
    ]


def test_late_change_slots_in_and_intervals_are_rederived(lake, spark, now, partitions):
    apply(lake, spark, now, [change("c", 1, lsn=10, name="v1", ts=T0),
                             change("u", 1, lsn=30, name="v3", ts=T0 + 120_000)])
    # v2 arrives after v3, and v1 is replayed: v2 goes between, v1 stays once.
    apply(lake, spark, now, [change("u", 1, lsn=20, name="v2", ts=T0 + 60_000),
                             change("c", 1, lsn=10, name="v1", ts=T0)])
    assert versions(lake, 1) == [
        ("v1", at(0), at(1), False, False),
        ("v2", at(1), at(2), False, False),
        ("v3", at(2), None, True, False),
    ]


def test_delete_closes_the_last_version_and_nothing_is_current(lake, spark, now,
                                                               partitions):
    apply(lake, spark, now, [change("c", 1, lsn=10, name="v1", ts=T0),
                             change("c", 2, lsn=11, name="w1", ts=T0)])
    apply(lake, spark, now, [change("d", 1, lsn=40, ts=T0 + 180_000)])
    assert versions(lake, 1) == [
        ("v1", at(0), at(3), False, False),
        (None, at(3), None, False, True),
    ]
    history = lake.read(lake.snapshot(TABLE.path))
    # As of minute 1 both rows exist; as of minute 4 only customer 2.
    assert sorted(r["name"] for r in as_of(history, F.lit(at(1))).collect()) == ["v1", "w1"]
    assert [r["name"] for r in as_of(history, F.lit(at(4))).collect()] == ["w1"]
    assert history.where("is_current").count() == 1
