"""The interface over Delta tables that the engine codes against.

A table is addressed by its path relative to the lake root (``log/page_views``). Every write is
one Delta transaction made relative to a `Snapshot` the caller read: if another writer committed
a transaction carrying one of the same application ids in between, the write fails with
`ConcurrentWriteError` and nothing is committed. That is what makes offset assignment and
checkpoint commits safe under concurrency.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, Protocol

import pyarrow as pa
import pyarrow.dataset as pads
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

WriteMode = Literal["append", "overwrite"]
#: A commit's custom metadata, or a function of the number of rows the write added (known once
#: the files are written, before the commit: so counts need no Spark job of their own).
CommitMetadata = Mapping[str, Any] | Callable[[int], Mapping[str, Any]]


@dataclass(frozen=True)
class AppTxn:
    """A Delta application transaction: `(app_id, version)` recorded atomically with a commit."""

    app_id: str
    version: int


@dataclass(frozen=True)
class DataFile:
    """One data file of a table snapshot, with the statistics used to skip it."""

    path: str
    size: int
    num_records: int
    partition_values: Mapping[str, Any] = field(default_factory=dict)
    min_values: Mapping[str, Any] = field(default_factory=dict)
    max_values: Mapping[str, Any] = field(default_factory=dict)
    modification_time: int = 0
    #: Nulls per column, where the statistics say (a column missing here: not known).
    null_counts: Mapping[str, int] = field(default_factory=dict)

    def overlaps(self, column: str, low: Any = None, high: Any = None) -> bool:
        """Whether the file may hold values of `column` in ``[low, high]`` (True if unknown)."""
        lo, hi = self.min_values.get(column), self.max_values.get(column)
        if lo is None or hi is None:
            return True
        lo, hi, low, high = (_comparable(v) for v in (lo, hi, low, high))
        return (low is None or hi >= low) and (high is None or lo <= high)


def overlapping(files: Sequence[DataFile], column: str, low: Any, high: Any) -> list[DataFile]:
    """The files whose statistics of `column` overlap ``[low, high]`` (none if `low` is None)."""
    if low is None:
        return []
    return [f for f in files if f.overlaps(column, low, high)]


#: A table this small is read (and rewritten) whole rather than pruned by a pass over the rows
#: that touch it: the pass is a Spark job of its own (a few hundred milliseconds here), about
#: what rewriting a MB of Parquet costs.
SMALL_TABLE_BYTES = 1024 * 1024


def is_small(files: Sequence[DataFile]) -> bool:
    """Whether a table of `files` is small enough to read whole instead of pruning it."""
    return sum(f.size for f in files) <= SMALL_TABLE_BYTES


def _comparable(value: Any) -> Any:
    """Datetimes as aware UTC; a naive one is local time, as PySpark returns timestamps."""
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc)
    return value


def already_committed(snapshot: "Snapshot", txn: AppTxn) -> bool:
    """Whether `snapshot` holds application transaction `txn` (or a later version of its app)."""
    version = snapshot.txn_version(txn.app_id)
    return version is not None and version >= txn.version


class Snapshot(Protocol):
    """A table as of one version. Writes are made relative to the snapshot they were planned on."""

    path: str
    version: int

    @property
    def schema(self) -> StructType: ...

    @property
    def partition_columns(self) -> list[str]: ...

    @property
    def properties(self) -> Mapping[str, str]: ...

    @property
    def table_id(self) -> str:
        """The table's Delta id: a table deleted and created again, or replaced, has a new one."""
        ...

    def files(self) -> list[DataFile]: ...

    def txn_version(self, app_id: str) -> int | None: ...


