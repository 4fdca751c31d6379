"""pgoutput messages → change events of whole transactions, with PostgreSQL positions.

A change event gets ``lsn`` = its own LSN (the row's LSN in the peek result) and
``commit_lsn`` = its transaction's commit end LSN (see `lakelog.cdc.envelope` for why the end).
Only transactions whose commit ends in ``(after, upto]`` are decoded: the caller's position
filters out whatever the slot returns again after a crash.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Union

from lakelog.cdc import pgoutput
from lakelog.cdc.envelope import Origin, event, row_changes
from lakelog.cdc.errors import CaptureError
from lakelog.cdc.source import ChangeBatch
from lakelog.cdc.source_tables import SourceTable
from lakelog.cdc.values import row_to_json

RowChange = Union[pgoutput.Insert, pgoutput.Update, pgoutput.Delete]


class Decoder:
    """Decodes peeked rows; relation descriptions are kept between calls."""

    def __init__(self, tables: Mapping[str, SourceTable], schema: str, where: str) -> None:
        self.tables, self.schema, self.where = tables, schema, where
        self._relations: dict[int, pgoutput.Relation] = {}
        self._columns: dict[tuple[int, tuple[str, ...]], list[int]] = {}

    def decode(
        self, rows: Iterable[tuple[int, bytes]], *, origin: Origin, after: int,
        upto: int | None, ts_ms: int,
    ) -> ChangeBatch:
        """Events of the complete transactions in `rows` ``(lsn, pgoutput message)``."""
        events: list[dict[str, Any]] = []
        end = after
        begin: pgoutput.Begin | None = None
        pending: list[tuple[int, RowChange]] = []
        truncate: pgoutput.Truncate | None = None
        for lsn, data in rows:
            message = pgoutput.parse(data)
            if isinstance(message, pgoutput.Begin):
                begin, pending, truncate = message, [], None
            elif isinstance(message, pgoutput.Commit):
                wanted = after < message.end_lsn and (upto is None or message.end_lsn <= upto)
                if begin is not None and wanted:
                    if truncate is not None:
                        self._refuse(truncate, message)
                    events.extend(self._transaction(origin, begin, message, pending, ts_ms))
                    end = message.end_lsn
                begin, pending = None, []
            elif isinstance(message, pgoutput.Relation):
                self._relations[message.relid] = message
            elif isinstance(message, pgoutput.Truncate):
                truncate = message
            elif message is not None:
                pending.append((lsn, message))
        return ChangeBatch(events, end)

    def _refuse(self, truncate: pgoutput.Truncate, commit: pgoutput.Commit) -> None:
        known = self._relations
        names = [known[r].name if r in known else str(r) for r in truncate.relids]
        raise CaptureError(
            f"PostgreSQL {self.where}: TRUNCATE of {', '.join(names)} at "
            f"{pgoutput.format_lsn(commit.commit_lsn)} cannot be captured as row changes; "
            "remove the capture state to take a new snapshot"
        )

    def _transaction(
        self, origin: Origin, begin: pgoutput.Begin, commit: pgoutput.Commit,
        changes: list[tuple[int, RowChange]], ts_ms: int,
    ) -> Iterator[dict[str, Any]]:
        source_ms = begin.commit_ts_us // 1000
        for lsn, message in changes:
            relation = self._relations.get(message.relid)
            if relation is None:
                raise CaptureError(
                    f"pgoutput: a change of relation {message.relid} before its description"
                )
            table = self.tables.get(relation.name) if relation.namespace == self.schema else None
            if table is None:
                continue
            if isinstance(message, pgoutput.Insert):
                rows = [("c", None, self._row(relation, table, message.new, None))]
            elif isinstance(message, pgoutput.Update):
                full = message.old if message.old_kind == "O" else None
                new = self._row(relation, table, message.new, full)
                old = None
                if message.old is not None:
                    old = self._row(relation, table, message.old, None)
                if full is None and old is not None and table.key(old) == table.key(new):
                    old = None  # only the key of the old row is known: no before image
                rows = row_changes(table, "u", old, new)
            else:
                rows = [("d", self._row(relation, table, message.old, None), None)]
            for op, before, after in rows:
                yield event(
                    origin, table.name, op, before, after, ts_ms=ts_ms, source_ts_ms=source_ms,
                    tx_id=begin.xid, lsn=lsn, commit_lsn=commit.end_lsn,
                )

    def _row(
        self, relation: pgoutput.Relation, table: SourceTable,
        values: tuple[pgoutput.Value, ...], old: tuple[pgoutput.Value, ...] | None,
    ) -> dict[str, Any]:
        key = (relation.relid, relation.columns)
        index = self._columns.get(key)
        if index is None:
            missing = [c for c in table.column_names if c not in relation.columns]
            if missing:
                raise CaptureError(
                    f"table {relation.namespace}.{relation.name} lost column(s) {missing} in the "
                    "change stream: update its SourceTable and take a new snapshot"
                )
            index = self._columns[key] = [relation.columns.index(c) for c in table.column_names]
        raw = [values[i] for i in index]
        for n, value in enumerate(raw):
            if value is pgoutput.UNCHANGED:
                if old is None:
                    raise CaptureError(
                        f"table {relation.name}: an unchanged TOASTed value without the old row; "
                        "set REPLICA IDENTITY FULL (install does) and take a new snapshot"
                    )
                raw[n] = old[index[n]]
        return row_to_json(table.columns, raw)
