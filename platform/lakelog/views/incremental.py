"""What an incremental run recomputes, found from the inputs' change data feed.

An hour-partitioned model (``partition_by='hour'``) recomputes whole hours: the hours of every
row its inputs inserted or deleted since the last run, read by the input's ``event_time`` (or
``hour``) column. Its rows for hour h must depend only on input rows of hour h — its ``hour``
column is ``date_trunc('hour', event_time)``; a recomputed row of an hour that was not being
recomputed fails the run. An input without such a column (a dimension table) is read whole, and
a change to it recomputes every hour.

Any other incremental model recomputes the `unique_key` values touched: the keys the model's
SQL yields when one input is replaced by its changed rows (inserted and deleted) and the others
are read whole, for each changed input. That finds every affected key when each output row's key
comes from its input rows — grouping by an input column, inner joins, filters — but not for SQL
where a change elsewhere alters a key without producing it (anti-joins, NOT EXISTS, ranking
across keys, a self-join of a changed input, which is replaced in both places): such models
should be materialized as tables.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from functools import reduce

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lakelog.lake import AppTxn, DataFile, Lake, Snapshot, held_read
from lakelog.lake.changes import CHANGE_COLUMNS
from lakelog.spark import literals
from lakelog.spark.session import has_required_conf
from lakelog.views.evaluate import Reader, evaluate
from lakelog.views.graph import ModelGraph
from lakelog.views.models import HOUR

ONE_HOUR = timedelta(hours=1)
#: Columns an input's rows are assigned to an hour by, in order of preference.
TIME_COLUMNS = ("event_time", HOUR)


def utc(moment: datetime) -> datetime:
    """Aware UTC; a naive datetime is local time, as PySpark returns timestamps."""
    return moment.astimezone(timezone.utc)


def time_column(schema: StructType) -> str | None:
    names = schema.fieldNames()
    return next((c for c in TIME_COLUMNS if c in names), None)


#: The most changed rows of an input, and their bytes in Arrow, handed to Spark as local rows
#: (`held_changed_rows`), as a microbatch's records are (`lakelog.log.held_records`).
HELD_CHANGES = 50_000
HELD_CHANGES_BYTES = 64 << 20


def changed_rows(lake: Lake, path: str, since: int, until: int) -> DataFrame:
    """Rows of `path` inserted or deleted by versions ``since+1..until``, in the table's columns."""
    return lake.changes(path, since + 1, until).drop(*CHANGE_COLUMNS)


def held_changed_rows(lake: Lake, snapshot: Snapshot, since: int) -> DataFrame:
    """`changed_rows` up to `snapshot` (a pinned input), read here and handed to Spark as local
    rows when the feed is a few files of few rows (`Lake.changes_arrow`): Spark's read of a feed
    scans its files and joins their rows to the commits' file list, in every query that uses
    them (an incremental run evaluates the model's SQL over them twice)."""
    held = lake.changes_arrow(snapshot.path, since + 1, snapshot.version, max_rows=HELD_CHANGES)
    if held is None or held.nbytes > HELD_CHANGES_BYTES:
        return changed_rows(lake, snapshot.path, since, snapshot.version)
    return held_read.frame(lake.spark, held, snapshot.schema)


def touched_hours(
    lake: Lake, spark: SparkSession, ranges: Mapping[str, tuple[int, int]],
    schemas: Mapping[str, StructType],
) -> dict[datetime, int] | None:
    """The hours of the rows each input inserted or deleted in versions ``since+1..until``
    (`ranges`: path to ``(since, until)``), with how many changed rows each has; None when an
    input without a time column changed. `schemas`: each input's columns (its pinned
    snapshot's, so that no schema is asked of Spark).

    A feed of few files (a microbatch's, `Lake.changes_arrow`) is read here, when the session
    truncates to hours in UTC as Arrow does here (a session lakelog built); the others make one
    Spark job between them."""
    found: Counter[datetime] = Counter()
    hours = []
    here = has_required_conf(spark)  # spark.sql.session.timeZone is UTC
    for path, (since, until) in ranges.items():
        column = time_column(schemas[path])
        held = lake.changes_arrow(path, since + 1, until) if here else None
        if column is None:  # any changed row may belong to any hour
            if (held.num_rows > 0 if held is not None
                    else not changed_rows(lake, path, since, until).isEmpty()):
                return None
        elif held is not None and pa.types.is_timestamp(held.schema.field(column).type):
            found.update(_arrow_hours(held.column(column)))
        else:
            rows = changed_rows(lake, path, since, until)
            hours.append(rows.select(F.date_trunc("hour", F.col(column)).alias(HOUR)))
    if hours:
        spread = reduce(DataFrame.unionByName, hours).where(F.col(HOUR).isNotNull()).groupBy(HOUR)
        found.update({utc(r[HOUR]): r["count"] for r in spread.count().collect()})
    return dict(found)


