"""Capture from PostgreSQL (logical decoding, pgoutput) against a real server."""

from __future__ import annotations

import random
import string
import threading
import time
from collections import Counter

import psycopg
import pytest
from cdc_helpers import (
    Mutator,
    MutatedDuringSnapshot,
    assert_mirrors,
    capture_all,
    fold,
    landed,
    source_rows,
)

from lakelog.cdc import (
    CaptureError,
    PostgresSource,
    SourceColumn,
    SourceTable,
    SourceUnavailableError,
    capture,
    position,
)
from lakelog.cdc.pgoutput import parse_lsn
from lakelog.demo import oltp
from lakelog.errors import ConfigError


ID = SourceColumn("id", "bigint")


def make_source(dsn: str, slot: str, tables=oltp.TABLES) -> PostgresSource:
    return PostgresSource(dsn, tables, slot, "lakelog_cdc", "shop")


def test_snapshot_then_changes(pg_dsn, slot, tmp_path, now):
    source = make_source(pg_dsn, slot)
    root = str(tmp_path / "lake")
    first = capture(source, root, now=now)
    assert first.snapshot_taken and first.snapshot_rows == 140
    conn = psycopg.connect(pg_dsn, autocommit=True)
    long_name = "".join(random.Random(1).choices(string.ascii_letters, k=20_000))  # TOASTed
    conn.execute("UPDATE customers SET name = %s WHERE customer_id = 1", (long_name,))
    conn.execute("UPDATE customers SET email = 'only@email.changed' WHERE customer_id = 1")
    done = oltp.mutate(conn, "postgres", n=400, seed=5, now=now)
    assert done.inserts and done.updates and done.deletes
    second = capture(source, root, now=now, max_changes=100)
    assert second.position_before == first.position_after < second.position_after
    span = f"{first.position_after:016X}-{second.position_after:016X}"
    assert second.files[0] == f"landing/cdc.customers/stream-{span}.ndjson"
    capture_all(lambda: capture(source, root, now=now, max_changes=100))
    events = assert_mirrors(root, conn, "postgres")
    slot_at = conn.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    ).fetchone()[0]
    assert parse_lsn(slot_at) == capture(source, root, now=now).position_after  # advanced
    customers = events["customers"]
    assert customers[-1]["source"]["snapshot"] == "false"
    by_tx = Counter(
        (e["source"]["txId"], (e["after"] or e["before"])["customer_id"]) for e in customers
    )
    assert max(by_tx.values()) >= 2  # a key changed several times in one transaction
    deleted_then_inserted = {
        e["before"]["customer_id"] for e in customers if e["op"] == "d"
    } & {e["after"]["customer_id"] for e in customers if e["op"] == "c"}
    assert deleted_then_inserted
    at = Counter(position(e) for e in customers if e["op"] in ("c", "d"))
    assert 2 in at.values()  # a key update: a delete and an insert at one position
    (toasted,) = [
        e for e in customers if e["op"] == "u" and e["after"]["email"] == "only@email.changed"
    ]
    assert toasted["after"]["name"] == long_name  # unchanged TOASTed value, from the old row
    first_streamed = next(e for e in customers if e["op"] != "r")
    assert first_streamed["source"]["commit_lsn"] > first.position_after
    assert first_streamed["source"]["ts_ms"] > 0 and first_streamed["source"]["txId"] > 0


def test_writer_racing_the_snapshot(pg_dsn, slot, tmp_path, now):
    """Changes commit between the slot's creation and the snapshot read, and during the read."""
    mutator = Mutator(lambda: psycopg.connect(pg_dsn), "postgres", now)
    source = make_source(pg_dsn, slot)
    root = str(tmp_path / "lake")
    mutator.start()
    try:
        racing = MutatedDuringSnapshot(source, mutator)
        assert capture(racing, root, now=now, max_changes=50).snapshot_taken
        mutator.wait_rounds(3)
        capture(source, root, now=now, max_changes=50)
    finally:
        mutator.finish()
    assert capture_all(lambda: capture(source, root, now=now, max_changes=500)) > 0
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert_mirrors(root, conn, "postgres")


def _wait_for_lock_wait(conn: psycopg.Connection, xid: str) -> None:
    """Until some backend (the slot's walsender) waits for transaction `xid` to end."""
    for _ in range(600):  # a liveness bound of ~60 s, not a timing assertion
        waiting = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid'"
            " AND transactionid::text = %s AND NOT granted", (xid,),
        ).fetchone()[0]
        if waiting:
            return
        time.sleep(0.1)
    raise AssertionError(f"nobody waited for transaction {xid}")


