"""Small shop tables for model tests: topic rows and customer rows written straight to the lake.

The models read only a table's columns, so rows are written with `Lake.write` in the tables'
real schemas (as ingest and the compacted-table consumer would leave them) without running
ingest or a consumer: a microbatch of a test is then one commit per table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from lakelog.demo.shop import TOPICS
from lakelog.demo.shop_cdc import COMPACTED
from lakelog.lake import Lake
from lakelog.views import ModelGraph, evaluate, load_models

MODELS = Path(__file__).parents[3] / "dbt_like_views"
START = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)
CUSTOMERS = COMPACTED["customers"]
INVENTORY = COMPACTED["inventory"]
#: Every lakelog table the demo models ref.
TABLES = frozenset(
    [*(t.path for t in TOPICS.values()), *(t.path for t in COMPACTED.values()),
     "streams/search_clicks"]
)


def demo_graph() -> ModelGraph:
    return load_models(MODELS, TABLES)


def _envelope(topic: str, rows: Sequence[dict[str, Any]], first_offset: int) -> list[dict]:
    """Topic rows (all in log partition 0, offsets from `first_offset`) with every column."""
    schema = TOPICS[topic].table_schema
    full = []
    for i, row in enumerate(rows):
        moment = row["event_time"]
        values = {
            "partition": 0, "offset": first_offset + i, "key": row["user_id"],
            "event_id": f"{topic}-{first_offset + i}", "session_id": f"s-{row['user_id']}",
            "device_time": moment, "sent_time": moment, "received_time": moment,
            "headers": {}, "ingest_time": moment, **row,
        }
        full.append({name: values.get(name) for name in schema.fieldNames()})
    return full


def append(lake: Lake, spark: SparkSession, topic: str, rows: Sequence[dict[str, Any]]) -> None:
    """Append `rows` (user_id, event_time and the topic's payload fields) to ``log/<topic>``."""
    spec = TOPICS[topic]
    lake.create_table(spec.path, spec.table_schema, partition_by=["partition"])
    snapshot = lake.snapshot(spec.path)
    first = sum(f.num_records for f in snapshot.files())
    df = spark.createDataFrame(_envelope(topic, rows, first), spec.table_schema)
    lake.write(snapshot, df)


def view(user: str, product: str | None, hour: int, minute: int = 0) -> dict[str, Any]:
    return {"user_id": user, "page": "product" if product else "home", "product_id": product,
            "event_time": START + timedelta(hours=hour, minutes=minute)}


def cart_add(user: str, product: str, hour: int, quantity: int = 1) -> dict[str, Any]:
    return {"user_id": user, "cart_id": f"c-{user}", "action": "add", "product_id": product,
            "quantity": quantity, "unit_price": 10.0,
            "event_time": START + timedelta(hours=hour, minutes=5)}


def order(order_id: str, user: str, items: Iterable[tuple[str, int]], hour: int) -> dict[str, Any]:
    lines = [{"product_id": p, "quantity": q, "unit_price": 2.5} for p, q in items]
    return {"user_id": user, "order_id": order_id, "cart_id": f"c-{user}", "items": lines,
            "total": sum(q * 2.5 for _, q in items),
            "event_time": START + timedelta(hours=hour, minutes=10)}


def customer(customer_id: int, name: str, *, position: int, deleted: bool = False) -> dict:
    return {"customer_id": customer_id, "name": None if deleted else name,
            "email": None if deleted else f"{name}@shop", "country": None if deleted else "NL",
            "updated_at": START, "_position": f"{position:016d}", "_op": "d" if deleted else "u",
            "_deleted": deleted, "_commit_time": START + timedelta(seconds=position)}


def write_customers(lake: Lake, spark: SparkSession, rows: Sequence[dict[str, Any]]) -> None:
    """Make `rows` the contents of ``tables/customers``: remove its files in one commit, add the
    rows in the next. (Its consumer rewrites files in one commit; the change feed is the same,
    and a test reads the two-commit kind much faster.)"""
    output = CUSTOMERS.output
    lake.create_table(output.path, output.schema)
    if lake.snapshot(output.path).files():
        lake.write(lake.snapshot(output.path), None, mode="overwrite")
    lake.write(lake.snapshot(output.path), spark.createDataFrame(rows, output.schema))


def recomputed(lake: Lake, spark: SparkSession, graph: ModelGraph, name: str) -> DataFrame:
    """What a full refresh of `name` would write now (evaluated, not written)."""
    return evaluate(spark, graph, name, lambda path: lake.read(lake.snapshot(path)))


def stored(lake: Lake, name: str) -> DataFrame:
    return lake.read(lake.snapshot(f"views/{name}"))
