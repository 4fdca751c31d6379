"""The embedded Delta engine: Spark-written Parquet, delta-rs commits, statistics, change feed."""

from __future__ import annotations

import threading
from datetime import date, timedelta, timezone
from pathlib import Path

import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from lakelog.errors import (
    ChangesUnavailableError, ConcurrentWriteError, SchemaMismatchError, TableNotFoundError,
)
from lakelog.lake import AppTxn, delta_commit

SCHEMA = T.StructType(
    [
        T.StructField("part", T.IntegerType()),
        T.StructField("id", T.LongType()),
        T.StructField("name", T.StringType()),
        T.StructField("tags", T.MapType(T.StringType(), T.StringType())),
    ]
)


def rows(spark, ids, part=0):
    return spark.createDataFrame([(part, i, f"n{i}", {"k": str(i)}) for i in ids], SCHEMA)


def test_a_write_returns_the_version_its_commit_became(lake, spark, monkeypatch):
    """Planned on an older snapshot, an append that conflicts with nothing lands after the
    versions committed since (delta-rs retries it); and another writer may commit right after
    it. Either way the write returns its own version, found by the commit's id in the log, and
    that version holds exactly its rows."""
    lake.create_table("t", SCHEMA)
    stale = lake.snapshot("t")
    assert lake.write(lake.snapshot("t"), rows(spark, [1])) == 1
    assert lake.write(lake.snapshot("t"), rows(spark, [2])) == 2
    assert lake.write(stale, rows(spark, [3])) == 3
    commit = delta_commit.commit

    def and_another_right_after(*args, **kwargs):
        commit(*args, **kwargs)
        monkeypatch.setattr(delta_commit, "commit", commit)
        lake.write_rows(lake.snapshot("t"), [{"part": 0, "id": 5, "name": "n5", "tags": {}}])

    monkeypatch.setattr(delta_commit, "commit", and_another_right_after)
    assert lake.write_rows(stale, [{"part": 0, "id": 4, "name": "n4", "tags": {}}]) == 4
    assert lake.snapshot("t").version == 5
    for version, added in [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)]:
        assert sorted(r.id for r in lake.changes("t", version, version).collect()) == [added]


def test_append_is_one_commit_readable_by_delta_rs(lake, spark):
    lake.create_table("t", SCHEMA, partition_by=["part"])
    version = lake.write(lake.snapshot("t"), rows(spark, range(5)).unionByName(rows(spark, [9], 1)))
    assert version == 1
    snapshot = lake.snapshot("t")
    assertDataFrameEqual(lake.read(snapshot), rows(spark, range(5)).unionByName(rows(spark, [9], 1)))
    # Any Delta reader sees the same rows: delta-rs reads the files Spark wrote.
    table = DeltaTable(lake.uri("t")).to_pyarrow_table()
    assert sorted(table.column("id").to_pylist()) == [0, 1, 2, 3, 4, 9]
    assert sorted(table.column("part").to_pylist()) == [0, 0, 0, 0, 0, 1]


def test_file_statistics_enable_skipping(lake, spark):
    lake.create_table("t", SCHEMA, partition_by=["part"])
    lake.write(lake.snapshot("t"), rows(spark, range(0, 10)).coalesce(1))
    lake.write(lake.snapshot("t"), rows(spark, range(10, 20)).coalesce(1))
    files = lake.snapshot("t").files()
    assert sorted((f.min_values["id"], f.max_values["id"]) for f in files) == [(0, 9), (10, 19)]
    assert all(f.num_records == 10 and f.partition_values == {"part": 0} for f in files)
    later = [f for f in files if f.overlaps("id", 12, 15)]
    assert lake.read(lake.snapshot("t"), files=later).count() == 10


def test_read_old_version(lake, spark):
    lake.create_table("t", SCHEMA)
    lake.write(lake.snapshot("t"), rows(spark, [1]))
    lake.write(lake.snapshot("t"), rows(spark, [2]))
    assert lake.read(lake.snapshot("t", version=1)).count() == 1
    assert lake.read(lake.snapshot("t")).count() == 2


