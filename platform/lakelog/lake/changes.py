"""The change data feed of a table, derived from its commits.

For each version, rows of the files it added are inserts and rows of the files it removed with
``dataChange`` are deletes; rows both removed and re-added in the same version (a copy-on-write
rewrite leaves the untouched rows of a file unchanged) cancel out. Reading a version needs its
removed files, so a version older than the last vacuum can no longer be read.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from lakelog.errors import ChangesUnavailableError
from lakelog.lake import data_files
from lakelog.spark import literals

CHANGE_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")


@dataclass(frozen=True)
class _FileChange:
    path: str
    version: int
    timestamp: datetime
    change: str  # "insert" | "delete"
    size: int = 0
    #: The file's partition values, as the log writes them (text; None for null).
    partition_values: tuple[tuple[str, str | None], ...] = ()
    #: The file's rows, from the action's statistics (None: not given).
    records: int | None = None


def log_actions(fs: pafs.FileSystem, table_fs_path: str, version: int) -> Iterator[dict]:
    log_file = f"{table_fs_path}/_delta_log/{version:020d}.json"
    try:
        with fs.open_input_stream(log_file) as stream:
            text = stream.read().decode()
    except FileNotFoundError as exc:
        raise ChangesUnavailableError(
            f"version {version} of {table_fs_path} is no longer in the Delta log "
            "(log retention removed it); its change feed cannot be read"
        ) from exc
    for line in text.splitlines():
        if line.strip():
            yield json.loads(line)


def _timestamp(actions: list[dict]) -> datetime:
    stamp_ms = next((a["commitInfo"].get("timestamp") for a in actions if "commitInfo" in a), 0)
    return datetime.fromtimestamp((stamp_ms or 0) / 1000, tz=timezone.utc)


def commit_timestamp(fs: pafs.FileSystem, table_fs_path: str, version: int) -> datetime:
    """When `version` was committed (from its commit info)."""
    return _timestamp(list(log_actions(fs, table_fs_path, version)))


def require_files(
    fs: pafs.FileSystem, table_fs_path: str, table: str, version: int, files: Sequence[str],
    purpose: str,
) -> None:
    """Raise `ChangesUnavailableError` unless every one of `files` (paths relative to the table)
    of version `version` of `table` is still on disk: a vacuum deletes removed files."""
    gone = _first_gone(fs, table_fs_path, files)
    if gone is not None:
        raise vacuumed(f"{purpose} of {table} (its version {version})", files[gone])


def _first_gone(fs: pafs.FileSystem, table_fs_path: str, files: Sequence[str]) -> int | None:
    """The index of the first of `files` (relative to the table) no longer on disk, if any."""
    return next(iter(data_files.missing(fs, table_fs_path, files)), None)


def vacuumed(needed_by: str, path: str) -> ChangesUnavailableError:
    """The error of a change feed that needs a file a vacuum deleted."""
    return ChangesUnavailableError(
        f"{needed_by} needs {path}, which was vacuumed; read changes from a later version")


def _file_changes(
    fs: pafs.FileSystem, table_fs_path: str, start_version: int, end_version: int
) -> list[_FileChange]:
    changes = []
    for version in range(start_version, end_version + 1):
        actions = list(log_actions(fs, table_fs_path, version))
        stamp = _timestamp(actions)
        for action in actions:
            for kind, change in (("add", "insert"), ("remove", "delete")):
                if kind in action and action[kind].get("dataChange", True):
                    file = action[kind]
                    changes.append(_FileChange(  # the path as on disk (the log encodes it)
                        unquote(file["path"]), version, stamp, change, file.get("size", 0),
                        tuple((file.get("partitionValues") or {}).items()),
                        json.loads(file["stats"]).get("numRecords") if file.get("stats")
                        else None))
    return changes


def read_changes(
    spark: SparkSession,
    *,
    fs: pafs.FileSystem,
    table_fs_path: str,
    table_spark_path: str,
    schema: StructType,
    start_version: int,
    end_version: int,
) -> DataFrame:
    """Rows changed by versions ``start_version..end_version`` with `_change_type` etc."""
    changes = _file_changes(fs, table_fs_path, start_version, end_version)
    columns = schema.fieldNames()
    empty = spark.createDataFrame([], schema).select(
        *columns,
        F.lit(None).cast("string").alias("_change_type"),
        F.lit(None).cast("long").alias("_commit_version"),
        F.lit(None).cast("timestamp").alias("_commit_timestamp"),
    )
    if not changes:
        return empty
    gone = _first_gone(fs, table_fs_path, [c.path for c in changes])
    if gone is not None:
        change = changes[gone]
        raise vacuumed(f"the change feed of version {change.version}", change.path)
    # Each row is matched to its file's change by the file's path within the table (its
    # partition folders and name: Spark names the files of one write alike in every partition
    # folder), as on disk.
    index = spark.createDataFrame(
        [(c.path, c.version, c.timestamp, c.change) for c in changes],
        "_file string, _commit_version long, _commit_timestamp timestamp, _change_type string",
    )
    paths = sorted({f"{table_spark_path}/{c.path}" for c in changes})
    rows = (
        spark.read.schema(schema)
        .option("basePath", table_spark_path)
        .parquet(*paths)
        .withColumn("_file", _relative_path(F.col("_metadata.file_path"),
                                            {c.path.count("/") + 1 for c in changes}))
        .join(F.broadcast(index), "_file")
    )
    rows = rows.select(*columns, *CHANGE_COLUMNS)
    return _cancelled(rows, columns) if _rewrites(changes) else rows


def _rewrites(changes: Sequence[_FileChange]) -> bool:
    """Whether a version both removes and adds files: only then can an insert and a delete of
    one row cancel out (an append, or a delete of whole files, has nothing to cancel)."""
    return bool({c.version for c in changes if c.change == "delete"}
                & {c.version for c in changes if c.change == "insert"})


def _relative_path(uri: Column, depths: Collection[int]) -> Column:
    """A file's path within the table, from its URI (Spark's, percent-encoded): its last
    `depths` segments, decoded. A range that spans a change of partitioning has files of more
    than one depth: each row then comes once per depth, and the join keeps the one that names a
    changed file (one write's file names are unique; only their partition folders repeat them)."""
    segments = F.split(F.url_decode(F.regexp_replace(uri, "\\+", "%2B")), "/")
    paths = [F.concat_ws("/", F.slice(segments, -depth, depth)) for depth in sorted(depths)]
    return paths[0] if len(paths) == 1 else F.explode(F.array(*paths))


def read_changes_arrow(
    fs: pafs.FileSystem, table_fs_path: str, schema: pa.Schema, start_version: int,
    end_version: int, *, max_bytes: int, max_rows: int | None = None,
) -> pa.Table | None:
    """`read_changes` without Spark, as Arrow (`_change_type`, `_commit_version`,
    `_commit_timestamp`): None when the range's files hold more than `max_bytes` or (when given)
    `max_rows` (by the log's statistics, before any is read, or else once read), or when a
    file's partition values are not of `schema`'s columns of types they parse to here as in
    Spark (`partition_types_held`): a partitioned table's partition columns are filled from each
    file's partition values in the log."""
    changes = _file_changes(fs, table_fs_path, start_version, end_version)
    if sum(c.size for c in changes) > max_bytes:
        return None
    counts = [c.records for c in changes]
    if max_rows is not None and None not in counts and sum(counts) > max_rows:
        return None
    partitioned = {name for c in changes for name, _ in c.partition_values}
    if not partition_types_held(schema, partitioned):
        return None
    parts = []
    for change in changes:
        try:
            rows = pq.read_table(f"{table_fs_path}/{change.path}", filesystem=fs,
                                 schema=schema, partitioning=None)
        except FileNotFoundError as exc:
            raise vacuumed(f"the change feed of version {change.version}", change.path) from exc
        for name, value in change.partition_values:
            index = rows.schema.get_field_index(name)
            column = pa.array([value] * rows.num_rows, pa.string()).cast(schema.field(name).type)
            rows = rows.set_column(index, schema.field(name), column)
        parts.append(_labelled(rows, change.change, change.version, change.timestamp))
    if not parts:
        return _labelled(schema.empty_table(), "insert", 0, datetime.now(timezone.utc))
    rows = pa.concat_tables(parts)
    if max_rows is not None and rows.num_rows > max_rows:
        return None
    return _cancelled_arrow(rows, schema.names) if _rewrites(changes) else rows


def partition_types_held(schema: pa.Schema, partition_columns: Collection[str]) -> bool:
    """Whether every partition column is one of `schema`'s whose values, written as text in the
    Delta log, parse in Arrow to what Spark reads (integers, strings, booleans: not dates or
    times, whose text forms differ between writers)."""
    def held(name: str) -> bool:
        if name not in schema.names:
            return False
        t = schema.field(name).type
        return (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_boolean(t))

    return all(held(name) for name in partition_columns)


#: The Arrow type of `_commit_timestamp`.
_STAMP = pa.timestamp("us", tz="UTC")


def _labelled(rows: pa.Table, change: str, version: int, timestamp: datetime) -> pa.Table:
    """`rows` with the change columns: all of them `change` of `version`, made at `timestamp`."""
    n = rows.num_rows
    return (rows.append_column("_change_type", pa.array([change] * n, pa.string()))
            .append_column("_commit_version", pa.array([version] * n, pa.int64()))
            .append_column("_commit_timestamp", pa.array([timestamp] * n, _STAMP)))


def net_changes_arrow(
    raw: pa.Table, *, before: pa.Table | None, after: pa.Table, keys: Sequence[str],
    version: int, timestamp: datetime,
) -> pa.Table:
    """`net_changes` held here: `raw` is the range's raw change feed (`read_changes_arrow`),
    `before` and `after` the table's current rows before the range and at its end (in the
    columns of `raw` but its change columns)."""
    touched = raw.select(list(keys)).group_by(list(keys)).aggregate([])
    names = [n for n in raw.column_names if n not in CHANGE_COLUMNS]
    schema = raw.select(names).schema

    def labelled(rows: pa.Table, change: str) -> pa.Table:
        rows = rows.cast(schema).join(touched, keys=list(keys), join_type="left semi")
        return _labelled(rows.select(names), change, version, timestamp)

    parts = [labelled(after, "insert")]
    if before is not None:
        parts.append(labelled(before, "delete"))
    return _cancelled_arrow(pa.concat_tables(parts), names)


def _cancelled_arrow(rows: pa.Table, names: Sequence[str]) -> pa.Table:
    """As `_cancelled`: an insert and a delete of the same row in one version cancel out.

    The multiset difference both ways, by row number: each row gets its rank among the rows of
    its version, value and kind (in order), and is kept when that rank reaches the count of the
    other kind's rows of its version and value, so the first deletes and inserts of a value
    cancel. Values compare column by column, by their dictionary codes (nested values by their
    JSON): a copy-on-write rewrite's thousands of unchanged rows cost no Python per row."""
    n = rows.num_rows
    if n == 0:
        return rows
    value = _row_codes([_codes(rows[name]) for name in (*names, "_commit_version")])
    insert = pc.equal(rows["_change_type"], "insert").to_numpy(zero_copy_only=False)
    side = value * 2 + insert.astype(np.int64)
    order = np.argsort(side, kind="stable")
    ranked = side[order]
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n) - np.searchsorted(ranked, ranked, side="left")
    counts = np.bincount(side, minlength=2 * (int(value.max()) + 1))
    return rows.filter(pa.array(rank >= counts[side ^ 1], pa.bool_()))


