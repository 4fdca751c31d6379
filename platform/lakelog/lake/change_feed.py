"""A table's change feed as the embedded lake answers it, by Spark or held here.

The feed of a range of versions is the rows its commits added and removed
(`lakelog.lake.changes`). Of a merge-on-read table (at either end of the range: a layout switch
inside it included) it is the range's net change by key, worked out from the table's current
rows at both ends; those need the older end's files, so a vacuum can make it unavailable.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakelog.errors import ChangesUnavailableError, TableNotFoundError
from lakelog.lake import held_read
from lakelog.lake.base import DataFile, is_small, overlapping
from lakelog.lake.changes import (
    commit_timestamp, net_changes, net_changes_arrow, read_changes, read_changes_arrow,
    require_files,
)
from lakelog.lake.delta_snapshot import DeltaSnapshot
from lakelog.lake.merge_on_read import MergeKeys, merge_keys

if TYPE_CHECKING:
    from lakelog.lake.embedded import EmbeddedLake

#: The most bytes of Parquet a change feed is read from here (`held`), not by Spark.
HELD_BYTES = 32 << 20


@dataclass(frozen=True)
class _Range:
    """The two ends of a feed: the version before its first (None from version 0) and its last,
    and the merge keys of a merge-on-read table at either end."""

    lake: EmbeddedLake
    path: str
    start: int
    before: DeltaSnapshot | None
    after: DeltaSnapshot
    merge: MergeKeys | None

    def require(self, before_files: list[DataFile]) -> None:
        """Raise `ChangesUnavailableError` unless `before_files` are still on disk."""
        require_files(self.lake.fs, self.lake.fs_path(self.path), self.path,
                      self.before.version, [f.path for f in before_files],
                      f"the change feed from version {self.start}")

    def timestamp(self) -> datetime:
        return commit_timestamp(self.lake.fs, self.lake.fs_path(self.path), self.after.version)


def _range(
    lake: EmbeddedLake, path: str, start: int, end: int | None,
    latest: DeltaSnapshot | None = None,
) -> _Range:
    """The ends of the feed from `start` through `end` (`latest`'s version when None; `latest`,
    when given, stands for that version)."""
    if latest is not None and end in (None, latest.version):
        after = latest
    else:
        after = _version(lake, path, end)
    before = _version(lake, path, start - 1) if start > 0 else None
    merge = merge_keys(after.properties) or (before and merge_keys(before.properties)) or None
    return _Range(lake, path, start, before, after, merge)


def _version(lake: EmbeddedLake, path: str, version: int) -> DeltaSnapshot:
    """Version `version` of the table, or `ChangesUnavailableError` when its log was trimmed
    (`Lake.forget_history`): a feed that needs it cannot be read any more."""
    try:
        return lake.snapshot(path, version)
    except TableNotFoundError as gone:
        if not lake.exists(path):
            raise
        raise ChangesUnavailableError(
            f"version {version} of {path} is no longer in the Delta log; its change feed "
            "cannot be read") from gone


def held(
    lake: EmbeddedLake, path: str, start: int, end: int, *, max_rows: int | None = None
) -> pa.Table | None:
    """The feed from `start` through `end` read here, when its files hold at most `HELD_BYTES`
    (and `max_rows` rows, when given),
    their partition columns (if any) are of types whose values parse here as in Spark
    (`changes.partition_types_held`), and, merge-on-read, both ends are small tables of one
    schema (`held_read.holds`); None otherwise (ask `spark`). The same columns."""
    ends = _range(lake, path, start, end)
    before, after = ends.before, ends.after
    if ends.merge and not (held_read.holds(after) and (before is None or (
            held_read.holds(before) and before.schema == after.schema))):
        return None
    raw = read_changes_arrow(lake.fs, lake.fs_path(path), after.arrow_schema, start, end,
                             max_bytes=HELD_BYTES, max_rows=max_rows)
    if not ends.merge or raw is None:
        return raw
    if before is not None:
        ends.require(before.files())
    return net_changes_arrow(
        raw, before=None if before is None else held_read.current_table(lake, before),
        after=held_read.current_table(lake, after), keys=ends.merge.keys, version=end,
        timestamp=ends.timestamp())


def spark(lake: EmbeddedLake, path: str, start: int, end: int | None = None) -> DataFrame:
    """The feed from `start` through `end` (the latest version when None) as a Spark frame."""
    latest = lake.snapshot(path)
    ends = _range(lake, path, start, end, latest)
    before, after = ends.before, ends.after
    rows = read_changes(
        lake.spark, fs=lake.fs, table_fs_path=lake.fs_path(path),
        table_spark_path=lake.spark_path(path), schema=latest.schema,
        start_version=start, end_version=after.version)
    if not ends.merge:
        return rows
    # Only files that can hold a touched key are read: those overlapping their range (a
    # small table's all, which costs less than a pass to find the range).
    keys = ends.merge.keys
    touched = rows.select(*keys).distinct()
    small = is_small(after.files()) and (before is None or is_small(before.files()))
    lo, hi = (None, None) if small else touched.agg(F.min(keys[0]), F.max(keys[0])).first()

    def holding(snapshot: DeltaSnapshot) -> list[DataFile]:
        return snapshot.files() if small else overlapping(snapshot.files(), keys[0], lo, hi)

    if before is not None:
        ends.require(holding(before))
    return net_changes(
        before=None if before is None else lake.read(before, files=holding(before), keys=touched,
                                                     key_columns=keys),
        after=lake.read(after, files=holding(after), keys=touched, key_columns=keys),
        version=after.version, timestamp=ends.timestamp())
