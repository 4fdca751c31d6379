"""lakelog's SQLite instance storage: Dagster's files, one SQLAlchemy engine per file."""

from __future__ import annotations

import importlib
import shutil
import sqlite3
import time
from pathlib import Path

import dagster as dg
import yaml
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.sqlite_storage import DagsterSqliteStorage

from lakelog.assets.instance_storage import Engines, SqliteStorage, storage_config
from lakelog.assets.runner import open_instance


@dg.asset
def numbers() -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"rows": 3})


def materialize(instance: dg.DagsterInstance) -> str:
    result = dg.materialize([numbers], instance=instance)
    assert result.success
    return result.run_id


def storage_class(instance: dg.DagsterInstance) -> type:
    data = instance.get_ref().storage_data
    return getattr(importlib.import_module(data.module_name), data.class_name)


def home_with(path: Path, config: dict) -> str:
    path.mkdir(parents=True)
    (path / "dagster.yaml").write_text(yaml.safe_dump(config))
    return str(path)


def test_dagsters_own_classes_read_what_it_stored_and_the_other_way(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))  # the env form of the README
    home = home_with(tmp_path / "home", {"storage": storage_config({"env": "DAGSTER_HOME"})})
    ours = dg.DagsterInstance.from_config(home)
    assert storage_class(ours) is SqliteStorage
    first = materialize(ours)

    shutil.copytree(home, tmp_path / "plain")
    (tmp_path / "plain" / "dagster.yaml").write_text("{}\n")  # Dagster's default storage
    theirs = dg.DagsterInstance.from_config(str(tmp_path / "plain"))
    assert theirs.get_run_by_id(first).status == dg.DagsterRunStatus.SUCCESS
    second = materialize(theirs)

    assert storage_class(theirs) is DagsterSqliteStorage
    ours = dg.DagsterInstance.from_ref(InstanceRef.from_dir(
        str(tmp_path / "plain"), overrides={"storage": storage_config(str(tmp_path / "plain"))}))
    event = ours.get_latest_materialization_event(numbers.key)
    assert event.run_id == second and event.asset_materialization.metadata["rows"].value == 3
    back = dg.DagsterInstance.from_config(home)
    assert {r.run_id for r in back.get_runs()} == {first}


def test_an_engine_is_built_once_per_file_and_the_least_used_let_go():
    engines = Engines(2)
    a = engines.get("sqlite:///a.db")
    assert engines.get("sqlite:///a.db") is a
    b = engines.get("sqlite:///b.db")
    engines.get("sqlite:///a.db")  # a used last: b goes first
    engines.get("sqlite:///c.db")
    assert engines.get("sqlite:///a.db") is a and engines.get("sqlite:///b.db") is not b


def test_the_runner_stores_through_it_unless_the_yaml_names_a_storage(tmp_path):
    lake = tmp_path / "lake"
    instance, where = open_instance(str(lake), {})
    assert storage_class(instance) is SqliteStorage
    run = materialize(instance)
    assert (lake / "dagster" / "history" / "runs" / f"{run}.db").exists()
    # Its dagster.yaml names the storage by $DAGSTER_HOME, which `dagster dev` sets:
    config = yaml.safe_load((lake / "dagster" / "dagster.yaml").read_text())
    assert config["storage"] == storage_config({"env": "DAGSTER_HOME"})

    # A copied lake keeps its runs in its own folder, not in the original's.
    shutil.copytree(lake, tmp_path / "copy")
    copy, _ = open_instance(str(tmp_path / "copy"), {})
    materialize(copy)
    assert [r.run_id for r in open_instance(str(lake), {})[0].get_runs()] == [run]
    assert len(copy.get_runs()) == 2

    own = home_with(tmp_path / "own", {"storage": {"sqlite": {"base_dir": str(tmp_path / "x")}}})
    chosen, _ = open_instance(str(lake), {"DAGSTER_HOME": own})
    assert storage_class(chosen) is DagsterSqliteStorage
    # A home whose dagster.yaml names no storage (as lakelog wrote them before) gets it.
    legacy = home_with(tmp_path / "legacy", {"telemetry": {"enabled": False}})
    assert storage_class(open_instance(str(lake), {"DAGSTER_HOME": legacy})[0]) is SqliteStorage


def test_a_kept_file_commits_into_its_wal_and_a_watch_of_the_run_sees_new_events(tmp_path):
    home = home_with(tmp_path / "home", {"storage": storage_config(str(tmp_path / "home"))})
    ours = dg.DagsterInstance.from_config(home)
    run = materialize(ours)
    shard = tmp_path / "home" / "history" / "runs" / f"{run}.db"
    # The storage keeps the file open: a connection's close leaves the WAL, not folded back.
    assert Path(f"{shard}-wal").stat().st_size > 0

    seen: list[str] = []
    watcher = dg.DagsterInstance.from_config(home)  # as the UI's process watches a run
    def note(entry, _cursor):
        seen.append(entry.dagster_event.message if entry.dagster_event else entry.user_message)

    watcher.watch_event_logs(run, None, note)
    try:
        writer = dg.DagsterInstance.from_config(home)  # another process adds to the run
        writer.report_engine_event("a late note", writer.get_run_by_id(run))
        deadline = time.monotonic() + 20
        while "a late note" not in seen and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "a late note" in seen
    finally:
        watcher.end_watch_event_logs(run, note)
        watcher.dispose()


def test_a_kept_file_stays_kept_after_its_engine_was_let_go_and_commits_normal(tmp_path):
    engines = Engines(1)
    paths = [tmp_path / "a.db", tmp_path / "b.db"]
    for path in paths:
        sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").fetchall()
    a = f"sqlite:///{paths[0]}"
    with engines.get(a, keep=True).connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    kept = engines._engines[a]
    assert kept.kept
    engines.get(f"sqlite:///{paths[1]}", keep=True)  # a is let go, its keeper closed
    assert not kept.kept
    engines.get(a, keep=True)
    assert engines._engines[a].kept
    engines.dispose()
    assert not engines._engines