def _row_codes(columns: list[np.ndarray]) -> np.ndarray:
    """Codes 0..k-1 of the rows' tuples of column codes, equal where all columns are: the
    columns folded into one integer each (made dense again before it could overflow)."""
    key = columns[0]
    for codes in columns[1:]:
        width = int(codes.max()) + 1
        if int(key.max()) >= np.iinfo(np.int64).max // width:
            key = np.unique(key, return_inverse=True)[1].reshape(-1)
        key = key * width + codes
    return np.unique(key, return_inverse=True)[1].reshape(-1)


def _codes(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Equal codes for equal values of `column` (null its own value): plain values by their
    dictionary codes, a struct by its validity's and its fields', a list or map by its JSON."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    t = array.type
    if pa.types.is_floating(t):  # every NaN one value, whatever its bits (as JSON's "NaN")
        array = pc.if_else(pc.is_nan(array), pa.scalar(float("nan"), t), array)
    if pa.types.is_struct(t):
        return _row_codes([_codes(array.is_valid()),
                           *(_codes(field) for field in array.flatten())])
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_temporal(t)
            or pa.types.is_decimal(t)):
        array = pa.array([json.dumps(v, sort_keys=True, default=str) for v in array.to_pylist()],
                         pa.string())
    encoded = array.dictionary_encode(null_encoding="encode")
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)


