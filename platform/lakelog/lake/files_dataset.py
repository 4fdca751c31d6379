"""Some of a table's files as one pyarrow dataset, their partition columns from the Delta log.

A table's partition values are not in its Parquet files but in the Delta log's add actions, as
text. Read here, each file's values become its fragment's partition expression, so a column
named is filled from them and a filter on it prunes whole files; one dataset of the files is
read with each file's row groups pruned, where a dataset per value took a few ms more each (a
log batch's ranges span every log partition). Only partition columns whose text parses in Arrow
as Spark reads it are taken so (`changes.partition_types_held`: integers, strings, booleans).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from lakelog.lake.base import DataFile
from lakelog.lake.changes import partition_types_held


def files_dataset(
    fs: pafs.FileSystem, table_path: str, files: Sequence[DataFile], schema: pa.Schema,
    partition_columns: Sequence[str], *, table: str,
) -> pads.Dataset:
    """`files` (of the table at `table_path` on `fs`, called `table` in errors) as one dataset
    of `schema`, the `partition_columns` named from each file's partition values."""
    if not partition_types_held(schema, partition_columns):
        raise ValueError(f"{table}: partition columns {list(partition_columns)} are read from "
                         "the Delta log's text only when integers, strings or booleans")
    return pads.FileSystemDataset.from_paths(
        [f"{table_path}/{f.path}" for f in files], schema=schema, format=pads.ParquetFileFormat(),
        filesystem=fs,
        partitions=[_expression(f, schema, partition_columns) for f in files]
        if partition_columns else None)


def _expression(f: DataFile, schema: pa.Schema, columns: Sequence[str]) -> pads.Expression:
    """Each of `columns`' value in file `f`, as a dataset's partition expression."""
    terms = [pads.field(c).is_null() if f.partition_values.get(c) is None
             else pads.field(c) == pa.scalar(f.partition_values[c]).cast(schema.field(c).type)
             for c in columns]
    return functools.reduce(operator.and_, terms)
