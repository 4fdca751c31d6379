"""The demo web shop's OLTP database, captured: changelog topics, compacted and history tables.

The source is SQLite under ``<home>/sources/shop.db`` by default, or the PostgreSQL database a
DSN points at (``LAKELOG_SOURCE_DSN`` in the CLI, the source resource in Dagster).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from pyspark.sql import SparkSession

from lakelog import consumers, ingest
from lakelog.captured import captured_source
from lakelog.cdc import Source
from lakelog.cdc.capture import capture_until_caught_up
from lakelog.cdc.sources import open_source
from lakelog.demo import oltp
from lakelog.lake import Lake

SHOP = captured_source("shop", oltp.TABLES)
SERVER = SHOP.server_name
CHANGELOGS = SHOP.changelogs
COMPACTED = SHOP.compacted
HISTORY = SHOP.history
CONSUMERS = SHOP.consumers


def source(root: str, dsn: str | None = None) -> Source:
    """The shop database: PostgreSQL when `dsn` is given, else SQLite under `root`."""
    return open_source(SERVER, oltp.TABLES, root=root, dsn=dsn)


@dataclass
class SyncResult:
    changes: int = 0  # change events landed (snapshot rows included)
    ingested: int = 0  # changelog records appended
    dead_letters: int = 0
    microbatches: dict[str, int] = field(default_factory=dict)


def sync(
    lake: Lake, spark: SparkSession, src: Source, *, now: datetime, max_changes: int = 10_000
) -> SyncResult:
    """Capture until caught up, ingest the changelogs, and bring every table up to date."""
    result = SyncResult()
    for captured in capture_until_caught_up(src, lake.root, now=now, max_changes=max_changes):
        result.changes += captured.changes + captured.snapshot_rows
    for done in ingest.ingest_topics(lake, spark, list(CHANGELOGS.values()), now=lambda: now):
        result.ingested += done.appended
        result.dead_letters += done.dead_letters
    for consumer in CONSUMERS.values():
        batches = consumers.run_until_caught_up(lake, consumer, CHANGELOGS, now=lambda: now)
        result.microbatches[consumer.name] = len(batches)
    return result
