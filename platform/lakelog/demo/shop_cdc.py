"""The demo web shop's OLTP database, captured: changelog topics, compacted and history tables.

The source is SQLite under ``<home>/sources/shop.db`` by default, or the PostgreSQL database a
DSN points at (``LAKELOG_SOURCE_DSN`` in the CLI, the source resource in Dagster).
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from pyspark.sql import SparkSession

from lakelog import consumers
from lakelog.cdc import Source
from lakelog.cdc.capture import capture_until_caught_up
from lakelog.cdc.captured import captured_source
from lakelog.cdc.connect import open_source, sqlite_path
from lakelog.cdc.errors import SourceUnavailableError
from lakelog.demo import oltp
from lakelog.lake import Lake
from lakelog.log import ingest

#: Customers change anywhere in the table (any customer may edit a profile), so their compacted
#: table is merge-on-read: a batch costs its changes, not the table (benchmarks/bench_compacted).
SHOP = captured_source("shop", oltp.TABLES, merge_on_read=("customers",))
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


#: The demo's own bookkeeping in the shop database (not captured): batches already mutated.
DEMO_BATCHES = "lakelog_demo_batches"


def connect(root: str, dsn: str | None = None) -> tuple[Any, oltp.Dialect]:
    """A connection to the shop database (created if missing) and its dialect."""
    if dsn:
        try:
            return psycopg.connect(dsn, connect_timeout=10, autocommit=True), "postgres"
        except psycopg.OperationalError as e:
            raise SourceUnavailableError(f"cannot connect to the shop database: {e}") from e
    path = sqlite_path(root, SERVER)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return sqlite3.connect(path, timeout=30), "sqlite"


def prepare(conn: Any, dialect: oltp.Dialect, *, seed: int) -> None:
    """Create and seed the shop tables once; a second call (a rerun) changes nothing."""
    oltp.create_schema(conn, dialect)
    conn.execute(f"CREATE TABLE IF NOT EXISTS {DEMO_BATCHES} (batch integer PRIMARY KEY)")
    conn.commit()
    if conn.execute("SELECT count(*) FROM customers").fetchone()[0] == 0:
        oltp.seed(conn, dialect, seed=seed)


def mutate_batch(
    conn: Any, dialect: oltp.Dialect, k: int, *, changes: int, seed: int, start: datetime
) -> bool:
    """The shop's OLTP activity during workload batch `k`, once: False if it already ran.

    The batch is recorded after its transactions commit, so a run killed in the middle of them
    repeats part of them: the captured tables still mirror the database exactly.
    """
    if conn.execute(f"SELECT count(*) FROM {DEMO_BATCHES} WHERE batch = {k}").fetchone()[0]:
        return False
    oltp.mutate(conn, dialect, n=changes, seed=seed * 1000 + k, now=start + timedelta(hours=k))
    conn.execute(f"INSERT INTO {DEMO_BATCHES} VALUES ({k})")
    conn.commit()
    return True
