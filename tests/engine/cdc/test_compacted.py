"""Changelog topics and compacted tables: ingest Debezium events, keep the newest row per key."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from engine_helpers import CUSTOMERS, ROW, change
from cdc_helpers import capture_all, connect_sqlite, source_rows
from pyspark.sql import functions as F

from lakelog import consumers
from lakelog.cdc import SqliteSource, capture
from lakelog.cdc.changelog import changelog_topic
from lakelog.cdc.compacted import CompactedTable, squash_table, live_rows, purge_tombstones
from lakelog.consumers import resets
from lakelog.demo import oltp
from lakelog.lake import EmbeddedLake
from lakelog.lake.merge_on_read import MergeKeys, merge_keys
from lakelog.log import dead_letters, ingest

TOPIC = changelog_topic("customers", ROW, CUSTOMERS.primary_key)
TABLE = CompactedTable("customers", TOPIC, ROW, CUSTOMERS.primary_key, rows_per_file=3)
LAYOUTS = ["copy-on-write", "merge-on-read"]
ISO = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"


@pytest.fixture(params=LAYOUTS)
def table(request):
    """The compacted table in each layout: the same rows must come out of both."""
    return replace(TABLE, merge_on_read=request.param == "merge-on-read")


def apply(lake, spark, now, lines, table=TABLE):
    ingest.produce(lake, spark, TOPIC, lines, source="test", now=now)
    return consumers.run_until_caught_up(lake, table.consumer, {TOPIC.name: TOPIC}, now=lambda: now)


def table_rows(lake):
    df = lake.read(lake.snapshot(TABLE.path))
    rows = [(r["customer_id"], (r["name"], r["_deleted"])) for r in df.collect()]
    assert len(rows) == len(dict(rows)), "one row per key"
    return dict(rows)


def test_newest_position_wins_whatever_the_arrival_order(lake, spark, now, table):
    apply(lake, spark, now, [change("c", 1, lsn=10, name="a1"), change("c", 2, lsn=11, name="b1"),
                             change("u", 1, lsn=30, name="a3")], table)
    # A late, older update of 1 and a replay of 2's create change nothing; 3 is new.
    apply(lake, spark, now, [change("u", 1, lsn=20, name="a2"), change("c", 2, lsn=11, name="b1"),
                             change("c", 3, lsn=40, name="c1")], table)
    assert table_rows(lake) == {1: ("a3", False), 2: ("b1", False), 3: ("c1", False)}
    # Within one batch the newest change of a key wins too, in any order.
    apply(lake, spark, now, [change("u", 3, lsn=60, name="c3"), change("u", 3, lsn=50, name="c2")],
          table)
    assert table_rows(lake)[3] == ("c3", False)


def test_commit_position_orders_before_change_position(lake, spark, now):
    """A transaction committed later wins even when its change LSN is lower (DESIGN: positions)."""
    apply(lake, spark, now, [change("u", 1, lsn=70, commit=80, name="first"),
                             change("u", 1, lsn=60, commit=90, name="second")])
    assert table_rows(lake)[1] == ("second", False)


def test_delete_leaves_a_tombstone_that_a_late_change_cannot_resurrect(lake, spark, now, table):
    apply(lake, spark, now, [change("c", 1, lsn=10, name="a1"), change("c", 2, lsn=11, name="b1")],
          table)
    apply(lake, spark, now, [change("d", 1, lsn=30)], table)
    apply(lake, spark, now, [change("u", 1, lsn=20, name="late")], table)
    assert table_rows(lake) == {1: (None, True), 2: ("b1", False)}
    assert [r["customer_id"] for r in live_rows(lake, table).collect()] == [2]
    # Purge: nothing before the retention has passed, then exactly the tombstone. Of a
    # merge-on-read table, a squash drops it with its key's older versions; a purge only takes
    # tombstones from files that overlap no other.
    later = now + timedelta(days=365 * 10)
    assert purge_tombstones(lake, table, now=now) == 0
    if table.merge_on_read:
        assert purge_tombstones(lake, table, now=later) == 0  # older versions elsewhere
        assert squash_table(lake, table, now=now).rows_dropped == 0  # not expired yet
        # New keys 0 and 3: one file whose key range overlaps every squashed one.
        apply(lake, spark, now, [change("c", 0, lsn=50, name="z"), change("c", 3, lsn=51,
                                                                         name="c")], table)
        assert squash_table(lake, table, now=later).rows_dropped == 1
        live = {0: ("z", False), 2: ("b1", False), 3: ("c", False)}
        assert table_rows(lake) == live
        apply(lake, spark, now, [change("d", 9, lsn=60)], table)  # a file of its own
        assert purge_tombstones(lake, table, now=later) == 1
        assert table_rows(lake) == live
    else:
        assert purge_tombstones(lake, table, now=later) == 1
        assert table_rows(lake) == {2: ("b1", False)}
    assert purge_tombstones(lake, table, now=later) == 0


def test_a_table_declared_in_the_other_layout_is_converted_with_its_rows(lake, spark, now):
    merge_on_read = replace(TABLE, merge_on_read=True)
    apply(lake, spark, now, [change("c", 1, lsn=10, name="a1"), change("c", 2, lsn=11, name="b1")])
    apply(lake, spark, now, [change("u", 1, lsn=20, name="a2")], merge_on_read)
    assert merge_keys(lake.snapshot(TABLE.path).properties) == MergeKeys(TABLE.key, "_position")
    apply(lake, spark, now, [change("u", 2, lsn=30, name="b2")], merge_on_read)
    assert len(lake.snapshot(TABLE.path).files()) == 3  # versions appended, not merged
    apply(lake, spark, now, [change("d", 1, lsn=40)])  # copy-on-write again: squashed first
    snapshot = lake.snapshot(TABLE.path)
    assert merge_keys(snapshot.properties) is None
    plain = lake.read(snapshot, all_versions=True).collect()
    assert sorted((r.customer_id, r.name, r._deleted) for r in plain) == [
        (1, None, True), (2, "b2", False)]


def test_malformed_change_events_are_dead_letters(lake, spark, now):
    bad = [
        change("x", 1, lsn=10, name="a"),
        json.dumps({"op": "c", "before": None, "after": None, "source": {"lsn": 5}}),
        json.dumps({"op": "d", "before": None, "after": None, "source": {"lsn": 6}}),
        json.dumps({"op": "c", "after": {"customer_id": 9}, "source": {"table": "customers"}}),
        json.dumps({"op": "c", "after": {"customer_id": "nine"}, "source": {"lsn": 7}}),
    ]
    result = ingest.produce(lake, spark, TOPIC, [change("c", 1, lsn=3, name="ok"), *bad],
                            source="test", now=now)
    assert (result.read, result.appended, result.dead_letters) == (6, 1, 5)
    reasons = sorted(r["reason"] for r in lake.read(lake.snapshot(dead_letters.PATH)).collect())
    assert reasons == sorted([
        "op must be one of c, u, d, r",
        "a create, update or read needs 'after'",
        "a delete needs 'before'",
        "no source position: needs source.lsn or source.seq",
        "field 'after' is not a valid struct<customer_id:bigint,name:string,email:string,"
        "country:string,updated_at:timestamp>: {\"customer_id\":\"nine\"}",
    ])


def test_compacted_tables_mirror_a_captured_sqlite_database(spark, tmp_path, sqlite_path, now):
    """Snapshot, then mutations (inserts, updates, deletes, re-inserts) → the tables equal the
    source, and applying the whole changelog again changes nothing."""
    root = str(tmp_path / "lake")
    lake = EmbeddedLake(spark, root)
    source = SqliteSource(sqlite_path, oltp.TABLES, "shop")
    conn = connect_sqlite(sqlite_path)
    tables = {t.name: CompactedTable(t.name, changelog_topic(t.name, t.spark_schema(),
                                                             t.primary_key),
                                     t.spark_schema(), t.primary_key, rows_per_file=20)
              for t in oltp.TABLES}
    topics = {t.topic.name: t.topic for t in tables.values()}

    def sync():
        capture_all(lambda: capture(source, root, now=now, max_changes=150))
        for table in tables.values():
            ingest.ingest(lake, spark, table.topic, now=now)
            consumers.run_until_caught_up(lake, table.consumer, topics, now=lambda: now)

    sync()
    oltp.mutate(conn, "sqlite", n=400, seed=11, now=now)
    sync()
    for source_table in oltp.TABLES:
        table = tables[source_table.name]
        rows = live_rows(lake, table)
        rows = rows.select(*[F.date_format(c, ISO).alias(c) if c == "updated_at" else
                             F.col(c).cast("string") if c == "price" else F.col(c)
                             for c in rows.columns])
        got = {source_table.key(r.asDict()): r.asDict() for r in rows.collect()}
        assert got == source_rows(conn, "sqlite", source_table), source_table.name
    # Replaying every change (offsets reset to the start) leaves the table as it is.
    products = tables["products"]
    before = sorted(live_rows(lake, products).collect())
    resets.reset_offsets(lake, products.consumer, topics, to="earliest", now=now)
    assert consumers.run_until_caught_up(lake, products.consumer, topics, now=lambda: now)
    assert sorted(live_rows(lake, products).collect()) == before


PRODUCTS = oltp.TABLES[1]
PRODUCT_ROW = PRODUCTS.spark_schema()
PRODUCT_TOPIC = changelog_topic("products", PRODUCT_ROW, PRODUCTS.primary_key)
PRODUCT_TABLE = CompactedTable("products", PRODUCT_TOPIC, PRODUCT_ROW, PRODUCTS.primary_key)


def debezium_product(key, lsn, price, updated_at):
    """A change event as Debezium writes it by default (precise decimals, adaptive times)."""
    row = {"product_id": key, "name": "lamp", "category": "home", "price": price,
           "updated_at": updated_at}
    return json.dumps({"before": None, "after": row, "op": "c", "ts_ms": 1_772_366_400_000,
                       "source": {"connector": "postgresql", "ts_ms": 1_772_366_400_000,
                                  "table": "products", "lsn": lsn}})


def test_debezium_default_encodings_are_decoded(lake, spark, now):
    def precise(unscaled: int, width: int) -> str:
        return base64.b64encode(unscaled.to_bytes(width, "big", signed=True)).decode()

    noon = "2026-03-01 12:00:00.123"
    lines = [
        debezium_product("p1", 10, precise(1999, 2), 1_772_366_400_123),  # ms (TIMESTAMP(3))
        debezium_product("p2", 11, precise(-250, 2), 1_772_366_400_123_456),  # µs, negative
        debezium_product("p3", 12, "7.5", "2026-03-01T12:00:00.123Z"),  # string mode, ISO
        debezium_product("p4", 13, 1234.5, 1_772_366_400_123_456_789),  # double mode, ns
        debezium_product("p5", 14, "not money!", 1_772_366_400_123),
        debezium_product("p6", 15, "1.00", "noon"),
    ]
    result = ingest.produce(lake, spark, PRODUCT_TOPIC, lines, source="test", now=now)
    assert (result.appended, result.dead_letters) == (4, 2)
    consumers.run_until_caught_up(lake, PRODUCT_TABLE.consumer, {PRODUCT_TOPIC.name: PRODUCT_TOPIC},
                                  now=lambda: now)
    prices = {r.product_id: str(r.price)
              for r in lake.read(lake.snapshot(PRODUCT_TABLE.path)).collect()}
    assert prices == {
        "p1": "19.99", "p2": "-2.50", "p3": "7.50", "p4": "1234.50",
    }
    stamps = {r.product_id: r.stamp for r in lake.read(lake.snapshot(PRODUCT_TABLE.path)).select(
        "product_id", F.date_format("updated_at", "yyyy-MM-dd HH:mm:ss.SSSSSS").alias("stamp"),
    ).collect()}
    assert stamps == {"p1": noon + "000", "p2": noon + "456", "p3": noon + "000",
                      "p4": noon + "456"}
    reasons = sorted(r["reason"] for r in lake.read(lake.snapshot(dead_letters.PATH)).collect())
    assert reasons == [
        "after.price: not money! is not a decimal(10,2) (a number, a numeric string or base64 "
        "bytes of the unscaled value)",
        "after.updated_at: noon is not a timestamp (an ISO-8601 time or epoch milliseconds, "
        "microseconds or nanoseconds)",
    ]


def test_change_counts_held_here_equal_the_change_feed(lake, spark, now, table, monkeypatch):
    """Upserts (some rewriting unchanged rows of their files), a stale change, deletes: the
    counts of each version range, read here from the table's files (a merge-on-read table's
    net change from its current rows at both ends), are those of its change feed through
    Spark, and so are the changed rows."""
    from lakelog.cdc.compacted import change_counts

    batches = [
        [change("c", k, lsn=k, name=f"n{k}") for k in range(1, 8)],
        [change("u", 2, lsn=20, name="x"), change("d", 5, lsn=21), change("u", 3, lsn=1)],
        [change("c", 8, lsn=30, name="n8"), change("d", 2, lsn=31), change("u", 7, lsn=32,
                                                                          name="y")],
    ]
    for lines in batches:
        apply(lake, spark, now, lines, table)
    last = lake.snapshot(table.path).version
    held = {(a, b): change_counts(lake, table.path, a, b)
            for a in range(1, last + 1) for b in range(a, last + 1)}
    def as_utc(row: dict) -> str:  # pyspark gives naive local times, pyarrow aware ones
        return str({k: v.astimezone(timezone.utc) if isinstance(v, datetime) else v
                    for k, v in row.items()})

    for a, b in held:
        here = lake.changes_arrow(table.path, a, b)
        spark_rows = lake.changes(table.path, a, b).drop("_commit_timestamp")
        assert sorted(map(as_utc, here.select(spark_rows.columns).to_pylist())) == sorted(
            as_utc(r.asDict()) for r in spark_rows.collect()), (a, b)
    monkeypatch.setattr(type(lake), "changes_arrow", lambda *args: None)
    feed = {(a, b): change_counts(lake, table.path, a, b) for a, b in held}
    assert held == feed
    assert held[1, last] != {"rows_upserted": 0, "rows_tombstoned": 0}
    assert sum(c["rows_tombstoned"] for (a, b), c in held.items() if a == b) >= 2
