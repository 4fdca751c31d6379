"""The demo shop's windowed aggregates: one per window kind, both emit modes.

- ``revenue_per_minute`` — tumbling minutes over ``orders``: order count, revenue, average,
  largest and smallest order, approximate distinct customers. Update mode.
- ``product_views_10m`` — 10-minute windows every minute over product page views, per product:
  views and approximate distinct viewers.
- ``order_value_rolling`` — for every order, the shop's orders and revenue in the hour up to it
  (sliding, no group: a shop-wide rolling hour, the number a live revenue dashboard shows;
  per user it would almost always be a single order).
- ``user_sessions`` — a user's page views and orders with gaps under 30 minutes form a session:
  pages viewed, orders placed and whether the session converted. Final mode: a session is
  published once the watermark has passed its end.

The workload delivers some events minutes late; two minutes of allowed lateness keep most of them
on time, the rest land in ``streams/<name>_late``. A quiet stream closes its windows after five
minutes without records.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.consumers.watermarks import Watermark
from lakelog.windows import (
    ApproxDistinct,
    Avg,
    Count,
    Hopping,
    Max,
    Min,
    Session,
    Sliding,
    Sum,
    Tumbling,
    WindowedAggregate,
)

WATERMARK = Watermark(lateness=timedelta(minutes=2), idle_timeout=timedelta(minutes=5))


def product_views(records: Mapping[str, DataFrame]) -> DataFrame:
    """Page views of a product page."""
    return records["page_views"].where(F.col("product_id").isNotNull())


def session_events(records: Mapping[str, DataFrame]) -> DataFrame:
    """Page views and orders as one stream of a user's activity."""
    columns = ["event_id", "event_time", "user_id"]
    views = records["page_views"].select(
        *columns, "page", F.lit(None).cast("string").alias("order_id"),
        F.lit(False).alias("is_order"),
    )
    orders = records["orders"].select(
        *columns, F.lit(None).cast("string").alias("page"), "order_id",
        F.lit(True).alias("is_order"),
    )
    return views.unionByName(orders)


REVENUE_PER_MINUTE = WindowedAggregate(
    name="revenue_per_minute",
    topics=("orders",),
    window=Tumbling(timedelta(minutes=1)),
    aggregates=(
        Count("orders"),
        Sum("revenue", "total"),
        Avg("avg_order", "total"),
        Max("max_order", "total"),
        Min("min_order", "total"),
        ApproxDistinct("customers", "user_id"),
    ),
    watermark=WATERMARK,
)

PRODUCT_VIEWS_10M = WindowedAggregate(
    name="product_views_10m",
    topics=("page_views",),
    window=Hopping(size=timedelta(minutes=10), hop=timedelta(minutes=1)),
    aggregates=(Count("views"), ApproxDistinct("viewers", "user_id")),
    group_by=("product_id",),
    watermark=WATERMARK,
    prepare=product_views,
    prepare_keeps_time=True,
)

ORDER_VALUE_ROLLING = WindowedAggregate(
    name="order_value_rolling",
    topics=("orders",),
    window=Sliding(timedelta(hours=1)),
    aggregates=(Count("orders"), Sum("revenue", "total"), Avg("avg_order", "total")),
    watermark=WATERMARK,
)

USER_SESSIONS = WindowedAggregate(
    name="user_sessions",
    topics=("page_views", "orders"),
    window=Session(gap=timedelta(minutes=30)),
    aggregates=(
        Count("pages", "page"),
        Count("orders", "order_id"),
        Max("converted", "is_order", dtype=T.BooleanType()),
    ),
    group_by=("user_id",),
    watermark=WATERMARK,
    emit="final",
    prepare=session_events,
    prepare_keeps_time=True,
)

WINDOWS: dict[str, WindowedAggregate] = {
    w.name: w
    for w in (REVENUE_PER_MINUTE, PRODUCT_VIEWS_10M, ORDER_VALUE_ROLLING, USER_SESSIONS)
}
