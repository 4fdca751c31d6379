"""Changelog files in the landing zone, named by position so that a retry rewrites nothing.

Per table, under ``landing/cdc.<table>/`` (names sort in position order; `label` is the
source's fixed-width position text):

- ``snapshot-<position>/part-00000.ndjson``, ... — the snapshot, written into the hidden folder
  ``.snapshot-<position>/`` first and published by renaming the whole folder;
- ``stream-<after>-<end>.ndjson`` — the changes of one capture batch, positions ``(after, end]``.

The ingester skips hidden names (``.x``, ``_x``), so a file or folder becomes visible only
complete: files are written as hidden temporaries, fsynced and renamed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from typing import IO, Any

from lakelog.cdc.checkpoint import fsync_dir, write_atomic
from lakelog.cdc.envelope import dumps
from lakelog.cdc.source_tables import SourceTable

SNAPSHOT_PREFIX = "snapshot-"


def topic_folder(table: SourceTable) -> str:
    """The table's landing folder, relative to the lake root."""
    return f"landing/{table.topic}"


def stream_file(table: SourceTable, first: str, last: str) -> str:
    return f"{topic_folder(table)}/stream-{first}-{last}.ndjson"


def discard_staging(root: str, tables: Iterable[SourceTable]) -> list[str]:
    """Remove hidden snapshot folders of attempts that never reached the capture state."""
    removed = []
    for table in tables:
        folder = os.path.join(root, topic_folder(table))
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if name.startswith("." + SNAPSHOT_PREFIX):
                shutil.rmtree(os.path.join(folder, name))
                removed.append(f"{topic_folder(table)}/{name}")
    return removed


def write_snapshot(
    root: str, tables: Iterable[SourceTable], label: str, events: Iterable[dict[str, Any]],
    *, lines_per_file: int,
) -> tuple[dict[str, int], tuple[str, ...]]:
    """Write snapshot events into hidden staging folders; (rows per table, the folders)."""
    by_name = {t.name: t for t in tables}
    counts: dict[str, int] = {}
    files: dict[str, IO[str]] = {}
    folders: dict[str, str] = {}
    try:
        for item in events:
            name = item["source"]["table"]
            n = counts.get(name, 0)
            if n % lines_per_file == 0:
                if name in files:
                    _finish(files.pop(name))
                else:
                    folders[name] = f"{topic_folder(by_name[name])}/.{SNAPSHOT_PREFIX}{label}"
                    os.makedirs(os.path.join(root, folders[name]), exist_ok=True)
                part = os.path.join(root, folders[name], f"part-{n // lines_per_file:05d}.ndjson")
                files[name] = open(part, "w", encoding="utf-8", newline="\n")
            files[name].write(dumps(item))
            files[name].write("\n")
            counts[name] = n + 1
        for name in list(files):
            _finish(files.pop(name))
    finally:
        for f in files.values():
            f.close()
    for folder in folders.values():
        fsync_dir(os.path.join(root, folder))
    return counts, tuple(folders[t] for t in by_name if t in folders)


def _finish(f: IO[str]) -> None:
    f.flush()
    os.fsync(f.fileno())
    f.close()


def visible(staging: str) -> str:
    """``landing/t/.snapshot-x`` → ``landing/t/snapshot-x``."""
    folder, name = staging.rsplit("/", 1)
    return f"{folder}/{name.lstrip('.')}"


def publish(root: str, staging: str) -> list[str]:
    """Rename a staging folder to visible; the part files it made visible (none if done before)."""
    source, target = os.path.join(root, staging), os.path.join(root, visible(staging))
    if not os.path.isdir(source):
        if os.path.isdir(target):
            return []  # published before a crash
        raise FileNotFoundError(f"snapshot folder {staging} vanished before it was published")
    if os.path.isdir(target):  # the same position published before: the same rows
        shutil.rmtree(source)
        return []
    os.rename(source, target)
    fsync_dir(os.path.dirname(target))
    return [f"{visible(staging)}/{name}" for name in sorted(os.listdir(target))]


def land(root: str, path: str, events: list[dict[str, Any]]) -> bool:
    """Write `events` as the NDJSON file `path` (relative to root) unless it exists; written?"""
    full = os.path.join(root, path)
    if os.path.exists(full):
        return False
    write_atomic(full, "".join(dumps(e) + "\n" for e in events))
    return True
