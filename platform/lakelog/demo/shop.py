"""The demo web shop: its topics and its downstream consumers.

Every topic is keyed by `user_id`, so one user's events stay in order in one log partition, and
carries the three timestamps of DESIGN.md (device event, device send, server receive).
"""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.consumers import BatchInput, Consumer, Output
from lakelog.demo.carts import CartAggregate
from lakelog.log.topics import EventTime, Retention, Topic

PARTITIONS = 4

TIMES = [
    T.StructField("device_time", T.TimestampType(), False),
    T.StructField("sent_time", T.TimestampType(), False),
    T.StructField("received_time", T.TimestampType(), False),
]
CLOCKS = EventTime(event="device_time", sent="sent_time", received="received_time")
RETENTION = Retention(time=timedelta(days=7))


def _topic(name: str, fields: list[T.StructField]) -> Topic:
    schema = T.StructType(
        [
            T.StructField("event_id", T.StringType(), False),
            T.StructField("user_id", T.StringType(), False),
            *fields,
            *TIMES,
        ]
    )
    return Topic(
        name, schema, key="user_id", partitions=PARTITIONS, time=CLOCKS, retention=RETENTION
    )


PAGE_VIEWS = _topic(
    "page_views",
    [
        T.StructField("session_id", T.StringType(), False),
        T.StructField("page", T.StringType(), False),  # home | product | search | cart
        T.StructField("product_id", T.StringType()),  # set when page == "product"
    ],
)
SEARCHES = _topic(
    "searches",
    [
        T.StructField("session_id", T.StringType(), False),
        T.StructField("query_id", T.StringType(), False),
        T.StructField("query", T.StringType(), False),
        T.StructField("results", T.ArrayType(T.StringType())),  # product ids, best first
    ],
)
CLICKS = _topic(
    "clicks",
    [
        T.StructField("session_id", T.StringType(), False),
        T.StructField("query_id", T.StringType(), False),
        T.StructField("product_id", T.StringType(), False),
        T.StructField("position", T.IntegerType(), False),  # 1-based rank in the results
    ],
)
CART_EVENTS = _topic(
    "cart_events",
    [
        T.StructField("session_id", T.StringType(), False),
        T.StructField("cart_id", T.StringType(), False),
        T.StructField("action", T.StringType(), False),  # add | remove | checkout
        T.StructField("product_id", T.StringType()),  # null for checkout
        T.StructField("quantity", T.IntegerType()),  # null for checkout
        T.StructField("unit_price", T.DoubleType()),  # null for checkout
    ],
)
ORDER_ITEM = T.StructType(
    [
        T.StructField("product_id", T.StringType()),
        T.StructField("quantity", T.IntegerType()),
        T.StructField("unit_price", T.DoubleType()),
    ]
)
ORDERS = _topic(
    "orders",
    [
        T.StructField("session_id", T.StringType(), False),
        T.StructField("order_id", T.StringType(), False),
        T.StructField("cart_id", T.StringType(), False),
        T.StructField("items", T.ArrayType(ORDER_ITEM), False),
        T.StructField("total", T.DoubleType(), False),
    ],
)

TOPICS: dict[str, Topic] = {
    t.name: t for t in (PAGE_VIEWS, SEARCHES, CLICKS, CART_EVENTS, ORDERS)
}

MONEY = T.DecimalType(18, 2)

PRODUCT_STATS = Output(
    path="streams/product_stats",
    schema=T.StructType(
        [
            T.StructField("product_id", T.StringType()),
            T.StructField("views", T.LongType()),
            T.StructField("cart_adds", T.LongType()),
            T.StructField("cart_removes", T.LongType()),
            T.StructField("orders", T.LongType()),
            T.StructField("units_sold", T.LongType()),
            T.StructField("revenue", MONEY),
            T.StructField("last_event_time", T.TimestampType()),
        ]
    ),
    keys=("product_id",),
)
MEASURES = ("views", "cart_adds", "cart_removes", "orders", "units_sold", "revenue")


def _zeros(df: DataFrame, **values) -> DataFrame:
    """`df` (product_id, event_time, some measures) with every measure, zero where absent."""
    columns = [F.col("product_id"), F.col("event_time")]
    for measure in MEASURES:
        default = F.lit(0).cast(MONEY if measure == "revenue" else "long")
        columns.append(values.get(measure, default).alias(measure))
    return df.select(*columns)


def product_deltas(
    page_views: DataFrame, cart_events: DataFrame, orders: DataFrame
) -> DataFrame:
    """Per product, what these records add to the running totals."""
    views = _zeros(page_views.where(F.col("product_id").isNotNull()), views=F.lit(1).cast("long"))
    carts = _zeros(
        cart_events.where(F.col("action").isin("add", "remove")),
        cart_adds=(F.col("action") == "add").cast("long"),
        cart_removes=(F.col("action") == "remove").cast("long"),
    )
    items = orders.select("event_time", F.explode("items").alias("item")).select(
        "event_time", "item.*"
    )
    sold = _zeros(
        items,
        orders=F.lit(1).cast("long"),
        units_sold=F.col("quantity").cast("long"),
        revenue=(F.col("quantity") * F.col("unit_price").cast(MONEY)).cast(MONEY),
    )
    return (
        views.unionByName(carts)
        .unionByName(sold)
        .groupBy("product_id")
        .agg(
            *[F.sum(m).cast(PRODUCT_STATS.schema[m].dataType).alias(m) for m in MEASURES],
            F.max("event_time").alias("last_event_time"),
        )
    )


def add_to_totals(current: DataFrame, deltas: DataFrame) -> DataFrame:
    """New totals for the products in `deltas` (current totals of other products unchanged)."""
    old = current.select(
        "product_id", *[F.col(m).alias(f"_old_{m}") for m in MEASURES],
        F.col("last_event_time").alias("_old_last"),
    )
    joined = deltas.join(old, "product_id", "left")
    return joined.select(
        "product_id",
        *[
            (F.col(m) + F.coalesce(F.col(f"_old_{m}"), F.lit(0)))
            .cast(PRODUCT_STATS.schema[m].dataType)
            .alias(m)
            for m in MEASURES
        ],
        F.greatest("last_event_time", "_old_last").alias("last_event_time"),
    )


def product_stats_transform(batch: BatchInput) -> dict[str, DataFrame]:
    deltas = product_deltas(
        batch.records["page_views"], batch.records["cart_events"], batch.records["orders"]
    )
    return {PRODUCT_STATS.path: add_to_totals(batch.current(PRODUCT_STATS), deltas)}


PRODUCT_STATS_CONSUMER = Consumer(
    name="product_stats",
    topics=("page_views", "cart_events", "orders"),
    outputs=(PRODUCT_STATS,),
    transform=product_stats_transform,
)

#: The shopping cart as an event-sourced aggregate of the cart_events commands; its checkouts
#: become orders, published to the topic ``cart_orders`` by `lakelog.sourcing.publish_outbox`.
CARTS = CartAggregate()

CONSUMERS: dict[str, Consumer] = {c.name: c for c in (PRODUCT_STATS_CONSUMER, CARTS.consumer)}
