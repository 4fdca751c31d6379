"""A write's files committed to a Delta table as one transaction, by delta-rs.

The files a write added and removed, its application transactions (the offsets and batch ids
that make it exactly-once) and its commit metadata become one commit relative to the snapshot
the writer read. When another writer committed first, the write fails: its new files are
deleted again (`discard`), so a failed write leaves nothing behind. A commit's version is found
again by its id in the log's commit files (`version_of`); a change of the table's metadata that
loses to another writer's is tried again (`retried`), and so is a `vacuum`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow.fs as pafs

from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

from lakelog.errors import ChangesUnavailableError, ConcurrentWriteError
from lakelog.lake import data_files
from lakelog.lake.base import AppTxn, DataFile
from lakelog.lake.changes import log_actions
from lakelog.lake.delta_snapshot import DeltaSnapshot


#: The commit-info field holding a commit's own id (`commit`), by which its version is found.
COMMIT_ID = "lakelog.commit"

#: How often a property change or a vacuum whose commit lost a race to another writer's
#: metadata change is tried again from the latest version (delta-rs rebases those commits over
#: data commits, not over a metadata change).
METADATA_RETRIES = 5

T = TypeVar("T")


def commit(
    snapshot: DeltaSnapshot,
    adds: list[AddAction],
    removed: Sequence[DataFile],
    txns: Sequence[AppTxn],
    metadata: Mapping[str, Any] | None,
    *,
    commit_id: str,
    discard: Callable[[list[str]], None],
) -> None:
    """Commit `adds` and the removal of `removed` on `snapshot`'s table, with `txns` and
    `metadata` (and `commit_id` as `COMMIT_ID`); on a conflict, `discard` the added files' paths
    and raise `ConcurrentWriteError`."""
    now_ms = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = list(adds)
    actions += [
        RemoveAction(f.path, True, now_ms, f.size, _partition_strings(f.partition_values))
        for f in removed
    ]
    properties = CommitProperties(
        custom_metadata={**(metadata or {}), COMMIT_ID: commit_id},
        app_transactions=[Transaction(t.app_id, t.version) for t in txns] or None,
        max_commit_retries=5,
    )
    try:
        snapshot.table.create_write_transaction(
            actions,
            "append",
            snapshot.table.schema(),
            partition_by=snapshot.partition_columns or None,
            commit_properties=properties,
        )
    except CommitFailedError as exc:
        discard([a.path for a in adds])
        raise ConcurrentWriteError(
            f"another writer committed to {snapshot.path} first ({exc}); nothing was written"
        ) from exc


def _partition_strings(values: Mapping[str, Any]) -> dict[str, str | None]:
    return {k: None if v is None else str(v) for k, v in values.items()}


def log_holds(fs: pafs.FileSystem, table_fs_path: str, version: int) -> bool:
    """Whether the table's log still holds `version`'s commit (an erasure's `forget_history`
    deletes those before a version)."""
    found = fs.get_file_info(f"{table_fs_path}/_delta_log/{version:020d}.json")
    return found.type != pafs.FileType.NotFound


def version_of(
    fs: pafs.FileSystem, table_fs_path: str, commit_id: str, versions: Iterable[int]
) -> int | None:
    """The first of `versions` whose commit carries `commit_id` (`COMMIT_ID`); None when the
    log holds none of them before one it does not hold."""
    for version in versions:
        try:
            actions = list(log_actions(fs, table_fs_path, version))
        except ChangesUnavailableError:
            return None
        if any(a.get("commitInfo", {}).get(COMMIT_ID) == commit_id for a in actions):
            return version
    return None


def retried(path: str, attempt: Callable[[], T], doing: str) -> T:
    """`attempt()`, again from the start while its commit loses to another writer's change of
    the table's metadata, up to `METADATA_RETRIES` times; then `ConcurrentWriteError`, saying
    what it was `doing`."""
    for _ in range(METADATA_RETRIES):
        try:
            return attempt()
        except CommitFailedError:
            continue
    raise ConcurrentWriteError(
        f"{path}: other writers changed the table's metadata {METADATA_RETRIES} times while "
        f"{doing}")


def vacuum(path: str, load: Callable[[], DeltaTable], fs: pafs.FileSystem, table_fs_path: str,
           *, retention_hours: int) -> list[str]:
    """Delete the files the table at `path` (`load` reads its latest version; `table_fs_path`
    on `fs`) no longer refers to and removed over `retention_hours` ago; the files deleted,
    relative to the table.

    delta-rs commits a vacuum's start and its end, and either may lose to another writer's
    metadata change (an erasure keeping a log's heads): it is `retried`. One that lost its end
    commit had deleted its files already, which its retry reports by their full path or, where
    it lists the table's folder, not at all: the files the first attempt planned that are gone
    count as deleted, each once, relative to the table."""
    planned: list[str] = []

    def attempt() -> list[str]:
        table = load()
        if not planned:
            planned.extend(table.vacuum(retention_hours=retention_hours, dry_run=True,
                                        enforce_retention_duration=False))
        return table.vacuum(retention_hours=retention_hours, dry_run=False,
                            enforce_retention_duration=False)

    done = retried(path, attempt, "it was being vacuumed")
    deleted = list(dict.fromkeys(relative_to_table(f, table_fs_path) for f in done))
    known = set(deleted)
    rest = [f for f in dict.fromkeys(relative_to_table(f, table_fs_path) for f in planned)
            if f not in known]
    return deleted + [rest[i] for i in data_files.missing(fs, table_fs_path, rest)]


def relative_to_table(path: str, table_fs_path: str) -> str:
    """A file of a table as delta-rs reports it (relative to the table, or a full path or URI,
    as a vacuum's retry reports files it found gone), relative to the table."""
    bare = path.split("://", 1)[-1]
    root = table_fs_path.rstrip("/") + "/"
    for prefix in (root, root.lstrip("/")):
        if bare.startswith(prefix):
            return bare[len(prefix):]
    return path
