"""A small table's current rows read by pyarrow (`lakelog.lake.held_read`) are the rows Spark's
read gives: newest version per key, ties to the first file, nulls, types and all."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pyarrow as pa
from engine_helpers import session_time_zone
from pyspark.sql import types as T

from lakelog.lake import base, held_read
from lakelog.lake.merge_on_read import MergeKeys

SCHEMA = T.StructType([
    T.StructField("k", T.LongType()), T.StructField("v", T.StringType()),
    T.StructField("pos", T.LongType()), T.StructField("at", T.TimestampType()),
    T.StructField("amount", T.DecimalType(10, 2)), T.StructField("gone", T.BooleanType()),
])
MERGE = MergeKeys(("k",), "pos")
AT = datetime(2026, 1, 5, 8, 0, 0, 123456, tzinfo=timezone.utc)


def row(k, v, pos, gone=False):
    return (k, v, pos, AT, Decimal("12.34") if v else None, gone)


def rows_of(df):
    return sorted((tuple(r) for r in df.collect()), key=repr)


def test_merge_on_read_rows_equal_sparks_read(spark, lake):
    lake.create_table("t", SCHEMA, properties=MERGE.properties())
    batches = [
        [row(1, "a", 1), row(2, "b", 1), row(3, "c", 1), row(None, "nokey", 1)],
        [row(2, "b2", 5), row(3, "c-old", 0), row(4, "tie-1", 7), row(5, None, None)],
        [row(4, "tie-2", 7), row(5, "v5", 2), row(6, "x", 3, gone=True), row(None, "n2", 2)],
        [row(9, "alone", 1)],
    ]
    for batch in batches:  # one file per batch, as a merge-on-read output writes them
        lake.write(lake.snapshot("t"), spark.createDataFrame(batch, SCHEMA).coalesce(1))
    snapshot = lake.snapshot("t")
    assert held_read.holds(snapshot)
    held = held_read.rows(lake, snapshot)
    assert held.schema == lake.read(snapshot).schema
    got = rows_of(held)
    assert got == rows_of(lake.read(snapshot))
    by_key = {r[0]: r for r in got}
    assert len(got) == len(by_key)  # one row per key, the null key's included
    assert by_key[2][1] == "b2" and by_key[3][1] == "c"  # newer by pos, whatever the file
    # A tie goes to the file whose name comes first: the second batch's file holds key 2.
    names = {f.min_values["k"]: f.path.rsplit("/", 1)[-1] for f in snapshot.files()
             if f.num_records == 4 and f.min_values["k"] in (2, 4)}
    assert by_key[4][1] == ("tie-1" if names[2] < names[4] else "tie-2")
    assert by_key[5][1] == "v5"  # a null pos loses
    written = spark.createDataFrame([row(9, "alone", 1)], SCHEMA).first()
    assert by_key[None][1] == "n2" and by_key[9] == tuple(written)  # microseconds and decimals


def test_copy_on_write_and_empty_tables(spark, lake):
    lake.create_table("plain", SCHEMA)
    snapshot = lake.snapshot("plain")
    assert held_read.holds(snapshot) and held_read.rows(lake, snapshot).collect() == []
    lake.write(snapshot, spark.createDataFrame([row(1, "a", 1), row(1, "a", 2)], SCHEMA))
    snapshot = lake.snapshot("plain")  # not merge-on-read: every row is current
    assert rows_of(held_read.rows(lake, snapshot)) == rows_of(lake.read(snapshot))
    assert held_read.current_table(lake, snapshot).num_rows == 2


def test_which_tables_are_read_here(spark, lake, monkeypatch):
    lake.create_table("small", SCHEMA, properties=MERGE.properties())
    lake.write(lake.snapshot("small"), spark.createDataFrame([row(1, "a", 1)], SCHEMA))
    assert held_read.holds(lake.snapshot("small"))
    monkeypatch.setattr(base, "SMALL_TABLE_BYTES", 0)  # a large table: Spark reads it
    assert not held_read.holds(lake.snapshot("small"))
    monkeypatch.undo()
    lake.create_table("parts", SCHEMA, partition_by=["gone"])  # no partition values by pyarrow
    assert not held_read.holds(lake.snapshot("parts"))
    floats = T.StructType([T.StructField("k", T.DoubleType()), T.StructField("pos", T.LongType())])
    lake.create_table("floats", floats, properties=MergeKeys(("k",), "pos").properties())
    assert not held_read.holds(lake.snapshot("floats"))  # Spark and Arrow order NaN apart
    nested = T.StructType([T.StructField("k", T.StructType([T.StructField("a", T.LongType())])),
                           T.StructField("pos", T.LongType())])
    lake.create_table("nested", nested, properties=MergeKeys(("k",), "pos").properties())
    assert not held_read.holds(lake.snapshot("nested"))  # Arrow groups by no struct
    # A key that names no column as it is spelled: Spark finds "K" (case-insensitive), Arrow not.
    lake.create_table("spelled", SCHEMA, properties=MergeKeys(("K",), "pos").properties())
    assert not held_read.holds(lake.snapshot("spelled"))
    assert isinstance(held_read.current_table(lake, lake.snapshot("small")), pa.Table)


def test_which_key_types_arrow_compares_as_spark_does():
    for alike in (T.LongType(), T.StringType(), T.DateType(), T.TimestampType(),
                  T.DecimalType(18, 2), T.BooleanType(), T.BinaryType()):
        assert held_read.compared_alike(alike), alike
    for unlike in (T.DoubleType(), T.FloatType(), T.StringType("UTF8_LCASE"),
                   T.ArrayType(T.LongType()), T.MapType(T.StringType(), T.LongType()),
                   T.StructType([T.StructField("a", T.LongType())])):
        assert not held_read.compared_alike(unlike), unlike


def test_wall_clock_times_in_a_session_zone_that_skips_them(spark, lake):
    """``timestamp_ntz`` values handed to Spark from this process stay the wall-clock times
    they are in a session (one lakelog did not build) whose zone has no such times: New York's
    clocks skip from 2:00 to 3:00 on 2026-03-08. Both the rows read here and rows written
    through Spark because Spark escapes their partition value in a folder's name."""
    local = T.StructType([T.StructField("local", T.TimestampNTZType())])
    schema = T.StructType([T.StructField("k", T.LongType()), T.StructField("p", T.StringType()),
                           T.StructField("local", T.TimestampNTZType()),
                           T.StructField("at", T.TimestampType()),
                           T.StructField("nested", local)])
    gap = datetime(2026, 3, 8, 2, 30)
    times = [gap + timedelta(minutes=20 * i) for i in range(4)]  # 2:30 to 3:30
    given = [{"k": i, "p": "a:b", "local": t, "at": AT, "nested": {"local": t}}
             for i, t in enumerate(times)]
    with session_time_zone(spark, "America/New_York"):
        for name, parts in (("here", []), ("escaped", ["p"])):
            lake.create_table(name, schema, partition_by=parts)
            snapshot = lake.snapshot(name)
            lake.write_table(snapshot, pa.Table.from_pylist(given, schema=snapshot.arrow_schema))
        read = lake.read(lake.snapshot("escaped")).collect()  # written by Spark
        assert sorted((r.local, r.nested.local) for r in read) == [(t, t) for t in times]
        snapshot = lake.snapshot("here")  # written by pyarrow, read here
        assert held_read.holds(snapshot)
        held = held_read.rows(lake, snapshot)
        assert held.schema == schema
        assert rows_of(held) == rows_of(lake.read(snapshot))
        assert sorted(r.local for r in held.collect()) == times
