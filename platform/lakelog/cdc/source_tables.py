"""Declarations of captured source tables: their columns, types and primary key.

A declaration is the contract between a source database and its ``cdc.<table>`` topic: the
column types say how a source value becomes a JSON value in the change event, and the Spark
schema of a row is the type of the event's ``before`` and ``after``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from pyspark.sql import types as T

from lakelog.errors import ConfigError

ColumnType = Literal["bigint", "integer", "text", "double", "numeric", "boolean", "timestamp"]
COLUMN_TYPES: tuple[str, ...] = get_args(ColumnType)

#: Lower-case SQL identifiers, usable unquoted in SQLite and PostgreSQL and in topic names.
NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

_SPARK_TYPES: dict[str, T.DataType] = {
    "bigint": T.LongType(),
    "integer": T.IntegerType(),
    "text": T.StringType(),
    "double": T.DoubleType(),
    "boolean": T.BooleanType(),
    "timestamp": T.TimestampType(),
}


@dataclass(frozen=True)
class SourceColumn:
    """A column; `precision` and `scale` are required for ``numeric`` and refused otherwise."""

    name: str
    type: ColumnType
    precision: int | None = None
    scale: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME.match(self.name):
            raise ConfigError(
                f"column {self.name!r}: names must be lower-case letters, digits and '_' "
                "(at most 63, not starting with a digit)"
            )
        if self.type not in COLUMN_TYPES:
            raise ConfigError(
                f"column {self.name}: unknown type {self.type!r}; "
                f"use one of {', '.join(COLUMN_TYPES)}"
            )
        if self.type == "numeric":
            if self.precision is None or self.scale is None:
                raise ConfigError(f"column {self.name}: numeric needs precision and scale")
            if not 1 <= self.precision <= 38 or not 0 <= self.scale <= self.precision:
                raise ConfigError(
                    f"column {self.name}: numeric({self.precision},{self.scale}) needs "
                    "1 <= precision <= 38 and 0 <= scale <= precision (Spark's decimal limits)"
                )
        elif self.precision is not None or self.scale is not None:
            raise ConfigError(
                f"column {self.name}: precision and scale are for numeric columns only"
            )

    @property
    def spark_type(self) -> T.DataType:
        if self.type == "numeric":
            return T.DecimalType(self.precision, self.scale)
        return _SPARK_TYPES[self.type]


@dataclass(frozen=True)
class SourceTable:
    """A captured table. Its primary key keys the changelog: one compacted row per key."""

    name: str
    columns: tuple[SourceColumn, ...]
    primary_key: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME.match(self.name) or self.name.startswith("_"):
            raise ConfigError(
                f"source table {self.name!r}: names must be lower-case letters, digits and '_' "
                "(at most 63, not starting with a digit or '_')"
            )
        if not self.columns:
            raise ConfigError(f"source table {self.name}: no columns declared")
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ConfigError(f"source table {self.name}: a column name is repeated: {names}")
        if not self.primary_key:
            raise ConfigError(
                f"source table {self.name}: no primary key declared; changes are keyed by it"
            )
        if len(set(self.primary_key)) != len(self.primary_key):
            raise ConfigError(f"source table {self.name}: primary key repeats a column")
        unknown = [k for k in self.primary_key if k not in names]
        if unknown:
            raise ConfigError(
                f"source table {self.name}: primary key column(s) {unknown} are not among "
                f"the declared columns {names}"
            )

    @property
    def topic(self) -> str:
        """The changelog topic of the table."""
        return f"cdc.{self.name}"

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def key(self, row: dict) -> tuple:
        """The primary key of a row (as written in an event's ``before``/``after``)."""
        return tuple(row[k] for k in self.primary_key)

    def spark_schema(self) -> T.StructType:
        """The row as Spark reads it from an event: every column nullable."""
        return T.StructType([T.StructField(c.name, c.spark_type, True) for c in self.columns])


def table_map(tables: tuple[SourceTable, ...] | list[SourceTable]) -> dict[str, SourceTable]:
    """Tables by name; a capture of no tables or of one name twice is a configuration error."""
    tables = tuple(tables)
    if not tables:
        raise ConfigError("cdc source: no tables to capture")
    for t in tables:
        if not isinstance(t, SourceTable):
            raise ConfigError(f"cdc source: {t!r} is not a SourceTable")
    by_name = {t.name: t for t in tables}
    if len(by_name) != len(tables):
        raise ConfigError(f"cdc source: a table is declared twice: {[t.name for t in tables]}")
    return by_name
