"""Dagster's SQLite instance storage, with one SQLAlchemy engine per database file, kept open.

Dagster's SQLite run, event-log and schedule storages build a new SQLAlchemy engine for every
connection and drop it afterwards. An engine holds the compiled-statement cache and the
dialect's first-connect set-up, so every stored event compiled its INSERTs again. These
subclasses keep the engine of each file for the life of the storage; connections are still
opened per use (`NullPool`), so processes share the files exactly as before, and the files are
Dagster's own: an instance written through them reads back with Dagster's classes.

What stayed was SQLite's work per stored event, about 15 ms on a disk whose fsync takes 2 ms:
the files are in WAL mode, and a connection that closes as the file's last one copies the WAL
into the database and deletes it (fsyncs), which with a connection per event was every event;
and every commit synced the WAL. So each event-log file a storage writes gets a keeper: a
connection held open and idle, which no writer waits for (WAL mode lets readers and a writer work
at once), but which makes every other close not the last (the run and schedule files take a few
writes per run or sensor tick, and get none). And connections commit with
``synchronous=NORMAL``, SQLite's setting for WAL mode: the WAL is synced at checkpoints, not at
every commit. A process that is killed loses nothing it committed; a power loss or an
operating-system crash may take back the last commits before a checkpoint (never corrupting the
file), as it may with any WAL database set so.
The UI's live view of a run watches the run's file; it is told of writes to its WAL too
(`_RunWatchdog`). A run of the shop pipeline with nothing to do (~45 steps) took 5.8 s, 7.2 s
with the engines alone and 9.1-9.4 s with Dagster's classes (medians of 3,
`benchmarks/bench_instance_storage.py`, every file kept then).

`SqliteStorage` holds the three in the folders Dagster's default storage uses under a Dagster
home. A `dagster.yaml` names it (deploy/README.md)::

    storage:
      custom:
        module: lakelog.assets.instance_storage
        class: SqliteStorage
        config: {base_dir: {env: DAGSTER_HOME}}

and the instances `lakelog run` and `lakelog demo` open use it unless their `dagster.yaml`
names a storage of its own (`lakelog.assets.runner.open_instance`).
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import sqlalchemy as db
from dagster._core.storage.event_log import SqliteEventLogStorage as _EventLog
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorageWatchdog
from dagster._core.storage.runs import SqliteRunStorage as _Runs
from dagster._core.storage.schedules import SqliteScheduleStorage as _Schedules
from dagster._core.storage.sqlite_storage import (
    DagsterSqliteStorage,
    _event_logs_directory,
    _runs_directory,
    _schedule_directory,
)
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from sqlalchemy.pool import NullPool
from watchdog.events import FileSystemEvent
from watchdog.observers import Observer


#: `base_dir` as a `dagster.yaml` spells "the folder $DAGSTER_HOME names".
FROM_DAGSTER_HOME = {"env": "DAGSTER_HOME"}


def storage_config(base_dir: str | Mapping[str, str]) -> dict[str, Any]:
    """The `storage` entry of a `dagster.yaml` that keeps the instance in `base_dir` (a path, or
    `FROM_DAGSTER_HOME`) through `SqliteStorage`: the files Dagster's default storage keeps
    there."""
    return {"custom": {"module": __name__, "class": "SqliteStorage",
                       "config": {"base_dir": base_dir}}}


#: Event-log shards (one file per run, and the index) whose engines a process keeps.
SHARD_ENGINES = 32
#: How connections to the instance's files sync their commits (see the module docstring).
SYNCHRONOUS = "NORMAL"


def _engine(conn_string: str, **options: Any) -> db.Engine:
    """An engine whose connections commit with `SYNCHRONOUS`."""
    engine = db.create_engine(conn_string, poolclass=NullPool, **options)

    @db.event.listens_for(engine, "connect")
    def _synchronous(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        dbapi_connection.execute(f"PRAGMA synchronous={SYNCHRONOUS}")

    return engine


class _Kept:
    """An engine, and once its file is in WAL mode, the idle connection that keeps the file open
    (`keep`), closed with the engine."""

    def __init__(self, engine: db.Engine) -> None:
        self.engine = engine
        self._keeper: sqlite3.Connection | None = None

    def keep(self) -> None:
        """Hold a connection to the file open from now on. Call it once the file is in WAL
        mode: the keeper's read then holds the WAL's shared lock for as long as it is open.
        Only a saving: a keeper that cannot be opened (a busy file) is done without."""
        if self._keeper is None and self.engine.url.database:
            keeper = sqlite3.connect(self.engine.url.database, check_same_thread=False)
            try:
                keeper.execute("SELECT count(*) FROM sqlite_master").fetchall()
            except sqlite3.Error:
                keeper.close()
                return
            self._keeper = keeper

    @property
    def kept(self) -> bool:
        return self._keeper is not None

    def dispose(self) -> None:
        if self._keeper is not None:
            self._keeper.close()
            self._keeper = None
        self.engine.dispose()


class Engines:
    """SQLAlchemy engines by connection string, the `limit` most recently used, each with its
    keeper once asked to `keep` it."""

    def __init__(self, limit: int, **options: Any) -> None:
        self.limit, self.options = limit, options
        self._engines: OrderedDict[str, _Kept] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, conn_string: str, *, keep: bool = False) -> db.Engine:
        with self._lock:
            kept = self._engines.pop(conn_string, None)
            if kept is None:
                kept = _Kept(_engine(conn_string, **self.options))
            self._engines[conn_string] = kept
            if keep:
                kept.keep()
            while len(self._engines) > self.limit:
                self._engines.popitem(last=False)[1].dispose()
            return kept.engine

    def dispose(self) -> None:
        with self._lock:
            while self._engines:
                self._engines.popitem()[1].dispose()


@contextmanager
def _transaction(engine: db.Engine) -> Iterator[db.Connection]:
    with engine.connect() as conn, conn.begin():
        yield conn


class _OneEngine:
    """Dagster's run or schedule storage (one file), its engine built once. Its file is not
    kept open: it takes a few writes per run or sensor tick, not one per event, and every
    sensor tick builds an instance of its own."""

    def __init__(self, conn_string: str, inst_data=None) -> None:
        super().__init__(conn_string, inst_data)
        self._engine = _engine(conn_string)

    @classmethod
    def from_config_value(cls, inst_data, config_value: Mapping[str, Any]):
        return cls.from_local(inst_data=inst_data, **config_value)

    @contextmanager
    def connect(self) -> Iterator[db.Connection]:
        with _transaction(self._engine) as conn:
            yield conn


class SqliteRunStorage(_OneEngine, _Runs):
    """Dagster's `SqliteRunStorage`, its engine built once."""


