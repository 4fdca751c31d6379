"""Time-dependent (versioned, as-of) join: each record with the row valid at its event time.

The consumer ``join.<name>`` joins each stream record with the version of its row in the
history table (``history/<table>``, SCD2) for which ``valid_from <= event_time < valid_to``
(``valid_to`` null: still valid) and that is not a delete. So a row changed after the record
does not change the record's result, and a record that arrives late still joins the version
that was valid at its event time. Before the row's first version, during a deletion, and for an
unknown key the table columns are null and `found` false (left join: no record dropped).

Only the versions of the batch's keys are read (`lakelog.lake.upsert.read_keys` prunes the history's
files, which are clustered by key), and the join is on the key with the interval as a condition
of that equi-join — no cartesian product. Should intervals ever overlap (source commit times
going backwards), the version with the greatest changelog position wins, so a record still gets
exactly one row.

The history is read as it is when the batch is processed: a source change captured after a
record was joined (CDC lag) does not revise that record's row — a consumer that must see such
changes runs after the history consumer has caught up with the source.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from lakelog.cdc.history import HistoryTable
from lakelog.consumers import BatchInput
from lakelog.errors import ConfigError
from lakelog.joins.lookup import Lookup


@dataclass(frozen=True)
class AsOfJoin(Lookup):
    """`stream` records with the version of their row in the history `table` valid at their
    event time."""

    def __post_init__(self) -> None:
        if not isinstance(self.table, HistoryTable):
            raise ConfigError(f"join {self.name}: an as-of join reads a history table "
                              f"(history/<name>), not {self.table.path}")
        super().__post_init__()

    def transform(self, batch: BatchInput) -> dict[str, DataFrame]:
        keyed = self.keyed(batch.records[self.stream.topic.name])
        history = self.table_rows(batch, keyed)
        return {self.output.path: join_as_of(self, keyed, history, batch=batch.batch)}


def join_as_of(join: Lookup, keyed: DataFrame, history: DataFrame, *, batch: int) -> DataFrame:
    """`keyed` records (`Lookup.keyed`) left-joined with the version of `history` (SCD2 rows)
    valid at each record's ``_time``."""
    versions = join.rows(history.where(~F.col("_deleted")), "valid_from", "valid_to", "_position")
    valid = (F.col("valid_from") <= F.col("_time")) & (
        F.col("valid_to").isNull() | (F.col("_time") < F.col("valid_to"))
    )
    joined = keyed.join(versions, join.same_key() & valid, "left")
    newest = Window.partitionBy("_partition", "_offset").orderBy(F.desc_nulls_last("_position"))
    one = joined.withColumn("_n", F.row_number().over(newest)).where(F.col("_n") == 1)
    return join.finish(one, batch=batch)
