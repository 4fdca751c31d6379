"""Change data capture from SQLite: triggers write every change into a change table.

SQLite has no replication log a client can read, so `install` adds AFTER INSERT/UPDATE/DELETE
triggers that copy the old and new row (as ``json_object``) into ``_lakelog_changes`` in the
same transaction as the change. Its AUTOINCREMENT ``seq`` is the position: SQLite runs one
writer at a time, so sequence order is commit order, and a reader never sees a smaller sequence
commit after a larger one. The database runs in WAL mode, so the application keeps writing while
a snapshot or a batch of changes is read.

Doubles and numerics stored as REAL are recorded as 17-digit text (``json_object`` would round
them to 15 digits). ``INSERT OR REPLACE`` deletes the old row without firing the DELETE trigger
(unless ``PRAGMA recursive_triggers`` is on), so a replace is captured as an insert.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from lakelog.cdc.envelope import Connector, Origin, epoch_ms, event, row_changes
from lakelog.cdc.errors import CaptureError, SourceUnavailableError
from lakelog.cdc.source import ChangeBatch, DeclaredSource, Snapshot, mark_last
from lakelog.cdc.source_tables import SourceTable
from lakelog.cdc.values import row_to_json
from lakelog.errors import ConfigError

CHANGES = "_lakelog_changes"
TRIGGER_PREFIX = "_lakelog_"
_NOW_MS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
_OPS = {"insert": "c", "update": "u", "delete": "d"}


class SqliteSource(DeclaredSource):
    """A SQLite database file whose `tables` are captured; `server_name` names it in events."""

    connector: Connector = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str],
        tables: tuple[SourceTable, ...] | list[SourceTable],
        server_name: str,
        *,
        timeout: float = 30.0,
    ) -> None:
        self.path = os.fspath(path)
        super().__init__(tables, server_name)
        self.timeout = timeout
        self.origin = Origin("sqlite", server_name, Path(self.path).stem, "main")

    def label(self, position: int) -> str:
        return f"{position:016d}"

    def connect(self) -> sqlite3.Connection:
        """An autocommit connection (explicit BEGIN) to the existing database file."""
        if not os.path.isfile(self.path):
            raise SourceUnavailableError(f"SQLite database {self.path} does not exist")
        try:
            return sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as e:
            raise SourceUnavailableError(f"cannot open SQLite database {self.path}: {e}") from e

    def install(self) -> None:
        """WAL mode; create the change table and (re)create the triggers in one transaction."""
        conn = self.connect()
        try:
            self._wal(conn)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {CHANGES} (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
                " tbl TEXT NOT NULL, op TEXT NOT NULL, before TEXT, after TEXT, ts_ms INTEGER)"
            )
            wanted = set()
            for table in self._tables.values():
                self._check(conn, table)
                for kind in _OPS:
                    name = f"{TRIGGER_PREFIX}{table.name}_{kind}"
                    wanted.add(name)
                    conn.execute(f'DROP TRIGGER IF EXISTS "{name}"')
                    conn.execute(_trigger(table, kind, name))
            stale = conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE ? ESCAPE '\\'",
                (TRIGGER_PREFIX.replace("_", "\\_") + "%",),
            ).fetchall()
            for (name,) in stale:
                if name not in wanted:
                    conn.execute(f'DROP TRIGGER "{name}"')
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()

    def _wal(self, conn: sqlite3.Connection) -> None:
        if conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
            return
        try:
            conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError as e:
            raise CaptureError(
                f"cannot switch {self.path} to WAL mode ({e}) while other connections use it: "
                "install the capture (or set PRAGMA journal_mode=WAL) before the workload starts"
            ) from e

    def _check(self, conn: sqlite3.Connection, table: SourceTable) -> None:
        info = conn.execute(f'PRAGMA table_info("{table.name}")').fetchall()
        if not info:
            raise ConfigError(f"SQLite database {self.path} has no table {table.name!r}")
        columns = {row[1] for row in info}
        missing = [c for c in table.column_names if c not in columns]
        if missing:
            raise ConfigError(
                f"table {table.name} in {self.path} has no column(s) {missing}; "
                f"it has {sorted(columns)}"
            )
        key = tuple(row[1] for row in sorted((r for r in info if r[5]), key=lambda r: r[5]))
        if key != table.primary_key:
            found = f"primary key {key}" if key else "no primary key"
            raise ConfigError(
                f"table {table.name} in {self.path} has {found}, but {table.primary_key} is "
                "declared; capture keys changes by the table's primary key"
            )

    def snapshot(self, *, now: datetime) -> Snapshot:
        """Install, then read the highest sequence and every table in one read transaction."""
        self.install()
        conn = self.connect()
        try:
            conn.execute("BEGIN")
            row = conn.execute(
                f"SELECT (SELECT seq FROM sqlite_sequence WHERE name = '{CHANGES}'), {_NOW_MS}"
            ).fetchone()
        except BaseException:
            conn.close()
            raise
        position, source_ms = row[0] or 0, row[1]
        return Snapshot(position, mark_last(self._read(conn, position, source_ms, epoch_ms(now))))

    def _read(
        self, conn: sqlite3.Connection, position: int, source_ms: int, ts_ms: int
    ) -> Iterator[dict[str, Any]]:
        try:
            for table in self._tables.values():
                columns = ", ".join(f'"{c}"' for c in table.column_names)
                for values in conn.execute(f'SELECT {columns} FROM "{table.name}"'):
                    row = row_to_json(table.columns, values)
                    yield event(
                        self.origin, table.name, "r", None, row,
                        ts_ms=ts_ms, source_ts_ms=source_ms, snapshot="true", seq=position,
                    )
        finally:
            conn.close()

    def head(self) -> int:
        """The position of the newest recorded change (0 before any)."""
        conn = self.connect()
        try:
            row = conn.execute(
                f"SELECT seq FROM sqlite_sequence WHERE name = '{CHANGES}'"
            ).fetchone()
        except sqlite3.OperationalError:  # capture never installed: no change recorded yet
            row = None
        finally:
            conn.close()
        return (row[0] if row else 0) or 0

    def rows(self, table: SourceTable) -> Iterator[dict[str, Any]]:
        """The table's current rows, as an event's ``after`` would hold them."""
        conn = self.connect()
        try:
            columns = ", ".join(f'"{c}"' for c in table.column_names)
            for values in conn.execute(f'SELECT {columns} FROM "{table.name}"'):
                yield row_to_json(table.columns, values)
        finally:
            conn.close()

    def changes(
        self, after: int, limit: int | None, *, upto: int | None = None, now: datetime
    ) -> ChangeBatch:
        """The recorded changes with ``after < seq <= upto``, at most `limit`, in seq order."""
        query = f"SELECT seq, tbl, op, before, after, ts_ms FROM {CHANGES} WHERE seq > ?"
        params: list[Any] = [after]
        if upto is not None:
            query += " AND seq <= ?"
            params.append(upto)
        query += " ORDER BY seq"
        if limit is not None:
            query += " LIMIT ?"
            params.append(limit)
        conn = self.connect()
        try:
            rows = conn.execute(query, params).fetchall()
        finally:
            conn.close()
        ts_ms, events, end = epoch_ms(now), [], after
        for seq, name, op, before, after_row, source_ms in rows:
            end = seq
            table = self._tables.get(name)
            if table is None:  # recorded before the table was dropped from the capture
                continue
            old = _row(table, before)
            new = _row(table, after_row)
            for kind, b, a in row_changes(table, op, old, new):
                events.append(
                    event(
                        self.origin, name, kind, b, a, ts_ms=ts_ms, source_ts_ms=source_ms, seq=seq
                    )
                )
        return ChangeBatch(events, end)

    def prune(self, upto: int) -> None:
        """Delete the recorded changes up to `upto` (they are landed)."""
        conn = self.connect()
        try:
            conn.execute(f"DELETE FROM {CHANGES} WHERE seq <= ?", (upto,))
        finally:
            conn.close()

    advance = prune


def _row(table: SourceTable, text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    data = json.loads(text)
    return row_to_json(table.columns, [data.get(c) for c in table.column_names])


def _value(ref: str, column_type: str, name: str) -> str:
    value = f'{ref}."{name}"'
    if column_type in ("double", "numeric"):
        return f"CASE typeof({value}) WHEN 'real' THEN printf('%!.17g', {value}) ELSE {value} END"
    return value


def _json(table: SourceTable, ref: str) -> str:
    pairs = ", ".join(f"'{c.name}', {_value(ref, c.type, c.name)}" for c in table.columns)
    return f"json_object({pairs})"


def _trigger(table: SourceTable, kind: str, name: str) -> str:
    before = _json(table, "OLD") if kind != "insert" else "NULL"
    after = _json(table, "NEW") if kind != "delete" else "NULL"
    return (
        f'CREATE TRIGGER "{name}" AFTER {kind.upper()} ON "{table.name}" BEGIN '
        f"INSERT INTO {CHANGES} (tbl, op, before, after, ts_ms) VALUES "
        f"('{table.name}', '{_OPS[kind]}', {before}, {after}, {_NOW_MS}); END"
    )
