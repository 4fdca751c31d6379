"""Nulls apart: a table whose property `NULLS_APART` names a column never has a data file that
holds both rows where that column is null and rows where it is not.

A history table (`lakelog.cdc.history`) asks for it with ``valid_to``: a microbatch changes
only the open versions of its keys (``valid_to`` null), and every other version stays as it is
unless a change arrives out of order. With open and closed versions in files of their own, the
files' null counts of ``valid_to`` tell which files hold open versions, and a batch rewrites
those alone: its cost follows the keys, not the versions kept. Every writer of the table keeps
the rule (both of `lakelog.lake.data_files`' ways to write), so a rewrite by a correction or an
erasure keeps the layout too; readers need not know of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakelog.lake.base import DataFile

#: The table property: the column whose nulls are kept apart.
NULLS_APART = "lakelog.files.nullsApart"
#: The column a Spark write partitions by (a folder per value, left out of the files), so that
#: no task writes a file of both kinds; the folders are flattened when the files are moved.
FLAG = "_lakelog_null"


def nulls_apart(properties: Mapping[str, str]) -> str | None:
    """The column whose nulls the table keeps apart, or None."""
    return properties.get(NULLS_APART) or None


def split(groups: list[tuple[str, pa.Table]], column: str) -> list[tuple[str, pa.Table]]:
    """(folder, rows) groups, each cut in two by `column`'s nulls (order kept; none empty)."""
    found = []
    for folder, rows in groups:
        null = pc.is_null(rows.column(column))
        for part in (rows.filter(pc.invert(null)), rows.filter(null)):
            if part.num_rows:
                found.append((folder, part))
    return found


def null_flag(column: str) -> Column:
    """Whether `column` is null: what the `FLAG` column holds. A write clustered by it first
    (`lakelog.lake.upsert.write_clustered`) is already in the order the flagged write needs,
    so Spark adds no sort of its own, as long as both use this one expression."""
    return F.col(column).isNull()


def flagged(df: DataFrame, column: str) -> DataFrame:
    """`df` with the `FLAG` column a Spark write partitions by."""
    return df.withColumn(FLAG, null_flag(column))


def flattened(relative: str) -> str:
    """A file Spark wrote under a `FLAG` folder, moved out of it: the flag goes into the file's
    name (a task names its files alike in every folder)."""
    folders, name = relative.rsplit("/", 1) if "/" in relative else ("", relative)
    kept = []
    for part in folders.split("/") if folders else []:
        if part.startswith(f"{FLAG}="):
            name = f"{'null' if part == f'{FLAG}=true' else 'set'}-{name}"
        else:
            kept.append(part)
    return "/".join([*kept, name])


def holding_nulls(files: Sequence[DataFile], column: str) -> list[DataFile]:
    """The files that may hold a row where `column` is null (no statistics: may)."""
    return [f for f in files if f.null_counts.get(column, 1) != 0]
