"""A small table's current rows read by pyarrow (`lakelog.lake.held_read`) are the rows Spark's
read gives: newest version per key, ties to the first file, nulls, types and all."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pyarrow as pa
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
    assert isinstance(held_read.current_table(lake, lake.snapshot("small")), pa.Table)


def test_which_key_types_arrow_compares_as_spark_does():
    for alike in (T.LongType(), T.StringType(), T.DateType(), T.TimestampType(),
                  T.DecimalType(18, 2), T.BooleanType(), T.BinaryType()):
        assert held_read.compared_alike(alike), alike
    for unlike in (T.DoubleType(), T.FloatType(), T.StringType("UTF8_LCASE"),
                   T.ArrayType(T.LongType()), T.MapType(T.StringType(), T.LongType()),
                   T.StructType([T.StructField("a", T.LongType())])):
        assert not held_read.compared_alike(unlike), unlike
