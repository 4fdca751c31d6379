"""A local lake's snapshots share the loads of versions taken before, and never a stale one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake
from pyspark.sql import types as T

from lakelog.lake import AppTxn, loaded_tables

SCHEMA = T.StructType([T.StructField("id", T.LongType()), T.StructField("name", T.StringType())])


def ids(lake, snapshot):
    return sorted(r["id"] for r in lake.read_arrow(snapshot).to_pylist())


def test_a_version_loaded_before_is_shared_and_a_new_commit_seen_at_once(lake):
    lake.create_table("t", SCHEMA)
    lake.write_rows(lake.snapshot("t"), [{"id": 1, "name": "a"}])
    first, again = lake.snapshot("t"), lake.snapshot("t")
    assert first.version == again.version == 1 and first.table is again.table
    assert lake.snapshot("t", version=1).table is first.table

    lake.write_rows(first, [{"id": 2, "name": "b"}])  # a commit through the shared load
    after = lake.snapshot("t")
    assert after.version == 2 and after.table is not first.table and ids(lake, after) == [1, 2]
    assert first.table.version() == 1 and ids(lake, first) == [1]  # the old one unchanged
    assert ids(lake, lake.snapshot("t", version=1)) == [1]

    # Another writer (here delta-rs itself) commits: the next snapshot has it.
    write_deltalake(lake.uri("t"), pa.table({"id": pa.array([3], pa.int64()), "name": ["c"]}),
                    mode="append")
    assert lake.snapshot("t").version == 3 and ids(lake, lake.snapshot("t")) == [1, 2, 3]


def test_a_table_made_again_at_its_path_is_loaded_anew(lake):
    lake.create_table("t", SCHEMA)
    lake.write_rows(lake.snapshot("t"), [{"id": 1, "name": "a"}])
    assert ids(lake, lake.snapshot("t")) == [1]
    shutil.rmtree(Path(lake.root, "t"))
    other = T.StructType([T.StructField("id", T.LongType())])
    lake.create_table("t", other)
    lake.write_rows(lake.snapshot("t"), [{"id": 7}])  # version 1 again, another table
    again = lake.snapshot("t")
    assert again.version == 1 and again.schema == other and ids(lake, again) == [7]


def test_a_log_not_as_expected_is_left_to_delta_rs(lake):
    lake.create_table("t", SCHEMA)
    for i in range(4):
        lake.write_rows(lake.snapshot("t"), [{"id": i, "name": "x"}])  # versions 1-4
    lake.forget_history("t", before=3)  # commits 0-2 gone
    log = Path(lake.root, "t", "_delta_log")
    (log / "_last_checkpoint").unlink()  # the probe would start at the trimmed version 0
    assert loaded_tables.latest(str(log)) is None
    assert lake.snapshot("t").version == 4 and ids(lake, lake.snapshot("t")) == [0, 1, 2, 3]
    (log / "_last_checkpoint").write_text("not json")
    assert loaded_tables.latest(str(log)) is None
    assert lake.snapshot("t").version == 4


def test_a_load_whose_log_was_trimmed_since_is_loaded_anew(lake):
    """A load reads the log's application transactions only when asked: one kept past the
    deletion of the commits it was loaded from would fail to."""
    lake.create_table("t", SCHEMA)
    for i in range(4):
        lake.write_rows(lake.snapshot("t"), [{"id": i, "name": "x"}], txns=[AppTxn("app", i)])
    before = lake.snapshot("t")  # loaded from commits 0-4 (no checkpoint yet)
    lake.forget_history("t", before=3)  # a checkpoint at 3; commits 0-2 gone
    after = lake.snapshot("t")
    assert after.version == 4 and after.table is not before.table
    assert after.txn_version("app") == 3 and ids(lake, after) == [0, 1, 2, 3]


def test_the_loads_kept_are_bounded(lake, monkeypatch):
    monkeypatch.setattr(loaded_tables, "VERSIONS", 3)
    lake.create_table("t", SCHEMA)
    for i in range(5):
        lake.write_rows(lake.snapshot("t"), [{"id": i, "name": "x"}])
    assert loaded_tables.SHARED.kept(lake.fs_path("t")) == [2, 3, 4]  # the three loaded last
    monkeypatch.setattr(loaded_tables, "TABLES", 1)
    lake.create_table("u", SCHEMA)
    assert loaded_tables.SHARED.kept(lake.fs_path("t")) == []  # another table loaded since
    assert [ids(lake, lake.snapshot("t", version=v)) for v in (1, 5)] == [[0], [0, 1, 2, 3, 4]]
