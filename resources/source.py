"""The CDC source resource: which database a capture reads."""

from __future__ import annotations

import os
from typing import Optional

import dagster as dg
from pydantic import Field

from lakelog.cdc import Source, SourceTable
from lakelog.cdc.connect import open_source

DSN_VARIABLE = "LAKELOG_SOURCE_DSN"


class SourceResource(dg.ConfigurableResource):
    """PostgreSQL at `dsn` (default $LAKELOG_SOURCE_DSN), else the SQLite file under the lake.

    The DSN is resolved when a source is opened, not when definitions load, so the same code
    location captures from SQLite locally and from PostgreSQL where the variable is set.
    """

    dsn: Optional[str] = Field(
        default=None,
        description="PostgreSQL connection string; default $LAKELOG_SOURCE_DSN, else SQLite.",
    )

    def open(self, server_name: str, tables: tuple[SourceTable, ...], *, root: str) -> Source:
        dsn = self.dsn or os.environ.get(DSN_VARIABLE) or None
        return open_source(server_name, tables, root=root, dsn=dsn)
