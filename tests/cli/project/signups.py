"""A pipeline of a user's own, outside the lakelog package: what the CLI tests point
`--pipeline` at. Sign-ups land in a topic; a windowed aggregate counts them per minute and plan
(keyed: a replay into it would count twice), a plain consumer copies them (appends: a replay
appends them again), and a SQL model sums the windows per hour."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pyspark.sql import types as T

from lakelog.consumers import BatchInput, Consumer, Output
from lakelog.consumers.watermarks import Watermark
from lakelog.log.topics import Compaction, EventTime, Topic
from lakelog.pipeline import Pipeline
from lakelog.windows import Count, Tumbling, WindowedAggregate

SIGNUPS = Topic(
    "signups",
    T.StructType([
        T.StructField("event_id", T.StringType(), False),
        T.StructField("user_id", T.StringType(), False),
        T.StructField("plan", T.StringType(), False),
        T.StructField("time", T.TimestampType(), False),
    ]),
    key="user_id",
    partitions=2,
    time=EventTime("time"),
    compaction=Compaction(),
)
PER_MINUTE = WindowedAggregate(
    "signups_per_minute", ("signups",), Tumbling(timedelta(minutes=1)), (Count("signups"),),
    group_by=("plan",), watermark=Watermark(lateness=timedelta(minutes=1)),
)
COPIES = Output("streams/signup_copies", T.StructType([
    T.StructField("event_id", T.StringType()), T.StructField("plan", T.StringType())]))


def copy(batch: BatchInput):
    return {COPIES.path: batch.records["signups"].select("event_id", "plan")}


pipeline = Pipeline(
    "signups",
    topics=[SIGNUPS],
    consumers=[Consumer("copies", ("signups",), (COPIES,), copy)],
    windows=[PER_MINUTE],
    models=Path(__file__).parent / "models",
)
