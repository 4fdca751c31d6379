"""The demo shop's joins: searches with their clicks, orders with their customers.

Demo users ``u-000123`` are the shop database's customer 123 (`CUSTOMER_KEY`).
"""

from __future__ import annotations

from datetime import timedelta

from lakelog.consumers.watermarks import Watermark
from lakelog.demo.shop import CLICKS, ORDERS, SEARCHES
from lakelog.demo.shop_cdc import COMPACTED, HISTORY
from lakelog.joins import AsOfJoin, ChangelogJoin, EnrichJoin, Side, TableJoin, WindowJoin

CUSTOMER_KEY = "try_cast(substr(user_id, 3) as bigint)"
CUSTOMER_COLUMNS = (("name", "name"), ("email", "email"), ("country", "country"))
ORDER = Side(
    ORDERS,
    (
        ("order_id", "order_id"),
        ("event_id", "event_id"),
        ("user_id", "user_id"),
        ("session_id", "session_id"),
        ("cart_id", "cart_id"),
        ("items", "items"),
        ("total", "total"),
        ("order_time", "event_time"),
    ),
)

#: Click-through: every search with the clicks on its results within the hour after it; once
#: that hour has passed the watermark, every search without a click; and once the watermark has
#: passed a click, every click whose search never came (it was a dead letter, or late): a full
#: outer join, so upstream loss shows.
SEARCH_CLICKS = WindowJoin(
    name="search_clicks",
    left=Side(
        SEARCHES,
        (
            ("search_event_id", "event_id"),
            ("query_id", "query_id"),
            ("user_id", "user_id"),
            ("session_id", "session_id"),
            ("query", "query"),
            ("search_time", "event_time"),
        ),
    ),
    right=Side(
        CLICKS,
        (
            ("click_event_id", "event_id"),
            ("product_id", "product_id"),
            ("position", "position"),
            ("click_time", "event_time"),
        ),
    ),
    keys=("session_id", "query_id"),
    within=timedelta(hours=1),
    watermark=Watermark(lateness=timedelta(minutes=10), idle_timeout=timedelta(minutes=5)),
    matched="clicked",
    how="full",
)

ORDERS_ENRICHED = EnrichJoin(
    name="orders_enriched",
    stream=ORDER,
    table=COMPACTED["customers"],
    key=(CUSTOMER_KEY,),
    columns=CUSTOMER_COLUMNS,
    found="customer_found",
)

ORDERS_AS_OF = AsOfJoin(
    name="orders_as_of",
    stream=ORDER,
    table=HISTORY["customers"],
    key=(CUSTOMER_KEY,),
    columns=(*CUSTOMER_COLUMNS, ("customer_valid_from", "valid_from")),
    found="customer_found",
)

CUSTOMER_ORDERS = TableJoin(
    name="customer_orders",
    facts=ORDERS,
    key=(CUSTOMER_KEY,),
    table=COMPACTED["customers"],
    columns=CUSTOMER_COLUMNS,
    count="orders",
    amount="revenue",
    amount_of="total",
    last="last_order_time",
)

#: Every product with its stock: the products and inventory tables joined from their change
#: streams (a changelog join may join on any columns; these two share their key).
PRODUCT_STOCK = ChangelogJoin(
    name="product_stock",
    left=COMPACTED["products"],
    right=COMPACTED["inventory"],
    on=(("product_id", "product_id"),),
    left_columns=(("product_id", "product_id"), ("name", "name"), ("category", "category"),
                  ("price", "price")),
    right_columns=(("warehouse", "warehouse"), ("quantity", "quantity")),
    how="left",
)

JOINS = {
    j.name: j
    for j in (SEARCH_CLICKS, ORDERS_ENRICHED, ORDERS_AS_OF, CUSTOMER_ORDERS, PRODUCT_STOCK)
}
