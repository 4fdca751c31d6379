"""A consumer's backlog from metadata: records behind, and the age of the oldest unconsumed one."""

from __future__ import annotations

from datetime import timedelta

from engine_helpers import drop, record
from pyspark.sql import types as T

from lakelog.consumers import Consumer, Output, run_until_caught_up
from lakelog.consumers.backlog import backlog
from lakelog.log import ingest

OUT = Output("streams/ids", T.StructType([T.StructField("event_id", T.StringType())]))
CONSUMER = Consumer(
    "ids", ("events",), (OUT,), lambda batch: {OUT.path: batch.records["events"].select("event_id")}
)


def test_backlog_counts_records_and_ages_the_oldest_unconsumed(lake, spark, topic, now):
    topics = {"events": topic}
    assert backlog(lake, CONSUMER, topics).oldest is None  # no log yet: nothing behind
    first, second = now - timedelta(hours=2), now - timedelta(minutes=5)
    drop(lake.root, topic.name, "a.ndjson", [record(i) for i in range(10)])
    ingest.ingest(lake, spark, topic, now=first)

    behind = backlog(lake, CONSUMER, topics)
    assert behind.records == 10
    assert behind.oldest == first
    assert behind.seconds(now) == timedelta(hours=2).total_seconds()

    run_until_caught_up(lake, CONSUMER, topics, now=lambda: now)
    drop(lake.root, topic.name, "b.ndjson", [record(i) for i in range(10, 14)])
    ingest.ingest(lake, spark, topic, now=second)

    behind = backlog(lake, CONSUMER, topics)  # the first batch is consumed: only the second ages
    assert behind.records == 4
    assert behind.oldest == second
    assert sum(x.lag for x in behind.lags) == 4

    run_until_caught_up(lake, CONSUMER, topics, now=lambda: now)
    caught_up = backlog(lake, CONSUMER, topics)
    assert (caught_up.records, caught_up.oldest, caught_up.seconds(now)) == (0, None, 0.0)