@pytest.mark.parametrize("rows_hint", [None, 10], ids=["spark-write", "small-write"])
def test_schema_mismatch_is_refused(lake, spark, rows_hint):
    lake.create_table("t", SCHEMA)
    bad = rows(spark, [1]).withColumn("id", F.col("id").cast("string"))
    with pytest.raises(SchemaMismatchError, match="id is string, expected bigint"):
        lake.write(lake.snapshot("t"), bad, rows_hint=rows_hint)
    with pytest.raises(SchemaMismatchError, match="missing columns tags"):
        lake.write(lake.snapshot("t"), rows(spark, [1]).drop("tags"), rows_hint=rows_hint)
    with pytest.raises(SchemaMismatchError, match="missing columns tags"):  # even without rows
        lake.write(lake.snapshot("t"), rows(spark, [1]).drop("tags").limit(0),
                   rows_hint=rows_hint)
    assert lake.snapshot("t").version == 0
    assert not any(p.name.endswith(".parquet") for p in Path(lake.root, "t").rglob("*"))


def test_missing_table_is_a_clear_error(lake):
    with pytest.raises(TableNotFoundError, match="no Delta table"):
        lake.snapshot("nope")


def test_same_app_id_from_same_snapshot_conflicts_and_leaves_no_files(lake, spark, tmp_path):
    lake.create_table("t", SCHEMA)
    first, second = lake.snapshot("t"), lake.snapshot("t")
    lake.write(first, rows(spark, [1]), txns=[AppTxn("guard", 1)])
    with pytest.raises(ConcurrentWriteError, match="nothing was written"):
        lake.write(second, rows(spark, [2]), txns=[AppTxn("guard", 1)])
    snapshot = lake.snapshot("t")
    assert snapshot.txn_version("guard") == 1
    assert [r.id for r in lake.read(snapshot).collect()] == [1]
    data_files = [p for p in (tmp_path / "lake" / "t").rglob("*.parquet")]
    assert len(data_files) == 1  # the loser's file was deleted again


def test_overwrite_and_remove(lake, spark):
    lake.create_table("t", SCHEMA)
    lake.write(lake.snapshot("t"), rows(spark, [1, 2]))
    lake.write(lake.snapshot("t"), rows(spark, [3]), mode="overwrite")
    assert [r.id for r in lake.read(lake.snapshot("t")).collect()] == [3]
    snapshot = lake.snapshot("t")
    lake.write(snapshot, None, remove=snapshot.files(), txns=[AppTxn("x", 7)])
    snapshot = lake.snapshot("t")
    assert lake.read(snapshot).count() == 0 and snapshot.txn_version("x") == 7


def test_change_feed_of_appends_and_rewrites(lake, spark):
    lake.create_table("t", SCHEMA)
    lake.write(lake.snapshot("t"), rows(spark, [1, 2]).coalesce(1))  # v1
    lake.write(lake.snapshot("t"), rows(spark, [3]))  # v2
    snapshot = lake.snapshot("t")
    # v3 rewrites the file of v1: id 1 unchanged, id 2 deleted, id 4 inserted.
    v1_file = [f for f in snapshot.files() if f.max_values["id"] == 2]
    lake.write(snapshot, rows(spark, [1, 4]), remove=v1_file)
    changes = lake.changes("t", 1).select("id", "_change_type", "_commit_version")
    got = sorted(tuple(r) for r in changes.collect())
    assert got == [(1, "insert", 1), (2, "delete", 3), (2, "insert", 1), (3, "insert", 2), (4, "insert", 3)]
    only_v3 = lake.changes("t", 3, 3).select("id", "_change_type").collect()
    assert sorted(tuple(r) for r in only_v3) == [(2, "delete"), (4, "insert")]


