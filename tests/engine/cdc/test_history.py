"""History tables (SCD2): versions ordered by position, intervals right under out-of-order input."""

from __future__ import annotations

from datetime import datetime

import pytest
from pyspark.sql import functions as F
from engine_helpers import CUSTOMERS, ROW, change
from test_compacted import TOPIC

from lakelog import consumers
from lakelog.cdc import history
from lakelog.cdc.history import HistoryTable, as_of
from lakelog.lake import DataFile, base, driver_write
from lakelog.lake.nulls_apart import NULLS_APART
from lakelog.log import ingest

TABLE = HistoryTable("customers", TOPIC, ROW, CUSTOMERS.primary_key, rows_per_file=2)
T0 = 1_772_366_400_000  # 2026-03-01 12:00 UTC, in ms


def apply(lake, spark, now, lines):
    ingest.produce(lake, spark, TOPIC, lines, source="test", now=now)
    consumers.run_until_caught_up(lake, TABLE.consumer, {TOPIC.name: TOPIC}, now=lambda: now)


def at(minutes):
    return datetime.fromtimestamp((T0 + minutes * 60_000) / 1000).replace(tzinfo=None)


def versions(lake, key):
    df = lake.read(lake.snapshot(TABLE.path)).where(F.col("customer_id") == key)
    return [
        (r["name"], r["valid_from"], r["valid_to"], r["is_current"], r["_deleted"])
        for r in df.orderBy("_position").collect()
    ]


@pytest.fixture(params=["whole", "pruned"])
def layout(request, monkeypatch):
    """A history table rewritten whole, as a small table is, or pruned to the files a batch
    can change, as a large one is (`lakelog.cdc.history.rewritten_files`)."""
    if request.param == "pruned":
        monkeypatch.setattr(base, "SMALL_TABLE_BYTES", 0)
    return request.param


def test_late_change_slots_in_and_intervals_are_rederived(lake, spark, now, partitions, layout):
    apply(lake, spark, now, [change("c", 1, lsn=10, name="v1", ts=T0),
                             change("u", 1, lsn=30, name="v3", ts=T0 + 120_000)])
    # v2 arrives after v3, and v1 is replayed: v2 goes between, v1 stays once.
    apply(lake, spark, now, [change("u", 1, lsn=20, name="v2", ts=T0 + 60_000),
                             change("c", 1, lsn=10, name="v1", ts=T0)])
    assert versions(lake, 1) == [
        ("v1", at(0), at(1), False, False),
        ("v2", at(1), at(2), False, False),
        ("v3", at(2), None, True, False),
    ]


def test_delete_closes_the_last_version_and_nothing_is_current(lake, spark, now,
                                                               partitions, layout):
    apply(lake, spark, now, [change("c", 1, lsn=10, name="v1", ts=T0),
                             change("c", 2, lsn=11, name="w1", ts=T0)])
    apply(lake, spark, now, [change("d", 1, lsn=40, ts=T0 + 180_000)])
    assert versions(lake, 1) == [
        ("v1", at(0), at(3), False, False),
        (None, at(3), None, False, True),
    ]
    history = lake.read(lake.snapshot(TABLE.path))
    # As of minute 1 both rows exist; as of minute 4 only customer 2.
    assert sorted(r["name"] for r in as_of(history, F.lit(at(1))).collect()) == ["v1", "w1"]
    assert [r["name"] for r in as_of(history, F.lit(at(4))).collect()] == ["w1"]
    assert history.where("is_current").count() == 1


def expected_versions(changes):
    """Per key, (name, valid_from, valid_to, is_current, deleted) of (key, minute, name or None
    for a delete) changes given in position order."""
    found = {}
    for key, minute, name in changes:
        found.setdefault(key, []).append((name, at(minute), None, name is not None, name is None))
    for rows in found.values():
        for i in range(len(rows) - 1):
            name, start, _, _, deleted = rows[i]
            rows[i] = (name, start, rows[i + 1][1], False, deleted)
    return found


@pytest.mark.parametrize("writes", ["held", "spark"])
def test_in_order_batches_rewrite_only_files_of_open_versions(lake, spark, now, monkeypatch,
                                                              writes):
    monkeypatch.setattr(base, "SMALL_TABLE_BYTES", 0)  # pruned, as a large table is
    if writes == "spark":
        monkeypatch.setattr(driver_write, "SMALL_WRITE_ROWS", -1)
    table = HistoryTable("customers", TOPIC, ROW, CUSTOMERS.primary_key, rows_per_file=100)
    changes, lsn = [], 10
    for batch in range(history.FOLD + 3):
        lines = []
        for key in range(1, 6):
            minute = batch * 10 + key
            name = None if (batch, key) == (2, 4) else f"c{key}b{batch}"
            op = "c" if batch == 0 or (batch, key) == (3, 4) else ("d" if name is None else "u")
            lines.append(change(op, key, lsn=lsn, name=name, ts=T0 + minute * 60_000))
            changes.append((key, minute, name))
            lsn += 1
        before = lake.snapshot(table.path).files() if lake.exists(table.path) else []
        ingest.produce(lake, spark, TOPIC, lines, source="test", now=now)
        consumers.run_until_caught_up(lake, table.consumer, {TOPIC.name: TOPIC}, now=lambda: now)
        snapshot = lake.snapshot(table.path)
        assert snapshot.properties[NULLS_APART] == "valid_to"
        files = snapshot.files()
        # No file holds both open versions and closed ones.
        assert all(f.null_counts["valid_to"] in (0, f.num_records) for f in files)
        # The files of closed versions stay, but for the small ones folded into one.
        kept = {f.path for f in files}
        gone = [f for f in before if f.path not in kept]
        closed_gone = [f for f in gone if f.null_counts["valid_to"] == 0]
        assert len(closed_gone) in (0, history.FOLD)
        assert all(f.num_records < table.rows_per_file for f in closed_gone)
        stored = {}  # one query a batch: each key's versions in order
        for r in lake.read(snapshot).orderBy("customer_id", "_position").collect():
            stored.setdefault(r["customer_id"], []).append(
                (r["name"], r["valid_from"], r["valid_to"], r["is_current"], r["_deleted"]))
        assert stored == expected_versions(changes)
    # Folding kept the files of closed versions fewer than the batches that made them.
    closed = [f for f in lake.snapshot(table.path).files() if f.null_counts["valid_to"] == 0]
    assert len(closed) < history.FOLD + 3 - 1


