"""One input of a join: a topic, the columns it contributes, and the columns every join adds.

Columns are chosen and renamed as ``(output name, topic column)`` pairs, so an output's schema
is known from the declarations alone (a consumer's tables are created before any data is read).
Every join output ends with ``batch`` (the microbatch that wrote the row) and ``hour`` (the
stream record's event time truncated to the hour: the time partition of the row).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, get_args

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.errors import ConfigError
from lakelog.log.topics import Topic

NAME = re.compile(r"^[a-z][a-z0-9_]{0,49}$")

#: Columns every join output ends with.
TRAILER = (
    T.StructField("batch", T.LongType()),
    T.StructField("hour", T.TimestampType()),
)


def check_name(kind: str, name: str) -> None:
    if not NAME.match(name):
        raise ConfigError(f"{kind} name {name!r} must be lowercase letters, digits and '_'")


@dataclass(frozen=True)
class Side:
    """A topic as a join input: `columns` are ``(output name, topic column)`` pairs, `time` the
    topic column that is the record's event time (the corrected ``event_time`` by default)."""

    topic: Topic
    columns: tuple[tuple[str, str], ...]
    time: str = "event_time"

    def __post_init__(self) -> None:
        record = self.topic.table_schema.fieldNames()
        unknown = [c for _, c in self.columns if c not in record]
        if unknown or self.time not in record:
            raise ConfigError(
                f"join input {self.topic.name}: no column {(unknown or [self.time])[0]!r} in "
                f"its records ({', '.join(record)})"
            )
        if not isinstance(self.type_of(self.time), T.TimestampType):
            raise ConfigError(f"join input {self.topic.name}: time column {self.time!r} "
                              "must be a timestamp")

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.columns]

    def type_of(self, column: str) -> T.DataType:
        return self.topic.table_schema[column].dataType

    @property
    def fields(self) -> list[T.StructField]:
        """The output fields this side contributes."""
        return [T.StructField(name, self.type_of(column)) for name, column in self.columns]

    def selected(self) -> list[Column]:
        return [F.col(column).alias(name) for name, column in self.columns]


def check_choice(owner: str, what: str, value: object, choices: Any) -> None:
    """`value` is one of the `choices` (a ``Literal`` type), else a ConfigError naming them."""
    allowed = get_args(choices)
    if value not in allowed:
        raise ConfigError(f"{owner}: {what} must be one of {', '.join(allowed)}, not {value!r}")


def check_columns(owner: str, names: Iterable[str]) -> None:
    """Output names are lowercase identifiers (a leading '_' is left to lakelog's internal
    columns, so they never collide), and no two output columns share one."""
    names = list(names)
    for name in names:
        if not NAME.match(name):
            raise ConfigError(f"{owner}: output column {name!r} must be lowercase letters, "
                              "digits and '_', starting with a letter")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"{owner}: output column {twice[0]!r} is chosen twice")


def columns_text(columns: Iterable[tuple[str, str]]) -> str:
    """``(output name, column)`` pairs as a consumer's definition shows them (`Consumer.
    definition`), by output name, e.g. ``name, stock=quantity``: their order changes nothing
    stored (rows are written by column name)."""
    return ", ".join(n if n == c else f"{n}={c}" for n, c in sorted(columns))


def trailer(*, batch: int, time: Column) -> list[Column]:
    """The ``batch`` and ``hour`` columns of a row whose stream record has event time `time`."""
    return [F.lit(batch).cast("long").alias("batch"), F.date_trunc("hour", time).alias("hour")]
