"""The demo shop's saved price alerts, matched against the products' changelog as it flows.

A shopper saves an alert — a category (or any), a maximum price, a keyword in the product name
(or any) — as a record of the ``price_alerts`` topic; a record with ``deleted`` true removes it.
`PRICE_ALERTS` percolates every created or updated product row of ``cdc.products`` through the
live alerts: ``streams/price_alert_matches`` says which product now fits whose alert. The demo
lands a deterministic set of alerts with its first batch (`alert_lines`); `lakelog produce
price_alerts FILE` adds more, which apply from the next microbatch on.
"""

from __future__ import annotations

import json
import os
import random

from pyspark.sql import types as T

from lakelog.demo.sessions import ADJECTIVES, NOUNS
from lakelog.demo.shop_cdc import CHANGELOGS
from lakelog.demo.workload import land_file
from lakelog.log.topics import Topic
from lakelog.search import Condition, Percolator

ALERTS = Topic(
    "price_alerts",
    T.StructType([
        T.StructField("event_id", T.StringType(), False),
        T.StructField("alert_id", T.StringType(), False),
        T.StructField("user_id", T.StringType(), False),
        T.StructField("category", T.StringType()),  # null: any category
        T.StructField("max_price", T.DecimalType(10, 2), False),
        T.StructField("keyword", T.StringType()),  # null: any name
        T.StructField("deleted", T.BooleanType()),
    ]),
    key="alert_id",
    partitions=2,
)

PRICE_ALERTS = Percolator(
    name="price_alert_matches",
    events=CHANGELOGS["cdc.products"],
    queries=ALERTS,
    id="alert_id",
    conditions=(
        Condition("after.category", "=", "category"),
        Condition("after.price", "<=", "max_price"),
        Condition("after.name", "contains", "keyword"),
    ),
    event_columns=(("product_id", "after.product_id"), ("product", "after.name"),
                   ("price", "after.price")),
    query_columns=(("user_id", "user_id"), ("max_price", "max_price")),
    deleted="deleted",
    where="op IN ('c', 'u')",  # a new row or a changed one (a price drop); not the snapshot
)


def alert_lines(seed: int, count: int = 60) -> list[str]:
    """`count` saved alerts of the demo's shoppers, the same for the same seed."""
    r = random.Random(f"{seed}:price-alerts")
    lines = []
    for n in range(count):
        alert = {
            "event_id": f"alert-{seed}-{n}", "alert_id": f"a-{n:04d}",
            "user_id": f"u-{r.randrange(1, 1000):06d}",
            "category": r.choice(NOUNS) if r.random() < 0.8 else None,
            "max_price": r.randrange(500, 60_000) / 100,
            "keyword": r.choice(ADJECTIVES) if r.random() < 0.5 else None,
            "deleted": False,
        }
        lines.append(json.dumps(alert))
    return lines


def land_alerts(root: str, seed: int) -> str | None:
    """Land the demo's alerts under ``<root>/landing/price_alerts/`` (once: an existing file is
    kept, so a rerun lands nothing new); the path written, or None."""
    path = os.path.join(root, "landing", ALERTS.name, f"alerts-{seed}.ndjson")
    return path if land_file(path, alert_lines(seed)) else None
