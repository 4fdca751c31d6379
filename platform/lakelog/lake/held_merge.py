"""A keyed upsert of few rows into a few stored rows, worked out in this process.

Merged by Spark, a microbatch's upsert (`lakelog.lake.upsert`) is a plan of joins — the stored
rows against the deletes, the incoming rows against the stored versions (`newer_by`), the stored
rows against the winners — each a broadcast or a shuffle, each a Spark job of its own under
adaptive execution, for a few hundred rows. Here the incoming rows and the keys to delete come
back in one Spark job (`driver_write.collect`; or with a microbatch's other outputs,
`lakelog.consumers.writes`), the candidate files are read by pyarrow, and the
joins are Arrow hash joins on the key columns alone (the rows are then taken by index, so any
column type rides along).

The result is Spark's merge: a stored row is kept unless its key is deleted or has a winning
incoming row; an incoming row wins unless `newer_by` says the stored row of its key is as new or
newer (nulls decide as Spark's left join and comparison do: an incoming row with a null version
loses to a stored version, and any incoming row wins over a stored null); null keys match
nothing. Clustered tables (`rows_per_file`) get their
rows sorted by key and cut into files of that many rows.

Only a copy-on-write unpartitioned table qualifies (`holds`): a merge-on-read table's current
rows are worked out by a read of its own, and files read by pyarrow carry no partition values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lakelog.lake import AppTxn, DataFile, Lake, Snapshot, driver_write, held_read
from lakelog.lake.merge_on_read import merge_keys

#: The most stored rows (those of the candidate files) merged here: one clustered file's worth,
#: and at most this many bytes of their files (a file without statistics counts no rows).
HELD_STORED_ROWS = 250_000
HELD_STORED_BYTES = 64 << 20

_PREFIX = "_lakelog_"
_DELETE, _INDEX, _STORED = f"{_PREFIX}delete", f"{_PREFIX}index", f"{_PREFIX}stored"


def holds(
    snapshot: Snapshot, candidates: Sequence[DataFile], rows: int | None, *,
    keys: Sequence[str], newer_by: str | None,
) -> bool:
    """Whether an upsert of about `rows` incoming rows into `candidates` is merged here.

    Only when every key and `newer_by` is a column named exactly (Spark resolves names
    regardless of case, Arrow does not) whose values Arrow compares as Spark does
    (`held_read.compared_alike`: not floating point, where Spark normalizes -0.0 and NaN and
    orders NaN above every number, nor nested or collated), and not when `newer_by` is a key
    or a column's name is one of the merge's own.
    """
    types = {f.name: f.dataType for f in snapshot.schema.fields}
    compared = [*keys, *([newer_by] if newer_by else [])]
    return (
        driver_write.is_small_write(rows)
        and sum(f.num_records for f in candidates) <= HELD_STORED_ROWS
        and sum(f.size for f in candidates) <= HELD_STORED_BYTES
        and not snapshot.partition_columns
        and merge_keys(snapshot.properties) is None
        and all(c in types and held_read.compared_alike(types[c]) for c in compared)
        and newer_by not in keys
        and not any(name.startswith(_PREFIX) for name in types)
    )


def merge(
    lake: Lake,
    snapshot: Snapshot,
    incoming: DataFrame,
    candidates: Sequence[DataFile],
    *,
    keys: Sequence[str],
    newer_by: str | None,
    rows_per_file: int | None,
    deletes: DataFrame | None,
    txns: Sequence[AppTxn],
    metadata: Mapping[str, Any] | None,
    collected: tuple[pa.Table, StructType] | None = None,
) -> int:
    """`lakelog.lake.upsert`'s commit, merged here: `candidates` replaced by their rows with
    `incoming` merged in and the keys of `deletes` taken out. `collected`: the rows of
    `collected_frame` when the caller collected them already (with other frames, in one job)."""
    keys = list(keys)
    if collected is None:
        collected = driver_write.collect(collected_frame(snapshot, incoming, deletes, keys))
    rows, gone = _split(snapshot, *collected, keys, deleting=deletes is not None)
    stored = lake.read_arrow(snapshot, files=candidates)
    # Nullable throughout, as Spark's rows are: a cast to a non-null field would refuse a null.
    schema = pa.schema([f.with_nullable(True) for f in stored.schema])
    stored, rows = stored.cast(schema), rows.cast(schema)
    if gone is not None and gone.num_rows:
        gone = gone.cast(pa.schema([schema.field(k) for k in keys]))
        stored = stored.take(_unmatched(stored, gone, keys))
    if newer_by is not None and rows.num_rows and stored.num_rows:
        rows = rows.take(_newer(rows, stored, keys, newer_by))
    merged = pa.concat_tables([stored.take(_unmatched(stored, rows.select(keys), keys)), rows])
    return lake.write_table(snapshot, merged, remove=candidates, txns=txns, metadata=metadata,
                            max_records_per_file=rows_per_file,
                            sort_by=keys if rows_per_file else ())


def collected_frame(
    snapshot: Snapshot, incoming: DataFrame, deletes: DataFrame | None, keys: Sequence[str]
) -> DataFrame:
    """The incoming rows, in the table's columns, and the keys to delete, flagged: what `merge`
    collects (one Spark job)."""
    schema = snapshot.schema  # parsed from the Delta log on each access
    frame = incoming.select(*schema.fieldNames(), F.lit(False).alias(_DELETE))
    if deletes is not None:
        # In the table's key types: a union would otherwise widen the incoming rows' keys to
        # the deletes' (a bigint delete key makes an int key column bigint). A key that does
        # not fit the type becomes null and matches nothing, as it matched nothing stored.
        typed = [F.col(k).try_cast(schema[k].dataType).alias(k) for k in keys]
        frame = frame.unionByName(deletes.select(*typed, F.lit(True).alias(_DELETE)),
                                  allowMissingColumns=True)
    return frame


def _split(
    snapshot: Snapshot, table: pa.Table, actual: StructType, keys: list[str], *, deleting: bool,
) -> tuple[pa.Table, pa.Table | None]:
    """The collected `collected_frame`: the incoming rows, conformed to the table, and the keys
    to delete (None when there were no deletes)."""
    flagged = table[_DELETE]
    rows = table.filter(pc.invert(flagged)).drop_columns([_DELETE])
    actual = StructType([f for f in actual.fields if f.name != _DELETE])
    rows = driver_write.conformed(snapshot, rows, actual)
    return rows, table.filter(flagged).select(keys) if deleting else None


def _indexed(table: pa.Table, columns: list[str]) -> pa.Table:
    return table.select(columns).append_column(
        _INDEX, pa.array(np.arange(table.num_rows, dtype=np.int64)))


def _unmatched(table: pa.Table, other: pa.Table, keys: list[str]) -> pa.Array:
    """The indices, in order, of `table`'s rows whose key is not among `other`'s."""
    if not other.num_rows:
        return pa.array(np.arange(table.num_rows, dtype=np.int64))
    kept = _indexed(table, keys).join(other, keys=keys, join_type="left anti")
    return pa.array(np.sort(kept[_INDEX].to_numpy()))


def _newer(rows: pa.Table, stored: pa.Table, keys: list[str], newer_by: str) -> pa.Array:
    """The indices, in order, of the incoming rows that win: no stored row of their key, or a
    greater `newer_by` than its."""
    versions = stored.select([*keys, newer_by]).rename_columns([*keys, _STORED])
    found = _indexed(rows, [*keys, newer_by]).join(versions, keys=keys, join_type="left outer")
    wins = pc.or_kleene(pc.is_null(found[_STORED]),
                        pc.greater(found[newer_by], found[_STORED]))
    return pa.array(np.sort(found.filter(pc.fill_null(wins, False))[_INDEX].to_numpy()))
