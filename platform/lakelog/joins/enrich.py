"""Stream–table join (enrichment): each record joined with its row's *current* version.

The consumer ``join.<name>`` reads the stream and, per microbatch, the compacted table
(``tables/<table>``) as it is when the batch is processed — the rows of the batch's keys, from
the files that can hold them (`lakelog.lake.upsert.read_keys`), or all of a small table's, read in
this process (`lakelog.lake.held_read`). It is a processing-time join, like a Kafka Streams
stream–table join: a record sees the table as of its processing, not as of its event time (that
is `lakelog.joins.as_of`), and a retried batch reads the table as it is at the retry. Rows
already written are never revised by later table changes.

A deleted row (a tombstone, ``_deleted``), a key the table has never seen, and a table that does
not exist yet all give null table columns and `found` false: the record is kept (left join).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakelog.cdc.compacted import CompactedTable
from lakelog.consumers import BatchInput
from lakelog.errors import ConfigError
from lakelog.joins.lookup import Lookup


@dataclass(frozen=True)
class EnrichJoin(Lookup):
    """`stream` records with the current row of the compacted `table`."""

    def __post_init__(self) -> None:
        if not isinstance(self.table, CompactedTable):
            raise ConfigError(f"join {self.name}: enrichment reads a compacted table "
                              f"(tables/<name>), not {self.table.path}")
        super().__post_init__()

    def transform(self, batch: BatchInput) -> dict[str, DataFrame]:
        keyed = self.keyed(batch.records[self.stream.topic.name])
        table, _ = self.table_rows(batch, keyed)
        return {self.output.path: enrich(self, keyed, table, batch=batch.batch)}


def enrich(join: Lookup, keyed: DataFrame, table: DataFrame, *, batch: int) -> DataFrame:
    """`keyed` records (`Lookup.keyed`) left-joined with the live rows of the compacted
    `table` (a table has one row per key, so a record gets at most one)."""
    live = join.rows(table.where(~F.col("_deleted")))
    # Broadcast: at most a row per key of the batch (or a small table's rows), while a
    # sort-merge join would shuffle and sort the records too.
    return join.finish(keyed.join(F.broadcast(live), join.same_key(), "left"), batch=batch)
