"""A write's data files: put into the table's folder before the commit, described for Delta, and
deleted again when the commit does not happen.

Few rows (the caller's `rows_hint`) are collected and written by pyarrow
(`lakelog.lake.driver_write`); otherwise Spark writes the DataFrame into a private staging folder
of the table and the files are moved into the table's own layout (``partition=3/part-....parquet``).
Either way each file's footer gives its Delta statistics, and a file without rows is left out.
Below are also the listings of what a folder holds: its files, and the Delta tables below it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake.transaction import AddAction
from pyspark.sql import DataFrame

from lakelog.lake import driver_write, nulls_apart, pages
from lakelog.lake.delta_snapshot import DeltaSnapshot
from lakelog.lake.schema import widen
from lakelog.lake.stats import partition_values, stats_json

STAGING = "_staging"


def write(
    fs: pafs.FileSystem,
    table_root: str,
    spark_root: str,
    snapshot: DeltaSnapshot,
    df: DataFrame,
    *,
    max_records_per_file: int | None = None,
    rows_hint: int | None = None,
    sort_by: Sequence[str] = (),
) -> list[AddAction]:
    """Write `df` into the table at `table_root` (a path of `fs`; `spark_root` is the same
    folder as Spark names it) and describe the files; nothing is committed. Rows collected
    here are sorted by `sort_by` first (`Lake.write`)."""
    expected = snapshot.schema
    if driver_write.is_small_write(rows_hint):
        # The schema comes with the rows (no look-up of its own): a mismatch is found once the
        # rows are here, and nothing is written.
        table = driver_write.conformed(snapshot, *driver_write.collect(df))
        if table.num_rows == 0:
            return []
        if sort_by:
            table = driver_write.sorted_rows(table, sort_by)
        groups = driver_write.groups(table, snapshot.partition_columns)
        if groups is not None:
            return write_arrow(fs, table_root, snapshot, groups, max_records_per_file)
        if sort_by:  # Spark writes them after all: in the order asked for
            df = df.coalesce(1).sortWithinPartitions(*sort_by)
    df, actual = widen(df, expected)
    driver_write.checked(snapshot, actual)
    df = df.select(*expected.fieldNames())
    return _write_with_spark(fs, table_root, spark_root, snapshot, df, max_records_per_file)


def write_arrow(
    fs: pafs.FileSystem,
    table_root: str,
    snapshot: DeltaSnapshot,
    groups: list[tuple[str, pa.Table]],
    max_records_per_file: int | None = None,
) -> list[AddAction]:
    """Rows already in this process, as (partition folder, rows) groups, written by pyarrow
    into the table of `snapshot` (in the page layout it asks for, `lakelog.lake.pages`, and
    with the nulls it keeps apart, `lakelog.lake.nulls_apart`)."""
    properties = snapshot.properties
    apart = nulls_apart.nulls_apart(properties)
    if apart:
        groups = nulls_apart.split(groups, apart)
    written: list[str] = []
    try:
        written = driver_write.write_files(fs, table_root, groups, max_records_per_file,
                                           page_rows=pages.page_rows(properties))
        adds = [described(fs, table_root, relative) for relative in written]
        return [add for add in adds if add is not None]
    except BaseException:
        delete(fs, table_root, written)
        raise


def _write_with_spark(
    fs: pafs.FileSystem,
    table_root: str,
    spark_root: str,
    snapshot: DeltaSnapshot,
    df: DataFrame,
    max_records_per_file: int | None,
) -> list[AddAction]:
    name = f"{STAGING}/{uuid.uuid4().hex}"
    staging = f"{table_root}/{name}"
    properties = snapshot.properties
    apart = nulls_apart.nulls_apart(properties)
    folders = list(snapshot.partition_columns)
    if apart:
        df, folders = nulls_apart.flagged(df, apart), [*folders, nulls_apart.FLAG]
    # "error" (= errorifexists): the one spelling Spark Connect accepts too.
    writer = df.write.mode("error").options(**pages.spark_options(pages.page_rows(properties)))
    if max_records_per_file:
        writer = writer.option("maxRecordsPerFile", max_records_per_file)
    if folders:
        writer = writer.partitionBy(*folders)
    adds: list[AddAction] = []
    try:
        writer.parquet(f"{spark_root}/{name}")
        for info in fs.get_file_info(pafs.FileSelector(staging, recursive=True)):
            relative = info.path[len(staging) + 1 :]
            file_name = relative.rsplit("/", 1)[-1]
            if info.type != pafs.FileType.File or not file_name.endswith(".parquet"):
                continue
            if file_name.startswith((".", "_")):
                continue
            if apart:
                relative = nulls_apart.flattened(relative)
            target = f"{table_root}/{relative}"
            fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
            fs.move(info.path, target)
            add = described(fs, table_root, relative)
            if add is None:  # Spark writes an empty file for an empty DataFrame
                fs.delete_file(target)
                continue
            adds.append(add)
    except BaseException:
        delete(fs, table_root, [a.path for a in adds])
        raise
    finally:
        fs.delete_dir_contents(staging, missing_dir_ok=True)
        try:
            fs.delete_dir(staging)
        except FileNotFoundError:
            pass
    return adds


def described(fs: pafs.FileSystem, table_root: str, relative: str) -> AddAction | None:
    """The add action of the table's file `relative`, from its footer; None: no rows."""
    target = f"{table_root}/{relative}"
    meta = pq.read_metadata(target, filesystem=fs)
    if meta.num_rows == 0:
        return None
    return AddAction(
        path=relative,
        size=fs.get_file_info(target).size,
        partition_values=partition_values(relative),
        modification_time=int(time.time() * 1000),
        data_change=True,
        stats=stats_json(meta),
    )


def missing(fs: pafs.FileSystem, table_root: str, relative_paths: Sequence[str]) -> list[int]:
    """The indexes of the files of `relative_paths` no longer on disk (a vacuum deleted them):
    all looked up in one call."""
    infos = fs.get_file_info([f"{table_root}/{relative}" for relative in relative_paths])
    return [i for i, info in enumerate(infos) if info.type == pafs.FileType.NotFound]


def delete(fs: pafs.FileSystem, table_root: str, relative_paths: Sequence[str]) -> None:
    for relative in relative_paths:
        try:
            fs.delete_file(f"{table_root}/{relative}")
        except FileNotFoundError:
            pass


def listed(fs: pafs.FileSystem, base: str) -> list[tuple[str, int]]:
    """Files below `base` (paths relative to it, and sizes), skipping hidden and temporary ones
    (a name starting with ``.`` or ``_`` anywhere in the path)."""
    found = []
    for info in fs.get_file_info(pafs.FileSelector(base, allow_not_found=True, recursive=True)):
        relative = info.path[len(base) + 1 :]
        if info.type == pafs.FileType.File and not any(
            part.startswith((".", "_")) for part in relative.split("/")
        ):
            found.append((relative, info.size))
    return sorted(found)


def tables_below(fs: pafs.FileSystem, base: str) -> list[str]:
    """Every Delta table below `base` (paths relative to it): the folders holding a
    ``_delta_log``."""
    infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True, recursive=True))
    return sorted(i.path[len(base) + 1 : -len("/_delta_log")] for i in infos
                  if i.type == pafs.FileType.Directory and i.path.endswith("/_delta_log"))
