"""Table–table join maintained incrementally: per-key totals of a fact stream joined with the
current row of a captured table, e.g. per customer their orders and their attributes.

Both tables are read as their change streams by one consumer, ``join.<name>``: the fact topic
(each fact adds to its key's totals) and the table's changelog (``cdc.<table>``: each change
replaces its key's attributes). A microbatch touches only the keys its records name: it reads
their stored rows (`lakelog.lake.upsert.candidate_files`, the output being clustered by key),
combines them with the batch's facts and changes in one aggregation per key (`combine`), and
upserts them into the files it read —
so the output always equals a batch join of (all facts with a key, aggregated per key) with
(the compacted table, tombstones included), full outer:

- a change is applied only if its changelog position is newer than the stored ``_position``,
  like the compacted table does, so late, replayed or duplicated changes cannot move a key back;
- a row deleted at the source keeps its totals and gets null attributes and ``_deleted`` true;
  the row stays (like a tombstone it keeps an older, late change from bringing the attributes
  back, and a later re-insert of the key continues its totals);
- a key with changes but no facts has a row with zero totals; a key with facts but no row yet
  has null attributes until its row's change arrives.

Facts are counted once per event id within a batch; across batches the topic's ingest
de-duplication (by event id, within its dedup window) keeps a redelivered fact out. A fact or
change whose key is null cannot be joined; it goes to ``streams/<name>_rejected`` with its
record, never silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.cdc.changelog import META, change_rows
from lakelog.cdc.compacted import CompactedTable
from lakelog.consumers import BatchInput, Changes, Consumer, Output, Role
from lakelog.errors import ConfigError
from lakelog.joins.side import check_columns, check_name, columns_text
from lakelog.lake.upsert import candidate_files
from lakelog.log.records import record_json
from lakelog.log.topics import Topic

MONEY = T.DecimalType(18, 2)

REJECTED = T.StructType([
    T.StructField("topic", T.StringType()),
    T.StructField("partition", T.IntegerType()),
    T.StructField("offset", T.LongType()),
    T.StructField("event_id", T.StringType()),
    T.StructField("event_time", T.TimestampType()),
    T.StructField("reason", T.StringType()),  # null_key
    T.StructField("record", T.StringType()),  # the whole record as JSON
    T.StructField("batch", T.LongType()),
])


@dataclass(frozen=True)
class TableJoin:
    name: str
    facts: Topic
    #: Per table key column (in the table's key order), a SQL expression over a fact.
    key: tuple[str, ...]
    #: The table whose changelog is joined (its topic, row and key; the table is not read).
    table: CompactedTable
    #: Attributes in the output, as ``(output name, row column)`` pairs.
    columns: tuple[tuple[str, str], ...]
    #: Output names of the totals: number of facts, exact sum of `amount_of`, latest event time.
    count: str = "count"
    amount: str = "amount"
    amount_of: str = "amount"
    last: str = "last_time"
    rows_per_file: int = 250_000
    max_records_per_batch: int = 250_000

    def __post_init__(self) -> None:
        check_name("table join", self.name)
        owner = f"table join {self.name}"
        if len(self.key) != len(self.table.key):
            raise ConfigError(f"{owner}: {self.table.name} has key {list(self.table.key)}, so "
                              f"a fact needs {len(self.table.key)} key expression(s)")
        unknown = [c for _, c in self.columns if c not in self.table.row.fieldNames()]
        if unknown:
            raise ConfigError(f"{owner}: {self.table.name} has no column {unknown[0]!r}")
        if self.amount_of not in self.facts.table_schema.fieldNames():
            raise ConfigError(f"{owner}: {self.facts.name} has no column {self.amount_of!r}")
        check_columns(owner, [n for n in self.output.schema.fieldNames() if n[0] != "_"])

    @property
    def output(self) -> Output:
        row = self.table.row
        schema = T.StructType([
            *[row[k] for k in self.table.key],
            *[T.StructField(n, row[c].dataType) for n, c in self.columns],
            T.StructField(self.count, T.LongType()),
            T.StructField(self.amount, MONEY),
            T.StructField(self.last, T.TimestampType()),
            *[f for f in META if f.name in ("_position", "_deleted")],
            T.StructField("batch", T.LongType()),
        ])
        return Output(f"streams/{self.name}", schema, keys=self.table.key,
                      rows_per_file=self.rows_per_file)

    @property
    def rejected(self) -> Output:
        return Output(f"streams/{self.name}_rejected", REJECTED, role=Role.REJECTED)

    @property
    def consumer(self) -> Consumer:
        return Consumer(
            name=f"join.{self.name}",
            topics=(self.facts.name, self.table.topic.name),
            outputs=(self.rejected, self.output),  # the joined table last: it is the state
            transform=self.transform,
            max_records_per_batch=self.max_records_per_batch,
            # What the stored totals and attributes hold (`lakelog.consumers.definitions`): a
            # batch adds to the totals of its keys, so totals of another key or amount would
            # mix, and a row keeps its attributes until its key's next change. The output's
            # names too: another schema would fail the write after the batch was planned.
            definition=(("key", ", ".join(self.key)), ("table_key", ", ".join(self.table.key)),
                        ("amount_of", self.amount_of),
                        ("totals", f"{self.count}, {self.amount}, {self.last}"),
                        ("columns", columns_text(self.columns))),
        )

    def transform(self, batch: BatchInput) -> dict[str, DataFrame | Changes]:
        facts = batch.records[self.facts.name].dropDuplicates(["event_id"])
        changes = batch.records[self.table.topic.name]
        fact_key, change_key = self.fact_key(), self.change_key()
        facts_ok = facts.where(_complete(fact_key))
        changes_ok = changes.where(_complete(change_key))
        keys = list(self.table.key)
        touched = facts_ok.select(*[c.alias(k) for c, k in zip(fact_key, keys)]).unionByName(
            changes_ok.select(*[c.alias(k) for c, k in zip(change_key, keys)])
        )
        snapshot = batch.outputs[self.output.path]
        files = candidate_files(snapshot, touched, keys)
        stored = batch.lake.read(snapshot, files=files, keys=touched.distinct(), key_columns=keys)
        rejected = _rejected(self.facts.name, facts.where(~_complete(fact_key)), batch.batch)
        rejected = rejected.unionByName(
            _rejected(self.table.topic.name, changes.where(~_complete(change_key)), batch.batch)
        )
        return {
            self.rejected.path: rejected,
            # The files read hold every stored row of the touched keys: they are rewritten.
            self.output.path: Changes(
                combine(self, stored, facts_ok, changes_ok, batch=batch.batch), files=files),
        }

    def fact_key(self) -> list[Column]:
        """The table key of a fact, one column per key column (null if it does not parse)."""
        row = self.table.row
        return [F.expr(e).try_cast(row[k].dataType) for k, e in zip(self.table.key, self.key)]

    def change_key(self) -> list[Column]:
        """The table key of a change event (from ``before`` for a delete)."""
        return [F.coalesce(F.col("after")[k], F.col("before")[k]) for k in self.table.key]


def _complete(key: list[Column]) -> Column:
    return reduce(lambda a, b: a & b, [part.isNotNull() for part in key])


def combine(
    join: TableJoin, stored: DataFrame, facts: DataFrame, changes: DataFrame, *, batch: int
) -> DataFrame:
    """The new rows of the keys of `facts` and `changes` (changelog records), from their
    `stored` rows: one aggregation per key over all three, in which the totals add up and the
    attributes of the greatest changelog position win (a stored row's among them)."""
    keys = list(join.table.key)
    names = [n for n, _ in join.columns]
    attributes = T.StructType([
        *[T.StructField(n, join.table.row[c].dataType) for n, c in join.columns],
        T.StructField("_deleted", T.BooleanType()),
    ])
    old = stored.select(
        *keys, F.col(join.count).alias("_n"), F.col(join.amount).alias("_amount"),
        F.col(join.last).alias("_last"),
        F.struct(*names, "_deleted").cast(attributes).alias("_attributes"), "_position",
    )
    new_facts = facts.select(
        *[c.alias(k) for c, k in zip(join.fact_key(), keys)],
        F.lit(1).cast("long").alias("_n"), F.col(join.amount_of).cast(MONEY).alias("_amount"),
        F.col("event_time").alias("_last"),
        F.lit(None).cast(attributes).alias("_attributes"),
        F.lit(None).cast("string").alias("_position"),
    )
    rows = change_rows(changes, join.table.row, join.table.key)
    new_changes = rows.select(
        *keys, F.lit(0).cast("long").alias("_n"), F.lit(0).cast(MONEY).alias("_amount"),
        F.lit(None).cast("timestamp").alias("_last"),
        F.struct(*[F.col(c).alias(n) for n, c in join.columns], "_deleted")
        .cast(attributes).alias("_attributes"),
        "_position",
    )
    merged = old.unionByName(new_facts).unionByName(new_changes).groupBy(*keys).agg(
        F.sum("_n").alias("_n"),
        F.sum("_amount").alias("_amount"),
        F.max("_last").alias("_last"),
        F.max_by("_attributes", "_position").alias("_attributes"),
        F.max("_position").alias("_position"),
    )
    return merged.select(
        *keys,
        *[F.col("_attributes")[n].alias(n) for n in names],
        F.col("_n").cast("long").alias(join.count),
        F.col("_amount").cast(MONEY).alias(join.amount),
        F.col("_last").alias(join.last),
        "_position",
        F.coalesce(F.col("_attributes._deleted"), F.lit(False)).alias("_deleted"),
        F.lit(batch).cast("long").alias("batch"),
    )


def _rejected(topic: str, records: DataFrame, batch: int) -> DataFrame:
    return records.select(
        F.lit(topic).alias("topic"), "partition", "offset", "event_id", "event_time",
        F.lit("null_key").alias("reason"), record_json().alias("record"),
        F.lit(batch).cast("long").alias("batch"),
    )
