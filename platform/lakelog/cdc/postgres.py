"""Log-based change data capture from PostgreSQL: logical decoding with the pgoutput plugin.

Setup (`install`, idempotent): a publication of exactly the captured tables, and REPLICA
IDENTITY FULL on each of them, so that updates and deletes carry the whole old row (Debezium's
``before``; with the default identity only the key of a deleted row would be known). The server
needs ``wal_level = logical``.

Snapshot: the logical slot is created on a replication connection with EXPORT_SNAPSHOT, which
returns its consistent point and the name of a snapshot of exactly the database state at that
point. A second connection imports it (REPEATABLE READ, SET TRANSACTION SNAPSHOT) and reads
every table, so the snapshot plus the changes the slot streams afterwards have no gap and no
overlap, however busy the database is meanwhile. Creating the slot waits until the transactions
running at that moment (in any database of the server) have ended.

Streaming: `changes` peeks at the slot (`pg_logical_slot_peek_binary_changes`), which consumes
nothing; only `advance` (``pg_replication_slot_advance``), called once the changes are landed,
lets the server forget them. Changes at or before the caller's position are skipped, which also
covers a slot that went back after a server crash (its position is persisted at checkpoints).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq, sql
from psycopg.conninfo import conninfo_to_dict

from lakelog.cdc import pgoutput
from lakelog.cdc.envelope import Connector, Origin, epoch_ms, event
from lakelog.cdc.errors import CaptureBusyError, CaptureError, SourceUnavailableError
from lakelog.cdc.pgdecode import Decoder
from lakelog.cdc.source import ChangeBatch, DeclaredSource, Snapshot, mark_last
from lakelog.cdc.source_tables import NAME, SourceTable
from lakelog.cdc.values import row_to_json
from lakelog.errors import ConfigError

SLOT_NAME = re.compile(r"^[a-z0-9_]{1,63}$")
_SESSION = "SET DateStyle = 'ISO, YMD'; SET TimeZone = 'UTC'; SET extra_float_digits = 1"
_PEEK = (
    "SELECT (lsn - '0/0'::pg_lsn)::bigint, data FROM pg_logical_slot_peek_binary_changes("
    "%s, %s::pg_lsn, %s::int, 'proto_version', '1', 'publication_names', %s)"
)


class PostgresSource(DeclaredSource):
    """`tables` of schema `schema` in the database of `dsn`, captured through `slot`."""

    connector: Connector = "postgresql"

    def __init__(
        self,
        dsn: str,
        tables: tuple[SourceTable, ...] | list[SourceTable],
        slot: str,
        publication: str,
        server_name: str,
        *,
        schema: str = "public",
        connect_timeout: int = 10,
    ) -> None:
        if not SLOT_NAME.match(slot):
            raise ConfigError(
                f"replication slot {slot!r}: use 1-63 lower-case letters, digits and '_'"
            )
        for what, name in (("publication", publication), ("schema", schema)):
            if not NAME.match(name):
                raise ConfigError(f"{what} {name!r}: use a lower-case SQL identifier")
        try:
            info = conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as e:
            raise ConfigError(f"invalid PostgreSQL DSN: {_line(e)}") from e
        self.dsn, self.slot, self.publication, self.schema = dsn, slot, publication, schema
        super().__init__(tables, server_name)
        self.connect_timeout = connect_timeout
        host, port = info.get("host", "localhost"), info.get("port", 5432)
        self.where = f"{host}:{port}/{info.get('dbname', '')}"  # no password in messages
        self._origin: Origin | None = None
        self._decoder = Decoder(self._tables, schema, self.where)

    def label(self, position: int) -> str:
        return f"{position:016X}"

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """psycopg errors as lakelog errors a user can act on."""
        try:
            yield
        except pg_errors.UndefinedObject as e:
            raise CaptureError(
                f"PostgreSQL {self.where}: {_line(e)}; the changes since the last capture cannot "
                "be read: remove the capture state to take a new snapshot (it recreates the "
                "slot and the publication)"
            ) from e
        except pg_errors.ObjectInUse as e:
            raise CaptureBusyError(
                f"PostgreSQL {self.where}: {_line(e)} (is another capture of {self.slot} running?)"
            ) from e
        except psycopg.OperationalError as e:
            raise SourceUnavailableError(f"PostgreSQL {self.where}: {_line(e)}") from e
        except psycopg.Error as e:
            raise CaptureError(f"PostgreSQL {self.where}: {_line(e)}") from e

    def connect(self, *, replication: bool = False) -> psycopg.Connection:
        """An autocommit connection (UTC, ISO dates); `replication` opens a walsender."""
        extra = {"replication": "database"} if replication else {}
        with self._errors():
            conn = psycopg.connect(
                self.dsn, autocommit=True, connect_timeout=self.connect_timeout, **extra
            )
            if not replication:
                conn.execute(_SESSION)
                if self._origin is None:
                    self._origin = Origin(
                        "postgresql", self.server_name, conn.info.dbname, self.schema
                    )
        return conn

    @property
    def origin(self) -> Origin:
        if self._origin is None:
            self.connect().close()
        assert self._origin is not None
        return self._origin

    def install(self) -> None:
        """Check the tables; set REPLICA IDENTITY FULL; (re)define the publication."""
        with self.connect() as conn, self._errors():
            level = conn.execute("SHOW wal_level").fetchone()[0]
            if level != "logical":
                raise ConfigError(
                    f"PostgreSQL {self.where} has wal_level={level}; capture needs "
                    "wal_level=logical (set it in postgresql.conf and restart the server)"
                )
            for table in self._tables.values():
                self._check(conn, table)
            exists = conn.execute(
                "SELECT 1 FROM pg_publication WHERE pubname = %s", (self.publication,)
            ).fetchone()
            published = {
                (r[0], r[1]) for r in conn.execute(
                    "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
                    (self.publication,),
                )
            }
            if exists and published == {(self.schema, t) for t in self._tables}:
                return
            names = sql.SQL(", ").join(self._qualified(t) for t in self._tables.values())
            verb = "ALTER PUBLICATION {} SET TABLE {}"
            if not exists:
                verb = "CREATE PUBLICATION {} FOR TABLE {}"
            conn.execute(sql.SQL(verb).format(sql.Identifier(self.publication), names))

    def _qualified(self, table: SourceTable) -> sql.Composable:
        return sql.Identifier(self.schema, table.name)

    def _check(self, conn: psycopg.Connection, table: SourceTable) -> None:
        row = conn.execute(
            "SELECT c.oid, c.relreplident FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
            (self.schema, table.name),
        ).fetchone()
        if row is None:
            raise ConfigError(f"PostgreSQL {self.where} has no table {self.schema}.{table.name}")
        oid, identity = row
        columns = {
            r[0] for r in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0"
                " AND NOT attisdropped", (oid,),
            )
        }
        missing = [c for c in table.column_names if c not in columns]
        if missing:
            raise ConfigError(
                f"table {self.schema}.{table.name} has no column(s) {missing}; "
                f"it has {sorted(columns)}"
            )
        key = tuple(
            r[0] for r in conn.execute(
                "SELECT a.attname FROM pg_index i,"
                " unnest(i.indkey) WITH ORDINALITY k(attnum, n), pg_attribute a"
                " WHERE i.indrelid = %s AND i.indisprimary AND a.attrelid = i.indrelid"
                " AND a.attnum = k.attnum ORDER BY k.n", (oid,),
            )
        )
        if key != table.primary_key:
            found = f"primary key {key}" if key else "no primary key"
            raise ConfigError(
                f"table {self.schema}.{table.name} has {found}, but {table.primary_key} is "
                "declared; capture keys changes by the table's primary key"
            )
        if identity != "f":
            alter = sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL")
            conn.execute(alter.format(self._qualified(table)))

    def drop_slot(self) -> None:
        """Drop the replication slot if it exists (it holds WAL until dropped or advanced)."""
        with self.connect() as conn, self._errors():
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                " WHERE slot_name = %s", (self.slot,),
            )

    def drop(self) -> None:
        """Stop capturing for good: drop the slot and the publication."""
        self.drop_slot()
        with self.connect() as conn, self._errors():
            drop = sql.SQL("DROP PUBLICATION IF EXISTS {}")
            conn.execute(drop.format(sql.Identifier(self.publication)))

    def snapshot(self, *, now: datetime) -> Snapshot:
        """Install, (re)create the slot and read every table as of its consistent point."""
        self.install()
        self.drop_slot()
        repl = self.connect(replication=True)
        try:
            with self._errors():
                command = f"CREATE_REPLICATION_SLOT {self.slot} LOGICAL pgoutput EXPORT_SNAPSHOT"
                result = repl.pgconn.exec_(command.encode())
                if result.status != pq.ExecStatus.TUPLES_OK:
                    message = (result.error_message or b"").decode(errors="replace").strip()
                    raise CaptureError(
                        f"PostgreSQL {self.where}: cannot create slot {self.slot}: {message}"
                    )
                position = pgoutput.parse_lsn(result.get_value(0, 1).decode())
                exported = result.get_value(0, 2).decode()
                conn = self.connect()
            try:
                with self._errors():
                    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    use = sql.SQL("SET TRANSACTION SNAPSHOT {}")
                    conn.execute(use.format(sql.Literal(exported)))
                    source_ts = conn.execute("SELECT transaction_timestamp()").fetchone()[0]
            except BaseException:
                conn.close()
                raise
        except BaseException:
            repl.close()
            raise
        events = self._read(conn, repl, position, epoch_ms(source_ts), epoch_ms(now))
        return Snapshot(position, mark_last(events))

    def _read(
        self, conn: psycopg.Connection, repl: psycopg.Connection, position: int,
        source_ms: int, ts_ms: int,
    ) -> Iterator[dict[str, Any]]:
        origin = self.origin
        try:
            for table in self._tables.values():
                columns = sql.SQL(", ").join(map(sql.Identifier, table.column_names))
                query = sql.SQL("COPY (SELECT {} FROM {}) TO STDOUT").format(
                    columns, self._qualified(table)
                )
                with self._errors(), conn.cursor().copy(query) as copy:
                    for values in copy.rows():
                        yield event(
                            origin, table.name, "r", None, row_to_json(table.columns, values),
                            ts_ms=ts_ms, source_ts_ms=source_ms, snapshot="true",
                            lsn=position, commit_lsn=position,
                        )
        finally:
            conn.close()
            repl.close()

    def head(self) -> int:
        """The server's current write-ahead log position (an LSN)."""
        conn = self.connect()
        try:
            with self._errors():
                current = "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint"
                return conn.execute(current).fetchone()[0]
        finally:
            conn.close()

    def rows(self, table: SourceTable) -> Iterator[dict[str, Any]]:
        """The table's current rows, as an event's ``after`` would hold them."""
        conn = self.connect()
        try:
            columns = sql.SQL(", ").join(map(sql.Identifier, table.column_names))
            query = sql.SQL("COPY (SELECT {} FROM {}) TO STDOUT").format(
                columns, self._qualified(table)
            )
            with self._errors(), conn.cursor().copy(query) as copy:
                for values in copy.rows():
                    yield row_to_json(table.columns, values)
        finally:
            conn.close()

    def changes(
        self, after: int, limit: int | None, *, upto: int | None = None, now: datetime
    ) -> ChangeBatch:
        """Peek at the slot: whole transactions whose commit ends in ``(after, upto]``."""
        bound = pgoutput.format_lsn(upto) if upto is not None else None
        with self.connect() as conn, self._errors():
            rows = conn.cursor(binary=True).execute(
                _PEEK, (self.slot, bound, limit, self.publication)
            ).fetchall()
        return self._decoder.decode(
            rows, origin=self.origin, after=after, upto=upto, ts_ms=epoch_ms(now)
        )

    def advance(self, upto: int) -> None:
        """Advance the slot to `upto` (a commit end) unless it is there already."""
        with self.connect() as conn, self._errors():
            row = conn.execute(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                (self.slot,),
            ).fetchone()
            if row is None:
                raise CaptureError(
                    f"PostgreSQL {self.where}: replication slot {self.slot} does not exist; "
                    "remove the capture state to take a new snapshot"
                )
            if pgoutput.parse_lsn(row[0]) < upto:
                conn.execute(
                    "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                    (self.slot, pgoutput.format_lsn(upto)),
                )


def _line(error: Exception) -> str:
    return " ".join(str(error).split())
