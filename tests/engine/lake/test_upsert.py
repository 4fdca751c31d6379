"""Keyed upserts: the files rewritten are the ones that may hold the keys, found by a pass over
the rows or named by the caller who read them."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest
from pyspark.sql import types as T

from lakelog.errors import SchemaMismatchError
from lakelog.lake import held_merge
from lakelog.lake import driver_write
from lakelog.lake.upsert import overlapping, rewrite, upsert

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


@pytest.mark.parametrize("written", ["here", "by Spark"])
def test_a_clustered_rewrite_writes_files_of_disjoint_key_ranges(spark, lake, monkeypatch,
                                                                  written):
    """Rows written here are one sorted run cut into files; by Spark, key ranges of tasks."""
    if written == "by Spark":
        monkeypatch.setattr(driver_write, "SMALL_WRITE_ROWS", 0)
    lake.create_table("c", SCHEMA)
    keys = [(k * 7919) % 35 for k in range(35)]  # 0..34, shuffled
    frame = spark.createDataFrame([(k, "v") for k in keys], SCHEMA).repartition(3)
    rewrite(lake, lake.snapshot("c"), frame, files=[], keys=("k",), rows_per_file=10,
            rows_hint=35)
    files = sorted(lake.snapshot("c").files(), key=lambda f: f.min_values["k"])
    assert sum(f.num_records for f in files) == 35 and all(f.num_records <= 10 for f in files)
    assert all(a.max_values["k"] < b.min_values["k"] for a, b in zip(files, files[1:]))
    if written == "here":
        assert [f.num_records for f in files] == [10, 10, 10, 5]
    assert rows(lake, "c") == {k: "v" for k in range(35)}


# The same upserts merged by Spark and here (`lakelog.lake.held_merge`) ---------------------

RICH = T.StructType([
    T.StructField("user", T.StringType()),
    T.StructField("start", T.TimestampType()),
    T.StructField("version", T.LongType()),
    T.StructField("amount", T.DecimalType(18, 2)),
    T.StructField("tags", T.ArrayType(T.StringType())),
    T.StructField("place", T.StructType([T.StructField("city", T.StringType())])),
    T.StructField("attrs", T.MapType(T.StringType(), T.StringType())),
])
KEYS = ("user", "start")


def _at(minute):
    return None if minute is None else datetime(2026, 1, 1, 0, minute)


def _rich(user, minute, version, tag="a"):
    return (user, _at(minute), version, Decimal(f"{minute or 0}.25"), [tag], (f"c-{user}",),
            {"tag": tag})


def _everything(lake, path):
    rows = lake.read(lake.snapshot(path)).collect()
    return sorted((tuple(r) for r in rows), key=repr)


def _scenario(spark, lake, path, *, newer_by, rows_per_file, named):
    """Stored rows, then one upsert of every kind of incoming row and delete; the rows after."""
    lake.create_table(path, RICH)
    stored = [_rich(f"u{i % 7}", i, i % 3) for i in range(30)] + [
        _rich("u-null-version", 1, None), _rich("u-null-start", None, 1)]
    upsert(lake, lake.snapshot(path), spark.createDataFrame(stored, RICH), keys=KEYS,
           newer_by=newer_by, rows_per_file=rows_per_file, rows_hint=len(stored))
    incoming = spark.createDataFrame([
        _rich("u1", 1, 5, "new"),        # newer: wins
        _rich("u2", 2, 0, "older"),      # stored version 2: loses
        _rich("u3", 3, 0, "same"),       # stored version 0: equal, loses
        _rich("u4", 4, None, "null"),    # null version against a stored one: loses
        _rich("u-null-version", 1, 0, "beats null"),  # stored null: wins
        _rich("u-null-start", None, 9, "null key"),   # a null key matches nothing
        _rich("u6", 6, 9, "deleted, then upserted"),  # deleted and upserted at once: upserted
        _rich("new", 59, 1, "added"),
        _rich("twice", 58, 1, "first"), _rich("twice", 58, 1, "second"),  # both kept
    ], RICH)
    deletes = spark.createDataFrame(
        [("u5", _at(5)), ("u6", _at(6)), ("nobody", _at(6)), (None, None)],
        "user string, start timestamp")
    snapshot = lake.snapshot(path)
    upsert(lake, snapshot, incoming, keys=KEYS, newer_by=newer_by, rows_per_file=rows_per_file,
           deletes=deletes, rows_hint=10, candidates=snapshot.files() if named else None)
    return _everything(lake, path)


class Calls(list):
    by_spark: object


@pytest.fixture
def merges(monkeypatch):
    """Counts the held merges; `by_spark()` turns them off."""
    calls, real = Calls(), held_merge.merge
    monkeypatch.setattr(held_merge, "merge", lambda *a, **k: calls.append(1) or real(*a, **k))

    def by_spark():
        monkeypatch.setattr(held_merge, "HELD_STORED_ROWS", -1)

    calls.by_spark = by_spark
    return calls


@pytest.mark.parametrize("newer_by, rows_per_file, named", [
    ("version", 8, True), ("version", 8, False), (None, None, True),
])
def test_the_held_merge_gives_the_rows_of_sparks(spark, lake, merges, newer_by, rows_per_file,
                                                  named):
    """Compound keys, a version column with nulls on both sides, deletes (of a stored key, a
    missing one, a null one, one upserted at once), duplicate incoming keys, nested, map and
    decimal columns, clustered files or not: the merge held here leaves Spark's rows."""
    options = {"newer_by": newer_by, "rows_per_file": rows_per_file, "named": named}
    held = _scenario(spark, lake, "held", **options)
    assert len(merges) == 2  # both upserts were merged here
    merges.by_spark()
    assert _scenario(spark, lake, "spark", **options) == held and len(merges) == 2
    rows = {}
    for r in held:
        rows.setdefault((r[0], r[1]), []).append(r[4][0])
    expected = {("u1", 1): ["new"], ("u-null-version", 1): ["beats null"],
                ("u6", 6): ["deleted, then upserted"], ("new", 59): ["added"],
                ("twice", 58): ["first", "second"]}
    expected |= ({("u2", 2): ["a"], ("u3", 3): ["a"], ("u4", 4): ["a"]} if newer_by else
                 {("u2", 2): ["older"], ("u3", 3): ["same"], ("u4", 4): ["null"]})
    for (user, minute), tags in expected.items():
        assert sorted(rows[(user, _at(minute))]) == tags
    assert ("u5", _at(5)) not in rows and len(rows[("u-null-start", None)]) == 2
    assert len(held) == 32 - 1 + 1 + 2 + 1  # u5 gone (u6 replaced); new, twice ×2, a null key
    if rows_per_file:  # clustered: at most 8 rows a file, the files' user ranges disjoint
        files = lake.snapshot("held").files()
        assert all(f.num_records <= 8 for f in files) and len(files) >= 4
        ranges = sorted((f.min_values.get("user"), f.max_values.get("user"))
                        for f in files if f.min_values.get("user") is not None)
        assert all(hi <= lo for (_, hi), (lo, _) in zip(ranges, ranges[1:]))


