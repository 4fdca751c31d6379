"""History tables (SCD type 2): every version of every row, with its validity interval.

``history/<name>`` holds, per primary key, one row per change: the row the change left, valid
from its commit time until the next change's (``valid_to`` null for the latest). ``is_current``
marks the latest version of a key that is not deleted; a delete is a version too (``_deleted``),
so "the row as of time t" is the version with ``valid_from <= t < valid_to`` unless deleted.

Versions are ordered by changelog position, not by arrival: each microbatch re-derives the
intervals of the keys it touches from all their stored versions plus the new ones, so a change
that arrives late slots in between and its neighbours' intervals are corrected. Replayed changes
(same position) are kept once.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from lakelog.cdc.changelog import META, ChangelogTable, change_rows
from lakelog.consumers import BatchInput, Changes, Output
from lakelog.lake.one_partition import one_partition
from lakelog.lake.upsert import candidate_files

VALIDITY = (
    T.StructField("valid_from", T.TimestampType()),
    T.StructField("valid_to", T.TimestampType()),
    T.StructField("is_current", T.BooleanType()),
)


@dataclass(frozen=True)
class HistoryTable(ChangelogTable):
    KIND = "history"
    LABEL = "history table"

    @property
    def path(self) -> str:
        return f"history/{self.name}"

    @property
    def output(self) -> Output:
        schema = T.StructType([*self.row.fields, *VALIDITY, *META])
        return Output(self.path, schema, keys=self.key, rows_per_file=self.rows_per_file)

    def transform(self, batch: BatchInput) -> dict[str, Changes]:
        new = change_rows(batch.records[self.topic.name], self.row, self.key)
        snapshot = batch.outputs[self.path]
        files = candidate_files(snapshot, new, self.key)
        stored = batch.lake.read(snapshot, files=files, keys=new.select(*self.key).distinct(),
                                 key_columns=self.key)
        # The files read hold every stored version of the batch's keys: they are rewritten.
        return {self.path: Changes(versions(stored, new, self.row, self.key,
                                            together=batch.few(files=files)), files=files)}


def versions(
    stored: DataFrame, new: DataFrame, row: T.StructType, key: tuple[str, ...], *,
    together: bool = False,
) -> DataFrame:
    """All versions of the keys of `new`: stored ones and new ones, intervals re-derived;
    with `together` (few rows: `BatchInput.few`), in one partition
    (`lakelog.lake.one_partition`)."""
    columns = [*row.fieldNames(), *(f.name for f in META)]
    every = stored.select(*columns).unionByName(new.select(*columns))
    if together:
        every = one_partition(every)
    every = every.dropDuplicates([*key, "_position"])
    order = Window.partitionBy(*key).orderBy("_position")
    valid_to = F.lead("_commit_time").over(order)
    return every.select(
        *row.fieldNames(),
        F.col("_commit_time").alias("valid_from"),
        valid_to.alias("valid_to"),
        (valid_to.isNull() & ~F.col("_deleted")).alias("is_current"),
        *(f.name for f in META),
    )


def as_of(history: DataFrame, when: Column) -> DataFrame:
    """The versions valid at `when` (a timestamp column or literal), deletes excluded."""
    return history.where(
        (F.col("valid_from") <= when)
        & (F.col("valid_to").isNull() | (when < F.col("valid_to")))
        & ~F.col("_deleted")
    )
