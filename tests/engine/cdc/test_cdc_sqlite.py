"""Capture from SQLite: snapshot, changes, a snapshot racing a writer, bad configuration."""

from __future__ import annotations

import os
import sqlite3
from datetime import timedelta
from decimal import Decimal

import pytest
from cdc_helpers import (
    Mutator,
    MutatedDuringSnapshot,
    assert_mirrors,
    capture_all,
    connect_sqlite,
    landed,
    visible_files,
)

from lakelog.cdc import (
    CaptureBusyError,
    SourceColumn,
    SourceTable,
    SourceUnavailableError,
    SqliteSource,
    capture,
    checkpoint,
)
from lakelog.demo import oltp
from lakelog.errors import ConfigError


ID = SourceColumn("id", "bigint")


def test_snapshot_then_changes(sqlite_path, tmp_path, now):
    source = SqliteSource(sqlite_path, oltp.TABLES, "shop")
    root = str(tmp_path / "lake")
    first = capture(source, root, now=now)
    assert first.snapshot_taken and first.position_before is None
    assert first.counts == {"customers": {"r": 60}, "products": {"r": 40}, "inventory": {"r": 40}}
    assert visible_files(root) == [
        f"landing/cdc.{t}/snapshot-0000000000000000/part-00000.ndjson"
        for t in ("customers", "inventory", "products")
    ]
    conn = connect_sqlite(sqlite_path)
    done = oltp.mutate(conn, "sqlite", n=300, seed=5, now=now)
    assert done.inserts and done.updates and done.deletes
    second = capture(source, root, now=now, max_changes=100)
    assert not second.snapshot_taken and second.position_before == 0
    assert 100 <= second.position_after < 110  # whole transactions only
    span = f"{0:016d}-{second.position_after:016d}"
    assert second.files[0] == f"landing/cdc.customers/stream-{span}.ndjson"
    capture_all(lambda: capture(source, root, now=now, max_changes=100))
    events = assert_mirrors(root, conn, "sqlite")
    every = [e for table_events in events.values() for e in table_events]
    assert {e["ts_ms"] for e in every} == {1772366400000}  # the injected clock
    assert conn.execute("SELECT count(*) FROM _lakelog_changes").fetchone() == (0,)  # pruned
    assert {e["op"] for e in every} == {"r", "c", "u", "d"}
    snapshot_flags = [e["source"]["snapshot"] for e in every if e["op"] == "r"]
    assert snapshot_flags.count("last") == 1


def test_deleted_key_inserted_again_is_alive(sqlite_path, tmp_path, now):
    source = SqliteSource(sqlite_path, oltp.TABLES, "shop")
    root = str(tmp_path / "lake")
    capture(source, root, now=now)
    conn = connect_sqlite(sqlite_path)
    row = conn.execute("SELECT * FROM customers WHERE customer_id = 5").fetchone()
    conn.execute("DELETE FROM customers WHERE customer_id = 5")
    conn.execute("INSERT INTO customers VALUES (?, ?, ?, ?, ?)", row)
    conn.execute("UPDATE customers SET customer_id = 500 WHERE customer_id = 6")  # a new key
    conn.commit()
    capture(source, root, now=now)
    events = assert_mirrors(root, conn, "sqlite")
    streamed = [
        (e["op"], (e["before"] or e["after"])["customer_id"])
        for e in events["customers"] if e["op"] != "r"
    ]
    assert streamed == [("d", 5), ("c", 5), ("d", 6), ("c", 500)]


def test_writer_racing_the_snapshot(sqlite_path, tmp_path, now):
    mutator = Mutator(lambda: connect_sqlite(sqlite_path), "sqlite", now)
    source = SqliteSource(sqlite_path, oltp.TABLES, "shop")
    root = str(tmp_path / "lake")
    mutator.start()
    try:
        racing = MutatedDuringSnapshot(source, mutator)
        result = capture(racing, root, now=now, max_changes=50)
        assert result.snapshot_taken
        mutator.wait_rounds(3)  # and it goes on while streaming
        capture(source, root, now=now, max_changes=50)
    finally:
        mutator.finish()
    assert capture_all(lambda: capture(source, root, now=now, max_changes=500)) > 0
    assert_mirrors(root, connect_sqlite(sqlite_path), "sqlite")