class Lake(Protocol):
    """Delta tables under one root, read and written as Spark DataFrames."""

    root: str

    def exists(self, path: str) -> bool: ...

    def create_table(
        self,
        path: str,
        schema: StructType,
        *,
        partition_by: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
    ) -> Snapshot:
        """Create the table if it does not exist; an existing table must have the same schema.
        Returns the table's latest snapshot, the one its schema was checked on."""

    def replace_table(self, path: str, schema: StructType) -> None:
        """Replace an existing table by an empty one with `schema` (and a new table id), as one
        new version: for a full rebuild whose columns changed. Replaced meanwhile by another
        writer with the same columns, it is left so; another commit first, a
        `ConcurrentWriteError`."""

    def snapshot(self, path: str, version: int | None = None) -> Snapshot: ...

    def read(
        self,
        snapshot: Snapshot,
        *,
        files: Sequence[DataFile] | None = None,
        keys: DataFrame | None = None,
        key_columns: Sequence[str] | None = None,
        all_versions: bool = False,
        file_paths: bool = False,
    ) -> DataFrame:
        """The snapshot's rows (or only those of `files`; only those whose key columns match a
        row of `keys`), read by Spark from the Parquet files. `key_columns`: the columns of
        `keys`, when the caller knows them (else they are looked up: over Spark Connect, a round
        trip); a merge-on-read table matches its merge keys.

        A merge-on-read table (`lakelog.lake.merge_on_read`) gives each key's current row only,
        unless `all_versions`. With `file_paths`, every row (all versions) and the path of its
        file (ending in the `DataFile.path`) in the column `lakelog.lake.merge_on_read.FILE`."""

    def write(
        self,
        snapshot: Snapshot,
        df: DataFrame | None,
        *,
        mode: WriteMode = "append",
        remove: Sequence[DataFile] = (),
        txns: Sequence[AppTxn] = (),
        metadata: CommitMetadata | None = None,
        max_records_per_file: int | None = None,
        rows_hint: int | None = None,
        sort_by: Sequence[str] = (),
    ) -> int:
        """Write `df` as Parquet files and commit them, with `remove`, as one transaction.

        Returns the committed version. `df=None` commits only the removes and app transactions.
        `max_records_per_file` cuts each task's output into files of at most that many rows.
        `rows_hint`, about how many rows `df` has when the caller knows (a microbatch's), lets
        an engine write few rows without a write job of their own. `sort_by`: the files hold
        the rows in this order (ascending) when the engine collects them to write
        them itself; a write by Spark keeps `df`'s order, which the caller chose
        (`lakelog.lake.upsert.write_clustered`).
        """

    def read_arrow(
        self,
        snapshot: Snapshot,
        *,
        files: Sequence[DataFile] | None = None,
        columns: Sequence[str] | None = None,
        where: pads.Expression | None = None,
    ) -> pa.Table:
        """The rows of a table that satisfy `where` (all of them by default: a small table,
        checkpoints, manifests), only `columns`, without Spark; filtered as the files are read,
        so only the rows kept are held. With `files`, only theirs, and a partition column is
        read (from each file's partition values) only when `columns` names it, and only one of
        integers, strings or booleans (`changes.partition_types_held`); `where` may name it
        then."""

    def write_table(
        self,
        snapshot: Snapshot,
        table: pa.Table,
        *,
        remove: Sequence[DataFile] = (),
        txns: Sequence[AppTxn] = (),
        metadata: CommitMetadata | None = None,
        max_records_per_file: int | None = None,
        sort_by: Sequence[str] = (),
    ) -> int:
        """`write` for rows already in this process, in the table's schema: added, and `remove`
        removed, in one commit; files of at most `max_records_per_file` rows in `table`'s
        order, sorted by `sort_by` (ascending) first."""

    def write_rows(
        self,
        snapshot: Snapshot,
        rows: Sequence[Mapping[str, Any]],
        *,
        mode: WriteMode = "append",
        txns: Sequence[AppTxn] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> int:
        """`write` for a small unpartitioned table given as rows in the table's schema."""

    def list_files(self, path: str) -> list[tuple[str, int]]:
        """Non-hidden files below `path` (not a table: the landing zone), with their sizes."""

    def tables(self) -> list[str]:
        """The path of every Delta table under the root."""

    def read_bytes(self, path: str) -> bytes:
        """The content of a file that is not a table (a landing file)."""

    def replace_file(self, path: str, data: bytes) -> None:
        """Write a file that is not a table, atomically (a hidden temporary file, then a move)."""

    def spark_path(self, path: str) -> str:
        """The path Spark uses for `path`."""

    def history(self, path: str, limit: int | None = None) -> list[dict[str, Any]]: ...

    def changes_arrow(
        self, path: str, start_version: int, end_version: int, *, max_rows: int | None = None
    ) -> pa.Table | None:
        """`changes` held here, for a range whose files are few (a microbatch's commits) of a
        copy-on-write table (partitioned by integers, strings or booleans at most), or of a
        merge-on-read table small at both ends (`held_read.holds`), of at most `max_rows` rows
        when given; None otherwise (ask `changes`). The same columns."""

    def changes(self, path: str, start_version: int, end_version: int | None = None) -> DataFrame:
        """The change data feed: rows inserted and deleted by versions ``start..end`` inclusive
        (of a merge-on-read table: the range's net change, `lakelog.lake.changes.net_changes`)."""

    def set_properties(self, path: str, properties: Mapping[str, str]) -> int:
        """Set table properties in a new version (returned). Properties another writer set to
        the same values meanwhile are left as they are (their version is returned); a change
        that loses a race to another metadata change is tried again on the latest version,
        else `ConcurrentWriteError`."""

    def vacuum(self, path: str, *, retention: timedelta) -> list[str]:
        """Delete files no longer referenced by versions younger than `retention` (tried again
        from the latest version when another writer changed the table's metadata meanwhile)."""

    def forget_history(self, path: str, before: int) -> int:
        """Checkpoint version `before` and delete the Delta log before it: no earlier version
        can be loaded again, and the statistics (min and max values) the log kept of files
        removed by then go with it; later versions stay readable, changes and all. Returns the
        commits forgotten."""

    def purge_removed(self, path: str, through: int) -> list[str]:
        """Delete now every file a commit of the table up to version `through` removed (vacuum
        with no retention, but never a file no commit mentions: a concurrent writer's files
        about to be committed are safe), so no version before can be read again. Returns the
        files deleted."""
