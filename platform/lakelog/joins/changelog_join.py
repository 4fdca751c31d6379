"""Table–table join of two changelog-backed tables on any columns, kept up to date from both
sides' change streams (DDIA ch. 11, "Stream joins": the table–table join as a materialized view).

E.g. accounts with their owner, on ``accounts.owner_id = owners.owner_id``: many rows on either
side may share a join value, and an update may move a row from one join value to another. The
consumer ``join.<name>`` reads both changelog topics (``cdc.<table>``) and writes:

- ``streams/<name>`` (upserted by ``_row``, the pair of primary keys) — the join of the two
  tables' current rows: `how` is inner, or left, right or full outer (a row without a partner
  has the other side's columns null). ``batch`` is the microbatch that last wrote the row.
- ``_state/joins/<name>/rows`` (upserted, internal) — per primary key of either side, its
  current row and join value, or a tombstone for a deleted key: a compacted table of both
  changelogs, so a change is applied only if its position is newer than the stored one, and
  late, replayed or duplicated changes cannot move a key back.

A microbatch, step by step:

1. per side and key, the batch's latest change replaces the stored row if its position is newer
   (a join with the state, which also gives the join value of the row each winner replaces);
2. the join values it touches are those of these winners and of the rows they replace, whose
   state rows a second scan of the state finds (with the winners broadcast for a small batch);
3. the state rows of the touched join values are joined twice, before and after the winners
   replace theirs: in one commit the first join's rows are deleted and the second's written,
   then the state in a commit of its own. The state is committed last, so a retry after a
   crash between the two computes the same rows from the state before the batch.

The output therefore equals a batch join of the two compacted tables after every batch (a
property test checks it after random changes, key moves, duplicates and reorderings).
A row whose join value has a null column matches nothing (SQL's equality); in an outer join it
appears unmatched, else it is only kept in the state, where a later update can give it a value.
A batch reads the state twice (both tables' current rows); the output rows it rewrites are those
of the touched join values.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Literal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.cdc.changelog import ChangelogTable
from lakelog.cdc.compacted import latest_rows
from lakelog.consumers import BatchInput, Changes, Consumer, Output, Role
from lakelog.errors import ConfigError
from lakelog.joins.side import check_choice, check_columns, check_name, columns_text
from lakelog.lake.one_partition import one_partition
from lakelog.log.offsets import RangeStats

How = Literal["inner", "left", "right", "full"]
Which = Literal["left", "right"]
STATE_KEY = ("_side", "_pk")


@dataclass(frozen=True)
class ChangelogJoin:
    """The rows of `left` joined with the rows of `right` whose `on` columns are equal."""

    name: str
    #: The tables joined, each by its changelog (its topic, row and key; the table is not read).
    left: ChangelogTable
    right: ChangelogTable
    #: ``(left column, right column)`` pairs of the join condition, all of them equal.
    on: tuple[tuple[str, str], ...]
    #: Output columns, as ``(output name, row column)`` pairs of each side.
    left_columns: tuple[tuple[str, str], ...]
    right_columns: tuple[tuple[str, str], ...]
    how: How = "inner"
    max_records_per_batch: int = 250_000

    def __post_init__(self) -> None:
        check_name("changelog join", self.name)
        owner = f"changelog join {self.name}"
        if self.left.topic.name == self.right.topic.name:
            raise ConfigError(f"{owner}: joins two different tables, not one with itself")
        check_choice(owner, "how", self.how, How)
        if not self.on:
            raise ConfigError(f"{owner}: needs at least one (left column, right column) pair")
        for side, columns in ((self.left, [a for a, _ in self.on] + [c for _, c in
                                                                   self.left_columns]),
                              (self.right, [b for _, b in self.on] + [c for _, c in
                                                                     self.right_columns])):
            unknown = [c for c in columns if c not in side.row.fieldNames()]
            if unknown:
                raise ConfigError(f"{owner}: {side.name} has no column {unknown[0]!r}")
        for a, b in self.on:
            if self.left.row[a].dataType != self.right.row[b].dataType:
                raise ConfigError(f"{owner}: {self.left.name}.{a} and {self.right.name}.{b} "
                                  "have different types")
        check_columns(owner, [n for n, _ in (*self.left_columns, *self.right_columns)])

    @property
    def output(self) -> Output:
        schema = T.StructType([
            T.StructField("_row", T.StringType()),
            *[T.StructField(n, self.left.row[c].dataType) for n, c in self.left_columns],
            *[T.StructField(n, self.right.row[c].dataType) for n, c in self.right_columns],
            T.StructField("batch", T.LongType()),
        ])
        return Output(f"streams/{self.name}", schema, keys=("_row",))

    @property
    def state(self) -> Output:
        schema = T.StructType([
            T.StructField("_side", T.StringType()),
            T.StructField("_pk", T.StringType()),
            T.StructField("_on", T.StringType()),
            T.StructField("_position", T.StringType()),
            T.StructField("_deleted", T.BooleanType()),
            T.StructField("left", self.left.row),
            T.StructField("right", self.right.row),
        ])
        return Output(f"_state/joins/{self.name}/rows", schema, keys=STATE_KEY,
                      newer_by="_position", role=Role.STATE)

    @property
    def consumer(self) -> Consumer:
        return Consumer(
            name=f"join.{self.name}",
            topics=(self.left.topic.name, self.right.topic.name),
            outputs=(self.output, self.state),  # the state last
            transform=self.transform,
            max_records_per_batch=self.max_records_per_batch,
            # What the state and the rows written hold (`lakelog.consumers.definitions`): a
            # stored row's join value follows `on` and its `_pk` the tables' keys, and a row is
            # rewritten only when a change touches its join value, so rows of the earlier `on`,
            # `how` or columns would stay.
            definition=(("on", ", ".join(f"{a} = {b}" for a, b in self.on)), ("how", self.how),
                        ("keys", f"{', '.join(self.left.key)}; {', '.join(self.right.key)}"),
                        ("left_columns", columns_text(self.left_columns)),
                        ("right_columns", columns_text(self.right_columns))),
        )

    def transform(self, batch: BatchInput) -> dict[str, DataFrame | Changes]:
        stored = batch.current(self.state).withColumn("_group", _group())
        incoming = self._latest(batch, "left").unionByName(self._latest(batch, "right"))
        winners = incoming.join(
            stored.select(*STATE_KEY, F.col("_position").alias("_stored"),
                          F.col("_group").alias("_was")),
            list(STATE_KEY), "left",
        ).where(F.col("_stored").isNull() | (F.col("_position") > F.col("_stored")))
        # Computed once, each a few rows: every output below is cut from these two (kept until
        # the batch's writes are done: `BatchInput.cached`). `_was` is the join group of the
        # stored row a winner replaces.
        winners = batch.cached(winners.drop("_stored").withColumn("_group", _group()))
        stats = RangeStats.combined(batch.stats.values())  # None: a topic's are not known
        before = batch.cached(_touched(stored, winners, stats and stats.records))
        after = before.where(~F.col("_replaced")).drop("_replaced").unionByName(
            winners.drop("_was"))
        if batch.few(self.state):  # each side of the joins below in one partition
            before, after = one_partition(before), one_partition(after)
        return {
            self.output.path: Changes(self.joined(after, batch=batch.batch),
                                      deletes=self.joined(before, batch=batch.batch)),
            self.state.path: winners.drop("_group", "_was"),
        }

    def _latest(self, batch: BatchInput, which: Which) -> DataFrame:
        """The batch's latest change per key of one side, as state rows."""
        table = self.left if which == "left" else self.right
        rows = latest_rows(batch.records[table.topic.name], table.row, table.key)
        columns = [a if which == "left" else b for a, b in self.on]
        values = [F.col(c).alias(f"c{i}") for i, c in enumerate(columns)]
        complete = reduce(lambda a, b: a & b, [F.col(c).isNotNull() for c in columns])
        other = self.right if which == "left" else self.left
        return rows.select(
            F.lit(which).alias("_side"),
            F.to_json(F.struct(*table.key)).alias("_pk"),
            F.when(~F.col("_deleted") & complete, F.to_json(F.struct(*values))).alias("_on"),
            "_position",
            "_deleted",
            F.struct(*table.row.fieldNames()).alias(which),
            F.lit(None).cast(other.row).alias("right" if which == "left" else "left"),
        )

    def joined(self, rows: DataFrame, *, batch: int) -> DataFrame:
        """The output rows of state `rows` (with their `_group`): the live rows of each side
        joined on the group, as `how` says."""
        live = rows.where(~F.col("_deleted"))
        left = live.where(F.col("_side") == "left").select("_group", F.col("_pk").alias("_l"),
                                                           "left")
        right = live.where(F.col("_side") == "right").select(
            "_group", F.col("_pk").alias("_r"), "right"
        )
        pairs = left.join(right, "_group", self.how)
        return pairs.select(
            F.to_json(F.struct(F.col("_l").alias("l"), F.col("_r").alias("r"))).alias("_row"),
            *[F.col("left")[c].alias(n) for n, c in self.left_columns],
            *[F.col("right")[c].alias(n) for n, c in self.right_columns],
            F.lit(batch).cast("long").alias("batch"),
        )


