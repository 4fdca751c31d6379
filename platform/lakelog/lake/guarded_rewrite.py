"""Replacing a small bookkeeping table whole, one writer per version.

Checkpoints, landing manifests and consumer-group membership are small Delta tables rewritten
whole by every commit. Each commit carries an application transaction named by the table's
owner and versioned by the table version it read, so of two writers that read the same version,
exactly one commits and the other fails with `ConcurrentWriteError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import types as T

from lakelog.lake.base import AppTxn, Lake, Snapshot


def guarded_rewrite(
    lake: Lake,
    path: str,
    schema: T.StructType,
    snapshot: Snapshot | None,
    rows: Sequence[Mapping[str, Any]],
    *,
    guard: str,
    metadata: Mapping[str, Any] | None = None,
) -> int:
    """Replace the small table at `path` by `rows`, relative to `snapshot` (None: the table does
    not exist yet, and is created): the commit carries the application transaction `guard`, so
    of two writers from one snapshot one fails (`ConcurrentWriteError`). The new version."""
    if snapshot is None:  # first commit: relative to the empty table, so a racing first wins
        lake.create_table(path, schema)
        snapshot = lake.snapshot(path, version=0)
    return lake.write_rows(snapshot, rows, mode="overwrite",
                           txns=[AppTxn(guard, snapshot.version + 1)], metadata=metadata)
