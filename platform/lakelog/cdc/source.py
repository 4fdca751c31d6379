"""What `capture` needs from a source database: a consistent snapshot, then changes by position.

A position is an int that grows with commit order (PostgreSQL: an LSN, SQLite: a sequence). The
snapshot is the table contents exactly at its position; `Source.changes` returns the changes of
transactions committed after a position, whole transactions only, in commit order. The source
keeps those changes until `Source.advance` says they are landed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from lakelog.cdc.envelope import Connector
from lakelog.cdc.source_tables import SourceTable, table_map
from lakelog.errors import ConfigError

#: Server names appear in file names and in every event's ``source.name``.
SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


@dataclass(frozen=True)
class Snapshot:
    """Every row of every table at `position`, as op ``r`` events, one table after the other.

    `events` is an iterator that reads lazily; exhausting or closing it ends the read.
    """

    position: int
    events: Iterator[dict[str, Any]]


@dataclass(frozen=True)
class ChangeBatch:
    """The changes after a position, complete up to `end` (the position of their last commit)."""

    events: list[dict[str, Any]]
    end: int


class Source(Protocol):
    """A captured database (`SqliteSource`, `PostgresSource`)."""

    connector: Connector

    @property
    def server_name(self) -> str: ...

    @property
    def tables(self) -> tuple[SourceTable, ...]: ...

    def label(self, position: int) -> str:
        """`position` as fixed-width text, so that file names sort in position order."""
        ...

    def snapshot(self, *, now: datetime) -> Snapshot:
        """Prepare capture (idempotently) and read a consistent snapshot; restarts capture."""
        ...

    def head(self) -> int:
        """The source's current position: how far capture could go now."""
        ...

    def rows(self, table: SourceTable) -> Iterator[dict[str, Any]]:
        """The table's current rows, as an event's ``after`` would hold them."""
        ...

    def changes(
        self, after: int, limit: int | None, *, upto: int | None = None, now: datetime
    ) -> ChangeBatch:
        """Changes of transactions committed in ``(after, upto]``, about `limit` at most.

        Whole transactions only, so a batch may exceed `limit` by one transaction's changes.
        """
        ...

    def advance(self, upto: int) -> None:
        """The changes up to `upto` are landed: the source may forget them."""
        ...


class DeclaredSource:
    """What every source keeps from its declaration: the server name and the captured tables."""

    def __init__(self, tables: tuple[SourceTable, ...] | list[SourceTable], server_name: str):
        self._tables = table_map(tables)
        self._server_name = check_server_name(server_name)

    @property
    def server_name(self) -> str:
        return self._server_name

    @property
    def tables(self) -> tuple[SourceTable, ...]:
        return tuple(self._tables.values())


def check_server_name(name: str) -> str:
    if not isinstance(name, str) or not SERVER_NAME.match(name):
        raise ConfigError(
            f"cdc server name {name!r}: use letters, digits, '_', '.' and '-' "
            "(at most 100, starting with a letter or digit)"
        )
    return name


def mark_last(events: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Pass snapshot events through, flagging the final one ``snapshot: "last"`` (Debezium)."""
    previous = None
    try:
        for item in events:
            if previous is not None:
                yield previous
            previous = item
        if previous is not None:
            previous["source"]["snapshot"] = "last"
            yield previous
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()