@pytest.mark.parametrize("partition_by", [[], ["part"], ["part", "name"]])
def test_change_feed_held_equals_sparks(lake, spark, partition_by):
    """`changes_arrow` reads the feed by pyarrow: the rows, change columns and partition values
    (a null one too) of Spark's feed, for every range."""
    lake.create_table("t", SCHEMA, partition_by=partition_by)
    lake.write(lake.snapshot("t"), rows(spark, [1, 2], part=0).unionByName(
        rows(spark, [5], part=7)))  # v1
    lake.write(lake.snapshot("t"), spark.createDataFrame(
        [(None, 3, None, None)], SCHEMA))  # v2: null partition values
    snapshot = lake.snapshot("t")
    old = [f for f in snapshot.files() if f.min_values.get("id") in (1, 2, 5)
           or f.partition_values.get("part") == 0]
    lake.write(snapshot, rows(spark, [4], part=0), remove=old)  # v3
    for a, b in [(1, 1), (1, 3), (2, 3), (3, 3)]:
        held = lake.changes_arrow("t", a, b)
        assert held is not None
        spark_rows = lake.changes("t", a, b).collect()
        assert sorted(map(_plain, held.to_pylist())) == sorted(
            _plain(r.asDict(recursive=True)) for r in spark_rows), (a, b)
        # A feed of more rows than asked for is left to Spark (the log's statistics tell).
        assert lake.changes_arrow("t", a, b, max_rows=len(spark_rows)) is not None
        assert lake.changes_arrow("t", a, b, max_rows=len(spark_rows) - 1) is None


def test_a_held_feed_of_appends_is_not_searched_for_pairs_that_cancel(lake, spark, monkeypatch):
    """Only a version that removes and adds files can insert and delete one row: a range of
    appends is returned as read, without the per-value pass (which turns a map column into
    JSON row by row); a range with a rewrite still cancels its unchanged rows."""
    from lakelog.lake import changes

    lake.create_table("t", SCHEMA)
    lake.write(lake.snapshot("t"), rows(spark, [1, 2]))  # v1
    lake.write(lake.snapshot("t"), rows(spark, [2, 3]))  # v2: an equal row, appended
    snapshot = lake.snapshot("t")
    removed = [f for f in snapshot.files() if f.min_values.get("id") == 1]  # v1's row 1
    lake.write(snapshot, rows(spark, [1, 2, 4]), remove=removed)  # v3: a rewrite
    searched = []
    original = changes._cancelled_arrow

    def spy(feed, names):
        searched.append(feed.num_rows)
        return original(feed, names)

    monkeypatch.setattr(changes, "_cancelled_arrow", spy)
    appends = lake.changes_arrow("t", 1, 2)
    assert sorted(appends["id"].to_pylist()) == [1, 2, 2, 3] and searched == []
    rewrite = lake.changes_arrow("t", 3, 3)
    assert searched == [sum(f.num_records for f in removed) + 3]  # removed rows and added
    assert rewrite.num_rows < searched[0]  # row 1 deleted and inserted again: cancelled
    assert sorted(zip(rewrite["id"].to_pylist(), rewrite["_change_type"].to_pylist())) == \
        sorted((r.id, r._change_type) for r in lake.changes("t", 3, 3).collect())


def test_each_row_of_a_partitioned_spark_write_is_one_change(lake, spark):
    """Spark names one task's files alike in every partition folder: the feed tells them apart
    by their folders, so each row is one change, by Spark and here alike."""
    lake.create_table("t", SCHEMA, partition_by=["part"])
    written = rows(spark, [1, 2], part=0).unionByName(rows(spark, [3], part=1)).coalesce(1)
    lake.write(lake.snapshot("t"), written)  # one task, two folders, one file name
    names = [f.path.rsplit("/", 1)[-1] for f in lake.snapshot("t").files()]
    assert len(names) == 2 and len(set(names)) == 1
    assert sorted(r.id for r in lake.changes("t", 1).collect()) == [1, 2, 3]
    assert sorted(lake.changes_arrow("t", 1, 1)["id"].to_pylist()) == [1, 2, 3]


