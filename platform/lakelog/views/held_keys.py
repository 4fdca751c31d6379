"""A keyed model's incremental run on a small table, its rows replaced in this process.

Worked out by Spark (`lakelog.views.incremental.replace`), a run is two jobs and an analysis:
the touched keys computed and cached, a pass over them for their range and count (which picks
the files to rewrite), then the table's candidate files read, the touched keys' rows taken out
and the recomputed rows added. When the model's table is small (`holds`), one Spark job brings
back the touched keys and their recomputed rows side by side (`collect`), and the table's rows
are replaced here (`replace`): its candidate files read by pyarrow, the rows of a touched key
dropped, the recomputed rows added, sorted by key and written by pyarrow in one commit.

Keys are compared as Python values, so a null key is a key like any other (as the Spark path's
null-safe join has it); keys of floating-point or nested types, or strings of a collation, are
not held (Spark normalizes -0.0 and NaN where Python does not, a struct is not hashable, and a
collation may make "A" and "a" one key). A run that touches more than
`HELD_KEYS` keys is not replaced here: `collect` says so, having brought back no more than that
many keys and their rows, and the run goes the Spark way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lakelog.lake import AppTxn, DataFile, Lake, Snapshot, driver_write, held_read
from lakelog.lake.held_merge import HELD_STORED_BYTES
from lakelog.lake.merge_on_read import merge_keys
from lakelog.views.incremental import matching

#: The most rows the model's table may hold, and the most keys a run may touch, to be
#: replaced here (both in memory at once: together half of `driver_write.SMALL_WRITE_ROWS`).
HELD_ROWS = 25_000
HELD_KEYS = 25_000

_UNIT = "_lakelog_unit"


def holds(output: Snapshot, keys: Sequence[str]) -> bool:
    """Whether a run of the model whose table is `output` (keyed by `keys`) is replaced here:
    not when a key is named in another case than its column (Spark finds it, Arrow does not)
    or compared otherwise by Spark than by Python (floating point, nested, a string collation
    other than the binary one)."""
    files = output.files()
    types = {f.name: f.dataType for f in output.schema.fields}
    return (
        not output.partition_columns  # files read by pyarrow carry no partition values
        and merge_keys(output.properties) is None
        and sum(f.num_records for f in files) <= HELD_ROWS
        and sum(f.size for f in files) <= HELD_STORED_BYTES
        and all(k in types and held_read.compared_alike(types[k]) for k in keys)
        and _UNIT not in types
    )


def collect(
    units: DataFrame, rows: DataFrame, keys: Sequence[str]
) -> tuple[pa.Table, pa.Table, StructType] | None:
    """The touched keys (`units`, distinct) and the model's rows of those keys (`rows`, every
    key's rows), in one Spark job: (keys, rows, the rows' Spark schema); None when more than
    `HELD_KEYS` keys are touched."""
    limited = units.limit(HELD_KEYS + 1)  # the whole of them, unless there are too many
    matched = rows.join(limited, matching(rows, limited, keys), "left_semi")
    # The rows first, so that the union has their columns in their order (and the keys' rows
    # nulls in the others), without asking Spark for them.
    frame = matched.withColumn(_UNIT, F.lit(False)).unionByName(
        limited.select(*keys, F.lit(True).alias(_UNIT)), allowMissingColumns=True)
    table, actual = driver_write.collect(frame)
    flagged = table[_UNIT]
    touched = table.filter(flagged).select(list(keys))
    if touched.num_rows > HELD_KEYS:
        return None
    return (touched, table.filter(pc.invert(flagged)).drop_columns([_UNIT]),
            StructType([f for f in actual.fields if f.name != _UNIT]))


def replace(
    lake: Lake,
    output: Snapshot,
    touched: pa.Table,
    recomputed: pa.Table,
    actual: StructType,
    keys: Sequence[str],
    *,
    order: Sequence[str],
    txns: Sequence[AppTxn],
    metadata: Mapping[str, object],
) -> int:
    """One commit: the files that may hold a touched key (`touched`: rows of the `keys`
    columns) rewritten without those keys' rows, plus the recomputed rows, sorted by the
    `order` columns."""
    keys = list(keys)
    candidates = candidate_files(output, touched, keys[0])
    recomputed = driver_write.conformed(output, recomputed, actual)
    stored = lake.read_arrow(output, files=candidates)
    # Nullable throughout, as Spark's rows are: a cast to a non-null field would refuse a null.
    schema = pa.schema([f.with_nullable(True) for f in stored.schema])
    stored, recomputed = stored.cast(schema), recomputed.cast(schema)
    gone = set(_key_tuples(touched.cast(pa.schema([schema.field(k) for k in keys]))))
    kept = np.array([key not in gone for key in _key_tuples(stored.select(keys))], dtype=bool)
    merged = pa.concat_tables([stored.filter(pa.array(kept, pa.bool_())), recomputed])
    return lake.write_table(output, merged, remove=candidates, txns=txns, metadata=metadata,
                            sort_by=order)


def candidate_files(output: Snapshot, touched: pa.Table, first: str) -> list[DataFile]:
    """The output's files that may hold one of the touched keys, by the first key column."""
    files = output.files()
    column = touched[first]
    if column.null_count:
        return files
    bounds = pc.min_max(column)
    lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
    return [f for f in files if f.overlaps(first, lo, hi)]


def _key_tuples(keys: pa.Table) -> list[tuple]:
    return list(zip(*(keys[c].to_pylist() for c in keys.column_names)))
