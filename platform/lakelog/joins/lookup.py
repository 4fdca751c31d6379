"""Stream records looking up a row of a table derived from a changelog (compacted or history).

The shared part of the stream–table join (`lakelog.joins.enrich`) and the as-of join
(`lakelog.joins.as_of`): which stream columns and table columns make the output, and how a
record names its row — one SQL expression over the record per table key column (for the demo,
``try_cast(substr(user_id, 3) as bigint)`` turns user ``u-000123`` into customer 123; a value
that does not fit the key's type gives a null key). Both are left joins: a record whose row is
missing, or whose key is null, still gives exactly one output row, with null table columns and
`found` false, so no record is ever dropped.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import reduce

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.cdc.changelog import ChangelogTable
from lakelog.consumers import BatchInput, Consumer, Output
from lakelog.errors import ConfigError
from lakelog.joins.side import TRAILER, Side, check_columns, check_name, trailer
from lakelog.lake import held_read
from lakelog.lake.upsert import read_keys


@dataclass(frozen=True)
class Lookup(ABC):
    """A join of `stream` records with rows of `table`, written to ``streams/<name>``."""

    name: str
    stream: Side
    table: ChangelogTable
    #: Per table key column (in the table's key order), a SQL expression over the record.
    key: tuple[str, ...]
    #: Table columns in the output, as ``(output name, table column)`` pairs.
    columns: tuple[tuple[str, str], ...]
    #: The output column saying whether the record's row was found.
    found: str = "found"
    max_records_per_batch: int = 250_000

    def __post_init__(self) -> None:
        check_name("join", self.name)
        owner = f"join {self.name}"
        if len(self.key) != len(self.table.key):
            raise ConfigError(
                f"{owner}: {self.table.path} has key {list(self.table.key)}, so the record "
                f"needs {len(self.table.key)} key expression(s), not {len(self.key)}"
            )
        known = self.table_schema.fieldNames()
        unknown = [c for _, c in self.columns if c not in known]
        if unknown:
            raise ConfigError(f"{owner}: {self.table.path} has no column {unknown[0]!r}")
        check_columns(owner, self.output.schema.fieldNames())

    @property
    def table_schema(self) -> T.StructType:
        return self.table.output.schema

    @property
    def output(self) -> Output:
        schema = T.StructType([
            *self.stream.fields,
            *[self.table_schema[k] for k in self.table.key],
            *[T.StructField(n, self.table_schema[c].dataType) for n, c in self.columns],
            T.StructField(self.found, T.BooleanType()),
            *TRAILER,
        ])
        return Output(f"streams/{self.name}", schema)

    @abstractmethod
    def transform(self, batch: BatchInput) -> dict[str, DataFrame]:
        """The batch's records joined with their rows (the join kind decides which row)."""

    @property
    def consumer(self) -> Consumer:
        return Consumer(
            name=f"join.{self.name}",
            topics=(self.stream.topic.name,),
            outputs=(self.output,),
            transform=self.transform,
            reads=(self.table.path,),
            max_records_per_batch=self.max_records_per_batch,
        )

    def table_rows(self, batch: BatchInput, keyed: DataFrame) -> tuple[DataFrame, pa.Table | None]:
        """The table's stored rows with a key of `keyed` (none before the table exists), or
        all of a small table's, read in this process (`lakelog.lake.held_read`) and joined by
        broadcast; those are also given as the Arrow data they were made of (else None)."""
        lake = batch.lake
        if not lake.exists(self.table.path):
            return keyed.sparkSession.createDataFrame([], self.table_schema), None
        snapshot = lake.snapshot(self.table.path)
        if held_read.holds(snapshot):
            held = held_read.current_table(lake, snapshot)
            return F.broadcast(held_read.rows(lake, snapshot, held)), held
        return read_keys(lake, snapshot, keyed, self.table.key), None

    def keyed(self, records: DataFrame) -> DataFrame:
        """The records' output columns, their table key, their time (``_time``) and position
        in the log (``_partition``, ``_offset``: one record, whatever its payload)."""
        return records.select(
            *self.stream.selected(),
            *[
                F.expr(expr).try_cast(self.table_schema[k].dataType).alias(k)
                for k, expr in zip(self.table.key, self.key)
            ],
            F.col(self.stream.time).alias("_time"),
            F.col("partition").alias("_partition"),
            F.col("offset").alias("_offset"),
        )

    def rows(self, table: DataFrame, *extra: str) -> DataFrame:
        """Table rows to join: the key as ``_t_<key>``, the chosen columns, ``_found``, and the
        `extra` table columns the join condition needs."""
        return table.select(
            *[F.col(k).alias(f"_t_{k}") for k in self.table.key],
            *[F.col(c).alias(n) for n, c in self.columns],
            *extra,
            F.lit(True).alias("_found"),
        )

    def same_key(self) -> Column:
        return reduce(
            lambda a, b: a & b, [F.col(k) == F.col(f"_t_{k}") for k in self.table.key]
        )

    def finish(self, joined: DataFrame, *, batch: int) -> DataFrame:
        """Joined rows as output rows; a record without a row gets `found` false."""
        return joined.select(
            *self.stream.names,
            *self.table.key,
            *[n for n, _ in self.columns],
            F.coalesce(F.col("_found"), F.lit(False)).alias(self.found),
            *trailer(batch=batch, time=F.col("_time")),
        )
