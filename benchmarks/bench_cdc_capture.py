"""Benchmark of change data capture: snapshot and streaming throughput into landing files.

Prints one JSON object to stdout; progress goes to stderr. For each source (PostgreSQL through
logical decoding, SQLite through triggers) it seeds the demo shop database, times the first
`capture` (the snapshot: rows/s), applies `--mutations` row changes with `lakelog.demo.oltp`
(untimed), and times the capture calls that land them (changes/s, all costs included: reading
the source, converting, writing and fsyncing the files, advancing the source, the state file).

    /work/venv/bin/python benchmarks/bench_cdc_capture.py --mutations 100000

PostgreSQL: ``--dsn`` (default ``LAKELOG_BENCH_PG_DSN`` or ``host=127.0.0.1 port=5432
user=postgres dbname=postgres``) must reach a server with ``wal_level=logical`` that lets the user
create databases; the benchmark works in a new database ``lakelog_bench_<hex>`` and drops it
and its slot afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from lakelog.cdc import PostgresSource, SqliteSource, capture
from lakelog.cdc.source import Source
from lakelog.demo import oltp

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def measure(
    source: Source, root: str, load: Callable[[], oltp.Mutations], max_changes: int
) -> dict[str, Any]:
    """Time the snapshot capture, apply the load untimed, time the captures that land it."""
    started = time.perf_counter()
    first = capture(source, root, now=NOW, max_changes=max_changes)
    snapshot_s = time.perf_counter() - started
    rows = first.snapshot_rows
    progress(f"  snapshot: {rows} rows in {snapshot_s:.2f}s")
    started = time.perf_counter()
    done = load()
    progress(f"  load: {done} in {time.perf_counter() - started:.1f}s (untimed)")
    changes = calls = 0
    started = time.perf_counter()
    while True:
        result = capture(source, root, now=NOW, max_changes=max_changes)
        calls += 1
        changes += result.changes
        if not result.files and result.position_after == result.position_before:
            break
    streaming_s = time.perf_counter() - started
    progress(f"  streaming: {changes} changes in {streaming_s:.2f}s, {calls} capture calls")
    landed = sum(
        os.path.getsize(os.path.join(folder, f))
        for folder, _, files in os.walk(os.path.join(root, "landing")) for f in files
    )
    return {
        "snapshot": {
            "rows": rows,
            "seconds": round(snapshot_s, 3),
            "rows_per_s": round(rows / snapshot_s),
        },
        "streaming": {
            "row_changes_applied": done.inserts + done.updates + done.deletes,
            "transactions": done.transactions,
            "change_events": changes,
            "capture_calls": calls,
            "max_changes": max_changes,
            "seconds": round(streaming_s, 3),
            "changes_per_s": round(changes / streaming_s),
        },
        "landed_bytes": landed,
    }


def bench_postgres(args: argparse.Namespace, home: str) -> dict[str, Any]:
    name = f"lakelog_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        server = admin.execute("SHOW server_version").fetchone()[0]
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = make_conninfo(args.dsn, dbname=name)
    slot = f"{name}_slot"
    try:
        with psycopg.connect(dsn) as conn:
            oltp.create_schema(conn, "postgres")
            oltp.seed(conn, "postgres", customers=args.customers, products=args.products)
        conn = psycopg.connect(dsn, autocommit=True)
        conn.execute("SET synchronous_commit = off")  # a faster load; capture is unaffected

        def load() -> oltp.Mutations:
            return oltp.mutate(conn, "postgres", n=args.mutations, seed=1, now=NOW)

        source = PostgresSource(dsn, oltp.TABLES, slot, "lakelog_bench", "bench")
        progress(f"postgres {server}: {args.customers} customers, {args.products} products")
        figures = measure(source, os.path.join(home, "postgres"), load, args.max_changes)
        conn.close()
        return {"server_version": server, **figures}
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                " WHERE database = %s", (name,),
            )
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def bench_sqlite(args: argparse.Namespace, home: str) -> dict[str, Any]:
    path = os.path.join(home, "shop.db")
    conn = sqlite3.connect(path, timeout=30)
    oltp.create_schema(conn, "sqlite")
    oltp.seed(conn, "sqlite", customers=args.customers, products=args.products)
    conn.execute("PRAGMA synchronous=OFF")  # a faster load; capture is unaffected
    source = SqliteSource(path, oltp.TABLES, "bench")
    progress(
        f"sqlite {sqlite3.sqlite_version}: {args.customers} customers, {args.products} products"
    )
    figures = measure(
        source, os.path.join(home, "sqlite"),
        lambda: oltp.mutate(conn, "sqlite", n=args.mutations, seed=1, now=NOW), args.max_changes,
    )
    conn.close()
    return {"sqlite_version": sqlite3.sqlite_version, **figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get(
        "LAKELOG_BENCH_PG_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=postgres"))
    parser.add_argument("--customers", type=int, default=100_000)
    parser.add_argument("--products", type=int, default=2_000)
    parser.add_argument("--mutations", type=int, default=100_000)
    parser.add_argument("--max-changes", type=int, default=10_000)
    parser.add_argument("--skip", action="append", choices=["postgres", "sqlite"], default=[])
    parser.add_argument("--home", help="keep the landing zones here (must not exist)")
    args = parser.parse_args()
    home = args.home or tempfile.mkdtemp(prefix="lakelog-bench-cdc-")
    os.makedirs(home, exist_ok=bool(args.home is None))
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "settings": {
            k: getattr(args, k) for k in ("customers", "products", "mutations", "max_changes")
        },
    }
    try:
        if "postgres" not in args.skip:
            out["postgres"] = bench_postgres(args, home)
        if "sqlite" not in args.skip:
            out["sqlite"] = bench_sqlite(args, home)
    finally:
        if args.home is None:
            shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
