"""A microbatch's records read from the log in this process and handed to Spark as local rows.

Read by Spark, a batch's offset ranges are a scan of the log files that hold them, filtered by
partition and offset; every query that uses the records plans that scan again (the files
looked up; over Spark Connect, on the server, each time) and runs it in tasks that open the
files, and a batch's records take part in several queries (its first pass, its outputs). For
a few thousand records that costs more than the records: a session-window batch that read its
events again in each query instead of keeping them took 1.7 s against 1.4 s
(`bench_pipeline.py --parts kinds`). Read by pyarrow (the files' row groups pruned by their
offset statistics) they are a local relation, whose plan holds the rows (`held_read.frame`).

The same rows as Spark's read: each file's rows in the ranges, and the file's log partition
from the Delta log (a log is partitioned by an integer column, which Arrow fills as Spark does).
Only ranges whose files hold few records and bytes qualify (`holds`), and only while the rows
read take few bytes.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from functools import reduce

import pyarrow as pa
import pyarrow.compute as pc

from lakelog.lake import DataFile, Lake, Snapshot

#: The most records read here, those of the ranges: a microbatch's worth, as many as a change
#: feed handed to Spark as local rows (a local relation is sent with each query that uses it).
HELD_RECORDS = 50_000
#: The most records and bytes of the files that hold the ranges, which pyarrow decodes (a
#: range inside a file is filtered out of the row groups it overlaps, of at most 10,000 records
#: in the log's files, `lakelog.lake.pages`): a 1,000-record batch cut out of four log files of
#: ~50,000 records each is read here in ~15 ms, where a Spark read of it is planned and run
#: again by each query that uses the records.
HELD_FILE_RECORDS = 250_000
HELD_BYTES = 32 << 20
#: The most bytes of the records read (Arrow, uncompressed) handed to Spark: more goes to
#: Spark's read (at Spark Connect's default threshold, a local relation is still sent inside
#: the plan rather than uploaded apart).
HELD_ARROW_BYTES = 64 << 20

PARTITION = "partition"


def holds(
    snapshot: Snapshot, files: Sequence[DataFile], ranges: Mapping[int, tuple[int, int]]
) -> bool:
    """Whether the records of `ranges` (per log partition, ``start <= offset < end``) are read
    here, given `files`, the files that hold them."""
    return (
        snapshot.partition_columns == [PARTITION]
        and sum(max(end - start, 0) for start, end in ranges.values()) <= HELD_RECORDS
        and sum(f.num_records for f in files) <= HELD_FILE_RECORDS
        and sum(f.size for f in files) <= HELD_BYTES
    )


def read(
    lake: Lake, snapshot: Snapshot, files: Sequence[DataFile],
    ranges: Mapping[int, tuple[int, int]],
) -> pa.Table | None:
    """The records of `ranges` (per log partition, ``start <= offset < end``) in `files`, the
    files that hold them, as Arrow rows in the log's columns, for Spark as a local relation
    (`held_read.frame`); None when they take more than `HELD_ARROW_BYTES` (read them by
    Spark)."""
    names = snapshot.schema.fieldNames()
    # One read of the files in log-partition order: each file's rows come in its partition's
    # range, its partition from the Delta log.
    order = sorted(files, key=lambda f: int(f.partition_values[PARTITION]))
    where = reduce(operator.or_, [
        (pc.field(PARTITION) == p) & (pc.field("offset") >= start) & (pc.field("offset") < end)
        for p, (start, end) in sorted(ranges.items())]) if ranges else None
    table = lake.read_arrow(snapshot, files=order, columns=names, where=where)
    return None if table.nbytes > HELD_ARROW_BYTES else table
