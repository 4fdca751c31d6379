"""Keyed upserts: the files rewritten are the ones that may hold the keys, found by a pass over
the rows or named by the caller who read them."""

from __future__ import annotations

from pyspark.sql import types as T

from lakelog.lake.upsert import overlapping, upsert

SCHEMA = T.StructType([T.StructField("k", T.LongType()), T.StructField("v", T.StringType())])


def rows(lake, path):
    return {r.k: r.v for r in lake.read(lake.snapshot(path)).collect()}


def test_an_upsert_into_named_files_equals_one_that_finds_them(spark, lake):
    for path in ("found", "named"):
        lake.create_table(path, SCHEMA)
        upsert(lake, lake.snapshot(path), spark.createDataFrame(
            [(k, "old") for k in range(40)], SCHEMA), keys=("k",), rows_per_file=10)
    snapshot = lake.snapshot("named")
    assert len(snapshot.files()) == 4  # clustered: keys 0-9, 10-19, ...
    changes = spark.createDataFrame([(12, "new"), (15, "new"), (40, "added")], SCHEMA)
    deletes = spark.createDataFrame([(13,)], "k long")
    # A caller that read the stored rows of 12, 13 and 15 knows their file (40 is a new key);
    # the upsert that finds the files itself rewrites every file that 12..40 overlaps.
    read = overlapping(snapshot.files(), "k", 12, 15)
    assert len(read) == 1

    upsert(lake, lake.snapshot("found"), changes, keys=("k",), rows_per_file=10, deletes=deletes)
    upsert(lake, snapshot, changes, keys=("k",), rows_per_file=10, deletes=deletes,
           candidates=read, rows_hint=3)
    expected = {k: "old" for k in range(40) if k != 13} | {12: "new", 15: "new", 40: "added"}
    assert rows(lake, "found") == rows(lake, "named") == expected
    after = lake.snapshot("named")
    kept = {f.path for f in after.files()} & {f.path for f in snapshot.files()}
    assert kept == {f.path for f in snapshot.files()} - {f.path for f in read}
