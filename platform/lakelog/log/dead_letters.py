"""The dead-letter table: every input record that could not be appended, and why.

``log/_dead_letters`` keeps the raw text, where it came from (file and line) and the reason, so a
bad record can be fixed and produced again; nothing is dropped silently.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.lake import AppTxn, Lake, Snapshot, already_committed

PATH = "log/_dead_letters"

SCHEMA = T.StructType(
    [
        T.StructField("topic", T.StringType()),
        T.StructField("source", T.StringType()),
        T.StructField("line", T.LongType()),
        T.StructField("raw", T.StringType()),
        T.StructField("reason", T.StringType()),
        T.StructField("ingest_time", T.TimestampType()),
    ]
)


def dead_letter_rows(parsed: DataFrame, *, topic: str) -> DataFrame:
    """Rows of `parsed` (from `records.parse_lines`) that carry an error, as dead letters."""
    return parsed.where(F.col("error").isNotNull()).select(
        F.lit(topic).alias("topic"),
        F.col("_src_file").alias("source"),
        F.col("_src_line").cast("long").alias("line"),
        F.col("value").alias("raw"),
        F.col("error").alias("reason"),
        F.col("_ingest_time").alias("ingest_time"),
    )


def owed(lake: Lake, txns: Sequence[AppTxn]) -> Snapshot | None:
    """The dead-letter table (created if new) to write a batch's dead letters to, or None when
    a commit carrying one of the batch's `txns` holds them already (a retry)."""
    lake.create_table(PATH, SCHEMA, partition_by=["topic"])
    snapshot = lake.snapshot(PATH)
    return None if any(already_committed(snapshot, t) for t in txns) else snapshot