def test_transaction_spanning_the_consistent_point(pg_dsn, slot, tmp_path, now):
    """A transaction that writes before the slot's consistent point and commits after it has
    change LSNs below the snapshot's position: only (commit_lsn, lsn) orders it correctly."""
    source = make_source(pg_dsn, slot)
    source.install()  # REPLICA IDENTITY FULL needs a lock the open transactions below would block
    root = str(tmp_path / "lake")
    admin = psycopg.connect(pg_dsn, autocommit=True)
    a, b, c = (psycopg.connect(pg_dsn) for _ in range(3))

    def write(conn, key, country):
        conn.execute("UPDATE customers SET country = %s WHERE customer_id = %s", (country, key))
        return conn.execute("SELECT pg_current_xact_id()::xid::text").fetchone()[0]

    xid_a = write(a, 1, "AA")  # running when slot creation starts: waited for
    result: list = []
    snapshotting = threading.Thread(target=lambda: result.append(capture(source, root, now=now)))
    snapshotting.start()
    try:
        _wait_for_lock_wait(admin, xid_a)
        xid_b = write(b, 2, "BB")  # starts after the first running-xacts record
        a.commit()
        _wait_for_lock_wait(admin, xid_b)  # the snapshot builder is now FULL, waiting for b
        write(c, 3, "CC")  # after the full snapshot, before the consistent point
        b.commit()
        snapshotting.join(timeout=60)
        assert not snapshotting.is_alive() and result and result[0].snapshot_taken
        c.execute("UPDATE customers SET email = 'late@example.com' WHERE customer_id = 4")
        c.commit()
    finally:
        for conn in (a, b, c):
            conn.close()
    capture(source, root, now=now)
    events = landed(root)["customers"]
    cp = result[0].position_after
    (spanning,) = [e for e in events if e["op"] == "u" and e["after"]["customer_id"] == 3]
    (after_cp,) = [e for e in events if e["op"] == "u" and e["after"]["customer_id"] == 4]
    assert spanning["source"]["lsn"] < cp < spanning["source"]["commit_lsn"]
    assert spanning["source"]["txId"] == after_cp["source"]["txId"]
    assert cp < after_cp["source"]["lsn"] < after_cp["source"]["commit_lsn"]
    snapshot_row = next(e for e in events if e["op"] == "r" and e["after"]["customer_id"] == 3)
    assert snapshot_row["after"]["country"] != "CC"  # c was invisible to the snapshot
    assert assert_mirrors(root, admin, "postgres")
    by_lsn_only = fold(events, oltp.CUSTOMERS, order=lambda e: e["source"]["lsn"])
    # Folding by lsn alone keeps the snapshot row of customer 3 over its first change.
    assert by_lsn_only[(3,)]["country"] != "CC"
    assert fold(events, oltp.CUSTOMERS)[(3,)]["country"] == "CC"
    assert source_rows(admin, "postgres", oltp.CUSTOMERS)[(3,)]["country"] == "CC"


def test_truncate_is_refused(pg_dsn, slot, tmp_path, now):
    source = make_source(pg_dsn, slot)
    root = str(tmp_path / "lake")
    capture(source, root, now=now)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE inventory")
    with pytest.raises(CaptureError, match="TRUNCATE of inventory .* take a new snapshot"):
        capture(source, root, now=now)


def test_lost_slot_is_a_clear_error(pg_dsn, slot, tmp_path, now):
    source = make_source(pg_dsn, slot)
    root = str(tmp_path / "lake")
    capture(source, root, now=now)
    source.drop_slot()
    with pytest.raises(CaptureError, match="remove the capture state"):
        capture(source, root, now=now)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (SourceTable("nope", (ID,), ("id",)), "has no table public.nope"),
        (SourceTable("nokey", (ID,), ("id",)), "has no primary key"),
        (SourceTable("customers", oltp.CUSTOMERS.columns, ("email",)), "has primary key"),
        (SourceTable("customers", (ID,), ("id",)), r"no column\(s\) \['id'\]"),
    ],
)
def test_bad_tables_are_config_errors(pg_dsn, slot, tmp_path, now, table, message):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE nokey (id bigint)")
    with pytest.raises(ConfigError, match=message):
        capture(make_source(pg_dsn, slot, [table]), str(tmp_path / "lake"), now=now)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        query = "SELECT slot_name FROM pg_replication_slots WHERE slot_name = %s"
        slots = conn.execute(query, (slot,))
        assert slots.fetchall() == []  # nothing was set up


def test_unreachable_server_and_bad_names(tmp_path, now):
    dsn = "host=127.0.0.1 port=1 user=postgres dbname=x connect_timeout=2"
    dead = PostgresSource(dsn, oltp.TABLES, "s", "p", "shop")
    with pytest.raises(SourceUnavailableError, match="PostgreSQL 127.0.0.1:1/x"):
        capture(dead, str(tmp_path / "lake"), now=now)
    with pytest.raises(ConfigError, match="replication slot 'Bad-Slot'"):
        PostgresSource("dbname=x", oltp.TABLES, "Bad-Slot", "p", "shop")
    with pytest.raises(ConfigError, match="publication"):
        PostgresSource("dbname=x", oltp.TABLES, "s", "p;drop", "shop")
    with pytest.raises(ConfigError, match="invalid PostgreSQL DSN"):
        PostgresSource("nosuchkey=1", oltp.TABLES, "s", "p", "shop")
