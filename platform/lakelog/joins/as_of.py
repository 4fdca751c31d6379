"""Time-dependent (versioned, as-of) join: each record with the row valid at its event time.

The consumer ``join.<name>`` joins each stream record with the version of its row in the
history table (``history/<table>``, SCD2) for which ``valid_from <= event_time < valid_to``
(``valid_to`` null: still valid) and that is not a delete. So a row changed after the record
does not change the record's result, and a record that arrives late still joins the version
that was valid at its event time. Before the row's first version, during a deletion, and for an
unknown key the table columns are null and `found` false (left join: no record dropped).

Only the versions of the batch's keys are read (`lakelog.lake.upsert.read_keys` prunes the history's
files, which are clustered by key), or all of a small history's, read in this process
(`lakelog.lake.held_read`); the join is on the key with the interval as a condition of that
equi-join — no cartesian product. Should intervals ever overlap (source commit times going
backwards), the version with the greatest changelog position wins, so a record still gets
exactly one row; a held history whose intervals do not overlap needs no such choice.

The history is read as it is when the batch is processed: a source change captured after a
record was joined (CDC lag) does not revise that record's row — a consumer that must see such
changes runs after the history consumer has caught up with the source.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce

import pyarrow as pa
import pyarrow.compute as pc
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
        history, held = self.table_rows(batch, keyed)
        overlaps = held is None or overlapping_versions(held, self.table.key)
        return {self.output.path: join_as_of(self, keyed, history, batch=batch.batch,
                                             overlapping=overlaps)}


def join_as_of(
    join: Lookup, keyed: DataFrame, history: DataFrame, *, batch: int, overlapping: bool = True
) -> DataFrame:
    """`keyed` records (`Lookup.keyed`) left-joined with the version of `history` (SCD2 rows)
    valid at each record's ``_time``. Without `overlapping` (the caller knows no two live
    versions of a key overlap: `overlapping_versions`) a record matches one version at most,
    and the newest of its matches need not be chosen (a shuffle of the records)."""
    versions = join.rows(history.where(~F.col("_deleted")), "valid_from", "valid_to", "_position")
    valid = (F.col("valid_from") <= F.col("_time")) & (
        F.col("valid_to").isNull() | (F.col("_time") < F.col("valid_to"))
    )
    joined = keyed.join(versions, join.same_key() & valid, "left")
    if not overlapping:
        return join.finish(joined, batch=batch)
    newest = Window.partitionBy("_partition", "_offset").orderBy(F.desc_nulls_last("_position"))
    one = joined.withColumn("_n", F.row_number().over(newest)).where(F.col("_n") == 1)
    return join.finish(one, batch=batch)


def overlapping_versions(history: pa.Table, key: Sequence[str]) -> bool:
    """Whether two live versions of one key in `history` (SCD2 rows held here) have intervals
    that overlap, so that one time could match both. Versions that match nothing — deleted, or
    with a null key or ``valid_from`` — are left out, as the join leaves them out. A floating
    point or nested key is taken to overlap (Spark's join matches -0.0 with 0.0; Arrow does not,
    and does not sort by a nested column)."""
    types = [history.schema.field(k).type for k in key]
    if any(pa.types.is_floating(t) or pa.types.is_nested(t) for t in types):
        return True
    live = history.filter(pc.invert(history["_deleted"]))  # null: dropped, as Spark's filter
    for column in (*key, "valid_from"):
        live = live.filter(pc.is_valid(live[column]))
    if live.num_rows < 2:
        return False
    ordered = live.sort_by([*((k, "ascending") for k in key), ("valid_from", "ascending")])
    n = ordered.num_rows
    same = reduce(pc.and_, [pc.equal(ordered[k].slice(1), ordered[k].slice(0, n - 1))
                            for k in key])
    # A version still open (null valid_to) overlaps any later one of its key.
    ends_first = pc.fill_null(
        pc.less_equal(ordered["valid_to"].slice(0, n - 1), ordered["valid_from"].slice(1)), False)
    return bool(pc.any(pc.and_(same, pc.invert(ends_first))).as_py())
