"""Loaded Delta tables are handed out again only while their log shows them current."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pyarrow.dataset as pads
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import types as T

from lakelog.lake import EmbeddedLake
from lakelog.lake.loaded_tables import LoadedTables

T_SCHEMA = T.StructType([T.StructField("id", T.LongType())])


class Loads:
    """A table's loads, counted."""

    def __init__(self, path: str) -> None:
        self.path, self.count = path, 0

    def __call__(self, version: int | None = None):
        def load() -> DeltaTable:
            self.count += 1
            return DeltaTable(self.path, version=version)
        return load


def rows(table: DeltaTable) -> list[int]:
    return sorted(table.to_pyarrow_table().column("a").to_pylist())


def test_a_table_is_loaded_again_only_after_a_commit(tmp_path):
    path, kept = str(tmp_path / "t"), LoadedTables()
    log, loads = f"{path}/_delta_log", Loads(path)
    write_deltalake(path, pa.table({"a": [1]}))
    first = kept.get(log, None, loads())
    assert kept.get(log, None, loads()) is first and loads.count == 1
    write_deltalake(path, pa.table({"a": [2]}), mode="append")
    second = kept.get(log, None, loads())
    assert loads.count == 2 and second.version() == 1 and rows(second) == [1, 2]
    assert first.version() == 0 and rows(first) == [1]  # a holder's table stays as it was
    # A latest load also stands for its version, then and later.
    assert kept.get(log, 1, loads(1)) is second and kept.get(log, 0, loads(0)) is first
    assert loads.count == 2
    past, again = LoadedTables(), Loads(path)  # a past version loaded as such is kept too
    assert past.get(log, 0, again(0)) is past.get(log, 0, again(0)) and again.count == 1


def test_a_table_made_again_at_the_same_path_and_version_is_loaded_again(tmp_path):
    path, kept = str(tmp_path / "t"), LoadedTables()
    log, loads = f"{path}/_delta_log", Loads(path)
    write_deltalake(path, pa.table({"a": [1]}))
    kept.get(log, None, loads())
    assert kept.holds(log)
    shutil.rmtree(path)
    assert not kept.holds(log)
    write_deltalake(path, pa.table({"a": [7]}))  # version 0 again, another table
    assert rows(kept.get(log, None, loads())) == [7]
    assert rows(kept.get(log, 0, loads(0))) == [7]
    assert loads.count == 2  # each latest load also stood for version 0


def test_a_version_whose_commit_file_is_gone_is_not_kept(tmp_path):
    path, kept = str(tmp_path / "t"), LoadedTables()
    log, loads = f"{path}/_delta_log", Loads(path)
    for value in range(3):
        write_deltalake(path, pa.table({"a": [value]}), mode="append")
    DeltaTable(path).create_checkpoint()
    (tmp_path / "t" / "_delta_log" / f"{2:020d}.json").unlink()  # the latest commit's file
    assert rows(kept.get(log, None, loads())) == [0, 1, 2]  # from the checkpoint
    kept.get(log, None, loads())
    assert loads.count == 2


def test_a_new_checkpoint_has_a_table_loaded_again(tmp_path):
    """A checkpoint may come with the log before it removed (`forget_history`), which a kept
    load reads its transactions from lazily."""
    path, kept = str(tmp_path / "t"), LoadedTables()
    log, loads = f"{path}/_delta_log", Loads(path)
    for value in range(3):
        write_deltalake(path, pa.table({"a": [value]}), mode="append")
    kept.get(log, None, loads())
    kept.get(log, 1, loads(1))
    DeltaTable(path, version=1).create_checkpoint()
    for version in (0, 1):
        (tmp_path / "t" / "_delta_log" / f"{version:020d}.json").unlink()
    assert rows(kept.get(log, None, loads())) == [0, 1, 2]
    assert rows(kept.get(log, 1, loads(1))) == [0, 1]
    assert loads.count == 4


