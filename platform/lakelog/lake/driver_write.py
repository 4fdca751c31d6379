"""Small writes without a Spark write job: the rows collected as Arrow, the Parquet files written
here.

A Spark write runs its own commit protocol (a job whose tasks write into a staging folder, commit
each file, then a listing and a move of every file): about 0.1 s for an unpartitioned table and
0.2 s for a partitioned one, whatever the size. A microbatch's few thousand rows cost less
collected (one job over the same plan) and written by pyarrow, in the layout, statistics and
types Spark gives: ``<column>=<value>/part-<uuid>.snappy.parquet`` for a partitioned table (the
partition columns out of the file), files of at most `max_records_per_file` rows in the rows'
order (so a clustered write keeps its key ranges), no file for no rows.

The caller says whether the rows are few (`Lake.write`'s `rows_hint`, at most `SMALL_WRITE_ROWS`):
they are held in memory at once.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType, DataType, MapType, StructField, StructType, UserDefinedType, VariantType,
)

from lakelog.errors import SchemaMismatchError
from lakelog.lake import pages
from lakelog.lake.schema import describe_mismatch, widened
from lakelog.spark.session import over_connect

if TYPE_CHECKING:
    from lakelog.lake import Snapshot

#: The most rows (by the caller's estimate) written this way; more go through a Spark write.
#: A clustered table's rewrite of a few full files (`rows_per_file`: a window table's 10,000 by
#: default, 50,000 when this was measured) and a batch's new rows fits (the 100k demo's
#: 10-minute windows: ~77,000 rows, 2.2-2.7 s a batch instead of 3.8 s with Spark's write and
#: its range partitioning); a few tens of MB held.
SMALL_WRITE_ROWS = 100_000

#: Partition values that name a folder as they are; anything else (Spark escapes it) or a null
#: goes through a Spark write, so the two writers never name one partition two ways.
_PLAIN = re.compile(r"^[A-Za-z0-9_.\-]+$")


def is_small_write(rows_hint: int | None) -> bool:
    return rows_hint is not None and rows_hint <= SMALL_WRITE_ROWS


def collect(df: DataFrame) -> tuple[pa.Table, StructType]:
    """The rows as Arrow, and their Spark schema.

    Over Spark Connect in one round trip: the rows' response carries their schema, where
    `toArrow` first asks for it in a round trip of its own, an analysis of the whole plan on
    the server (a microbatch's plan costs about as much to analyse again as to run). In a
    session of this process's own the schema is a local call on the analysed plan.
    """
    if over_connect(df):
        table, schema = df._to_table()
        return table, schema if schema is not None else df.schema  # a server that sent none
    return df.toArrow(), df.schema


_WHICH = "_lakelog_which"


def collect_together(frames: Sequence[DataFrame]) -> list[tuple[pa.Table, StructType]]:
    """Each frame's rows as Arrow, and their Spark schema (`collect`), by one query.

    A microbatch's outputs are often cut from one frame (`BatchInput.cached`): collected one by
    one, each is a job and, over Spark Connect, a round trip of its own. Here each frame's rows
    become one struct column of a union (null in the other frames' rows; over Spark Connect no
    schema is looked up), a tag says which, and the rows are cut apart again, each frame's in
    its own order. The rows come back as wide as all the frames together: for few rows.
    """
    connect = len(frames) > 1 and over_connect(frames[0])
    if len(frames) < 2 or not connect and not all(_nullable_all(df.schema) for df in frames):
        return [collect(df) for df in frames]
    union = None
    for i, df in enumerate(frames):
        row = F.struct("*")
        if not connect:
            # A classic `toArrow` casts the rows to their schema, and Arrow refuses a null struct
            # whose fields may not be null: every field nullable (a local look-up here).
            row = row.cast(_nullable(df.schema))
        branch = df.select(F.lit(i).alias(_WHICH), row.alias(f"{_WHICH}_{i}"))
        union = branch if union is None else union.unionByName(branch, allowMissingColumns=True)
    assert union is not None
    table, schema = collect(union)
    which = table[_WHICH]
    found = []
    for i, df in enumerate(frames):
        rows = table[f"{_WHICH}_{i}"].filter(pc.equal(which, i))
        fields = [rows.type.field(j) for j in range(rows.type.num_fields)]
        shape = schema[f"{_WHICH}_{i}"].dataType if connect else df.schema
        assert isinstance(shape, StructType)
        found.append((pa.Table.from_arrays(rows.flatten(), schema=pa.schema(fields)), shape))
    return found


def _nullable_all(data_type: DataType) -> bool:
    """Whether `_nullable` makes every field of `data_type` nullable in Arrow: not so for a
    user-defined type or a variant, whose Arrow fields pyspark sets itself."""
    if isinstance(data_type, StructType):
        return all(_nullable_all(f.dataType) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return _nullable_all(data_type.elementType)
    if isinstance(data_type, MapType):
        return _nullable_all(data_type.keyType) and _nullable_all(data_type.valueType)
    return not isinstance(data_type, (UserDefinedType, VariantType))


def _nullable(data_type: DataType) -> DataType:
    """`data_type` with every field, element and value nullable, at every depth."""
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True)
                           for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_nullable(data_type.keyType), _nullable(data_type.valueType), True)
    return data_type


def checked(snapshot: Snapshot, actual: StructType) -> StructType:
    """`actual`, the schema of rows to write into `snapshot`'s table; a clear error if it is
    not the table's (after widening)."""
    problem = describe_mismatch(expected=snapshot.schema, actual=actual)
    if problem:
        raise SchemaMismatchError(f"cannot write to {snapshot.path}: {problem}")
    return actual


#: Arrow types of the types a column widens to (`lakelog.lake.schema.widened`).
_ARROW_WIDE = {"short": pa.int16(), "integer": pa.int32(), "long": pa.int64(),
               "double": pa.float64()}


def conformed(snapshot: Snapshot, table: pa.Table, actual: StructType) -> pa.Table:
    """Collected rows (`collect`) in the columns of `snapshot`'s table, their widened columns
    cast as Spark would cast them; a clear error if their schema is not the table's."""
    expected = snapshot.schema
    actual = checked(snapshot, widened(actual, expected))
    for f in actual.fields:
        wide = _ARROW_WIDE.get(f.dataType.typeName())
        column = table.schema.get_field_index(f.name)
        if wide is not None and table.schema.field(column).type != wide:
            table = table.set_column(column, f.name, table[f.name].cast(wide))
    return table.select(expected.fieldNames())


def sorted_rows(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    """`table` sorted by `columns`, ascending (nulls last: the order only clusters the files)."""
    return table.sort_by([(c, "ascending") for c in columns])


def groups(table: pa.Table, partition_columns: Sequence[str]) -> list[tuple[str, pa.Table]] | None:
    """The rows (some: no rows are no write) as (partition folder, file rows) groups in the rows'
    order; None when a partition value is not plain (the caller writes with Spark instead)."""
    if not partition_columns:
        return [("", table)]
    keys = table.select(list(partition_columns)).to_pylist()
    distinct: dict[tuple[Any, ...], None] = dict.fromkeys(tuple(k.values()) for k in keys)
    found = []
    for values in distinct:
        if any(v is None or not _PLAIN.match(str(v)) for v in values):
            return None
        mask = None
        for column, value in zip(partition_columns, values):
            hit = pc.equal(table[column], pa.scalar(value, table.schema.field(column).type))
            mask = hit if mask is None else pc.and_(mask, hit)
        folder = "/".join(f"{c}={v}" for c, v in zip(partition_columns, values)) + "/"
        found.append((folder, table.filter(mask).drop_columns(list(partition_columns))))
    return found


def write_files(
    fs: pafs.FileSystem,
    table_root: str,
    groups: list[tuple[str, pa.Table]],
    max_records_per_file: int | None,
    *,
    page_rows: int | None = None,
) -> list[str]:
    """Write each group's rows into files under `table_root` (a path of `fs`); the relative
    paths written, in order. `page_rows`: `lakelog.lake.pages`."""
    written = []
    options = pages.arrow_options(page_rows)
    for folder, rows in groups:
        step = max_records_per_file or rows.num_rows
        if folder:
            fs.create_dir(f"{table_root}/{folder.rstrip('/')}", recursive=True)
        for start in range(0, rows.num_rows, step):
            relative = f"{folder}part-{uuid.uuid4().hex}.snappy.parquet"
            pq.write_table(rows.slice(start, step), f"{table_root}/{relative}", filesystem=fs,
                           compression="snappy", **options)
            written.append(relative)
    return written
