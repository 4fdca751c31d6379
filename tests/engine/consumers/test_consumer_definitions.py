"""A consumer's definition as its checkpoint keeps it: the text of a declaration, and which
differences refuse a batch (`lakelog.consumers.definitions`). Plain Python: no Spark."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta

import pytest
from pyspark.sql import types as T

from lakelog.consumers import Consumer, checkpoints
from lakelog.consumers.definitions import DEFINITION, check, described, kept
from lakelog.demo.shop_joins import CUSTOMER_ORDERS, PRODUCT_STOCK, SEARCH_CLICKS
from lakelog.errors import DefinitionChangedError
from lakelog.windows import Count, Hopping, Session, Sliding, Sum, WindowedAggregate
from lakelog.windows.aggregates import Aggregation
from lakelog.windows.consumer import definition

SESSIONS = WindowedAggregate("visits", ("events",), Session(gap=timedelta(minutes=30)),
                             (Count("pages"),), group_by=("user_id",), emit="final")


def checkpoint(state) -> checkpoints.Checkpoint:
    return checkpoints.Checkpoint("window.visits", None, 3, {}, None, state)


def test_a_declaration_is_its_class_and_the_fields_it_sets():
    assert described(Hopping(timedelta(minutes=10), timedelta(minutes=1))) == (
        "Hopping(size=0:10:00, hop=0:01:00)")
    assert described(Sum("revenue", "total")) == "Sum(name=revenue, column=total)"
    assert described(Sum("units", "quantity", dtype=T.LongType())) == (
        "Sum(name=units, column=quantity, dtype=bigint)")

    @dataclass(frozen=True)
    class Scaled(Count):  # a user's own aggregation, with a function among its fields
        scale: object = field(default=None)

    # A function is shown by its type: its repr (an address) changes from process to process.
    assert described(Scaled("n", scale=lambda x: 2 * x)) == "Scaled(name=n, scale=function)"
    assert isinstance(Scaled("n"), Aggregation)
    assert dict(definition(SESSIONS)) == {
        "window": "Session(gap=0:30:00)", "emit": "final", "group_by": "user_id string",
        "aggregates": "Count(name=pages)", "late": "drop"}


def test_what_a_change_refuses_and_what_it_takes():
    consumer = SESSIONS.consumer
    state = kept(consumer, {"watermark_us": 1})
    assert state["watermark_us"] == 1 and state[DEFINITION]["emit"] == "final"
    check(consumer, checkpoint(state))  # the same declaration
    check(consumer, checkpoint({"watermark_us": 1}))  # none kept yet (an earlier lakelog)
    later = replace(SESSIONS, watermark=replace(SESSIONS.watermark, lateness=timedelta(hours=1)))
    check(later.consumer, checkpoint(state))  # the lateness leaves the windows as they were
    # A name the kept definition lacks (one a later lakelog added) is taken as declared.
    check(consumer, checkpoint({DEFINITION: {k: v for k, v in state[DEFINITION].items()
                                             if k != "late"}}))
    # Final windows leave the state once published: under 'correct' a late record would make
    # a window of its own that replaces the published one.
    with pytest.raises(DefinitionChangedError, match=r"late 'drop' -> 'correct'"):
        check(replace(SESSIONS, late="correct").consumer, checkpoint(state))
    with pytest.raises(DefinitionChangedError, match=r"group_by 'user_id string' -> "
                       r"'user_id string, device string'"):
        check(replace(SESSIONS, group_by=("user_id", "device")).consumer, checkpoint(state))
    # In update mode, or for sliding windows (kept in the state), the policy may change.
    rolling = WindowedAggregate("rolling", ("events",), Sliding(timedelta(hours=1)),
                                (Sum("revenue", "total"),), emit="final")
    check(replace(rolling, late="correct").consumer,
          checkpoint(kept(rolling.consumer, {})))
    plain = Consumer("copy", ("events",), (), lambda batch: {})
    assert kept(plain, {"x": 1}) == {"x": 1}  # a consumer without a definition keeps none


def test_a_window_join_keeps_its_keys_window_and_emitted_sides():
    state = kept(SEARCH_CLICKS.consumer, {})
    check(replace(SEARCH_CLICKS, matched=SEARCH_CLICKS.matched).consumer, checkpoint(state))
    with pytest.raises(DefinitionChangedError, match=r"within '1:00:00' -> '0:10:00'"):
        check(replace(SEARCH_CLICKS, within=timedelta(minutes=10)).consumer, checkpoint(state))
    with pytest.raises(DefinitionChangedError, match=r"how 'full' -> 'left'"):
        check(replace(SEARCH_CLICKS, how="left").consumer, checkpoint(state))


def test_a_changelog_join_keeps_its_condition_kind_and_columns():
    state = kept(PRODUCT_STOCK.consumer, {})
    assert state[DEFINITION] == {
        "topics": "cdc.inventory, cdc.products", "on": "product_id = product_id", "how": "left",
        "keys": "product_id; product_id", "left_columns": "category, name, price, product_id",
        "right_columns": "quantity, warehouse"}
    # The same columns in another order: rows are written by name.
    check(replace(PRODUCT_STOCK, left_columns=PRODUCT_STOCK.left_columns[::-1]).consumer,
          checkpoint(state))
    check(replace(PRODUCT_STOCK, max_records_per_batch=10).consumer, checkpoint(state))
    # A stored row's join value is of the earlier condition until its key changes again.
    moved = replace(PRODUCT_STOCK, on=(("product_id", "product_id"), ("name", "warehouse")))
    with pytest.raises(DefinitionChangedError, match=r"on 'product_id = product_id' -> "
                       r"'product_id = product_id, name = warehouse'"):
        check(moved.consumer, checkpoint(state))
    with pytest.raises(DefinitionChangedError, match=r"how 'left' -> 'inner'"):
        check(replace(PRODUCT_STOCK, how="inner").consumer, checkpoint(state))
    renamed = replace(PRODUCT_STOCK, right_columns=(("warehouse", "warehouse"),
                                                    ("stock", "quantity")))
    with pytest.raises(DefinitionChangedError, match=r"right_columns 'quantity, warehouse' -> "
                       r"'stock=quantity, warehouse'"):
        check(renamed.consumer, checkpoint(state))


def test_a_table_join_keeps_its_key_amount_and_attributes():
    state = kept(CUSTOMER_ORDERS.consumer, {})
    assert state[DEFINITION]["amount_of"] == "total"
    assert state[DEFINITION]["key"] == CUSTOMER_ORDERS.key[0]
    check(replace(CUSTOMER_ORDERS, rows_per_file=1000).consumer, checkpoint(state))
    # The stored totals are sums of the earlier column, per the earlier key.
    earlier = {DEFINITION: {**state[DEFINITION], "amount_of": "subtotal"}}
    with pytest.raises(DefinitionChangedError, match=r"amount_of 'subtotal' -> 'total'"):
        check(CUSTOMER_ORDERS.consumer, checkpoint(earlier))
    with pytest.raises(DefinitionChangedError, match=r"key '.*' -> 'customer_id'"):
        check(replace(CUSTOMER_ORDERS, key=("customer_id",)).consumer, checkpoint(state))
    fewer = replace(CUSTOMER_ORDERS, columns=CUSTOMER_ORDERS.columns[:1])
    with pytest.raises(DefinitionChangedError, match=r"columns '.*' -> '.*'"):
        check(fewer.consumer, checkpoint(state))
    # Renamed totals would fail the write once the batch was planned: refused before.
    with pytest.raises(DefinitionChangedError, match=r"totals 'orders, revenue, "
                       r"last_order_time' -> 'orders, spent, last_order_time'"):
        check(replace(CUSTOMER_ORDERS, amount="spent").consumer, checkpoint(state))
    # Facts of another topic would be added to the totals of the earlier one's.
    other = {DEFINITION: {**state[DEFINITION], "topics": "cdc.customers, refunds"}}
    with pytest.raises(DefinitionChangedError, match=r"topics 'cdc.customers, refunds' -> "
                       r"'cdc.customers, orders'"):
        check(CUSTOMER_ORDERS.consumer, checkpoint(other))