def test_partition_values_that_name_escaped_folders(lake, spark):
    """Spark escapes some characters of a partition value in its folder's name, and the Delta
    log percent-encodes the path again: reads, removes, the change feed and the purge of removed
    files all find the files as they are on disk."""
    schema = T.StructType([T.StructField("p", T.StringType()), T.StructField("id", T.LongType())])
    values = ["a:b", "c d", "x%y", "é", "k=v", "plain"]
    lake.create_table("t", schema, partition_by=["p"])
    lake.write(lake.snapshot("t"), spark.createDataFrame(
        [(v, i) for i, v in enumerate(values)], schema))  # v1, by Spark (values not plain)
    snapshot = lake.snapshot("t")
    assert sorted(lake.read(snapshot).collect()) == sorted(
        (v, i) for i, v in enumerate(values))
    assert sorted(lake.read_arrow(snapshot)["id"].to_pylist()) == list(range(len(values)))
    colon = [f for f in snapshot.files() if f.partition_values["p"] == "a:b"]
    lake.write(snapshot, spark.createDataFrame([("a:b", 10)], schema), remove=colon)  # v2
    after = lake.read(lake.snapshot("t")).collect()
    assert sorted(r.id for r in after) == [1, 2, 3, 4, 5, 10]  # the old file went
    feed = sorted((r.p, r.id, r._change_type) for r in lake.changes("t", 2).collect())
    assert feed == [("a:b", 0, "delete"), ("a:b", 10, "insert")]
    held = lake.changes_arrow("t", 1, 2)
    assert held is not None and sorted(zip(held["p"].to_pylist(), held["id"].to_pylist())) == \
        sorted([*((v, i) for i, v in enumerate(values)), ("a:b", 0), ("a:b", 10)])
    assert lake.purge_removed("t", through=2) == [colon[0].path]
    assert not (Path(lake.root) / "t" / colon[0].path).exists()
    assert lake.read(lake.snapshot("t")).count() == 6


def test_a_file_path_within_a_table_from_sparks_uri(spark):
    from lakelog.lake.changes import _relative_path

    uris = spark.createDataFrame([("file:/lake/t/p=a%253Ab/part-1.parquet",),
                                  ("file:///lake/t/part-2.parquet",)], "uri string")
    one = uris.select(_relative_path(F.col("uri"), {2}).alias("f")).collect()
    assert [r.f for r in one] == ["p=a%3Ab/part-1.parquet", "t/part-2.parquet"]
    both = uris.select(_relative_path(F.col("uri"), {1, 2}).alias("f")).collect()
    assert sorted(r.f for r in both) == ["p=a%3Ab/part-1.parquet", "part-1.parquet",
                                         "part-2.parquet", "t/part-2.parquet"]


def test_a_change_feed_past_a_trimmed_log_is_unavailable(lake, spark):
    lake.create_table("t", SCHEMA)
    for i in range(4):
        lake.write(lake.snapshot("t"), rows(spark, [i]))  # versions 1-4
    lake.forget_history("t", before=3)  # the log of versions 0-2 is gone
    for start in (1, 2, 3):  # each needs the version before it
        with pytest.raises(ChangesUnavailableError, match="no longer in the Delta log"):
            lake.changes("t", start)
        with pytest.raises(ChangesUnavailableError, match="no longer in the Delta log"):
            lake.changes_arrow("t", start, 4)
    assert lake.changes("t", 4).count() == 1 and lake.changes_arrow("t", 4, 4).num_rows == 1


def test_a_change_feed_partitioned_by_date_is_left_to_spark(lake, spark):
    schema = T.StructType([T.StructField("day", T.DateType()), T.StructField("id", T.LongType())])
    lake.create_table("d", schema, partition_by=["day"])
    lake.write(lake.snapshot("d"), spark.sql("SELECT current_date() AS day, 1L AS id"))
    assert lake.changes_arrow("d", 1, 1) is None  # the log's text of a date: Spark's to parse
    assert lake.changes("d", 1, 1).count() == 1


def _plain(row: dict) -> str:
    """A row of either feed as comparable text: maps as dicts, the commit time in UTC."""
    tags = row["tags"]
    return repr({**row, "tags": dict(tags) if isinstance(tags, list) else tags,
                 "_commit_timestamp": row["_commit_timestamp"].astimezone(timezone.utc)})


def test_small_tables_without_spark(lake):
    schema = T.StructType([T.StructField("a", T.StringType()), T.StructField("b", T.LongType())])
    lake.create_table("small", schema)
    rows = [{"a": "x", "b": 1}, {"a": "y", "b": 2}]
    lake.write_rows(lake.snapshot("small"), rows, mode="overwrite")
    lake.write_rows(lake.snapshot("small"), rows[:1], mode="overwrite")
    assert lake.read_arrow(lake.snapshot("small")).to_pylist() == [{"a": "x", "b": 1}]
    assert lake.snapshot("small").version == 2


