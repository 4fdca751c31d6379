"""The main job: generate the web-shop workload and run ingestion and every consumer over it.

Each of the workload's batches is landed (files already there are kept), ingested topic by topic,
and consumed by every consumer until caught up. With a shop database, each batch also changes
the database (inserts, updates, deletes) and its capture brings the changelogs, compacted and
history tables up to date. Then the stream consumers (windowed aggregates and joins, which read
the changelogs and the customer tables too) catch up. Every step is exactly-once and resumable, so a
run that was killed at any moment, run again with the same seed and home, finishes the remaining
work and leaves the tables an uninterrupted run leaves.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pyspark.sql import SparkSession

from lakelog import consumers, ingest
from lakelog.consumers import Consumer
from lakelog.lake import Lake
from lakelog.log import partition_states
from lakelog.topics import Topic
from lakelog.carts import publish_orders
from lakelog.demo import shop, shop_cdc
from lakelog.demo.workload import Workload


@dataclass
class DemoSummary:
    events: int
    seed: int
    batches: int
    landed: int = 0  # lines in the workload's landing files
    files_written: int = 0  # by this run (a resumed run writes only what was missing)
    read: int = 0
    appended: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    ingests: int = 0
    microbatches: int = 0
    heads: dict[str, int] = field(default_factory=dict)
    lag: dict[str, int] = field(default_factory=dict)
    source: str | None = None  # the captured shop database: sqlite or postgresql
    source_changes: int = 0  # change events captured (snapshot rows included)
    seconds: float = 0.0

    @property
    def records_per_second(self) -> float:
        return self.read / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "records_per_second": round(self.records_per_second, 1)}


def run_demo(
    lake: Lake,
    spark: SparkSession,
    *,
    topics: Mapping[str, Topic],
    consumer_list: list[Consumer],
    workload: Workload,
    now: Callable[[], datetime],
    progress: Callable[[str], None] = lambda _: None,
    source_dsn: str | None = None,
    with_source: bool = True,
    stream_consumers: Sequence[Consumer] = (),
) -> DemoSummary:
    started = time.perf_counter()
    summary = DemoSummary(workload.events, workload.seed, workload.batches)
    conn = dialect = src = None
    if with_source:
        conn, dialect = shop_cdc.connect(lake.root, source_dsn)
        shop_cdc.prepare(conn, dialect, seed=workload.seed)
        src = shop_cdc.source(lake.root, source_dsn)
        summary.source = src.connector
    every_topic = {**topics, **shop_cdc.CHANGELOGS}

    def catch_up(consumer: Consumer, reads: Mapping[str, Topic]) -> int:
        """Microbatches with records (an idle tick, which only moves a watermark, is not one)."""
        done = [r for r in consumers.run_until_caught_up(lake, consumer, reads, now=now) if r.records]
        progress(f"  {consumer.name}: {len(done)} microbatches,"
                 f" {sum(r.records for r in done)} records")
        return len(done)

    for k in range(workload.batches):
        written = workload.write_batch(k, lake.root)
        summary.files_written += len(written)
        progress(f"batch {k + 1}/{workload.batches}: landed {len(written)} new files")
        if conn is not None:
            changes = max(workload.events // (20 * workload.batches), 10)
            if shop_cdc.mutate_batch(conn, dialect, k, changes=changes, seed=workload.seed,
                                     start=workload.start):
                progress(f"  shop database: about {changes} row changes")
        for result in ingest.ingest_topics(lake, spark, list(topics.values()), now=now):
            summary.ingests += 1
            summary.read += result.read
            summary.appended += result.appended
            summary.duplicates += result.duplicates
            summary.dead_letters += result.dead_letters
            progress(
                f"  ingest {result.topic}: {result.read} read, {result.appended} appended,"
                f" {result.duplicates} duplicates, {result.dead_letters} dead letters"
            )
        for consumer in consumer_list:
            summary.microbatches += catch_up(consumer, topics)
        if any(c.name == shop.CARTS.consumer.name for c in consumer_list):
            published = publish_orders(lake, shop.CARTS, now=now())
            progress(f"  {published.orders} checkout orders published to cart_orders")
        if src is not None:
            synced = shop_cdc.sync(lake, spark, src, now=now())
            summary.source_changes += synced.changes
            summary.microbatches += sum(synced.microbatches.values())
            progress(f"  capture: {synced.changes} change events, {synced.ingested} appended to"
                     " the changelogs")
        for consumer in stream_consumers:
            summary.microbatches += catch_up(consumer, every_topic)
    if conn is not None:
        conn.close()
    summary.landed = sum(workload.summary(k).lines for k in range(workload.batches))
    for name, topic in topics.items():
        states = partition_states(lake.snapshot(topic.path), topic.partitions)
        summary.heads[name] = sum(s.head for s in states.values())
    for consumer in consumer_list:
        summary.lag[consumer.name] = sum(p.lag for p in consumers.lag(lake, consumer, topics))
    for consumer in stream_consumers:
        lags = consumers.lag(lake, consumer, every_topic)
        summary.lag[consumer.name] = sum(p.lag for p in lags)
    if src is not None:
        for name, consumer in shop_cdc.CONSUMERS.items():
            lags = consumers.lag(lake, consumer, shop_cdc.CHANGELOGS)
            summary.lag[name] = sum(p.lag for p in lags)
    summary.seconds = time.perf_counter() - started
    return summary