def test_exact_values_through_triggers(tmp_path, now):
    path = str(tmp_path / "values.db")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, d REAL, p NUMERIC, b INTEGER, t TEXT)")
    conn.execute("INSERT INTO m VALUES (1, 0.1, 10.5, 1, '2026-03-01 12:00:00')")
    conn.commit()
    table = SourceTable(
        "m",
        (SourceColumn("id", "bigint"), SourceColumn("d", "double"),
         SourceColumn("p", "numeric", precision=10, scale=2), SourceColumn("b", "boolean"),
         SourceColumn("t", "timestamp")),
        ("id",),
    )
    source = SqliteSource(path, [table], "values")
    root = str(tmp_path / "lake")
    capture(source, root, now=now)
    conn.execute("UPDATE m SET d = 0.1 + 0.2, p = 1234567.891, b = 0 WHERE id = 1")
    conn.commit()
    capture(source, root, now=now)
    snapshot, change = landed(root)["m"]
    assert snapshot["after"] == {
        "id": 1, "d": Decimal("0.1"), "p": Decimal("10.5"), "b": True,
        "t": "2026-03-01T12:00:00.000000Z",
    }
    assert str(snapshot["after"]["p"]) == "10.50"
    # json_object would round the double to 15 digits (0.3); the trigger writes all 17.
    assert change["after"]["d"] == Decimal("0.30000000000000004")
    assert str(change["after"]["p"]) == "1234567.89" and change["after"]["b"] is False


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (SourceTable("nope", (ID,), ("id",)), "has no table 'nope'"),
        (SourceTable("customers", (ID,), ("id",)), r"no column\(s\) \['id'\]"),
        (SourceTable("customers", oltp.CUSTOMERS.columns, ("email",)), "has primary key"),
        (SourceTable("nokey", (ID,), ("id",)), "has no primary key"),
    ],
)
def test_bad_tables_are_config_errors(sqlite_path, tmp_path, now, table, message):
    conn = sqlite3.connect(sqlite_path)
    conn.execute("CREATE TABLE nokey (id INTEGER)")
    conn.commit()
    with pytest.raises(ConfigError, match=message):
        capture(SqliteSource(sqlite_path, [table], "shop"), str(tmp_path / "lake"), now=now)
    assert not os.path.exists(tmp_path / "lake" / "landing")


def test_bad_sources_and_options(sqlite_path, tmp_path, now):
    root = str(tmp_path / "lake")
    with pytest.raises(SourceUnavailableError, match="does not exist"):
        capture(SqliteSource(str(tmp_path / "missing.db"), oltp.TABLES, "shop"), root, now=now)
    assert not os.path.exists(tmp_path / "missing.db")
    with pytest.raises(ConfigError, match="declared twice"):
        SqliteSource(sqlite_path, [oltp.CUSTOMERS, oltp.CUSTOMERS], "shop")
    with pytest.raises(ConfigError, match="no tables"):
        SqliteSource(sqlite_path, [], "shop")
    with pytest.raises(ConfigError, match="server name"):
        SqliteSource(sqlite_path, oltp.TABLES, "../shop")
    source = SqliteSource(sqlite_path, oltp.TABLES, "shop")
    with pytest.raises(ConfigError, match="max_changes"):
        capture(source, root, now=now, max_changes=0)
    with checkpoint.locked(root, "shop"), pytest.raises(CaptureBusyError, match="another capture"):
        capture(source, root, now=now)
    assert capture(source, root, now=now).snapshot_taken  # the lock is free again
    fewer = SqliteSource(sqlite_path, [oltp.CUSTOMERS], "shop")
    with pytest.raises(ConfigError, match="captured tables changed .* to land a new snapshot"):
        capture(fewer, root, now=now)
    other = SqliteSource(sqlite_path, oltp.TABLES, "shop")
    other.connector = "postgresql"
    with pytest.raises(ConfigError, match="belongs to a sqlite source"):
        capture(other, root, now=now)


def test_mutate_is_deterministic(tmp_path, now):
    dumps = []
    for name in ("a.db", "b.db"):
        conn = sqlite3.connect(str(tmp_path / name))
        oltp.create_schema(conn, "sqlite")
        oltp.seed(conn, "sqlite", customers=30, products=20, seed=1)
        oltp.mutate(conn, "sqlite", n=200, seed=2, now=now + timedelta(hours=1))
        dumps.append(
            [conn.execute(f"SELECT * FROM {t.name} ORDER BY 1").fetchall() for t in oltp.TABLES]
        )
    assert dumps[0] == dumps[1]
    assert all(p[0].startswith("p-") and len(p[0]) == 7 for p in dumps[0][1])