def test_arrow_rows_in_and_out_by_file_column_and_filter(lake):
    """`write_table` appends rows held here into the table's partition folders; `read_arrow`
    takes some files' columns, filtered as they are read."""
    import pyarrow as pa
    import pyarrow.dataset as pads

    schema = T.StructType([T.StructField("p", T.IntegerType()), T.StructField("a", T.StringType()),
                           T.StructField("b", T.LongType())])
    lake.create_table("parts", schema, partition_by=["p"])
    rows = pa.table({"b": pa.array([1, 2, 3, 4], pa.int64()), "a": ["w", "x", "y", "z"],
                     "p": pa.array([0, 1, 0, 1], pa.int32())})
    version = lake.write_table(lake.snapshot("parts"), rows, metadata=lambda n: {"rows": n})
    snapshot = lake.snapshot("parts")
    assert version == snapshot.version and lake.history("parts", limit=1)[0]["rows"] == 4
    assert sorted(f.partition_values["p"] for f in snapshot.files()) == [0, 1]
    assert sorted(lake.read(snapshot).collect()) == sorted(
        (r["p"], r["a"], r["b"]) for r in rows.to_pylist())
    ones = [f for f in snapshot.files() if f.partition_values["p"] == 1]
    assert lake.read_arrow(snapshot, files=ones, columns=["a"]).to_pylist() == [
        {"a": "x"}, {"a": "z"}]
    assert lake.read_arrow(snapshot, files=ones, columns=["a"],
                           where=pads.field("b") > 2).to_pylist() == [{"a": "z"}]
    assert lake.read_arrow(snapshot, files=[], columns=["b"]).num_rows == 0
    whole = lake.read_arrow(snapshot, columns=["p", "a"], where=pads.field("p") == 0)
    assert sorted(whole.to_pylist(), key=lambda r: r["a"]) == [{"p": 0, "a": "w"},
                                                             {"p": 0, "a": "y"}]
    # Some files' partition column, named, comes from their partition values in the log.
    both = lake.read_arrow(snapshot, files=snapshot.files(), columns=["a", "p"],
                           where=(pads.field("p") == 1) & (pads.field("b") < 4))
    assert both.to_pylist() == [{"a": "x", "p": 1}]
    # A date's text in the Delta log may not parse as Spark reads it: not read that way.
    dated = T.StructType([T.StructField("d", T.DateType()), T.StructField("a", T.StringType())])
    lake.create_table("dated", dated, partition_by=["d"])
    lake.write_table(lake.snapshot("dated"), pa.table({"a": ["x"], "d": pa.array(
        [date(2026, 3, 1)], pa.date32())}))
    on_day = lake.snapshot("dated")
    with pytest.raises(ValueError, match="partition columns"):
        lake.read_arrow(on_day, files=on_day.files(), columns=["a", "d"])
    assert lake.read_arrow(on_day, files=on_day.files(), columns=["a"]).to_pylist() == [
        {"a": "x"}]


def test_landing_listing_skips_hidden(lake, tmp_path):
    folder = tmp_path / "lake" / "landing" / "x"
    (folder / "_tmp").mkdir(parents=True)
    (folder / "a.ndjson").write_text("{}\n")
    (folder / ".b.ndjson.tmp").write_text("{}\n")
    (folder / "_tmp" / "c.ndjson").write_text("{}\n")
    assert lake.list_files("landing/x") == [("a.ndjson", 3)]
    assert lake.list_files("landing/missing") == []


def test_a_table_is_checkpointed_every_ten_commits(lake, spark, tmp_path):
    """A snapshot replays the JSON commits since the last checkpoint: lakelog's small tables
    commit on every microbatch, so they are checkpointed often."""
    lake.create_table("t", SCHEMA)
    for i in range(11):
        lake.write(lake.snapshot("t"), rows(spark, [i]), rows_hint=1)
    log = tmp_path / "lake" / "t" / "_delta_log"
    assert list(log.glob("*.checkpoint.parquet"))  # delta-rs writes it after version 9
    assert sorted(r.id for r in lake.read(lake.snapshot("t")).collect()) == list(range(11))


