"""Changelog topics: Debezium change events of one source table, keyed by its primary key.

A record is Debezium's JSON value (converter with ``schemas.enable=false``): ``before``, ``after``,
``op`` (c create, u update, d delete, r snapshot read), ``ts_ms`` and ``source``. The topic derives
from it, at ingest, the columns the rest of lakelog works with:

- ``pk`` — the primary key from ``after`` (or ``before`` for a delete), the topic's key;
- ``position`` — a string whose order is the order of the changes of a key at the source:
  ``hex16(commit) + hex16(change)``. For PostgreSQL, commit is ``source.commit_lsn`` (lakelog's
  capture adds it; Debezium's own output lacks it, and then the change's ``lsn`` is used) and
  change is ``source.lsn``: logical decoding emits transactions in commit order, and a change can
  carry an LSN below an earlier-committed transaction's, so the change LSN alone can misorder.
  For SQLite both are the change table's ``source.seq``;
- ``change_id`` — position and key, the event id (a re-landed change is a duplicate);
- ``commit_time`` — the source's commit time (``source.ts_ms``), the event time.

Decimal, timestamp and date columns may come in any of Debezium's encodings of them (base64
``precise`` decimals, epoch timestamps and dates: `lakelog.cdc.debezium`) besides lakelog's own.

Change events that break the envelope's rules (unknown op, a create without ``after``, a delete
without ``before``, no position) are dead letters, like any malformed record.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.cdc.debezium import row_decoder
from lakelog.consumers import BatchInput, Consumer, Output
from lakelog.errors import ConfigError
from lakelog.log.topics import Compaction, Derived, EventTime, Retention, Rule, Topic

OPS = ("c", "u", "d", "r")
COMPACTION = Compaction(
    min_lag=timedelta(hours=1), delete_retention=timedelta(days=1), tombstone="op = 'd'"
)

SOURCE = T.StructType(
    [
        T.StructField("version", T.StringType()),
        T.StructField("connector", T.StringType()),
        T.StructField("name", T.StringType()),
        T.StructField("ts_ms", T.LongType()),
        T.StructField("snapshot", T.StringType()),
        T.StructField("db", T.StringType()),
        T.StructField("schema", T.StringType()),
        T.StructField("table", T.StringType()),
        T.StructField("txId", T.LongType()),
        T.StructField("lsn", T.LongType()),
        T.StructField("commit_lsn", T.LongType()),
        T.StructField("seq", T.LongType()),
    ]
)


def _hex16(value: Column) -> Column:
    return F.lpad(F.hex(value), 16, "0")


def position(record: Column) -> Column:
    """The ordering position of a change event (see the module docstring)."""
    source = record["source"]
    change = F.coalesce(source["lsn"], source["seq"])
    commit = F.coalesce(source["commit_lsn"], change)
    return F.concat(_hex16(commit), _hex16(change))


def primary_key(record: Column, columns: Sequence[str]) -> Column:
    """The key as a string: the value itself for one column, a JSON object for several."""
    def value(row: Column) -> Column:
        if len(columns) == 1:
            return row[columns[0]].cast("string")
        parts = [row[c] for c in columns]
        complete = reduce(lambda a, b: a & b, [p.isNotNull() for p in parts])
        return F.when(complete, F.to_json(F.struct(*[p.alias(c) for p, c in zip(parts, columns)])))

    return F.coalesce(value(record["after"]), value(record["before"]))


def changelog_topic(
    table: str,
    row: T.StructType,
    key: Sequence[str],
    *,
    name: str | None = None,
    partitions: int = 4,
    retention: Retention | None = None,
    dedup_window: timedelta = timedelta(days=1),
    compaction: Compaction | None = COMPACTION,
) -> Topic:
    """The topic ``cdc.<table>`` of change events of a table with columns `row`.

    Compacted by default, like Debezium's topics: deletes are its tombstones."""
    key = tuple(key)
    missing = [k for k in key if k not in row.fieldNames()]
    if not key or missing:
        raise ConfigError(
            f"changelog of {table}: primary key {list(key)} is not among the columns "
            f"{row.fieldNames()}"
        )
    schema = T.StructType(
        [
            T.StructField("before", row),
            T.StructField("after", row),
            T.StructField("op", T.StringType(), False),
            T.StructField("ts_ms", T.LongType()),
            T.StructField("source", SOURCE),
        ]
    )
    derived = (
        Derived("pk", T.StringType(), lambda r: primary_key(r, key)),
        Derived("position", T.StringType(), position),
        Derived(
            "change_id", T.StringType(),
            lambda r: F.concat(position(r), F.lit(":"), primary_key(r, key)),
        ),
        Derived(
            "commit_time", T.TimestampType(),
            lambda r: F.timestamp_millis(F.coalesce(r["source"]["ts_ms"], r["ts_ms"])),
        ),
    )
    rules = (
        Rule(f"op must be one of {', '.join(OPS)}", lambda r: r["op"].isin(*OPS)),
        Rule("a create, update or read needs 'after'",
             lambda r: (r["op"] == "d") | r["after"].isNotNull()),
        Rule("a delete needs 'before'", lambda r: (r["op"] != "d") | r["before"].isNotNull()),
        Rule("no source position: needs source.lsn or source.seq",
             lambda r: F.coalesce(r["source"]["lsn"], r["source"]["seq"]).isNotNull()),
    )
    decoders = tuple(d for d in (row_decoder("before", row), row_decoder("after", row)) if d)
    return Topic(
        name or f"cdc.{table}",
        schema,
        decoders=decoders,
        key="pk",
        partitions=partitions,
        event_id="change_id",
        time=EventTime("commit_time"),
        retention=retention or Retention(),
        dedup_window=dedup_window,
        derived=derived,
        rules=rules,
        compaction=compaction,
    )


