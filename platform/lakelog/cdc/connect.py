"""Opening the source of a capture: PostgreSQL when a DSN is given, else a SQLite file."""

from __future__ import annotations

import os
import re

from lakelog.cdc.postgres import PostgresSource
from lakelog.cdc.source import Source
from lakelog.cdc.source_tables import SourceTable
from lakelog.cdc.sqlite import SqliteSource


def sqlite_path(root: str, server_name: str) -> str:
    """Where the embedded default keeps a server's SQLite database: ``<root>/sources/``."""
    return os.path.join(root, "sources", f"{server_name}.db")


def open_source(
    server_name: str, tables: tuple[SourceTable, ...], *, root: str, dsn: str | None = None
) -> Source:
    """The capture source of `server_name`; its slot and publication are ``lakelog_<server>``."""
    if dsn:
        name = "lakelog_" + re.sub(r"[^a-z0-9_]", "_", server_name.lower())
        return PostgresSource(dsn, tables, slot=name, publication=name, server_name=server_name)
    return SqliteSource(sqlite_path(root, server_name), tables, server_name)