def test_the_least_recently_used_table_is_dropped_first(tmp_path):
    kept = LoadedTables(size=4)  # two tables: each load keeps its latest and its version
    loads = {}
    for name in ("a", "b", "c"):
        path = str(tmp_path / name)
        write_deltalake(path, pa.table({"a": [1]}))
        loads[name] = Loads(path)
    for name in ("a", "b", "a", "c", "a", "b"):  # c drops b, used longer ago than a
        kept.get(str(tmp_path / name / "_delta_log"), None, loads[name]())
    assert {n: l.count for n, l in loads.items()} == {"a": 1, "b": 2, "c": 1}


def test_lakes_at_one_root_share_a_loaded_table_until_one_writes(lake, spark):
    """Each Dagster step opens a lake of its own: a snapshot of an unchanged table is the table
    another lake loaded, and a write through either is seen by both at once."""
    lake.create_table("t", T_SCHEMA)
    other = EmbeddedLake(spark, lake.root)
    before = lake.snapshot("t")
    assert other.snapshot("t").table is before.table
    version = other.write_rows(other.snapshot("t"), [{"id": 1}])
    after = lake.snapshot("t")
    assert after.version == version == before.version + 1 and after.table is not before.table
    assert [r.id for r in lake.read(after).collect()] == [1]
    assert before.version == before.table.version()  # an earlier snapshot is as it was


def test_a_whole_table_is_read_without_delta_rs_python_files(lake, monkeypatch):
    """delta-rs's dataset reads through Python file objects, and a reader of one let go on an
    Arrow thread while the interpreter exits aborts the process; kept loads live that long."""
    lake.create_table("t", T_SCHEMA)
    lake.write_rows(lake.snapshot("t"), [{"id": 1}, {"id": 2}])
    lake.write_rows(lake.snapshot("t"), [{"id": 3}])

    def refused(*args, **kwargs):
        raise AssertionError("read through delta-rs's Python filesystem")

    monkeypatch.setattr(DeltaTable, "to_pyarrow_dataset", refused)
    snapshot = lake.snapshot("t")
    assert sorted(lake.read_arrow(snapshot).column("id").to_pylist()) == [1, 2, 3]
    assert lake.read_arrow(snapshot, columns=["id"], where=pads.field("id") > 1).num_rows == 2


def test_a_loaded_version_s_files_are_parsed_once_for_every_lake(lake, spark, monkeypatch):
    """A step's lake is new; the file list of a table another lake loaded is not parsed again,
    and a new version's is."""
    from lakelog.lake import delta_snapshot

    parsed = []
    real = delta_snapshot._data_files
    monkeypatch.setattr(delta_snapshot, "_data_files",
                        lambda actions: parsed.append(actions.num_rows) or real(actions))
    lake.create_table("t", T_SCHEMA)
    lake.write_rows(lake.snapshot("t"), [{"id": 1}])
    first = lake.snapshot("t").files()
    assert EmbeddedLake(spark, lake.root).snapshot("t").files() == first and parsed == [1]
    lake.write_rows(lake.snapshot("t"), [{"id": 2}])
    assert len(EmbeddedLake(spark, lake.root).snapshot("t").files()) == 2 and parsed == [1, 2]


def test_a_file_list_leaves_with_its_loaded_table(lake, spark):
    """The lists are kept by the table object's id: one let go takes its list along, so a
    later table given the same id cannot be handed another's files."""
    import gc

    from lakelog.lake import delta_snapshot

    lake.create_table("t", T_SCHEMA)
    lake.write_rows(lake.snapshot("t"), [{"id": 1}])
    table = DeltaTable(lake.uri("t"))  # loaded apart from the process's kept tables
    key = id(table)
    assert len(delta_snapshot.DeltaSnapshot("t", table).files()) == 1
    assert key in delta_snapshot._PARSED
    del table
    gc.collect()
    assert key not in delta_snapshot._PARSED
