"""Reading landed changelogs back, folding them into table state, and the source tables' rows."""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from lakelog.cdc import Snapshot, SourceTable, position
from lakelog.demo import oltp


def connect_sqlite(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, check_same_thread=False)
    conn.execute("PRAGMA synchronous=OFF")  # the tests' writers need no durability
    return conn


class Crash(Exception):
    """A simulated crash: the process dies at this point."""


def crash_on(monkeypatch, target: Any, name: str, call: int) -> None:
    """Make the `call`-th call of ``target.name`` raise `Crash` instead of running."""
    original = getattr(target, name)
    calls = itertools.count(1)

    def crashing(*args, **kwargs):
        if next(calls) == call:
            raise Crash(f"{name} #{call}")
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, crashing)


def visible_files(root: str) -> list[str]:
    """Landing files the ingester would pick up (no hidden part in the path), sorted."""
    found = []
    base = os.path.join(root, "landing")
    for folder, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        for name in files:
            if not name.startswith((".", "_")) and name.endswith(".ndjson"):
                found.append(os.path.relpath(os.path.join(folder, name), root))
    return sorted(found)


def landed(root: str) -> dict[str, list[dict]]:
    """Every landed event per table, numerics parsed exactly."""
    events: dict[str, list[dict]] = {}
    for path in visible_files(root):
        with open(os.path.join(root, path), encoding="utf-8") as f:
            for line in f:
                event = json.loads(line, parse_float=Decimal)
                topic = path.split(os.sep)[1]
                assert topic == f"cdc.{event['source']['table']}"
                events.setdefault(event["source"]["table"], []).append(event)
    return events


def _row_of(event: dict) -> dict:
    return event["before"] if event["op"] == "d" else event["after"]


def fold(events: list[dict], table: SourceTable, order: Callable[[dict], Any] = position) -> dict:
    """Table state from its changelog: per key the event of the highest position wins."""
    latest: dict[tuple, tuple[Any, dict]] = {}
    for event in events:
        key = table.key(_row_of(event))
        if key not in latest or order(event) > latest[key][0]:
            latest[key] = (order(event), event)
    return {key: _plain(e["after"]) for key, (_, e) in latest.items() if e["op"] != "d"}


def duplicates(events: dict[str, list[dict]], tables: tuple[SourceTable, ...]) -> list[tuple]:
    """Events landed more than once, by (table, position, key)."""
    seen, twice = set(), []
    for table in tables:
        for event in events.get(table.name, []):
            ident = (table.name, position(event), table.key(_row_of(event)))
            if ident in seen:
                twice.append(ident)
            seen.add(ident)
    return twice


def _plain(row: dict) -> dict:
    """Decimals as text, so that the scale is compared too (12.50, not 12.5)."""
    return {k: str(v) if isinstance(v, Decimal) else v for k, v in row.items()}


def _expected(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, Decimal):
        return str(value)
    return value


def source_rows(conn: Any, dialect: str, table: SourceTable) -> dict:
    """The table's rows by key, as the changelog should hold them."""
    columns = ", ".join(table.column_names)
    rows = conn.execute(f"SELECT {columns} FROM {table.name}").fetchall()
    if dialect == "postgres":
        conn.commit()
    out = {}
    for values in rows:
        row = {c.name: _expected(v) for c, v in zip(table.columns, values)}
        if dialect == "sqlite":
            if row["updated_at"] is not None:
                row["updated_at"] = row["updated_at"].replace(" ", "T") + "Z"
        out[table.key(row)] = row
    return out


def assert_mirrors(root: str, conn: Any, dialect: str) -> dict[str, list[dict]]:
    """The landed changelogs fold to exactly the source tables, and nothing landed twice."""
    events = landed(root)
    for table in oltp.TABLES:
        expected = source_rows(conn, dialect, table)
        assert fold(events.get(table.name, []), table) == expected, table.name
    assert duplicates(events, oltp.TABLES) == []
    return events


def capture_all(capture_once: Callable[[], Any], limit: int = 200) -> int:
    """Call a capture until it lands nothing new; the number of change events landed."""
    total = 0
    for _ in range(limit):
        result = capture_once()
        total += result.changes
        if result.position_after == result.position_before and not result.files:
            return total
    raise AssertionError(f"capture did not catch up in {limit} calls")


class Mutator(threading.Thread):
    """Mutates the OLTP tables in its own connection until stopped; counts its transactions."""

    def __init__(self, connect: Callable[[], Any], dialect: str, start: datetime) -> None:
        super().__init__(daemon=True)
        self.connect, self.dialect, self.start_time = connect, dialect, start
        self.stop = threading.Event()
        self.progress = threading.Condition()
        self.rounds = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        conn = self.connect()
        try:
            while not self.stop.is_set():
                at = self.start_time + timedelta(seconds=self.rounds)
                oltp.mutate(conn, self.dialect, n=5, seed=1000 + self.rounds, now=at)
                with self.progress:
                    self.rounds += 1
                    self.progress.notify_all()
        except BaseException as e:  # surfaced by finish()
            self.error = e
            with self.progress:
                self.progress.notify_all()
        finally:
            conn.close()

    def wait_rounds(self, more: int) -> None:
        """Block until `more` further rounds committed (a liveness bound, not a timing check)."""
        with self.progress:
            goal = self.rounds + more
            done = self.progress.wait_for(lambda: self.rounds >= goal or self.error, timeout=60)
        assert done and self.error is None, f"mutator stalled: {self.error!r}"

    def finish(self) -> None:
        self.stop.set()
        self.join(timeout=60)
        assert not self.is_alive() and self.error is None, f"mutator failed: {self.error!r}"


class MutatedDuringSnapshot:
    """A source whose snapshot read waits for the mutator to commit more, twice: before the
    first row and after the first rows, so that changes race the snapshot for real."""

    def __init__(self, source: Any, mutator: Mutator) -> None:
        self._source, self._mutator = source, mutator

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    def snapshot(self, *, now: datetime) -> Snapshot:
        snapshot = self._source.snapshot(now=now)
        return Snapshot(snapshot.position, self._interleaved(snapshot.events))

    def _interleaved(self, events: Iterator[dict]) -> Iterator[dict]:
        self._mutator.wait_rounds(3)
        for n, event in enumerate(events):
            if n == 10:
                self._mutator.wait_rounds(3)
            yield event
