"""Reconciliation: does a compacted table hold exactly the rows of its source table?

Both sides are fingerprinted the same way in Spark — row count and an order-independent hash
(the sum of each row's xxhash64) — after the source rows went through the very JSON conversion
capture uses, so equal tables give equal fingerprints whatever the row order.

The comparison is only meaningful at the captured position: the source rows are read, then the
source is asked for changes after that position; if there are any, the source moved on since the
capture and the result says so (`source_moved`) instead of reporting a false difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.cdc.compacted import CompactedTable, live_rows
from lakelog.cdc.envelope import dumps
from lakelog.cdc.source import Source
from lakelog.cdc.source_tables import SourceTable
from lakelog.lake import Lake

SAMPLE = 5


@dataclass(frozen=True)
class Reconciliation:
    table: str
    position: int
    source_moved: bool  # changes after `position` exist: the tables are not comparable now
    lake_rows: int
    source_rows: int
    lake_hash: int
    source_hash: int
    missing: tuple[str, ...] = ()  # keys in the source but not in the lake (a sample)
    extra: tuple[str, ...] = ()  # keys in the lake but not in the source (a sample)
    different: tuple[str, ...] = ()  # keys in both with other values (a sample)

    @property
    def matches(self) -> bool:
        return (self.lake_rows, self.lake_hash) == (self.source_rows, self.source_hash)


def _hashed(df: DataFrame, columns: list[str], key: tuple[str, ...]) -> DataFrame:
    return df.select(
        F.to_json(F.struct(*key)).alias("_key"), F.xxhash64(*columns).alias("_hash")
    )


def _fingerprint(hashed: DataFrame) -> tuple[int, int]:
    row = hashed.agg(
        F.count("*").alias("n"), F.sum(F.col("_hash").cast("decimal(38,0)")).alias("h")
    ).first()
    return row["n"], int(row["h"] or 0)


def source_frame(spark: SparkSession, source: Source, table: SourceTable) -> DataFrame:
    """The source table's current rows, typed as the changelog types them."""
    lines = [(dumps(row),) for row in source.rows(table)]
    raw = spark.createDataFrame(lines, T.StructType([T.StructField("value", T.StringType())]))
    return raw.select(F.from_json("value", table.spark_schema()).alias("r")).select("r.*")


def reconcile(
    spark: SparkSession,
    lake: Lake,
    compacted: CompactedTable,
    source: Source,
    table: SourceTable,
    *,
    position: int,
    now: datetime,
) -> Reconciliation:
    """Compare `compacted` (live rows) with `table` of `source` as captured up to `position`."""
    columns = list(table.column_names)
    source_rows = _hashed(source_frame(spark, source, table), columns, table.primary_key)
    moved = bool(source.changes(position, 1, now=now).events)
    lake_rows = _hashed(live_rows(lake, compacted), columns, table.primary_key)
    source_rows, lake_rows = source_rows.persist(), lake_rows.persist()
    try:
        (lake_n, lake_h), (source_n, source_h) = _fingerprint(lake_rows), _fingerprint(source_rows)
        result = Reconciliation(table.name, position, moved, lake_n, source_n, lake_h, source_h)
        if result.matches:
            return result
        joined = lake_rows.alias("l").join(source_rows.alias("s"), "_key", "full_outer")

        def sample(condition) -> tuple[str, ...]:
            return tuple(r["_key"] for r in joined.where(condition).select("_key").limit(SAMPLE)
                         .collect())

        return Reconciliation(
            table.name, position, moved, lake_n, source_n, lake_h, source_h,
            missing=sample(F.col("l._hash").isNull()),
            extra=sample(F.col("s._hash").isNull()),
            different=sample(F.col("l._hash") != F.col("s._hash")),
        )
    finally:
        source_rows.unpersist()
        lake_rows.unpersist()
