"""Crash and resume at every step of the capture commit order, for both sources.

After a crash the source keeps changing; a new process (a new source object) captures to the
end. The landed changelogs must then fold to exactly the source tables, with no event twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import psycopg
import pytest
from cdc_helpers import Crash, assert_mirrors, capture_all, connect_sqlite, crash_on, visible_files

from lakelog.cdc import PostgresSource, SqliteSource, capture, change_files, checkpoint
from lakelog.demo import oltp


@dataclass
class Shop:
    dialect: str
    source: Callable[[], Any]  # a new source object, as a restarted process makes
    connect: Callable[[], Any]


@pytest.fixture(params=["sqlite", "postgres"])
def shop(request) -> Shop:
    if request.param == "sqlite":
        path = request.getfixturevalue("sqlite_path")
        return Shop(
            "sqlite",
            lambda: SqliteSource(path, oltp.TABLES, "shop"),
            lambda: connect_sqlite(path),
        )
    dsn, slot = request.getfixturevalue("pg_dsn"), request.getfixturevalue("slot")
    return Shop(
        "postgres",
        lambda: PostgresSource(dsn, oltp.TABLES, slot, "lakelog_cdc", "shop"),
        lambda: psycopg.connect(dsn, autocommit=True),
    )


# Where the crash happens: (module or "source", function, which call of it raises).
SNAPSHOT_CRASHES = {
    "while writing the snapshot (3)": (change_files, "dumps", 25),
    "before saving the snapshot state (4)": (checkpoint, "save", 1),
    "between publishing two tables (5)": (change_files, "publish", 2),
    "before clearing the staging folders (6)": (checkpoint, "save", 2),
}
STREAM_CRASHES = {
    "before saving the pending batch (8)": (checkpoint, "save", 1),
    "between landing two tables (9)": (change_files, "land", 2),
    "before advancing the source (10)": ("source", "advance", 1),
    "before saving the position (11)": (checkpoint, "save", 2),
}


def _crash(monkeypatch, source: Any, where: tuple) -> None:
    target, name, call = where
    crash_on(monkeypatch, source if target == "source" else target, name, call)


@pytest.mark.parametrize("point", list(SNAPSHOT_CRASHES))
def test_crash_during_the_snapshot(shop, point, tmp_path, now, monkeypatch):
    root = str(tmp_path / "lake")
    conn = shop.connect()
    oltp.mutate(conn, shop.dialect, n=50, seed=11, now=now)
    source = shop.source()
    with monkeypatch.context() as patch:
        _crash(patch, source, SNAPSHOT_CRASHES[point])
        with pytest.raises(Crash):
            capture(source, root, now=now, max_changes=1000)
    committed = checkpoint.load(root, "shop", source.connector)
    if committed is None:  # the snapshot never reached its commit point: none of it is visible
        assert visible_files(root) == []
    else:
        assert committed.staging
    # Deletes (and more) between the crash and the redo: a stale half snapshot would keep rows.
    oltp.mutate(conn, shop.dialect, n=150, seed=12, now=now + timedelta(minutes=1))
    later = now + timedelta(minutes=2)
    capture_all(lambda: capture(shop.source(), root, now=later, max_changes=70))
    events = assert_mirrors(root, conn, shop.dialect)
    reads = [e["source"] for table in events.values() for e in table if e["op"] == "r"]
    assert len({s["lsn"] or s["seq"] for s in reads}) == 1  # one snapshot: redone or finished


@pytest.mark.parametrize("point", list(STREAM_CRASHES))
def test_crash_while_streaming(shop, point, tmp_path, now, monkeypatch):
    root = str(tmp_path / "lake")
    conn = shop.connect()
    capture(shop.source(), root, now=now)
    oltp.mutate(conn, shop.dialect, n=150, seed=21, now=now + timedelta(minutes=1))
    source = shop.source()
    with monkeypatch.context() as patch:
        _crash(patch, source, STREAM_CRASHES[point])
        with pytest.raises(Crash):
            capture(source, root, now=now, max_changes=60)
    pending = checkpoint.load(root, "shop", source.connector).pending
    assert (pending is None) == point.startswith("before saving the pending")
    # New commits before the retry: it must still land exactly the pending batch first.
    oltp.mutate(conn, shop.dialect, n=100, seed=22, now=now + timedelta(minutes=2))
    capture_all(lambda: capture(shop.source(), root, now=now, max_changes=1000))
    assert_mirrors(root, conn, shop.dialect)