INT_KEYED = T.StructType([T.StructField("k", T.IntegerType()), T.StructField("v", T.StringType())])


def test_delete_keys_of_a_wider_type_and_deleting_everything(spark, lake, merges):
    """Deletes whose key is a bigint for an int key (a union would have widened the incoming
    rows' key to bigint too) and an upsert that deletes every row: Spark's result, here."""
    outcome = {}
    for path in ("held", "spark"):
        if path == "spark":
            merges.by_spark()
        lake.create_table(path, INT_KEYED)
        upsert(lake, lake.snapshot(path), spark.createDataFrame([(k, "old") for k in range(5)],
                                                                INT_KEYED), keys=("k",), rows_hint=5)
        upsert(lake, lake.snapshot(path), spark.createDataFrame([(1, "new")], INT_KEYED),
               keys=("k",), deletes=spark.createDataFrame([(2,), (1 << 40,)], "k long"),
               rows_hint=1)
        outcome[path] = sorted(tuple(r) for r in lake.read(lake.snapshot(path)).collect())
        nothing = spark.createDataFrame([], INT_KEYED)
        upsert(lake, lake.snapshot(path), nothing, keys=("k",), rows_hint=0,
               deletes=spark.createDataFrame([(k,) for k in range(5)], "k long"))
        assert lake.read(lake.snapshot(path)).count() == 0
        assert lake.snapshot(path).files() == []
    assert merges == [1, 1, 1]  # three upserts held, then none
    assert outcome["held"] == outcome["spark"] == [(0, "old"), (1, "new"), (3, "old"), (4, "old")]


def test_the_held_merge_takes_small_upserts_of_comparable_keys(lake):
    lake.create_table("t", RICH)
    snapshot = lake.snapshot("t")
    assert held_merge.holds(snapshot, [], 1000, keys=KEYS, newer_by="version")
    assert not held_merge.holds(snapshot, [], None, keys=KEYS, newer_by=None)  # how many?
    assert not held_merge.holds(snapshot, [], 10_000_000, keys=KEYS, newer_by=None)
    assert not held_merge.holds(snapshot, [], 1000, keys=KEYS, newer_by="user")  # a key
    lake.create_table("f", T.StructType([T.StructField("x", T.DoubleType())]))
    assert not held_merge.holds(lake.snapshot("f"), [], 1000, keys=("x",), newer_by=None)
    lake.create_table("p", RICH, partition_by=["user"])
    assert not held_merge.holds(lake.snapshot("p"), [], 1000, keys=KEYS, newer_by=None)
    # Spark resolves "USER" as "user", Arrow would not find it; Arrow cannot join on a struct
    # nor order by an array as Spark does.
    assert not held_merge.holds(snapshot, [], 1000, keys=("USER", "start"), newer_by=None)
    assert not held_merge.holds(snapshot, [], 1000, keys=("user", "start"), newer_by="VERSION")
    assert not held_merge.holds(snapshot, [], 1000, keys=("place",), newer_by=None)
    assert not held_merge.holds(snapshot, [], 1000, keys=KEYS, newer_by="tags")


def test_a_held_merge_of_the_wrong_schema_is_refused_and_writes_nothing(spark, lake, merges):
    lake.create_table("t", SCHEMA)
    before = lake.snapshot("t")
    wrong = spark.createDataFrame([(1, 2)], "k long, v long")
    with pytest.raises(SchemaMismatchError, match="cannot write to t"):
        upsert(lake, before, wrong, keys=("k",), rows_hint=1)
    assert merges == [1] and lake.snapshot("t").version == before.version
