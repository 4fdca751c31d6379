"""History tables (SCD type 2): every version of every row, with its validity interval.

``history/<name>`` holds, per primary key, one row per change: the row the change left, valid
from its commit time until the next change's (``valid_to`` null for the latest). ``is_current``
marks the latest version of a key that is not deleted; a delete is a version too (``_deleted``),
so "the row as of time t" is the version with ``valid_from <= t < valid_to`` unless deleted.

Versions are ordered by changelog position, not by arrival. A change that comes after every
stored version of its key (the usual case) closes the key's open version (``valid_to`` null)
and leaves the closed ones as they are: the table keeps open and closed versions in files of
their own (`lakelog.lake.nulls_apart`), and a batch whose changes all do so reads and rewrites
only the files that hold open versions of its keys' range, adding the versions it closes in
files of their own, so its cost follows the table's keys, not the versions it has kept
(`rewritten_files` tells from the files' statistics of ``_position``, else by a pass over the
batch's keys' open versions). A batch with a change at or before its key's open version (a
late change, a replay) re-derives the intervals of its keys from all their stored versions
plus the new ones: a late change slots in between and its neighbours' intervals are
corrected, and replayed changes (same position) are kept once.

The versions a batch closes make a small file; a batch also folds `FOLD` small files of closed
versions of about one size into one when there are that many (a size-tiered merge: a version
is rewritten once per tier, a few times in all, not once a batch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from lakelog.cdc.changelog import META, ChangelogTable, change_rows
from lakelog.consumers import BatchInput, Changes, Output
from lakelog.lake import DataFile, Lake, Snapshot
from lakelog.lake.base import is_small, overlapping
from lakelog.lake.nulls_apart import holding_nulls
from lakelog.lake.one_partition import one_partition

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
        return Output(self.path, schema, keys=self.key, rows_per_file=self.rows_per_file,
                      nulls_apart="valid_to")

    def transform(self, batch: BatchInput) -> dict[str, Changes]:
        new = change_rows(batch.records[self.topic.name], self.row, self.key)
        snapshot = batch.outputs[self.path]
        files, later = rewritten_files(batch.lake, snapshot, new, self.key, self.rows_per_file)
        stored = batch.lake.read(snapshot, files=files, keys=new.select(*self.key).distinct(),
                                 key_columns=self.key)
        # The files read hold every stored version of the batch's keys that can change (all
        # of them unless `later`, else the open ones): they are rewritten.
        rows = versions(stored, new, self.row, self.key, later=later,
                        together=batch.few(files=files))
        return {self.path: Changes(rows, files=files)}


#: How many small files of closed versions a batch folds into one (`folded`).
FOLD = 8


def rewritten_files(
    lake: Lake, snapshot: Snapshot, new: DataFrame, key: tuple[str, ...], rows_per_file: int,
) -> tuple[list[DataFile], bool]:
    """The files a batch of changes `new` rewrites, and whether every change comes after all
    the stored versions of its key (then only open versions change).

    All of a small table's (`is_small`), as any keyed upsert, with no pass over `new`. Else one
    pass finds the key range and the first position: the files of that range holding open
    versions when the changes are later, with the small files of closed versions `folded`
    into one; else every file of the range. The changes are later when the first comes after
    every position the range's files hold, else when each comes after its key's open version
    (the key's last, a pass over those of the batch's keys): a batch cut from the log's
    partitions unevenly starts before where another partition's last batch ended."""
    files = snapshot.files()
    if not files or is_small(files):
        return files, False
    first = key[0]
    bounds = new.agg(F.min(first).alias("lo"), F.max(first).alias("hi"),
                     F.min("_position").alias("position")).first()
    near = overlapping(files, first, bounds["lo"], bounds["hi"])
    position = bounds["position"]
    if position is None:
        return [], False
    chosen = holding_nulls(near, "valid_to")
    later = all(f.max_values.get("_position") is not None and f.max_values["_position"] < position
                for f in near) or not _late_keys(lake, snapshot, chosen, new, key)
    if not later:
        return near, False
    names = {f.path for f in chosen}
    return chosen + folded([f for f in files if f.path not in names], rows_per_file), True


def _late_keys(
    lake: Lake, snapshot: Snapshot, files: Sequence[DataFile], new: DataFrame,
    key: tuple[str, ...],
) -> bool:
    """Whether a change of `new` comes at or before its key's open version in `files`."""
    first_new = new.groupBy(*key).agg(F.min("_position").alias("_first"))
    open_versions = lake.read(snapshot, files=files, keys=first_new.select(*key),
                              key_columns=key).where(F.col("valid_to").isNull())
    return not open_versions.join(first_new, list(key)).where(
        F.col("_first") <= F.col("_position")).isEmpty()


def folded(files: Sequence[DataFile], rows_per_file: int) -> list[DataFile]:
    """`FOLD` files of closed versions of about one size (a size tier: the same power of
    `FOLD` rows), when there are that many, of the smallest such tier; none otherwise. Only
    files of at most ``rows_per_file // FOLD`` rows fold, so a fold writes at most about
    `rows_per_file` rows and a version is rewritten once a tier, not once a batch."""
    tiers: dict[int, list[DataFile]] = {}
    for f in files:
        if f.null_counts.get("valid_to") == 0 and f.num_records <= rows_per_file // FOLD:
            tiers.setdefault(int(math.log(max(f.num_records, 1), FOLD)), []).append(f)
    for tier in sorted(tiers):
        if len(tiers[tier]) >= FOLD:
            return sorted(tiers[tier], key=lambda f: (f.num_records, f.path))[:FOLD]
    return []


def versions(
    stored: DataFrame, new: DataFrame, row: T.StructType, key: tuple[str, ...], *,
    later: bool = False, together: bool = False,
) -> DataFrame:
    """The versions of the keys of `new`, in `stored` and `new`, intervals derived; with
    `later` (every change of `new` comes after every stored version of its key), only those
    of the open versions and the new ones, closed versions kept as they are (their successor
    may be in a file not read). With `together` (few rows: `BatchInput.few`), in one
    partition (`lakelog.lake.one_partition`)."""
    columns = [*row.fieldNames(), *(f.name for f in META)]
    closed = F.col("valid_to") if later else F.lit(None).cast("timestamp")
    every = stored.select(*columns, closed.alias("_closed")).unionByName(
        new.select(*columns, F.lit(None).cast("timestamp").alias("_closed")))
    if together:
        every = one_partition(every)
    every = every.dropDuplicates([*key, "_position"])
    order = Window.partitionBy(*key).orderBy("_position")
    valid_to = F.coalesce(F.col("_closed"), F.lead("_commit_time").over(order))
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