def test_a_read_of_some_keys_matches_the_columns_named(lake, spark):
    """`read(keys=...)` keeps the rows whose key columns match a row of `keys`: the columns
    `key_columns` names (the caller knows them: no look-up), else all of `keys`' columns."""
    lake.create_table("t", SCHEMA)
    lake.write(lake.snapshot("t"), rows(spark, range(6)).unionByName(rows(spark, [2], 1)))
    snapshot = lake.snapshot("t")
    wanted = spark.createDataFrame([(2, 0), (4, 0), (7, 0)], "id long, part int")
    both = sorted((r.part, r.id) for r in lake.read(snapshot, keys=wanted).collect())
    assert both == [(0, 2), (0, 4)]
    by_id = lake.read(snapshot, keys=wanted, key_columns=["id"]).collect()
    assert sorted((r.part, r.id) for r in by_id) == [(0, 2), (0, 4), (1, 2)]


def loaded_before(lake, monkeypatch, change: dict[str, str], times: int = 1) -> None:
    """The lake's next `times` loads of table "t" give the version it had before another
    writer set the properties `change`: a commit planned on it meets that metadata change."""
    uri, load = lake.uri("t"), lake._load
    stale = DeltaTable(uri)  # what this writer loaded, then another writer commits
    DeltaTable(uri).alter.set_table_properties(change, raise_if_not_exists=False)
    calls = iter(range(times))
    monkeypatch.setattr(lake, "_load", lambda path, version=None: (
        stale if next(calls, None) is not None else load(path, version)))


def test_properties_set_meanwhile_by_another_writer(lake, monkeypatch):
    """Two writers setting table properties at once (members of a group marking a table made
    before): delta-rs fails the later metadata change, so the lake looks again. Set to the same
    values meanwhile, they are left as they are; another property changed meanwhile, the change
    is made on top of it; losing every time, a `ConcurrentWriteError`."""
    lake.create_table("t", SCHEMA)
    before = lake.snapshot("t").version
    loaded_before(lake, monkeypatch, {"lakelog.a": "1"})
    assert lake.set_properties("t", {"lakelog.a": "1"}) == before + 1  # the other's version
    assert lake.snapshot("t").version == before + 1

    loaded_before(lake, monkeypatch, {"lakelog.b": "2"})
    version = lake.set_properties("t", {"lakelog.a": "3"})
    assert version == before + 3
    properties = lake.snapshot("t").properties
    assert (properties["lakelog.a"], properties["lakelog.b"]) == ("3", "2")

    loaded_before(lake, monkeypatch, {"lakelog.c": "4"}, times=100)
    with pytest.raises(ConcurrentWriteError, match="other writers changed"):
        lake.set_properties("t", {"lakelog.a": "5"})
    assert lake.snapshot("t").properties["lakelog.a"] == "3"


