"""Dagster's SQLite instance storage, with one SQLAlchemy engine per database file.

Dagster's SQLite run, event-log and schedule storages build a new SQLAlchemy engine for every
connection and drop it afterwards. An engine holds the compiled-statement cache and the
dialect's first-connect set-up, so every stored event compiled its INSERTs again. These
subclasses keep the engine of each file for the life of the storage; connections are still
opened per use (`NullPool`), so processes share the files exactly as before, and the files are
Dagster's own: an instance written through them reads back with Dagster's classes. A run of
the shop pipeline with nothing to do (~45 steps) took 6.8 s instead of 7.5 s (median of 5,
`benchmarks/bench_instance_storage.py`); what stays is mostly SQLite's commit per event.

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

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import sqlalchemy as db
from dagster._core.storage.event_log import SqliteEventLogStorage as _EventLog
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


class Engines:
    """SQLAlchemy engines by connection string, the `limit` most recently used."""

    def __init__(self, limit: int, **options: Any) -> None:
        self.limit, self.options = limit, options
        self._engines: OrderedDict[str, db.Engine] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, conn_string: str) -> db.Engine:
        with self._lock:
            engine = self._engines.pop(conn_string, None)
            if engine is None:
                engine = db.create_engine(conn_string, poolclass=NullPool, **self.options)
            self._engines[conn_string] = engine
            while len(self._engines) > self.limit:
                self._engines.popitem(last=False)[1].dispose()
            return engine


@contextmanager
def _transaction(engine: db.Engine) -> Iterator[db.Connection]:
    with engine.connect() as conn, conn.begin():
        yield conn


class _OneEngine:
    """Dagster's run or schedule storage (one file), its engine built once."""

    def __init__(self, conn_string: str, inst_data=None) -> None:
        super().__init__(conn_string, inst_data)
        self._engine = db.create_engine(conn_string, poolclass=NullPool)

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

    @contextmanager
    def _connect(self, shard: str) -> Iterator[db.Connection]:
        with self._db_lock:
            engine = self._engines.get(self.conn_string_for_shard(shard))
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with _transaction(engine) as conn:
                yield conn


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
