"""The exactly-once capture loop: a source's snapshot, then its changes, into landing files.

One `capture` call lands the snapshot if none is landed yet, then one batch of changes (about
`max_changes`); a caller (a sensor, a schedule, a loop) calls it again to follow the source.
The same loop serves every `Source`. File names are in `lakelog.cdc.change_files`.

Commit order. Each step is durable before the next starts; a crash anywhere is finished by the
next call (`<p>` is a position label):

Snapshot, when there is no capture state:
  1. remove hidden ``.snapshot-*`` folders of earlier attempts (no state names them, so none of
     them was published);
  2. `Source.snapshot`: PostgreSQL drops a stale slot and creates the slot; SQLite opens a read
     transaction. The position is the slot's consistent point / the highest sequence;
  3. write every row into ``landing/cdc.<t>/.snapshot-<p>/`` (hidden) and fsync;
  4. save the state: snapshot position, position, staging folders. This is the commit point;
  5. rename each staging folder to ``snapshot-<p>/``, which the ingester then sees whole;
  6. save the state without staging folders.
  A crash before 4 leaves no state, and the next call starts over at 1: a half-landed snapshot
  never becomes visible (a row deleted between it and the redo would live on downstream for
  ever). A crash between 4 and 6 is finished by the next call from 5.

Streaming, from the state's position `a`:
  7. read the changes after `a`, about `max_changes`, complete up to the commit `e`;
  8. save the state with ``pending = e`` (write-ahead: which batch is being landed);
  9. land ``landing/cdc.<t>/stream-<a>-<e>.ndjson`` for each table with changes, keeping files
     that exist;
  10. `Source.advance` to `e`: PostgreSQL advances the slot, SQLite prunes its change table;
  11. save the state: ``position = e``, nothing pending.
  A crash between 8 and 11 is finished by the next call: it reads exactly ``(a, e]`` again (by
  position, so whether 10 happened does not matter), lands the files not yet landed under the
  same names, advances and saves. Without step 8 a retry could read a longer batch, as new
  commits arrive, and land its first changes a second time under another name.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from lakelog.cdc import change_files, checkpoint
from lakelog.cdc.checkpoint import CaptureState
from lakelog.cdc.source import Source
from lakelog.cdc.values import iso_utc
from lakelog.errors import ConfigError

SNAPSHOT_LINES_PER_FILE = 100_000


@dataclass(frozen=True)
class CaptureResult:
    """What one `capture` call landed, for asset metadata and for a caller's catch-up loop."""

    server_name: str
    snapshot_taken: bool
    position_before: int | None  # None: there was no landed snapshot
    position_after: int
    counts: Mapping[str, Mapping[str, int]]  # table -> op -> events landed by this call
    files: tuple[str, ...]  # landing files this call made visible, relative to the root

    @property
    def changes(self) -> int:
        """Streamed change events landed (snapshot rows not included)."""
        return sum(n for ops in self.counts.values() for op, n in ops.items() if op != "r")

    @property
    def snapshot_rows(self) -> int:
        return sum(ops.get("r", 0) for ops in self.counts.values())


def capture(
    source: Source,
    root: str | os.PathLike[str],
    *,
    now: datetime,
    max_changes: int = 10_000,
    snapshot_lines_per_file: int = SNAPSHOT_LINES_PER_FILE,
) -> CaptureResult:
    """Land the snapshot if it is not landed yet, then one batch of changes."""
    if max_changes < 1 or snapshot_lines_per_file < 1:
        raise ConfigError("capture: max_changes and snapshot_lines_per_file must be >= 1")
    root = os.fspath(root)
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    files: list[str] = []
    with checkpoint.locked(root, source.server_name):
        current = checkpoint.load(root, source.server_name, source.connector)
        names = tuple(t.name for t in source.tables)
        if current is not None and sorted(current.tables) != sorted(names):
            raise ConfigError(
                f"capture {source.server_name}: the captured tables changed from "
                f"{list(current.tables)} to {list(names)}; remove "
                f"{checkpoint.checkpoint_path(root, source.server_name)} to land a new snapshot"
            )
        before = current.position if current is not None else None
        if current is None:
            current = _snapshot(source, root, now, snapshot_lines_per_file, counts)
        if current.staging:
            current = _publish(root, current, now, files)
        current = _stream(source, root, current, now, max_changes, counts, files)
    return CaptureResult(
        source.server_name, before is None, before, current.position,
        {table: dict(ops) for table, ops in counts.items()}, tuple(files),
    )


def _snapshot(
    source: Source, root: str, now: datetime, lines_per_file: int, counts: dict[str, Counter[str]]
) -> CaptureState:
    change_files.discard_staging(root, source.tables)  # 1
    snapshot = source.snapshot(now=now)  # 2
    with closing(snapshot.events) as events:  # 3
        rows, staging = change_files.write_snapshot(
            root, source.tables, source.label(snapshot.position), events,
            lines_per_file=lines_per_file,
        )
    current = CaptureState(
        source.server_name, source.connector, tuple(t.name for t in source.tables),
        snapshot.position, snapshot.position, staging, None, iso_utc(now),
    )
    checkpoint.save(root, current)  # 4
    for table, n in rows.items():
        counts[table]["r"] += n
    return current


def _publish(root: str, current: CaptureState, now: datetime, files: list[str]) -> CaptureState:
    for folder in current.staging:
        files.extend(change_files.publish(root, folder))  # 5
    current = replace(current, staging=(), updated_at=iso_utc(now))
    checkpoint.save(root, current)  # 6
    return current


def _stream(
    source: Source, root: str, current: CaptureState, now: datetime, max_changes: int,
    counts: dict[str, Counter[str]], files: list[str],
) -> CaptureState:
    after = current.position
    if current.pending is None:
        batch = source.changes(after, max_changes, now=now)  # 7
        if batch.end <= after:
            return current
        end = batch.end
        current = replace(current, pending=end, updated_at=iso_utc(now))
        checkpoint.save(root, current)  # 8
    else:
        end = current.pending
        batch = source.changes(after, None, upto=end, now=now)  # 7, again
    by_table: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in batch.events:
        by_table[item["source"]["table"]].append(item)
    first, last = source.label(after), source.label(end)
    for table in source.tables:
        events = by_table.get(table.name)
        if events and change_files.land(root, change_files.stream_file(table, first, last), events):  # 9
            files.append(change_files.stream_file(table, first, last))
            counts[table.name].update(e["op"] for e in events)
    source.advance(end)  # 10
    current = replace(current, position=end, pending=None, updated_at=iso_utc(now))
    checkpoint.save(root, current)  # 11
    return current


def capture_until_caught_up(
    source: Source,
    root: str | os.PathLike[str],
    *,
    now: datetime,
    max_changes: int = 10_000,
    max_batches: int | None = None,
) -> list[CaptureResult]:
    """`capture` again and again until a call lands nothing new (or `max_batches` calls)."""
    results: list[CaptureResult] = []
    while max_batches is None or len(results) < max_batches:
        result = capture(source, root, now=now, max_changes=max_changes)
        results.append(result)
        if not result.files and result.position_after == result.position_before:
            break
    return results
