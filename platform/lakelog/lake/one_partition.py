"""Few rows in one partition: a microbatch's operators without shuffles.

An operator that needs the rows of a key together (a grouping, a window, a sort-merge join, a
de-duplication) finds them so in a single partition, where rows spread over partitions (a local
relation takes one per core, a scan of small files one per core too) are shuffled first: a
stage more, its tasks, and for adaptive execution a new plan of what is left. Two single
partitions join without a shuffle either. A held microbatch of 1,000 changes applied to a
compacted and a history table went through four shuffles; in one partition, none.

`one_partition` coalesces (no shuffle: one task reads the partitions there were). It is for
rows few enough that one core does them sooner than two cores and a shuffle: what a
microbatch holds in this process (`held_read.frame`), and stored rows of files that hold at
most `FEW_RECORDS` (`few`). A step whose rows each cost much CPU (a nested-loop join testing
every pair) spreads them over the cores again (`spread`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame

from lakelog.lake.base import DataFile
from lakelog.spark.session import over_connect

#: The most rows worked on in one partition (`few`): stored files' records, and a batch's.
FEW_RECORDS = 100_000


def one_partition(df: DataFrame) -> DataFrame:
    """`df` in a single partition, by a coalesce (no shuffle)."""
    return df.coalesce(1)


def few(files: Sequence[DataFile] = (), *, records: int = 0) -> bool:
    """Whether `files` and `records` more rows are few enough to work on in one partition."""
    return records + sum(f.num_records for f in files) <= FEW_RECORDS


def spread(df: DataFrame) -> DataFrame:
    """In a classic session, `df`'s rows dealt round-robin over its default parallelism (its
    cores), for rows that then each cost more CPU than the shuffle: a percolator's 1,000 events
    tested against every saved query took 0.30-0.36 s a batch in one partition, 0.22-0.29 s
    spread (its collect, 2 cores). Over Spark Connect `df` as it is: a batch took the same in
    one partition as before (0.15 s), and spread over the server's 8 shuffle partitions, the
    only count the client knows without asking, 0.21-0.23 s against 0.19 s."""
    spark = df.sparkSession
    return df if over_connect(spark) else df.repartition(spark.sparkContext.defaultParallelism)
