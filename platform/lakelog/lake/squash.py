"""Squashing merge-on-read tables, and switching a keyed table between its two layouts.

A merge-on-read table (`lakelog.lake.merge_on_read`) gains a file of new versions with every
microbatch. `squash` rewrites each group of files whose key ranges overlap — the only files that
can hold several versions of a key — into files of one current row per key, clustered by key
range; files that overlap no other are left alone. It is the table's compaction, run by the
maintenance job: a squash costs what the overlapping files hold (for changes spread over every key,
the whole table), once for many microbatches, instead of every microbatch.

`ensure_layout` makes an existing keyed table match its declaration: a copy-on-write table holds
one row per key, so it turns merge-on-read by a property change alone; a merge-on-read table is
squashed first, then turned copy-on-write.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F

from lakelog.errors import ConfigError
from lakelog.lake import Lake
from lakelog.lake.merge_on_read import COPY_ON_WRITE, MergeKeys, merge_keys, overlap_groups
from lakelog.lake.upsert import write_clustered

#: Rows per file of a squash that was given none.
ROWS_PER_FILE = 250_000


@dataclass(frozen=True)
class SquashResult:
    files_before: int
    files_squashed: int  # files rewritten (every group of overlapping files)
    versions_read: int  # rows of the squashed files: all versions of their keys
    rows_written: int  # one current row (or tombstone) per key
    rows_dropped: int  # current rows `drop` removed
    version: int | None  # the squash's commit; None when there was nothing to squash

    @property
    def ratio(self) -> float:
        """Rows written per version read (1.0 when nothing was squashed)."""
        return self.rows_written / self.versions_read if self.versions_read else 1.0


def squash(
    lake: Lake,
    path: str,
    *,
    rows_per_file: int | None = None,
    drop: Callable[[], Column] | None = None,
    declared: MergeKeys | None = None,
) -> SquashResult:
    """Rewrite every group of key-overlapping files of merge-on-read table `path` in one commit.

    `drop` makes a predicate (once Spark runs) of current rows to remove from the squashed files,
    e.g. expired tombstones: safe, since every version of their keys is among those files.
    `declared` is the merge keys the table is declared with: a table its consumer has not converted yet (it had nothing to consume since
    the declaration changed) is converted first.
    """
    if declared is not None:
        ensure_layout(lake, path, declared, rows_per_file=rows_per_file)
    snapshot = lake.snapshot(path)
    merge = merge_keys(snapshot.properties)
    if merge is None:
        raise ConfigError(f"{path} is not a merge-on-read table: there is nothing to squash")
    files = snapshot.files()
    squashed = [f for g in overlap_groups(files, merge.keys[0]) if len(g) > 1 for f in g]
    if not squashed:
        return SquashResult(len(files), 0, 0, 0, 0, None)
    versions = sum(f.num_records for f in squashed)
    # The groups are closed under overlap, so reading them resolves every version of their keys.
    rows, dropped = lake.read(snapshot, files=squashed), 0
    if drop is not None:
        doomed = F.coalesce(drop(), F.lit(False))
        keys = lake.read(snapshot, files=squashed, all_versions=True).where(doomed)
        dropped = lake.read(snapshot, files=squashed,
                            keys=keys.select(*merge.keys).distinct()).where(doomed).count()
        rows = rows.where(~doomed)
    version = write_clustered(
        lake, snapshot, rows, keys=merge.keys, rows_per_file=rows_per_file or ROWS_PER_FILE,
        rows=versions - dropped, remove=squashed, metadata={
            "lakelog.squash": {"files": len(squashed), "versions": versions, "dropped": dropped},
        })
    before = {f.path for f in files}
    written = sum(f.num_records for f in lake.snapshot(path, version).files()
                  if f.path not in before)
    return SquashResult(len(files), len(squashed), versions, written, dropped, version)


def ensure_layout(
    lake: Lake, path: str, wanted: MergeKeys | None, *, rows_per_file: int | None = None
) -> bool:
    """Turn keyed table `path` merge-on-read (`wanted` keys) or copy-on-write (None) if it is
    not; whether it had to change."""
    current = merge_keys(lake.snapshot(path).properties)
    if current == wanted:
        return False
    if current is not None and wanted is not None:
        raise ConfigError(f"{path} is merge-on-read by {current}, not by {wanted}: a table's "
                          "keys cannot change")
    if wanted is not None:
        lake.set_properties(path, wanted.properties())
    else:
        squash(lake, path, rows_per_file=rows_per_file)
        lake.set_properties(path, COPY_ON_WRITE)
    return True