#: The most records of a batch whose winners are broadcast to find the stored rows they touch:
#: one scan of the state, where a join shuffles the state and each side of the winners in a
#: Spark job of its own. A larger batch (or one of unknown size) joins them so.
BROADCAST_WINNERS = 10_000


def _touched(stored: DataFrame, winners: DataFrame, records: int | None) -> DataFrame:
    """The stored rows of the join groups `winners` touch (theirs, and those of the rows they
    replace), each with ``_replaced``: whether a winner replaces it. The winners of a batch of
    at most `BROADCAST_WINNERS` `records` (as many winners at most; None: not known) are
    broadcast."""
    touched = winners.select("_group").unionByName(
        winners.where(F.col("_was").isNotNull()).select(F.col("_was").alias("_group")))
    replaced = winners.select(*STATE_KEY, F.lit(True).alias("_replaced"))  # one row a key
    if records is not None and records <= BROADCAST_WINNERS:
        touched, replaced = F.broadcast(touched), F.broadcast(replaced)
    return stored.join(touched, "_group", "left_semi").join(
        replaced, list(STATE_KEY), "left",
    ).withColumn("_replaced", F.coalesce(F.col("_replaced"), F.lit(False)))


def _group() -> Column:
    """The join group of a state row: its join value, or for a row without one (a null column,
    or deleted) a group of its own, so that it matches nothing."""
    return F.coalesce(F.col("_on"), F.concat(F.lit("\u0000"), F.col("_side"), F.lit(":"),
                                             F.col("_pk"))).alias("_group")
