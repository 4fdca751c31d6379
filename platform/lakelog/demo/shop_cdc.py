"""The demo web shop's OLTP database, captured: changelog topics, compacted and history tables.

The source is SQLite under ``<home>/sources/shop.db`` by default, or the PostgreSQL database a
DSN points at (``LAKELOG_SOURCE_DSN`` in the CLI, the source resource in Dagster).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime

from pyspark.sql import SparkSession

from lakelog import consumers, ingest
from lakelog.cdc import PostgresSource, Source, SqliteSource, capture
from lakelog.changelog import changelog_topic
from lakelog.compacted import CompactedTable
from lakelog.demo import oltp
from lakelog.history import HistoryTable
from lakelog.lake import Lake
from lakelog.topics import Topic

SERVER = "shop"
SLOT = PUBLICATION = "lakelog_shop"
SQLITE_PATH = os.path.join("sources", "shop.db")

CHANGELOGS: dict[str, Topic] = {
    t.topic: changelog_topic(t.name, t.spark_schema(), t.primary_key) for t in oltp.TABLES
}
COMPACTED: dict[str, CompactedTable] = {
    t.name: CompactedTable(t.name, CHANGELOGS[t.topic], t.spark_schema(), t.primary_key)
    for t in oltp.TABLES
}
HISTORY: dict[str, HistoryTable] = {
    t.name: HistoryTable(t.name, CHANGELOGS[t.topic], t.spark_schema(), t.primary_key)
    for t in oltp.TABLES
}
CONSUMERS = {
    c.name: c for c in [*(t.consumer for t in COMPACTED.values()),
                        *(t.consumer for t in HISTORY.values())]
}


def source(root: str, dsn: str | None = None) -> Source:
    """The shop database: PostgreSQL when `dsn` is given, else SQLite under `root`."""
    if dsn:
        return PostgresSource(dsn, oltp.TABLES, slot=SLOT, publication=PUBLICATION,
                              server_name=SERVER)
    return SqliteSource(os.path.join(root, SQLITE_PATH), oltp.TABLES, server_name=SERVER)


@dataclass
class SyncResult:
    changes: int = 0  # change events landed (snapshot rows included)
    ingested: int = 0  # changelog records appended
    dead_letters: int = 0
    microbatches: dict[str, int] = field(default_factory=dict)


def sync(
    lake: Lake, spark: SparkSession, src: Source, *, now: datetime,
    max_changes: int = 10_000, max_captures: int = 1_000,
) -> SyncResult:
    """Capture until caught up, ingest the changelogs, and bring every table up to date."""
    result = SyncResult()
    for _ in range(max_captures):
        captured = capture(src, lake.root, now=now, max_changes=max_changes)
        result.changes += captured.changes + captured.snapshot_rows
        if not captured.files and captured.position_after == captured.position_before:
            break
    for done in ingest.ingest_topics(lake, spark, list(CHANGELOGS.values()), now=lambda: now):
        result.ingested += done.appended
        result.dead_letters += done.dead_letters
    for consumer in CONSUMERS.values():
        batches = consumers.run_until_caught_up(lake, consumer, CHANGELOGS, now=lambda: now)
        result.microbatches[consumer.name] = len(batches)
    return result

