"""A write's files committed to a Delta table as one transaction, by delta-rs.

The files a write added and removed, its application transactions (the offsets and batch ids
that make it exactly-once) and its commit metadata become one commit relative to the snapshot
the writer read. When another writer committed first, the write fails: its new files are
deleted again (`discard`), so a failed write leaves nothing behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

from lakelog.errors import ConcurrentWriteError
from lakelog.lake.base import AppTxn, DataFile
from lakelog.lake.delta_snapshot import DeltaSnapshot


#: The commit-info field holding a commit's own id (`commit`), by which its version is found.
COMMIT_ID = "lakelog.commit"


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