def test_a_history_table_made_before_takes_the_layout(lake, spark, now, monkeypatch):
    monkeypatch.setattr(base, "SMALL_TABLE_BYTES", 0)
    # Made as before: without the property, so one file holds key 1's closed and open
    # versions and key 2's open one.
    apply(lake, spark, now, [change("c", 1, lsn=10, name="v1", ts=T0),
                             change("c", 2, lsn=11, name="w1", ts=T0),
                             change("u", 1, lsn=20, name="v2", ts=T0 + 60_000)])
    lake.set_properties(TABLE.path, {NULLS_APART: ""})  # no property, as a table before
    snapshot = lake.snapshot(TABLE.path)
    lake.write_table(snapshot, lake.read_arrow(snapshot), remove=snapshot.files())
    (mixed,) = lake.snapshot(TABLE.path).files()
    assert 0 < mixed.null_counts["valid_to"] < mixed.num_records
    apply(lake, spark, now, [change("u", 2, lsn=30, name="w2", ts=T0 + 120_000)])
    snapshot = lake.snapshot(TABLE.path)
    assert snapshot.properties[NULLS_APART] == "valid_to"
    assert all(f.null_counts["valid_to"] in (0, f.num_records) for f in snapshot.files())
    assert versions(lake, 1) == [("v1", at(0), at(1), False, False), ("v2", at(1), None, True, False)]
    assert versions(lake, 2) == [("w1", at(0), at(2), False, False), ("w2", at(2), None, True, False)]


def test_closed_files_fold_by_size_tier():
    def closed(name, rows):
        return DataFile(name, 1, rows, null_counts={"valid_to": 0})

    rows_per_file = 250_000
    batches = [closed(f"b{i}", 1_000) for i in range(history.FOLD - 1)]
    big = [closed(f"big{i}", 240_000) for i in range(4)] + [closed("mid", 7_000)]
    # One short of a tier's worth: nothing folds, and large files never join a small tier.
    assert history.folded(batches + big, rows_per_file) == []
    assert history.folded(big * 3, rows_per_file) == []
    one_more = closed("b-last", 990)
    assert {f.path for f in history.folded(batches + big + [one_more], rows_per_file)} == {
        *(f.path for f in batches), "b-last"}
    # A file that may hold open versions never folds.
    unknown = DataFile("open", 1, 1_000)
    assert history.folded(batches + [unknown], rows_per_file) == []


def test_a_batch_behind_another_key_but_after_its_own_rewrites_only_open_versions(
        lake, spark, now, monkeypatch):
    # Key 2's change comes before key 1's last one (as when the log's partitions were cut
    # unevenly), but after key 2's own versions: the closed versions stay where they are.
    monkeypatch.setattr(base, "SMALL_TABLE_BYTES", 0)
    apply(lake, spark, now, [change("c", 1, lsn=10, name="v1", ts=T0),
                             change("c", 2, lsn=11, name="w1", ts=T0),
                             change("c", 3, lsn=12, name="x1", ts=T0)])
    apply(lake, spark, now, [change("u", 1, lsn=100, name="v2", ts=T0 + 60_000),
                             change("u", 3, lsn=101, name="x2", ts=T0 + 60_000)])
    # The closed versions of keys 1 and 3: a file whose key range holds key 2.
    closed = [f.path for f in lake.snapshot(TABLE.path).files() if f.null_counts["valid_to"] == 0]
    assert len(closed) == 1
    apply(lake, spark, now, [change("u", 2, lsn=50, name="w2", ts=T0 + 120_000)])
    files = lake.snapshot(TABLE.path).files()
    assert closed[0] in {f.path for f in files}
    assert versions(lake, 1) == [("v1", at(0), at(1), False, False), ("v2", at(1), None, True, False)]
    assert versions(lake, 2) == [("w1", at(0), at(2), False, False), ("w2", at(2), None, True, False)]
    # A change before its key's open version re-derives the key's intervals.
    apply(lake, spark, now, [change("u", 2, lsn=40, name="w1b", ts=T0 + 60_000)])
    assert versions(lake, 2) == [("w1", at(0), at(1), False, False),
                                 ("w1b", at(1), at(2), False, False),
                                 ("w2", at(2), None, True, False)]