def net_changes(
    *, before: DataFrame | None, after: DataFrame, version: int, timestamp: datetime
) -> DataFrame:
    """The net change of a merge-on-read table (`lakelog.lake.merge_on_read`) over a range of
    versions: of the keys its raw change feed names, the current rows of `before` (the version
    before the range; None if the table is new) that are gone from `after` (its last version)
    are deletes, and those new in `after` inserts, all labelled with the last version. A version
    appended new versions of keys, not new keys, so the raw feed alone would miss the replaced
    rows; and a version older than the stored one changes nothing at all."""
    columns = after.columns

    def labelled(df: DataFrame) -> DataFrame:
        return df.select(
            *columns,
            F.lit(version).cast("long").alias("_commit_version"),
            literals.timestamp(timestamp).alias("_commit_timestamp"),
        )

    new = labelled(after).withColumn("_change_type", F.lit("insert"))
    if before is None:
        return new.select(*columns, *CHANGE_COLUMNS)
    old = labelled(before).withColumn("_change_type", F.lit("delete"))
    return _cancelled(new.unionByName(old).select(*columns, *CHANGE_COLUMNS), columns)


def _cancelled(rows: DataFrame, columns: list[str]) -> DataFrame:
    """`rows` (inserts and deletes, by `_change_type`) without the pairs of an insert and a
    delete of the same row in one version: the multiset difference both ways, in one pass over
    the rows grouped by their exact value (a map column, which Spark cannot group by, by its
    JSON)."""
    maps = any(_has_map(f.dataType) for f in rows.select(*columns).schema.fields)
    value = F.to_json(F.struct(*columns)) if maps else F.struct(*columns)
    group = ["_commit_version", "_row"]
    is_insert = F.col("_change_type") == "insert"
    side = Window.partitionBy(*group, "_change_type").orderBy(F.lit(1))
    whole = Window.partitionBy(*group)
    numbered = (
        rows.withColumn("_row", value)
        .withColumn("_n", F.row_number().over(side))
        .withColumn("_inserts", F.sum(is_insert.cast("int")).over(whole))
        .withColumn("_deletes", F.sum((~is_insert).cast("int")).over(whole))
    )
    others = F.when(is_insert, F.col("_deletes")).otherwise(F.col("_inserts"))
    return numbered.where(F.col("_n") > others).select(*columns, *CHANGE_COLUMNS)


def _has_map(data_type: DataType) -> bool:
    if isinstance(data_type, MapType):
        return True
    if isinstance(data_type, StructType):
        return any(_has_map(f.dataType) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return _has_map(data_type.elementType)
    return False
