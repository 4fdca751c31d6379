"""Delta tables delta-rs has loaded, handed out again while their log shows them unchanged.

Loading a table replays its log (the last checkpoint and the commits since), 5-17 ms on 2 cores,
and a pipeline step loads the same few tables many times: the 100,000-event demo loaded 1,346
latest and 181 past versions. A table loaded at version v is still the latest while its log
holds no commit v + 1, and is still the same table while commit v's file holds the same bytes:
a commit's file names the data files it adds (by UUID), lakelog's commit id or a new table's id,
and its time in milliseconds, so a table deleted and created again at the same path fails it; and
while the log's last checkpoint is the same one. The check is a file's absence and two small
reads, some microseconds.

Holders share a loaded table: delta-rs leaves a `DeltaTable` at its version when it is read or
committed through (a commit makes a new version in the log, not in the object). Operations that
move the object itself (setting properties, vacuum) load their own. Only tables on the local
filesystem are kept; others are loaded each time. A kept table lives until the process exits, so
the lake reads a whole table's files through pyarrow's own filesystem (`EmbeddedLake.read_arrow`):
delta-rs's dataset reads through a Python file object, and one let go on an Arrow thread while
the interpreter exits aborts the process (an earlier try at keeping loads was reverted for that
abort; benchmarks/README.md, twentieth and twenty-ninth sessions).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable

from deltalake import DeltaTable

#: How many loaded versions are kept, the least recently used dropped first: every table of the
#: demo's pipeline (82) at its latest version and one other (a loaded table takes 0.1-1 MB).
SIZE = 256


class LoadedTables:
    """Loaded tables by log folder and version, each reused while its log shows it current."""

    def __init__(self, size: int = SIZE) -> None:
        self._size = size
        self.clear()

    def clear(self) -> None:
        """Keep nothing (a forked child: the tables its parent loaded are the parent's)."""
        self._kept: OrderedDict[tuple[str, int | None], tuple[DeltaTable, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def holds(self, log_dir: str) -> bool:
        """Whether a table whose log is `log_dir` is kept and its commit's file still there:
        then the folder holds a Delta table (a stat, where delta-rs lists the log)."""
        with self._lock:
            kept = self._kept.get((log_dir, None))
        return kept is not None and _exists(log_dir, kept[0].version())

    def get(self, log_dir: str, version: int | None, load: Callable[[], DeltaTable]) -> DeltaTable:
        """The table whose log is the local folder `log_dir`, at `version` (None: the latest);
        `load` loads it when no kept one is current."""
        with self._lock:
            kept = self._kept.get((log_dir, version))
        if kept is not None:
            table, fingerprint = kept
            at = table.version()
            if (version is not None or not _exists(log_dir, at + 1)) and \
                    _fingerprint(log_dir, at) == fingerprint:
                with self._lock:
                    if (log_dir, version) in self._kept:
                        self._kept.move_to_end((log_dir, version))
                return table
        table = load()
        fingerprint = _fingerprint(log_dir, table.version())
        if fingerprint is not None:  # else its commit's file is gone (log clean-up): not kept
            with self._lock:
                for key in ((log_dir, version), (log_dir, table.version())):
                    self._kept[key] = (table, fingerprint)
                    self._kept.move_to_end(key)
                while len(self._kept) > self._size:
                    self._kept.popitem(last=False)
        return table


#: The process's loaded tables, shared by its lakes (a Dagster step opens a lake of its own).
LOADED = LoadedTables()
os.register_at_fork(after_in_child=LOADED.clear)


def _commit_file(log_dir: str, version: int) -> str:
    return os.path.join(log_dir, f"{version:020d}.json")


def _exists(log_dir: str, version: int) -> bool:
    return os.path.exists(_commit_file(log_dir, version))


def _fingerprint(log_dir: str, version: int) -> bytes | None:
    """Commit `version`'s file and the log's last checkpoint pointer, hashed; None without the
    commit's file. A new checkpoint may come with the log before it removed (clean-up,
    `forget_history`), and delta-rs reads a loaded version's transactions from that log lazily."""
    try:
        with open(_commit_file(log_dir, version), "rb") as f:
            digest = hashlib.blake2b(f.read(), digest_size=16)
    except FileNotFoundError:
        return None
    try:
        with open(os.path.join(log_dir, "_last_checkpoint"), "rb") as f:
            digest.update(f.read())
    except FileNotFoundError:
        pass
    return digest.digest()
