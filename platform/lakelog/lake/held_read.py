"""A small table's current rows, read in this process and handed to Spark as local rows.

A microbatch that looks up its keys in a table of a few hundred kilobytes (`is_small`) pays
Spark more in stages than in data: a pass over the records for their distinct keys (a shuffle
and a broadcast), a scan of the table's files, and for a merge-on-read table a shuffle and sort
of each key's versions; about half a second on two cores for a table of 3,000 rows. Read by
pyarrow, the same rows take milliseconds, and as a local relation (`createDataFrame` of Arrow
data; over Spark Connect, rows inside the plan) they join the records by broadcast in the
records' own stage.

For a merge-on-read table, each key gets the version with the greatest `newer_by` (nulls
last), a tie going to the first file by name, as `lakelog.lake.merge_on_read.newest` orders
them; resolved across all the files, where Spark's read resolves only files whose key ranges
overlap (a file on its own holds one version per key, as lakelog writes them): the same rows.

Only an unpartitioned table qualifies (files read by pyarrow carry no partition values), and a
merge-on-read table only when its keys and `newer_by` are compared alike by Arrow and Spark
(`compared_alike`: neither floating point, which Spark normalizes, nor nested, which Arrow does
not group by, nor strings of a collation).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType, DataType, DoubleType, FloatType, MapType, StringType, StructType,
)

from lakelog.lake.base import Lake, Snapshot, is_small
from lakelog.lake.merge_on_read import FILE, file_name, merge_keys
from lakelog.lake.one_partition import one_partition

_INDEX = "_lakelog_index"


def holds(snapshot: Snapshot) -> bool:
    """Whether the table's current rows are read here (`rows`) rather than by Spark."""
    if snapshot.partition_columns or not is_small(snapshot.files()):
        return False
    merge = merge_keys(snapshot.properties)
    if merge is None:
        return True
    types = {f.name: f.dataType for f in snapshot.schema.fields}
    return all(c in types and compared_alike(types[c]) for c in (*merge.keys, merge.newer_by))


def compared_alike(data_type: DataType) -> bool:
    """Whether Arrow (and Python) group and compare values of `data_type` as Spark does: not
    floating point (Spark normalizes -0.0 and NaN), nested types (Arrow does not group by them,
    Python does not hash them) or strings of a collation (which may make "A" and "a" equal)."""
    if isinstance(data_type, StringType):
        return data_type.collation == "UTF8_BINARY"
    return not isinstance(data_type, (FloatType, DoubleType, StructType, ArrayType, MapType))


def current_table(lake: Lake, snapshot: Snapshot) -> pa.Table:
    """The table's current rows as Arrow data (the table must be one that `holds`)."""
    merge = merge_keys(snapshot.properties)
    if merge is None:
        return lake.read_arrow(snapshot, files=snapshot.files())
    parts = [
        table.append_column(FILE, pa.array([file_name(f.path)] * table.num_rows, pa.string()))
        for f in snapshot.files()
        for table in [lake.read_arrow(snapshot, files=[f])]
    ]
    if not parts:
        return lake.read_arrow(snapshot, files=[])
    versions = pa.concat_tables(parts)
    order = versions.select([*merge.keys, merge.newer_by, FILE]).append_column(
        _INDEX, pa.array(np.arange(versions.num_rows, dtype=np.int64)))
    # Newest first within each key (nulls last, Arrow's default and where Spark's descending
    # order puts them); a group keeps its rows' order when aggregated without threads, so its
    # "first" is its newest.
    order = order.sort_by([(merge.newer_by, "descending"), (FILE, "ascending")])
    first = order.group_by(list(merge.keys), use_threads=False).aggregate([(_INDEX, "first")])
    chosen = np.sort(first[f"{_INDEX}_first"].to_numpy())
    return versions.drop_columns([FILE]).take(pa.array(chosen))


def rows(lake: Lake, snapshot: Snapshot, table: pa.Table | None = None) -> DataFrame:
    """`current_table` as a DataFrame in the table's schema (`table`: the rows it gave, when
    the caller holds them already)."""
    table = current_table(lake, snapshot) if table is None else table
    return frame(lake.spark, table, snapshot.schema)


def frame(spark: SparkSession, table: pa.Table, schema: StructType) -> DataFrame:
    """Arrow rows as a DataFrame (a local relation) of `schema`'s columns, types and metadata,
    in one partition (`lakelog.lake.one_partition`: held rows are few).

    Given the schema, Spark reads each Arrow column as the type it is to have: a
    ``timestamp_ntz`` column stays a wall-clock time. Left to infer types, it takes a zone-less
    Arrow timestamp for a local time of the session's zone, which fails for a time that a
    daylight-saving gap skips there (2:30 on the day clocks go forward)."""
    if not table.num_rows:
        return one_partition(spark.createDataFrame([], schema))
    return one_partition(spark.createDataFrame(table.select(schema.fieldNames()), schema))
