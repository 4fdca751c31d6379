"""The shop's captured tables against the source database, SQLite and real PostgreSQL:
compacted tables equal the source, reconciliation sees it, and sees a difference or a source
that moved on."""

from __future__ import annotations

import os
import sqlite3

import psycopg
import pytest
from cdc_helpers import MutatedDuringSnapshot, Mutator

from lakelog.cdc import capture, checkpoint
from lakelog.cdc.reconcile import reconcile
from lakelog.demo import oltp, shop_cdc
from lakelog.lake import EmbeddedLake


def reconcile_all(spark, lake, src, now):
    position = checkpoint.load(lake.root, src.server_name, src.connector).position
    return {
        t.name: reconcile(spark, lake, shop_cdc.COMPACTED[t.name], src, t, position=position,
                          now=now)
        for t in oltp.TABLES
    }


@pytest.fixture(params=["sqlite", "postgres"])
def shop(request, tmp_path):
    """(dialect, connect, source) of a seeded shop database of either kind."""
    root = str(tmp_path / "lake")
    if request.param == "sqlite":
        src = shop_cdc.source(root)
        path = src.path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        conn = sqlite3.connect(path)
        oltp.create_schema(conn, "sqlite")
        oltp.seed(conn, "sqlite", customers=60, products=40, seed=3)
        conn.close()
        return "sqlite", lambda: sqlite3.connect(path, timeout=30, check_same_thread=False), src
    dsn = request.getfixturevalue("pg_dsn")
    slot = request.getfixturevalue("slot")
    src = shop_cdc.source(root, dsn)
    src.slot = slot  # a slot of the test's own, dropped with its database
    return "postgres", lambda: psycopg.connect(dsn), src


def test_compacted_tables_equal_the_source_after_concurrent_changes(spark, tmp_path, shop, now):
    dialect, connect, src = shop
    lake = EmbeddedLake(spark, str(tmp_path / "lake"))
    mutator = Mutator(connect, dialect, now)
    mutator.start()
    try:  # the writer commits before and while the snapshot is read
        capture(MutatedDuringSnapshot(src, mutator), lake.root, now=now)
    finally:
        mutator.finish()
    result = shop_cdc.sync(lake, spark, src, now=now, max_changes=100)
    assert result.dead_letters == 0
    checks = reconcile_all(spark, lake, src, now)
    assert all(c.matches and not c.source_moved for c in checks.values()), checks
    assert checks["customers"].lake_rows > 0

    # The source moves on: reconciliation says so rather than reporting a difference.
    conn = connect()
    oltp.mutate(conn, dialect, n=20, seed=99, now=now)
    conn.close()
    assert all(c.source_moved for c in reconcile_all(spark, lake, src, now).values())


def test_a_difference_is_found_and_named(spark, tmp_path, shop, now):
    dialect, connect, src = shop
    lake = EmbeddedLake(spark, str(tmp_path / "lake"))
    shop_cdc.sync(lake, spark, src, now=now)
    table = shop_cdc.COMPACTED["products"]
    snapshot = lake.snapshot(table.path)
    rows = lake.read(snapshot)
    damaged = rows.where("product_id != 'p-00003'")
    lake.write(snapshot, damaged, mode="overwrite")
    check = reconcile_all(spark, lake, src, now)["products"]
    assert not check.matches and not check.source_moved
    assert (check.lake_rows, check.source_rows) == (39, 40)
    assert check.missing == ('{"product_id":"p-00003"}',) and check.extra == ()
