"""Keyed upserts: the files rewritten are the ones that may hold the keys, found by a pass over
the rows or named by the caller who read them."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from lakelog.errors import SchemaMismatchError
from lakelog.lake import held_merge
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


# The same upserts merged by Spark and here (`lakelog.lake.held_merge`) ---------------------

RICH = T.StructType([
    T.StructField("user", T.StringType()),
    T.StructField("start", T.TimestampType()),
    T.StructField("version", T.LongType()),
    T.StructField("amount", T.DecimalType(18, 2)),
    T.StructField("tags", T.ArrayType(T.StringType())),
    T.StructField("place", T.StructType([T.StructField("city", T.StringType())])),
])


def _rich(user, minute, version, tags=("a",)):
    from datetime import datetime
    from decimal import Decimal

    start = None if minute is None else datetime(2026, 1, 1, 0, minute)
    return (user, start, version, Decimal(f"{minute or 0}.25"), list(tags), (f"c-{user}",))


def _everything(lake, path):
    return sorted((tuple(r) for r in lake.read(lake.snapshot(path)).collect()), key=repr)


@pytest.fixture(params=["held", "spark"])
def merged_by(request, monkeypatch):
    """Each upsert merged here (the default for few rows) or by Spark."""
    if request.param == "spark":
        monkeypatch.setattr(held_merge, "HELD_STORED_ROWS", -1)
    return request.param


def test_the_held_merge_takes_small_upserts(lake):
    lake.create_table("t", RICH)
    snapshot = lake.snapshot("t")
    assert held_merge.holds(snapshot, snapshot.files(), 1000)
    assert not held_merge.holds(snapshot, snapshot.files(), None)  # no idea how many rows
    assert not held_merge.holds(snapshot, snapshot.files(), 10_000_000)


def test_both_merges_give_the_same_rows(spark, lake, merged_by):
    """Compound keys, a version column with nulls on both sides, deletes (one of a key not
    stored, one null), nested and decimal columns, clustered files: Spark's merge and the held
    one leave the same rows, and the held one's files keep their key ranges."""
    keys, stored = ("user", "start"), [
        _rich(f"u{i % 7}", i, i % 3) for i in range(30)] + [
        _rich("u-null-version", 1, None), _rich("u-null-start", None, 1)]
    outcome = {}
    for path in ("found", "named"):
        lake.create_table(path, RICH)
        upsert(lake, lake.snapshot(path), spark.createDataFrame(stored, RICH), keys=keys,
               newer_by="version", rows_per_file=8, rows_hint=len(stored))
        incoming = spark.createDataFrame([
            _rich("u1", 1, 5, ("new",)),        # newer: wins
            _rich("u2", 2, 0, ("older",)),      # stored version 2: loses
            _rich("u3", 3, 0, ("same",)),       # stored version 0: equal, loses
            _rich("u4", 4, None, ("null",)),    # null version against a stored one: loses
            _rich("u-null-version", 1, 0, ("beats null",)),  # stored null: wins
            _rich("u-null-start", None, 9, ("null key",)),   # a null key matches nothing
            _rich("new", 59, 1, ("added",)),
        ], RICH)
        deletes = spark.createDataFrame(
            [("u5", _rich("", 5, 0)[1]), ("nobody", _rich("", 6, 0)[1]), (None, None)],
            "user string, start timestamp")
        snapshot = lake.snapshot(path)
        upsert(lake, snapshot, incoming, keys=keys, newer_by="version", rows_per_file=8,
               deletes=deletes, rows_hint=7,
               candidates=snapshot.files() if path == "named" else None)
        outcome[path] = _everything(lake, path)
    assert outcome["found"] == outcome["named"]
    rows = {(r[0], r[1]): r for r in outcome["named"]}
    assert rows[("u1", _rich("", 1, 0)[1])][4] == ["new"]
    assert rows[("u2", _rich("", 2, 0)[1])][4] == ["a"]
    assert rows[("u3", _rich("", 3, 0)[1])][4] == ["a"]
    assert rows[("u4", _rich("", 4, 0)[1])][4] == ["a"]
    assert rows[("u-null-version", _rich("", 1, 0)[1])][4] == ["beats null"]
    assert ("u5", _rich("", 5, 0)[1]) not in rows and ("new", _rich("", 59, 0)[1]) in rows
    assert sum(1 for r in outcome["named"] if r[0] == "u-null-start") == 2
    assert len(outcome["named"]) == 32 - 1 + 2
    files = lake.snapshot("named").files()
    assert all(f.num_records <= 8 for f in files) and len(files) >= 4
    if merged_by == "held":  # clustered: the files' user ranges do not overlap
        ranges = sorted((f.min_values.get("user"), f.max_values.get("user"))
                        for f in files if f.min_values.get("user") is not None)
        assert all(hi <= lo for (_, hi), (lo, _) in zip(ranges, ranges[1:]))


def test_a_held_merge_of_the_wrong_schema_is_refused_and_writes_nothing(spark, lake):
    lake.create_table("t", SCHEMA)
    before = lake.snapshot("t")
    wrong = spark.createDataFrame([(1, 2)], "k long, v long")
    with pytest.raises(SchemaMismatchError, match="cannot write to t"):
        upsert(lake, before, wrong, keys=("k",), rows_hint=1)
    assert lake.snapshot("t").version == before.version
