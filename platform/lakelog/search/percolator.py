"""Stored queries matched against each microbatch of a topic: search on streams (DDIA ch. 11),
the way Elasticsearch's percolator turns search around — the queries are stored, the records
flow past them.

A `Percolator` reads two topics. `queries` holds saved queries, e.g. price alerts (a category,
a maximum price, a keyword), one id each: the newest record of an id replaces its query, and
one whose `deleted` column is true removes it. `events` is any topic, e.g. the products'
changelog. Each `Condition` compares a column of the query with a column of the event; a query
whose column is null does not constrain that condition (an alert without a category is for any
category). The consumer ``percolate.<name>`` writes per microbatch:

- ``streams/<name>`` (appended) — one row per (query, event) that match: the query's id and
  chosen columns, the event's chosen columns and its place in the log, the batch, the hour of
  the event time (the row's time partition);
- ``_state/percolators/<name>/queries`` (upserted, internal) — the live queries.

The batch's events are matched against the queries stored before the batch; the batch's own
query records are applied after them, in the same commit order as every consumer's (the state
last). So a query added, changed or removed applies from the next batch on, a retry matches the
same queries, and every match is written exactly once. An event no query matches is not lost:
it stays in its topic; a query record without an id is a dead letter at ingest (the id must be a
required field).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Literal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from lakelog.consumers import BatchInput, Changes, Consumer, Output, Role
from lakelog.errors import ConfigError
from lakelog.joins.side import check_choice, check_columns, check_name
from lakelog.lake.one_partition import spread
from lakelog.log.topics import Topic

Op = Literal["=", "<=", ">=", "contains"]

#: The columns every match ends with: where the event is in its log, and when it happened.
TRAILER = (
    T.StructField("event_id", T.StringType()),
    T.StructField("event_partition", T.IntegerType()),
    T.StructField("event_offset", T.LongType()),
    T.StructField("event_time", T.TimestampType()),
    T.StructField("batch", T.LongType()),
    T.StructField("hour", T.TimestampType()),
)


@dataclass(frozen=True)
class Condition:
    """``event <op> query``: `event` a column (or dotted field path) of the event record, `query`
    a column of the query. ``contains`` is a case-insensitive substring test of the event's
    text. A null query value passes; a null event value fails a query value that is set."""

    event: str
    op: Op
    query: str

    def test(self) -> Column:
        """The condition over a row of events joined with queries (query columns ``_q_*``)."""
        event, query = F.col(_event(self.event)), F.col(_q(self.query))
        if self.op == "contains":  # each side lowered once, before the join (`matches`)
            passed = F.col(_lower(_event(self.event))).contains(F.col(_lower(_q(self.query))))
        else:
            passed = {"=": event == query, "<=": event <= query, ">=": event >= query}[self.op]
        return query.isNull() | F.coalesce(passed, F.lit(False))


@dataclass(frozen=True)
class Percolator:
    name: str
    events: Topic
    queries: Topic
    #: The queries topic's id column (a required field: a record without one is a dead letter).
    id: str
    conditions: tuple[Condition, ...]
    #: Output columns as ``(output name, event column or dotted path)`` pairs.
    event_columns: tuple[tuple[str, str], ...] = ()
    #: Output columns as ``(output name, query column)`` pairs.
    query_columns: tuple[tuple[str, str], ...] = ()
    #: A boolean column of the queries topic: true removes the query.
    deleted: str | None = None
    #: A SQL filter on the events; only those it keeps are matched (e.g. no deletes).
    where: str | None = None
    max_records_per_batch: int = 250_000

    def __post_init__(self) -> None:
        check_name("percolator", self.name)
        owner = f"percolator {self.name}"
        if self.events.name == self.queries.name:
            raise ConfigError(f"{owner}: its events and its queries are two different topics")
        if not self.conditions:
            raise ConfigError(f"{owner}: needs at least one condition")
        if self.id not in self.queries.required_fields:
            raise ConfigError(f"{owner}: the id {self.id!r} must be a required field of "
                              f"{self.queries.name}")
        for c in self.conditions:
            check_choice(owner, "condition op", c.op, Op)
            self.event_type(c.event)
            query_type = self.query_type(c.query)
            if c.op == "contains" and not isinstance(query_type, T.StringType):
                raise ConfigError(f"{owner}: 'contains' needs a text column, not {c.query!r}")
        for _, column in self.event_columns:
            self.event_type(column)
        for _, column in self.query_columns:
            self.query_type(column)
        if self.deleted is not None and not isinstance(self.query_type(self.deleted),
                                                       T.BooleanType):
            raise ConfigError(f"{owner}: deleted column {self.deleted!r} must be a boolean")
        check_columns(owner, self.output.schema.fieldNames())

    def event_type(self, path: str) -> T.DataType:
        """The type of an event column or dotted field path (a ConfigError if there is none)."""
        kind: T.DataType = self.events.table_schema
        for part in path.split("."):
            if not isinstance(kind, T.StructType) or part not in kind.fieldNames():
                raise ConfigError(f"percolator {self.name}: {self.events.name} has no field "
                                  f"{path!r}")
            kind = kind[part].dataType
        return kind

    def query_type(self, column: str) -> T.DataType:
        if column not in self.queries.table_schema.fieldNames():
            raise ConfigError(f"percolator {self.name}: {self.queries.name} has no column "
                              f"{column!r}")
        return self.queries.table_schema[column].dataType

    @property
    def output(self) -> Output:
        return Output(f"streams/{self.name}", T.StructType([
            T.StructField(self.id, self.query_type(self.id)),
            *[T.StructField(n, self.query_type(c)) for n, c in self.query_columns],
            *[T.StructField(n, self.event_type(c)) for n, c in self.event_columns],
            *TRAILER,
        ]))

    @property
    def state(self) -> Output:
        stored = dict.fromkeys([self.id, *(c.query for c in self.conditions),
                                *(c for _, c in self.query_columns)])
        schema = T.StructType([T.StructField(c, self.query_type(c)) for c in stored])
        return Output(f"_state/percolators/{self.name}/queries", schema, keys=(self.id,),
                      role=Role.STATE)

    @property
    def consumer(self) -> Consumer:
        return Consumer(
            name=f"percolate.{self.name}",
            topics=(self.events.name, self.queries.name),
            outputs=(self.output, self.state),  # the state last
            transform=self.transform,
            max_records_per_batch=self.max_records_per_batch,
        )

    def transform(self, batch: BatchInput) -> dict[str, DataFrame | Changes]:
        events = batch.records[self.events.name]
        if self.where:
            events = events.where(F.expr(self.where))
        found = matches(self, events, batch.current(self.state), batch=batch.batch)
        latest = batch.records[self.queries.name].withColumn("_newest", F.row_number().over(
            Window.partitionBy(self.id).orderBy(F.desc("partition"), F.desc("offset"))
        )).where(F.col("_newest") == 1)
        gone = F.lit(False) if self.deleted is None else F.coalesce(F.col(self.deleted),
                                                                    F.lit(False))
        return {
            self.output.path: found,
            self.state.path: Changes(
                latest.where(~gone).select(*self.state.schema.fieldNames()),
                deletes=latest.where(gone).select(self.id),
            ),
        }


def matches(percolator: Percolator, events: DataFrame, queries: DataFrame, *,
            batch: int) -> DataFrame:
    """Output rows of `events` (topic records) matched with stored `queries` (the state's
    rows)."""
    p = percolator
    paths = dict.fromkeys([*(c.event for c in p.conditions), *(c for _, c in p.event_columns)])
    # A `contains` compares lowered text: each event's and each query's lowered once here, not
    # once per pair the join tests (Spark does not move an expression of a join's condition
    # below the join).
    searched = dict.fromkeys(c.event for c in p.conditions if c.op == "contains")
    keywords = dict.fromkeys(c.query for c in p.conditions if c.op == "contains")
    flat = events.select(
        *[F.col(path).alias(_event(path)) for path in paths],
        *[F.lower(F.col(path)).alias(_lower(_event(path))) for path in searched],
        "event_id", "partition", "offset", "event_time",
    )
    # The state's columns as declared: `queries.columns` asks Spark Connect for them.
    stored = queries.select(*[F.col(c).alias(_q(c)) for c in p.state.schema.fieldNames()],
                            *[F.lower(F.col(c)).alias(_lower(_q(c))) for c in keywords])
    test = reduce(lambda a, b: a & b, [c.test() for c in p.conditions])
    # Every event is tested against every query: over the cores, not in the one partition a
    # batch's held records come in (`lakelog.lake.one_partition`).
    return spread(flat).join(stored, test, "inner").select(
        F.col(_q(p.id)).alias(p.id),
        *[F.col(_q(c)).alias(n) for n, c in p.query_columns],
        *[F.col(_event(c)).alias(n) for n, c in p.event_columns],
        F.col("event_id"),
        F.col("partition").alias("event_partition"),
        F.col("offset").alias("event_offset"),
        F.col("event_time"),
        F.lit(batch).cast("long").alias("batch"),
        F.date_trunc("hour", F.col("event_time")).alias("hour"),
    )


def _event(path: str) -> str:
    return "_e_" + path.replace(".", "__")


def _q(column: str) -> str:
    return "_q_" + column


def _lower(column: str) -> str:
    """The column of `column`'s lowered text, for `contains`."""
    return "_lc" + column
