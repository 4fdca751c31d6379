"""Merge-on-read keyed tables: each row is a version of its key, and a key's row is its newest.

A table whose properties name merge keys (`MergeKeys.properties`) is written by appending: a
microbatch adds a file of its rows without reading the table, so its cost follows the changes
whatever the table's size. A reader sees, per key, only the version with the greatest `newer_by`
value — the row a copy-on-write upsert with the same rule would have left. Versions of one key
can only be in files whose key ranges overlap, so a read of some files resolves them against the
files overlapping those (`closure`), and `lakelog.lake.squash` rewrites groups of overlapping files into
one version per key, which keeps reads cheap and drops the old versions. This is Hudi's
merge-on-read table type, or Iceberg's equality deletes, on plain Delta files: a Delta reader that
does not resolve the versions itself (newest per key) sees all of them until a squash.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from lakelog.lake.base import DataFile

KEYS = "lakelog.mergeOnRead.keys"
NEWER_BY = "lakelog.mergeOnRead.newerBy"
#: The column a merge-on-read read adds for the name of each row's file (dropped before return).
FILE = "_lakelog_file"


@dataclass(frozen=True)
class MergeKeys:
    """The key columns of a merge-on-read table and the column whose greatest value wins."""

    keys: tuple[str, ...]
    newer_by: str

    def properties(self) -> dict[str, str]:
        return {KEYS: ",".join(self.keys), NEWER_BY: self.newer_by}


#: Table properties that turn merge-on-read off (a table property cannot be removed).
COPY_ON_WRITE = {KEYS: "", NEWER_BY: ""}


def merge_keys(properties: Mapping[str, str]) -> MergeKeys | None:
    """The table's merge keys, or None for an ordinary (copy-on-write or append) table."""
    keys = properties.get(KEYS, "")
    if not keys:
        return None
    return MergeKeys(tuple(keys.split(",")), properties[NEWER_BY])


def newest(df: DataFrame, merge: MergeKeys) -> DataFrame:
    """Per key, the row with the greatest `newer_by` (ties, which are normally copies of one
    change, go to the first file by name, so a read of a snapshot always picks the same row).
    `df` has the `FILE` column."""
    order = Window.partitionBy(*merge.keys).orderBy(F.col(merge.newer_by).desc(), F.col(FILE))
    return (
        df.withColumn("_lakelog_rank", F.row_number().over(order))
        .where(F.col("_lakelog_rank") == 1)
        .drop("_lakelog_rank")
    )


def closure(files: Sequence[DataFile], chosen: Sequence[DataFile], column: str) -> list[DataFile]:
    """`chosen` and every file of `files` whose range of `column` overlaps one of them: all the
    files that can hold a version of a key in `chosen`."""
    names = {f.path for f in chosen}
    ranges = [(f.min_values.get(column), f.max_values.get(column)) for f in chosen]
    if any(lo is None or hi is None for lo, hi in ranges):
        return list(files)
    return [f for f in files if f.path in names or any(f.overlaps(column, lo, hi) for lo, hi in ranges)]


def current_rows(
    read_files: Callable[[Sequence[DataFile]], DataFrame],
    files: Sequence[DataFile],
    chosen: Sequence[DataFile] | None,
    merge: MergeKeys,
    keys: DataFrame | None = None,
) -> DataFrame:
    """The current rows (newest version per key) that live in `chosen` (None: in any file),
    only of the keys in `keys` if given.

    `read_files` reads files with the `FILE` column. Only files whose key ranges overlap need
    resolving (a squashed table has none), and `keys` is applied before the resolution, so a
    lookup of a few keys sorts only their versions."""
    column = merge.keys[0]
    wanted = list(files) if chosen is None else closure(files, chosen, column)
    groups = overlap_groups(wanted, column)
    alone = [g[0] for g in groups if len(g) == 1]
    overlapping = [f for g in groups if len(g) > 1 for f in g]

    def only_keys(df: DataFrame) -> DataFrame:
        return df if keys is None else df.join(keys, list(merge.keys), "left_semi")

    rows = only_keys(read_files(alone))
    if overlapping:
        rows = rows.unionByName(newest(only_keys(read_files(overlapping)), merge))
    if chosen is not None and {f.path for f in wanted} != {f.path for f in chosen}:
        rows = rows.where(F.col(FILE).isin(*sorted({file_name(f.path) for f in chosen})))
    return rows.drop(FILE)


def overlap_groups(files: Sequence[DataFile], column: str) -> list[list[DataFile]]:
    """`files` in groups whose ranges of `column` overlap (transitively): a key's versions are
    all in one group. Files without statistics of `column` form one group with all the rest."""
    if any(f.min_values.get(column) is None or f.max_values.get(column) is None for f in files):
        return [list(files)] if files else []
    ordered = sorted(files, key=lambda f: (f.min_values[column], f.max_values[column]))
    groups: list[list[DataFile]] = []
    high = None
    for f in ordered:
        if groups and f.overlaps(column, None, high):
            groups[-1].append(f)
            high = max(high, f.max_values[column])
        else:
            groups.append([f])
            high = f.max_values[column]
    return groups


def file_name(path: str) -> str:
    """A file's name as the `FILE` column gives it (Spark's ``_metadata.file_name``)."""
    return path.rsplit("/", 1)[-1]
