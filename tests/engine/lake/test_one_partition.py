"""Few rows in one partition (`lakelog.lake.one_partition`): a microbatch's groupings, windows
and joins without shuffles, and the same rows as when they are spread and shuffled."""

from __future__ import annotations

import re

import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.lake import held_read, one_partition
from lakelog.lake.base import DataFile
from lakelog.spark.session import over_connect

SCHEMA = T.StructType([T.StructField("k", T.LongType()), T.StructField("v", T.LongType())])


def plan(df, capsys) -> str:
    """The physical plan Spark would run (before adaptive execution changes it)."""
    capsys.readouterr()
    df.explain()
    return capsys.readouterr().out


def shuffled(physical: str) -> bool:
    """Whether a plan shuffles rows (a broadcast of a small side is not a shuffle)."""
    return re.search(r"(?<!Broadcast)Exchange", physical) is not None


def counts(df) -> dict[int, int]:
    return {r["k"]: r["n"] for r in df.groupBy("k").agg(F.count("*").alias("n")).collect()}


def test_few_counts_stored_records_and_batch_records(monkeypatch):
    monkeypatch.setattr(one_partition, "FEW_RECORDS", 100)
    files = [DataFile("a.parquet", size=1, num_records=60), DataFile("b.parquet", 1, 30)]
    assert one_partition.few(files)
    assert one_partition.few(files, records=10)
    assert not one_partition.few(files, records=11)
    assert one_partition.few(records=100) and not one_partition.few(records=101)


def test_held_rows_are_grouped_without_a_shuffle(spark, capsys):
    table = pa.table({"k": [i % 7 for i in range(500)], "v": list(range(500))})
    held = held_read.frame(spark, table, SCHEMA)
    grouped = held.groupBy("k").agg(F.count("*").alias("n"))
    assert not shuffled(plan(grouped, capsys))
    assert counts(held) == {k: len(range(k, 500, 7)) for k in range(7)}


def test_a_small_table_is_read_in_one_partition_and_a_large_one_spread(
    spark, lake, capsys, monkeypatch,
):
    lake.create_table("t", SCHEMA)
    for part in range(3):  # three files
        rows = [(i % 5, part * 100 + i) for i in range(100)]
        lake.write(lake.snapshot("t"), spark.createDataFrame(rows, SCHEMA).coalesce(1))
    snapshot = lake.snapshot("t")
    assert len(snapshot.files()) == 3
    expected = {k: 60 for k in range(5)}

    small = lake.read(snapshot)
    assert not shuffled(plan(small.groupBy("k").count(), capsys))
    assert counts(small) == expected

    monkeypatch.setattr(one_partition, "FEW_RECORDS", 299)
    spread = lake.read(snapshot)
    assert shuffled(plan(spread.groupBy("k").count(), capsys))
    assert counts(spread) == expected


def test_single_partitions_join_without_a_shuffle_whatever_their_estimated_size(spark, capsys):
    """Spark estimates a join as large as the product of its sides, so the plans a batch's rows
    come from are often estimated over 128 MB, past which Spark by default shuffles even single
    partitions to join them (`spark.sql.maxSinglePartitionBytes`, which lakelog's sessions
    lift)."""
    table = pa.table({"k": list(range(12)), "v": list(range(12))})
    held = held_read.frame(spark, table, SCHEMA)
    rows = held
    for i in range(3):  # 12 rows, estimated at 288 B to the fourth power (~7 GB)
        rows = rows.join(held.select(F.col("k").alias(f"k{i}")), F.col("k") == F.col(f"k{i}"))
    left = one_partition.one_partition(rows.select("k", "v"))
    right = one_partition.one_partition(rows.select("k", (F.col("v") * 10).alias("w")))
    joined = left.join(right, "k")
    assert not shuffled(plan(joined, capsys))
    assert sorted((r["k"], r["w"]) for r in joined.collect()) == [(k, k * 10) for k in range(12)]


def test_rows_costly_each_are_spread_over_a_classic_sessions_cores(spark, capsys):
    table = pa.table({"k": list(range(40)), "v": list(range(40))})
    rows = one_partition.spread(held_read.frame(spark, table, SCHEMA))
    if over_connect(spark):  # as they are: spread over the server's shuffle partitions was slower
        assert not shuffled(plan(rows, capsys))
    else:
        assert "RoundRobinPartitioning" in plan(rows, capsys)
    assert sorted(r["k"] for r in rows.collect()) == list(range(40))
