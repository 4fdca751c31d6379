"""Merge-on-read tables: appended versions, resolved on read (whole, by files, by keys, as a
change feed), squashed by key-overlapping groups, and switched to and from copy-on-write."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from lakelog.consumers import Output
from lakelog.errors import ChangesUnavailableError, ConfigError
from lakelog.lake.merge_on_read import MergeKeys, merge_keys
from lakelog.lake.squash import ensure_layout, squash
from lakelog.lake.upsert import read_keys, upsert, write_clustered

SCHEMA = T.StructType([T.StructField("k", T.LongType()), T.StructField("v", T.StringType()),
                       T.StructField("pos", T.LongType())])
MERGE = MergeKeys(("k",), "pos")


def table(lake, path="t"):
    lake.create_table(path, SCHEMA, properties=MERGE.properties())
    return path


def append(spark, lake, path, rows):
    """One microbatch: its rows as one file, sorted by key (as a merge-on-read output writes)."""
    return write_clustered(lake, lake.snapshot(path), spark.createDataFrame(rows, SCHEMA),
                           keys=("k",), rows_per_file=1000, rows=len(rows))


def current(lake, path, **read):
    df = lake.read(lake.snapshot(path), **read)
    got = [(r.k, (r.v, r.pos)) for r in df.collect()]
    assert len(got) == len(dict(got)), "one row per key"
    return dict(got)


def test_reads_give_each_key_its_newest_version(spark, lake):
    path = table(lake)
    append(spark, lake, path, [(1, "a", 1), (2, "b", 1), (3, "c", 1), (4, "d", 1)])
    append(spark, lake, path, [(2, "b2", 5), (3, "c-old", 0)])  # 3's version is older
    append(spark, lake, path, [(7, "g", 1), (8, "h", 1)])  # no overlap with the others
    first, second, third = sorted(lake.snapshot(path).files(), key=lambda f: f.modification_time)
    assert current(lake, path) == {1: ("a", 1), 2: ("b2", 5), 3: ("c", 1), 4: ("d", 1),
                                   7: ("g", 1), 8: ("h", 1)}
    assert lake.read(lake.snapshot(path), all_versions=True).count() == 8
    # A read of some files gives the current rows that live in them, resolved against every
    # file overlapping their keys.
    assert current(lake, path, files=[first]) == {1: ("a", 1), 3: ("c", 1), 4: ("d", 1)}
    assert current(lake, path, files=[second]) == {2: ("b2", 5)}
    assert current(lake, path, files=[third]) == {7: ("g", 1), 8: ("h", 1)}
    # A lookup by key reads the files that may hold the keys and gets the newest versions.
    keys = spark.createDataFrame([(2,), (3,), (9,)], "k long")
    found = read_keys(lake, lake.snapshot(path), keys, ("k",))
    assert {r.k: r.v for r in found.collect()} == {2: "b2", 3: "c"}


def test_fold_rewrites_only_overlapping_files_and_keeps_the_rows(spark, lake):
    path = table(lake)
    append(spark, lake, path, [(1, "a", 1), (2, "b", 1), (3, "c", 1)])
    append(spark, lake, path, [(2, "b2", 5), (3, "c-old", 0)])
    append(spark, lake, path, [(7, "g", 1)])
    alone = max(lake.snapshot(path).files(), key=lambda f: f.modification_time)
    before = current(lake, path)
    result = squash(lake, path, rows_per_file=10)
    assert (result.files_before, result.files_squashed) == (3, 2)
    assert (result.versions_read, result.rows_written) == (5, 3)
    after = lake.snapshot(path)
    assert alone.path in {f.path for f in after.files()}
    assert current(lake, path) == before
    assert lake.read(after, all_versions=True).count() == 4  # one version per key left
    assert squash(lake, path, rows_per_file=10).version is None  # nothing overlaps any more


def test_change_feed_is_the_net_change_of_the_rows(spark, lake):
    path = table(lake)
    v1 = append(spark, lake, path, [(1, "a", 1), (2, "b", 1)])
    v2 = append(spark, lake, path, [(2, "b2", 5), (3, "c", 5)])
    v3 = append(spark, lake, path, [(1, "a-old", 0)])  # older than the stored version

    def feed(start, end):
        return sorted((r._change_type, r.k, r.v, r._commit_version)
                      for r in lake.changes(path, start, end).collect())

    assert feed(v1, v1) == [("insert", 1, "a", v1), ("insert", 2, "b", v1)]
    assert feed(v2, v2) == [("delete", 2, "b", v2), ("insert", 2, "b2", v2),
                            ("insert", 3, "c", v2)]
    assert feed(v3, v3) == []
    assert feed(v1, v3) == [("insert", 1, "a", v3), ("insert", 2, "b2", v3),
                            ("insert", 3, "c", v3)]
    v4 = squash(lake, path, rows_per_file=10).version
    assert feed(v4, v4) == []  # a squash changes no row


def test_a_change_feed_that_needs_vacuumed_files_says_so(spark, lake):
    """Netting a merge-on-read range reads the rows the version before it held."""
    path = table(lake)
    append(spark, lake, path, [(1, "a", 1)])
    append(spark, lake, path, [(1, "a2", 2)])
    apart = append(spark, lake, path, [(5, "e", 1)])  # overlaps neither: not squashed
    squashed = squash(lake, path, rows_per_file=10).version
    assert lake.purge_removed(path, squashed)  # the first two files are gone
    with pytest.raises(ChangesUnavailableError,
                       match=rf"the change feed from version {apart} of t \(its version "
                             rf"{apart - 1}\) needs .*, which was vacuumed"):
        lake.changes(path, apart, apart)


def test_layouts_switch_both_ways_without_changing_rows(spark, lake):
    lake.create_table("t", SCHEMA)
    upsert(lake, lake.snapshot("t"), spark.createDataFrame([(1, "a", 1), (2, "b", 1)], SCHEMA),
           keys=("k",), newer_by="pos", rows_per_file=10)
    assert ensure_layout(lake, "t", MERGE, rows_per_file=10)
    assert merge_keys(lake.snapshot("t").properties) == MERGE
    append(spark, lake, "t", [(2, "b2", 5)])
    assert not ensure_layout(lake, "t", MERGE, rows_per_file=10)
    with pytest.raises(ConfigError, match="keys cannot change"):
        ensure_layout(lake, "t", MergeKeys(("v",), "pos"), rows_per_file=10)
    # A squash told the declared keys converts a table its consumer has not converted yet.
    lake.create_table("idle", SCHEMA)
    assert squash(lake, "idle", rows_per_file=10, declared=MERGE).version is None
    assert merge_keys(lake.snapshot("idle").properties) == MERGE
    # Back to copy-on-write: squashed first, so a plain reader sees one row per key.
    assert ensure_layout(lake, "t", None, rows_per_file=10)
    snapshot = lake.snapshot("t")
    assert merge_keys(snapshot.properties) is None
    plain = lake.read(snapshot, all_versions=True).collect()
    assert sorted((r.k, r.v) for r in plain) == [(1, "a"), (2, "b2")]


def test_bad_merge_on_read_declarations_are_refused(lake):
    with pytest.raises(ConfigError, match="merge-on-read needs keys and newer_by"):
        Output("t", SCHEMA, keys=("k",), merge_on_read=True)
    with pytest.raises(ConfigError, match="not partitioned"):
        Output("t", SCHEMA, keys=("k",), newer_by="pos", partition_by=("v",), merge_on_read=True)
    lake.create_table("plain", SCHEMA)
    with pytest.raises(ConfigError, match="not a merge-on-read table"):
        squash(lake, "plain")
