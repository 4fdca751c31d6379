"""Timestamp literals a Spark Connect client sends without asking the server anything."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.spark import literals
from lakelog.spark.session import over_connect

MOMENTS = [
    datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone.utc),
    datetime(2026, 3, 29, 3, 30, tzinfo=timezone(timedelta(hours=2))),
    datetime(2026, 12, 6, 9, 0, 0, 1),  # naive: local time (no caller passes one)
    datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc),
]


def test_a_timestamp_literal_is_the_instant_pyspark_s_own_gives(spark):
    row = spark.range(1).select(
        *[literals.timestamp(m).alias(f"ours{i}") for i, m in enumerate(MOMENTS)],
        *[F.lit(m).cast("timestamp").alias(f"theirs{i}") for i, m in enumerate(MOMENTS)],
        literals.timestamp(None).alias("none"),
    ).first()
    for i in range(len(MOMENTS)):
        assert row[f"ours{i}"] == row[f"theirs{i}"]
    assert row["none"] is None


def test_a_null_timestamp_literal_is_typed(spark):
    df = spark.range(1).select(literals.timestamp(None).alias("t"))
    assert df.schema["t"].dataType == T.TimestampType()


def test_timestamp_literals_ask_the_server_nothing(spark, monkeypatch):
    """PySpark's Connect client asks for the session's timestamp type (a round trip) for each
    `F.lit` of a datetime; a microbatch's watermarks and times are made without it."""
    if not over_connect(spark):
        pytest.skip("a classic session's literals make no round trip")
    conf = type(spark.conf)
    asked: list[str] = []
    real = conf.get
    monkeypatch.setattr(conf, "get", lambda self, key, *a, **k: asked.append(key) or
                        real(self, key, *a, **k))
    F.lit(MOMENTS[0])
    assert asked, "PySpark's own literal no longer asks: this test checks nothing"
    asked.clear()
    for moment in (*MOMENTS, None):
        literals.timestamp(moment)
    assert asked == []
