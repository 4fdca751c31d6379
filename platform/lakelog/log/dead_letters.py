"""The dead-letter table: every input record that could not be appended, and why.

``log/_dead_letters`` keeps the raw text, where it came from (file and line) and the reason, so a
bad record can be fixed and produced again; nothing is dropped silently.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

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