#: The change columns of rows derived from a changelog, besides the source row's columns.
META = (
    T.StructField("_position", T.StringType()),
    T.StructField("_op", T.StringType()),
    T.StructField("_deleted", T.BooleanType()),
    T.StructField("_commit_time", T.TimestampType()),
)


def change_rows(changes: DataFrame, row: T.StructType, key: Sequence[str]) -> DataFrame:
    """Each change as the row it leaves: ``after``, or for a delete the key alone (a tombstone),
    with the `META` columns."""
    deleted = F.col("op") == "d"
    columns = [
        (F.when(deleted, F.col("before")[f.name]).otherwise(F.col("after")[f.name])
         if f.name in key else F.when(~deleted, F.col("after")[f.name])).alias(f.name)
        for f in row.fields
    ]
    return changes.select(
        *columns,
        F.col("position").alias("_position"),
        F.col("op").alias("_op"),
        deleted.alias("_deleted"),
        F.col("commit_time").alias("_commit_time"),
    )


@dataclass(frozen=True)
class ChangelogTable(ABC):
    """A table one consumer derives from one changelog topic (compacted or history table).

    Subclasses give `KIND` (the consumer's name prefix), `LABEL` (in messages), `path`,
    `output` and `transform`.
    """

    KIND = "table"
    LABEL = "changelog table"

    name: str
    topic: Topic  # a changelog topic (`changelog_topic`)
    row: T.StructType
    key: tuple[str, ...]
    rows_per_file: int = 250_000
    max_records_per_batch: int = 250_000

    def __post_init__(self) -> None:
        if not self.key or any(k not in self.row.fieldNames() for k in self.key):
            raise ConfigError(
                f"{self.LABEL} {self.name}: key {list(self.key)} not in the row"
            )

    @property
    @abstractmethod
    def path(self) -> str: ...

    @property
    @abstractmethod
    def output(self) -> Output: ...

    @abstractmethod
    def transform(self, batch: BatchInput) -> dict[str, DataFrame]: ...

    @property
    def consumer(self) -> Consumer:
        """The consumer that maintains this table alone."""
        return Consumer(
            name=f"{self.KIND}.{self.name}",
            topics=(self.topic.name,),
            outputs=(self.output,),
            transform=self.transform,
            max_records_per_batch=self.max_records_per_batch,
        )