def test_a_table_replaced_by_two_writers_at_once(lake):
    """Two runs of one rebuild replacing a table at once (a model whose columns changed): one
    commit loses to the other. With the same columns the loser finds the table already so;
    with other columns it fails with a `ConcurrentWriteError`, never delta-rs's own error."""
    lake.create_table("t", SCHEMA)
    wider = T.StructType([*SCHEMA.fields, T.StructField("extra", T.StringType())])
    narrower = T.StructType(SCHEMA.fields[:2])

    def race(first: T.StructType, second: T.StructType) -> list[BaseException]:
        failures: list[BaseException] = []
        start = threading.Barrier(2)

        def replace(schema: T.StructType) -> None:
            start.wait()
            try:
                lake.replace_table("t", schema)
            except BaseException as exc:  # noqa: BLE001 - reported to the test's thread
                failures.append(exc)

        threads = [threading.Thread(target=replace, args=(s,)) for s in (first, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return failures

    for _ in range(5):
        assert race(wider, wider) == []
        assert lake.snapshot("t").schema == wider
    lost: list[BaseException] = []
    for _ in range(20):  # until the two commits meet (they did every time here)
        lost += race(wider, narrower)
        if lost:
            break
    assert lost and all(isinstance(f, ConcurrentWriteError) for f in lost), lost
    assert lake.snapshot("t").schema in (wider, narrower)


def test_a_vacuum_after_another_writers_metadata_change(lake, spark, monkeypatch):
    """A vacuum whose start commit loses to a property set meanwhile (an erasure keeping a log's
    heads) is tried again from the latest version and deletes what it would have."""
    lake.create_table("t", SCHEMA)
    lake.write(lake.snapshot("t"), rows(spark, [1]))
    lake.write(lake.snapshot("t"), rows(spark, [2]), mode="overwrite")
    loaded_before(lake, monkeypatch, {"lakelog.a": "1"})
    removed = lake.vacuum("t", retention=timedelta(0))
    assert len(removed) == 1
    assert [r.id for r in lake.read(lake.snapshot("t")).collect()] == [2]


def test_a_vacuum_whose_end_commit_lost_reports_what_it_deleted(lake, spark, monkeypatch):
    """A vacuum whose end commit loses to another writer's metadata change after it deleted its
    files is tried again, which finds nothing left to delete: it reports the files the first
    attempt deleted."""
    lake.create_table("t", SCHEMA)
    lake.write(lake.snapshot("t"), rows(spark, [1]))
    lake.write(lake.snapshot("t"), rows(spark, [2]), mode="overwrite")
    real, lost = DeltaTable.vacuum, []

    def vacuum(self, *args, dry_run: bool = True, **kwargs):
        done = real(self, *args, dry_run=dry_run, **kwargs)
        if not dry_run and not lost:  # the files are deleted; the end commit loses
            lost.append(done)
            raise CommitFailedError("the vacuum's end commit lost a race (simulated)")
        return done

    monkeypatch.setattr(DeltaTable, "vacuum", vacuum)
    removed = lake.vacuum("t", retention=timedelta(0))
    assert len(lost) == 1 and len(lost[0]) == 1
    assert removed == lost[0]
    assert [r.id for r in lake.read(lake.snapshot("t")).collect()] == [2]


def test_a_version_whose_log_was_forgotten_meanwhile(lake, spark):
    """An erasure's clean-up (`forget_history`) deletes the log before a version while a writer
    holds an older snapshot: its commit, and a look-up of its transactions, cannot be checked
    against the versions since. Both fail as a `ConcurrentWriteError` (read the table again),
    not as delta-rs's own error, and the write leaves no file behind."""
    lake.create_table("t", SCHEMA)
    for i in range(2):
        lake.write_rows(lake.snapshot("t"), [{"part": 0, "id": i, "name": "n", "tags": {}}])
    stale, looked_up = lake.snapshot("t", 2), lake.snapshot("t", 2)
    for i in range(2, 4):
        lake.write_rows(lake.snapshot("t"), [{"part": 0, "id": i, "name": "n", "tags": {}}])
    lake.forget_history("t", before=4)
    with pytest.raises(ConcurrentWriteError, match="forgotten meanwhile"):
        looked_up.txn_version("some-app")
    with pytest.raises(ConcurrentWriteError, match="forgotten meanwhile"):
        lake.write(stale, rows(spark, [9]))
    kept = {f.path for f in lake.snapshot("t").files()}
    table_dir = Path(lake.root) / "t"
    on_disk = {str(p.relative_to(table_dir)) for p in table_dir.rglob("*.parquet")
               if "_delta_log" not in p.parts}
    assert on_disk == kept
    assert sorted(r.id for r in lake.read(lake.snapshot("t")).collect()) == [0, 1, 2, 3]


def test_a_file_delta_rs_reports_is_named_relative_to_its_table():
    """A vacuum reports files relative to the table, or (its retry) by their full path or URI:
    `delta_commit.vacuum` names each relative to the table, so that one file is one name."""
    for reported in ("part-1.parquet", "/data/lake/t/part-1.parquet",
                     "file:///data/lake/t/part-1.parquet"):
        assert delta_commit.relative_to_table(reported, "/data/lake/t") == "part-1.parquet"
    assert delta_commit.relative_to_table(
        "s3://bucket/lake/t/k=1/part-1.parquet", "bucket/lake/t") == "k=1/part-1.parquet"
    assert delta_commit.relative_to_table(
        "/data/lake/other/part-1.parquet", "/data/lake/t") == "/data/lake/other/part-1.parquet"
