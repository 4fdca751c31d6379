"""Orders with their customer — now (enrichment), at the order's time (as-of), and as totals
per customer (table join) — as DataFrame functions; `test_joins_orders` runs the consumers."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pyarrow as pa
import pytest
from joins_helpers import CHANGES, at, change, customer_row, local, order, position

from lakelog.demo.shop import ORDERS
from lakelog.demo.shop_joins import CUSTOMER_ORDERS, ORDERS_AS_OF, ORDERS_ENRICHED
from lakelog.errors import ConfigError
from lakelog.joins import enrich, join_as_of
from lakelog.consumers import BatchInput
from lakelog.joins.as_of import overlapping_versions
from lakelog.lake import held_read
from lakelog.joins.table_join import combine


def frame(spark, schema, rows):
    return spark.createDataFrame([tuple(r.get(n) for n in schema.fieldNames()) for r in rows],
                                 schema)


def by_order(df):
    return {r["order_id"]: (r["customer_id"], r["name"], r["country"], r["customer_found"])
            for r in df.collect()}


def test_enrichment_keeps_every_order_and_nulls_missing_or_deleted_customers(spark):
    orders = spark.createDataFrame(
        [order("1", 0, customer=1), order("2", 0, customer=2), order("3", 0, customer=3),
         order("4", 0, customer=None)], ORDERS.table_schema,
    )
    table = frame(spark, ORDERS_ENRICHED.table_schema, [
        customer_row(1, "Ada", position="01"), customer_row(2, None, position="02", deleted=True),
    ])
    out = enrich(ORDERS_ENRICHED, ORDERS_ENRICHED.keyed(orders), table, batch=7)
    assert out.columns == ORDERS_ENRICHED.output.schema.fieldNames()
    assert by_order(out) == {
        "o-1": (1, "Ada", "NL", True),
        "o-2": (2, None, None, False),  # deleted at the source
        "o-3": (3, None, None, False),  # never seen
        "o-4": (None, None, None, False),  # user id without a customer number
    }
    row = out.where("order_id = 'o-1'").first()
    assert (row["batch"], row["hour"], row["total"], row["event_id"]) == (7, local(at(0)), 1.0, "1")


def test_as_of_join_takes_the_version_valid_at_the_order_time(spark):
    history = frame(spark, ORDERS_AS_OF.table_schema, [
        customer_row(1, "Ada", position="10", valid=(0, 60)),
        customer_row(1, "Ada", position="20", country="DE", valid=(60, 120)),
        customer_row(1, None, position="30", deleted=True, valid=(120, None)),
        customer_row(2, "Bob", position="11", valid=(30, None)),
        # Overlapping intervals (commit times that went backwards): the newest position wins.
        customer_row(4, "Old", position="40", valid=(0, 100)),
        customer_row(4, "New", position="41", valid=(50, None)),
    ])
    orders = spark.createDataFrame([
        order("1", -60, customer=1), order("2", 0, customer=1), order("3", 59, customer=1),
        order("4", 60, customer=1), order("5", 150, customer=1), order("6", 45, customer=2),
        order("7", 45, customer=3), order("8", 70, customer=4),
    ], ORDERS.table_schema)
    out = join_as_of(ORDERS_AS_OF, ORDERS_AS_OF.keyed(orders), history, batch=0)
    assert by_order(out) == {
        "o-1": (1, None, None, False),  # before the customer existed
        "o-2": (1, "Ada", "NL", True),  # valid_from is inclusive
        "o-3": (1, "Ada", "NL", True),  # the change at minute 60 does not reach back
        "o-4": (1, "Ada", "DE", True),  # valid_to is exclusive
        "o-5": (1, None, None, False),  # deleted by then
        "o-6": (2, "Bob", "NL", True),
        "o-7": (3, None, None, False),
        "o-8": (4, "New", "NL", True),
    }
    assert out.where("order_id = 'o-4'").first()["customer_valid_from"] == local(at(60))


def versions(*rows):
    """History rows as Arrow: (customer, valid_from minute, valid_to minute or None, deleted)."""
    def moment(minute):
        return None if minute is None else at(minute)
    return pa.table({
        "customer_id": pa.array([r[0] for r in rows], pa.int64()),
        "valid_from": pa.array([moment(r[1]) for r in rows], pa.timestamp("us", tz="UTC")),
        "valid_to": pa.array([moment(r[2]) for r in rows], pa.timestamp("us", tz="UTC")),
        "_deleted": pa.array([r[3] for r in rows], pa.bool_()),
    })


def test_overlapping_versions_of_a_held_history():
    key = ("customer_id",)
    disjoint = versions((1, 0, 60, False), (1, 60, 120, False), (1, 120, None, True),
                        (2, 30, None, False), (3, 0, None, False), (None, 0, None, False))
    assert not overlapping_versions(disjoint, key)
    assert not overlapping_versions(versions(), key)
    assert overlapping_versions(versions((4, 0, 100, False), (4, 50, None, False)), key)
    assert overlapping_versions(versions((4, 50, None, False), (4, 0, None, False)), key)
    # What the join leaves out cannot overlap: deletes, null keys, no valid_from.
    assert not overlapping_versions(versions((4, 0, None, True), (4, 50, None, False)), key)
    assert not overlapping_versions(versions((None, 0, None, False), (None, 5, None, False)), key)
    assert not overlapping_versions(versions((4, None, None, False), (4, 5, None, False)), key)
    floats = versions((4, 0, 60, False)).set_column(0, "customer_id", pa.array([4.0]))
    assert overlapping_versions(floats, key)  # -0.0 and 0.0 are one key to Spark's join
    nested = versions((4, 0, 60, False)).set_column(0, "customer_id", pa.array([{"a": 4}]))
    assert overlapping_versions(nested, key)  # Arrow sorts by no struct


def test_as_of_transform_of_a_held_history_whose_versions_overlap(spark, lake):
    """Commit times that went backwards: the held history's intervals overlap, and each order
    still gets one row, the newest matching version's."""
    history = ORDERS_AS_OF.table
    lake.create_table(history.path, ORDERS_AS_OF.table_schema)
    lake.write(lake.snapshot(history.path), frame(spark, ORDERS_AS_OF.table_schema, [
        customer_row(4, "Old", position="40", valid=(0, 100)),
        customer_row(4, "New", position="41", valid=(50, None)),
        customer_row(5, "Eve", position="42", valid=(0, None)),
    ]))
    assert held_read.holds(lake.snapshot(history.path))
    orders = spark.createDataFrame([order("1", 20, customer=4), order("2", 70, customer=4),
                                    order("3", 70, customer=5)], ORDERS.table_schema)
    batch = BatchInput(lake, 0, {ORDERS.name: orders}, {})
    out = ORDERS_AS_OF.transform(batch)[ORDERS_AS_OF.output.path]
    assert out.count() == 3
    assert by_order(out) == {"o-1": (4, "Old", "NL", True), "o-2": (4, "New", "NL", True),
                             "o-3": (5, "Eve", "NL", True)}


