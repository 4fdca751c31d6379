"""The demo's order joins as consumers, against the captured customers table: enrichment with
the current row, the row as of the order's time, and per-customer totals kept incrementally."""

from __future__ import annotations

from decimal import Decimal

import pytest
from joins_helpers import at, change_line, local, order_line
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from lakelog import consumers
from lakelog.demo.shop import ORDERS
from lakelog.demo.shop_cdc import CHANGELOGS, COMPACTED, SHOP
from lakelog.demo.shop_joins import CUSTOMER_ORDERS, ORDERS_AS_OF, ORDERS_ENRICHED
from lakelog.lake import held_read
from lakelog.log import ingest

CHANGES = CHANGELOGS["cdc.customers"]
TOPICS = {ORDERS.name: ORDERS, **CHANGELOGS}
TOTALS = ["name", "country", "orders", "revenue", "last_order_time", "_deleted", "batch"]


def deliver(lake, spark, now, changes, orders, *run):
    """Changes and orders arrive, then the consumers `run` run in this order."""
    ingest.produce(lake, spark, CHANGES, changes, source="test", now=now)
    ingest.produce(lake, spark, ORDERS, orders, source="test", now=now)
    for consumer in run:
        consumers.run_until_caught_up(lake, consumer, TOPICS, now=lambda: now)


def rows(lake, path):
    return lake.read(lake.snapshot(path)).collect()


def by_order(lake, join):
    return {r["order_id"]: (r["customer_id"], r["name"], r["country"], r["customer_found"])
            for r in rows(lake, join.output.path)}


def totals(lake):
    return {r["customer_id"]: tuple(r[c] for c in TOTALS)
            for r in rows(lake, CUSTOMER_ORDERS.output.path)}


@pytest.mark.parametrize("table_read", ["held", "spark"])
def test_order_joins_end_to_end(lake, spark, now, table_read, monkeypatch):
    if table_read == "spark":  # the lookups' read of a table too large to hold here
        monkeypatch.setattr(held_read, "holds", lambda snapshot: False)
    # Customer 999 orders before its row exists; "nobody" has no customer number.
    deliver(lake, spark, now, [
        change_line("c", 123, lsn=10, minute=0, name="Ada"),
        change_line("c", 7, lsn=11, minute=0, name="Bob"),
        change_line("c", 8, lsn=12, minute=0, name="Cy"),
    ], [
        order_line("o1", 30, customer=123, total=10.5), order_line("o3", 30, customer=7, total=1),
        order_line("o4", 30, customer=999, total=3),
        order_line("o5", 30, customer=1, total=1).replace("u-000001", "nobody"),
    ], CUSTOMER_ORDERS.consumer)
    zero = Decimal("0.00")
    assert totals(lake) == {
        123: ("Ada", "NL", 1, Decimal("10.50"), local(at(30)), False, 0),
        7: ("Bob", "NL", 1, Decimal("1.00"), local(at(30)), False, 0),
        8: ("Cy", "NL", 0, zero, None, False, 0),
        999: (None, None, 1, Decimal("3.00"), local(at(30)), False, 0),
    }
    assert [(r["event_id"], r["reason"]) for r in rows(lake, CUSTOMER_ORDERS.rejected.path)] == [
        ("o5", "null_key")
    ]

    # 123 moves at minute 60, 7 is deleted, 999's row arrives; 123 orders again, and o6
    # (minute 45, before the move) arrives late.
    deliver(lake, spark, now, [
        change_line("u", 123, lsn=20, minute=60, name="Ada", country="DE"),
        change_line("d", 7, lsn=21, minute=60),
        change_line("c", 999, lsn=22, minute=60, name="Dee"),
    ], [
        order_line("o2", 90, customer=123, total=5.25), order_line("o6", 45, customer=123, total=1),
    ], CUSTOMER_ORDERS.consumer, SHOP.consumer_of("customers"), ORDERS_ENRICHED.consumer,
       ORDERS_AS_OF.consumer)
    assert totals(lake) == {
        123: ("Ada", "DE", 3, Decimal("16.75"), local(at(90)), False, 1),
        7: (None, None, 1, Decimal("1.00"), local(at(30)), True, 1),  # totals kept
        8: ("Cy", "NL", 0, zero, None, False, 0),  # untouched
        999: ("Dee", "NL", 1, Decimal("3.00"), local(at(30)), False, 1),
    }
    missing = (None, None, False)
    # Enrichment: the rows as they are when the orders are processed.
    assert by_order(lake, ORDERS_ENRICHED) == {
        "o-o1": (123, "Ada", "DE", True), "o-o2": (123, "Ada", "DE", True),
        "o-o6": (123, "Ada", "DE", True), "o-o3": (7, *missing),
        "o-o4": (999, "Dee", "NL", True), "o-o5": (None, *missing),
    }
    # As of each order's time: the later move does not reach back to o1, and the late o6
    # still gets the version valid at minute 45.
    assert by_order(lake, ORDERS_AS_OF) == {
        "o-o1": (123, "Ada", "NL", True), "o-o2": (123, "Ada", "DE", True),
        "o-o6": (123, "Ada", "NL", True), "o-o3": (7, "Bob", "NL", True),
        "o-o4": (999, *missing), "o-o5": (None, *missing),
    }

    # The same as a batch join of all orders with the compacted table.
    customers = lake.read(lake.snapshot(COMPACTED["customers"].path))
    orders = lake.read(lake.snapshot(ORDERS.path)).select(
        F.expr("try_cast(substr(user_id, 3) as bigint)").alias("customer_id"),
        "total", "event_time",
    ).where("customer_id is not null")
    per_customer = orders.groupBy("customer_id").agg(
        F.count("*").alias("orders"),
        F.sum(F.col("total").cast("decimal(18,2)")).alias("revenue"),
        F.max("event_time").alias("last_order_time"),
    )
    expected = per_customer.join(customers, "customer_id", "full").select(
        "customer_id", "name", "email", "country",
        F.coalesce("orders", F.lit(0).cast("long")).alias("orders"),
        F.coalesce("revenue", F.lit(0)).cast("decimal(18,2)").alias("revenue"),
        "last_order_time", "_position", F.coalesce("_deleted", F.lit(False)).alias("_deleted"),
    )
    actual = lake.read(lake.snapshot(CUSTOMER_ORDERS.output.path)).drop("batch")
    assertDataFrameEqual(actual, expected, checkRowOrder=False)
