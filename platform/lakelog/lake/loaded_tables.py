"""Delta table versions loaded once: a snapshot of a version loaded before is that load again.

Loading a table with delta-rs reads its last checkpoint and the commits after it, 4-7 ms a load
on a local disk. A microbatch takes some 20 snapshots, most of them of versions its step loaded
already (1,029 of the 1,615 loads of a 100,000-event demo were of a table's version loaded just
before, many by an earlier step). A loaded `DeltaTable` never changes (a commit through it
leaves it at its version), so a version's load can be shared, by every lake of the process.

On a local lake the latest version is found without delta-rs: by the log's commit files, from
the last checkpoint on, one `stat` each (a checkpoint every 10 commits keeps it to a few). A
version's load is reused only while its commit file is the very file it was loaded with (the
same inode, modification time and size), so a table deleted and created again at the same path
is loaded anew; and only while the log's last checkpoint is the one it was loaded after, since
a load reads some of the log only when asked (the application transactions), and the log files
before a new checkpoint may be gone (`Lake.forget_history`, delta-rs's log clean-up). Anything unexpected in the log (no commit file where one should be, no readable
``_last_checkpoint``) leaves the load to delta-rs, as an object store's lake always does.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable

from deltalake import DeltaTable

#: How many tables the process keeps loads of, and how many versions of each (the least
#: recently used going): a table's latest versions are what the next steps ask for.
TABLES = 512
VERSIONS = 3

#: What a version's load is kept by: the log's last checkpoint when it was loaded (a load reads
#: it and the commits after it, some of them only when asked; a new checkpoint may come with the
#: older log files deleted), and the version's commit file (inode, modification time, size).
Stamp = tuple[int, int, int, int]


def _commit_file(log: str, version: int) -> str:
    return os.path.join(log, f"{version:020d}.json")


def _checkpointed(log: str) -> int | None:
    """The version of the last checkpoint ``_last_checkpoint`` names (0 without one), None if it
    cannot be read."""
    try:
        with open(os.path.join(log, "_last_checkpoint"), encoding="utf-8") as f:
            return int(json.load(f)["version"])
    except FileNotFoundError:
        return 0
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _stamp(log: str, version: int, checkpoint: int) -> Stamp | None:
    try:
        st = os.stat(_commit_file(log, version))
    except FileNotFoundError:
        return None
    return checkpoint, st.st_ino, st.st_mtime_ns, st.st_size


def stamp(log: str, version: int) -> Stamp | None:
    """The stamp of `version` of the table whose ``_delta_log`` folder is `log`; None when the
    log is not as expected (delta-rs is left to load it)."""
    checkpoint = _checkpointed(log)
    return None if checkpoint is None else _stamp(log, version, checkpoint)


def latest(log: str) -> tuple[int, Stamp] | None:
    """The latest version of the table whose ``_delta_log`` folder is `log`, and its stamp; None
    when the log is not as expected."""
    checkpoint = _checkpointed(log)
    if checkpoint is None:
        return None
    version, found = checkpoint, _stamp(log, checkpoint, checkpoint)
    if found is None:
        return None  # trimmed commits, or no table here
    while (following := _stamp(log, version + 1, checkpoint)) is not None:
        version, found = version + 1, following
    return version, found


class LoadedTables:
    """The versions of local tables loaded lately, by table folder and version: one for the
    whole process (`SHARED`), so a step's snapshots share the loads of the steps before it."""

    def __init__(self) -> None:
        self._tables: OrderedDict[str, OrderedDict[int, tuple[Stamp, DeltaTable]]] = OrderedDict()
        self._lock = threading.Lock()

    def table(
        self, folder: str, version: int | None, load: Callable[[int | None], DeltaTable],
    ) -> DeltaTable:
        """The table in `folder` at `version` (None: the latest): a load kept, else `load`'s."""
        log = os.path.join(folder, "_delta_log")
        if version is None:
            found = latest(log)
            if found is None:
                return load(None)
            version, now = found
        elif (now := stamp(log, version)) is None:
            return load(version)
        with self._lock:
            held = self._tables.get(folder, {}).get(version)
            if held is not None and held[0] == now:
                self._keep(folder, version, held)
                return held[1]
        table = load(version)
        with self._lock:
            self._keep(folder, version, (now, table))
        return table

    def kept(self, folder: str) -> list[int]:
        """The versions of the table in `folder` kept, the most recently used last."""
        with self._lock:
            return list(self._tables.get(folder, ()))

    def _keep(self, folder: str, version: int, entry: tuple[Stamp, DeltaTable]) -> None:
        versions = self._tables.setdefault(folder, OrderedDict())
        self._tables.move_to_end(folder)
        versions[version] = entry
        versions.move_to_end(version)
        while len(versions) > VERSIONS:
            versions.popitem(last=False)
        while len(self._tables) > TABLES:
            self._tables.popitem(last=False)


SHARED = LoadedTables()
