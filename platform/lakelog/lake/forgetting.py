"""Forgetting a table's past, for an erasure (`lakelog.erasure`): the data files earlier
versions removed, and the Delta log before a version.

Both work on the table's files directly: the removed files are found in the log's remove
actions (a version whose commit log retention already cleaned up has none left to name), and
the log before a version goes once a checkpoint at that version stands in for it.
"""

from __future__ import annotations

from collections.abc import Set
from urllib.parse import unquote

import pyarrow.fs as pafs

from lakelog.errors import ChangesUnavailableError
from lakelog.lake.changes import log_actions


def removed_files(fs: pafs.FileSystem, table_fs_path: str, kept: Set[str],
                  through: int) -> list[str]:
    """Data files (paths within the table, as on disk) that versions ``0..through`` removed,
    that are not in `kept` (the current version's) and that storage still holds."""
    removed: set[str] = set()
    for version in range(through + 1):
        try:
            actions = list(log_actions(fs, table_fs_path, version))
        except ChangesUnavailableError:  # cleaned up by log retention
            continue
        # The log percent-encodes the paths.
        removed.update(unquote(a["remove"]["path"]) for a in actions if "remove" in a)
    return [p for p in sorted(removed - kept)
            if fs.get_file_info(f"{table_fs_path}/{p}").type != pafs.FileType.NotFound]


def forget_log(fs: pafs.FileSystem, log_fs_path: str, before: int) -> int:
    """Delete the log's files of versions before `before` (a checkpoint at `before` must stand);
    how many commits were forgotten."""
    forgotten = 0
    for info in fs.get_file_info(pafs.FileSelector(log_fs_path)):
        name = info.base_name
        number = name.split(".", 1)[0]
        if number.isdigit() and int(number) < before and info.type == pafs.FileType.File:
            fs.delete_file(info.path)
            forgotten += name.endswith(".json")
    return forgotten