def test_as_of_join_without_the_choice_of_the_newest_when_nothing_overlaps(spark):
    history = frame(spark, ORDERS_AS_OF.table_schema, [
        customer_row(1, "Ada", position="10", valid=(0, 60)),
        customer_row(1, "Ada", position="20", country="DE", valid=(60, None)),
        customer_row(2, None, position="11", deleted=True, valid=(30, None)),
    ])
    orders = spark.createDataFrame([
        order("1", -60, customer=1), order("2", 0, customer=1), order("3", 60, customer=1),
        order("4", 45, customer=2), order("5", 45, customer=None),
    ], ORDERS.table_schema)
    keyed = ORDERS_AS_OF.keyed(orders)
    chosen = join_as_of(ORDERS_AS_OF, keyed, history, batch=0)
    direct = join_as_of(ORDERS_AS_OF, keyed, history, batch=0, overlapping=False)
    assert by_order(direct) == by_order(chosen) == {
        "o-1": (1, None, None, False), "o-2": (1, "Ada", "NL", True),
        "o-3": (1, "Ada", "DE", True), "o-4": (2, None, None, False),
        "o-5": (None, None, None, False),
    }
    assert direct.count() == 5 and direct.columns == chosen.columns


def test_lookup_declaration_errors():
    with pytest.raises(ConfigError, match="compacted table"):
        replace(ORDERS_ENRICHED, table=ORDERS_AS_OF.table)
    with pytest.raises(ConfigError, match="history table"):
        replace(ORDERS_AS_OF, table=ORDERS_ENRICHED.table)
    with pytest.raises(ConfigError, match="key expression"):
        replace(ORDERS_ENRICHED, key=())
    with pytest.raises(ConfigError, match="no column 'nope'"):
        replace(ORDERS_ENRICHED, columns=(("x", "nope"),))
    with pytest.raises(ConfigError, match="chosen twice"):
        replace(ORDERS_ENRICHED, found="total")


def test_table_join_declaration_errors():
    with pytest.raises(ConfigError, match="no column 'nope'"):
        replace(CUSTOMER_ORDERS, amount_of="nope")
    with pytest.raises(ConfigError, match="no column 'nope'"):
        replace(CUSTOMER_ORDERS, columns=(("x", "nope"),))
    with pytest.raises(ConfigError, match="chosen twice"):
        replace(CUSTOMER_ORDERS, count="revenue")
    with pytest.raises(ConfigError, match="key expression"):
        replace(CUSTOMER_ORDERS, key=("a", "b"))


def test_table_join_batch_adds_totals_and_applies_only_newer_changes(spark):
    join = CUSTOMER_ORDERS
    stored = frame(spark, join.output.schema, [
        {"customer_id": 123, "name": "Ada", "email": "ada@x", "country": "NL", "orders": 1,
         "revenue": Decimal("10.50"), "last_order_time": at(30), "_position": position(20),
         "_deleted": False, "batch": 0},
        {"customer_id": 42, "orders": 1, "revenue": Decimal("3.00"),
         "last_order_time": at(30), "_deleted": False, "batch": 0},
    ])
    facts = spark.createDataFrame([
        order("7", 100, customer=123, total=2.0), order("8", 100, customer=42, total=1.0),
        order("9", 90, customer=5, total=1.25), order("10", 95, customer=5, total=1.0),
    ], ORDERS.table_schema)
    changes = spark.createDataFrame([
        change("u", 123, lsn=15, minute=20, name="Old"),  # older than the stored row's
        change("c", 42, lsn=30, minute=60, name="Dee"),
        change("u", 42, lsn=29, minute=59, name="Eve"),  # older than Dee, same batch
        change("d", 5, lsn=31, minute=60),
    ], CHANGES.table_schema)
    out = combine(join, stored, facts, changes, batch=3)
    assert out.columns == join.output.schema.fieldNames()
    got = {r["customer_id"]: (r["name"], r["orders"], r["revenue"], r["last_order_time"],
                              r["_position"], r["_deleted"], r["batch"]) for r in out.collect()}
    assert got == {
        123: ("Ada", 2, Decimal("12.50"), local(at(100)), position(20), False, 3),
        42: ("Dee", 2, Decimal("4.00"), local(at(100)), position(30), False, 3),
        5: (None, 2, Decimal("2.25"), local(at(95)), position(31), True, 3),
    }