def _arrow_hours(moments: pa.ChunkedArray) -> dict[datetime, int]:
    """How many of `moments` (Arrow timestamps) fall in each hour, as Spark's ``date_trunc`` in
    a UTC session puts them (a timestamp without time zone is a wall-clock time, as UTC's)."""
    if moments.type.tz is not None:  # floored in UTC, not in the values' own time zone
        moments = moments.cast(pa.timestamp(moments.type.unit, "UTC"))
    counts = pc.value_counts(pc.floor_temporal(moments.drop_null(), unit="hour"))
    return {
        (hour if hour.tzinfo else hour.replace(tzinfo=timezone.utc)).astimezone(timezone.utc):
        count
        for hour, count in zip(counts.field("values").to_pylist(),
                               counts.field("counts").to_pylist())
    }


def in_hours(column: str, hours: Collection[datetime]):
    # Each hour as microseconds since the epoch: a datetime literal would have Spark Connect's
    # client ask the server for the session's timestamp type, a round trip per hour.
    moments = [literals.timestamp(h) for h in sorted(hours)]
    return F.date_trunc("hour", F.col(column)).isin(*moments)


def whole_reader(lake: Lake, pinned: Mapping[str, Snapshot]) -> Reader:
    """Reads each input whole at its pinned snapshot; a small one (`held_read.holds`, a
    dimension table of a few thousand rows) by pyarrow, once, as local rows that Spark joins by
    broadcast, where its scan (and, merge-on-read, the sort of each key's versions) would cost
    stages of their own in every plan that reads it. Each read is a DataFrame of its own, as a
    Spark read is: two evaluations joined to each other never share a column of one input."""
    held: dict[str, pa.Table] = {}

    def read(path: str) -> DataFrame:
        snapshot = pinned[path]
        if not held_read.holds(snapshot):
            return lake.read(snapshot)
        if path not in held:
            held[path] = held_read.current_table(lake, snapshot)
        return held_read.rows(lake, snapshot, held[path])

    return read


def hour_reader(
    lake: Lake, pinned: Mapping[str, Snapshot], hours: Collection[datetime], whole: Reader
) -> Reader:
    """Reads each input's rows of `hours` (only files whose statistics overlap them); an input
    without a time column whole, with `whole`."""

    def read(path: str) -> DataFrame:
        snapshot = pinned[path]
        column = time_column(snapshot.schema)
        if column is None:
            return whole(path)
        files = [
            f for f in snapshot.files()
            if any(f.overlaps(column, h, h + ONE_HOUR - timedelta(microseconds=1)) for h in hours)
        ]
        return lake.read(snapshot, files=files).where(in_hours(column, hours))

    return read


def hour_files(snapshot: Snapshot, hours: Collection[datetime]) -> list[DataFile]:
    """The output's files that may hold rows of `hours`."""
    return [f for f in snapshot.files() if any(f.overlaps(HOUR, h, h) for h in hours)]


def touched_keys(
    spark: SparkSession,
    graph: ModelGraph,
    name: str,
    read: Reader,
    changes: Mapping[str, DataFrame],
    keys: Sequence[str],
) -> DataFrame:
    """The keys the model yields with one changed input replaced by its changed rows, for each."""
    found = []
    for changed, rows in changes.items():

        def substituted(path: str, changed: str = changed, rows: DataFrame = rows) -> DataFrame:
            return rows if path == changed else read(path)

        found.append(evaluate(spark, graph, name, substituted).select(*keys))
    return reduce(DataFrame.unionByName, found).distinct()


def key_files(
    snapshot: Snapshot, units: DataFrame, keys: Sequence[str]
) -> tuple[list[DataFile], int]:
    """The output's files that may hold one of the keys in `units` (by the first key column),
    and how many keys `units` holds, in one pass over them."""
    first = keys[0]
    row = units.agg(
        F.count(F.lit(1)).alias("keys"), F.min(first).alias("lo"), F.max(first).alias("hi"),
        F.count(F.when(F.col(first).isNull(), 1)).alias("nulls"),
    ).first()
    files = snapshot.files()
    if row is None or not row["keys"]:
        return [], 0
    if row["nulls"]:
        return files, row["keys"]
    return [f for f in files if f.overlaps(first, row["lo"], row["hi"])], row["keys"]


def matching(left: DataFrame, right: DataFrame, columns: Sequence[str]):
    """Null-safe equality on `columns`: a null key is a key like any other."""
    return reduce(lambda a, b: a & b, [left[c].eqNullSafe(right[c]) for c in columns])


def replace(
    lake: Lake,
    snapshot: Snapshot,
    rows: DataFrame,
    units: DataFrame,
    columns: Sequence[str],
    candidates: Sequence[DataFile],
    *,
    txns: Sequence[AppTxn],
    metadata: Mapping[str, object],
    rows_hint: int | None = None,
) -> int:
    """One commit: the candidate files rewritten without the rows of `units`, plus `rows`
    (`rows_hint`: how many rows that makes at most, when known)."""
    existing = lake.read(snapshot, files=candidates)
    kept = existing.join(units, matching(existing, units, columns), "left_anti")
    return lake.write(
        snapshot, kept.unionByName(rows), remove=candidates, txns=txns, metadata=metadata,
        rows_hint=rows_hint,
    )