class SqliteScheduleStorage(_OneEngine, _Schedules):
    """Dagster's `SqliteScheduleStorage`, its engine built once."""


class SqliteEventLogStorage(_EventLog):
    """Dagster's `SqliteEventLogStorage` (a file per run and an index file), an engine kept per
    file for the `SHARD_ENGINES` files used last."""

    def __init__(self, base_dir: str, inst_data=None) -> None:
        self._engines = Engines(SHARD_ENGINES,
                                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS})
        super().__init__(base_dir, inst_data)

    @classmethod
    def from_config_value(cls, inst_data, config_value: Mapping[str, Any]) -> SqliteEventLogStorage:
        return cls(inst_data=inst_data, **config_value)

    def watch(self, run_id: str, cursor: str | None, callback: Any) -> None:
        """Dagster's `watch` (the UI's live events of a run), its watcher `_RunWatchdog`."""
        if not self._obs:
            self._obs = Observer()
            self._obs.start()
        watchdog = _RunWatchdog(self, run_id, callback, cursor)
        self._watchers[run_id][callback] = (
            watchdog, self._obs.schedule(watchdog, self._base_dir, recursive=True))

    def dispose(self) -> None:
        super().dispose()  # the watchers first: a last callback would open files again
        self._engines.dispose()

    def wipe(self) -> None:
        self._engines.dispose()  # the keepers let go of the files Dagster's wipe deletes,
        super().wipe()
        self._engines.dispose()  # and of any a concurrent write opened meanwhile

    @contextmanager
    def _connect(self, shard: str) -> Iterator[db.Connection]:
        with self._db_lock:
            conn_string = self.conn_string_for_shard(shard)
            initialized = shard in self._initialized_dbs  # in WAL mode: it may be kept
            engine = self._engines.get(conn_string, keep=initialized)
            if not initialized:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
                self._engines.get(conn_string, keep=True)
            with _transaction(engine) as conn:
                yield conn


class _RunWatchdog(SqliteEventLogStorageWatchdog):
    """Dagster's watcher of a run's event file, which takes a write to the file's WAL as a
    change too: a kept file's events land in its WAL, and the file itself changes only when the
    WAL is checkpointed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._patterns = [self._log_path, f"{self._log_path}-wal"]

    def on_modified(self, event: FileSystemEvent) -> None:
        self._process_log()


class SqliteStorage(DagsterSqliteStorage):
    """Dagster's default SQLite storage (`storage: sqlite:`) over the classes above."""

    def __init__(self, base_dir: str, inst_data=None) -> None:
        self.base_dir = base_dir
        self._run_storage = SqliteRunStorage.from_local(_runs_directory(base_dir))
        self._event_log_storage = SqliteEventLogStorage(_event_logs_directory(base_dir))
        self._schedule_storage = SqliteScheduleStorage.from_local(_schedule_directory(base_dir))
        self._inst_data = inst_data
        super(DagsterSqliteStorage, self).__init__()  # what Dagster's __init__ ends with

    @classmethod
    def from_config_value(cls, inst_data, config_value: Mapping[str, Any]) -> SqliteStorage:
        return cls.from_local(inst_data=inst_data, **config_value)
