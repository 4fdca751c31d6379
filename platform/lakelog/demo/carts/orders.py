"""Publishing checkouts' orders to a topic exactly once: a transactional outbox and its relay.

Why not append to the topic from inside the microbatch: a consumer's transform may run several
times for one batch (retries, a run racing a resumed one) and should stay a pure function of its
input. Why not stop at the table: downstream consumers read topics (offsets, lag, sensors), not
tables. So each of the two steps gets the guarantee it needs:

1. **decide** — the cart consumer writes each batch's orders to ``streams/<name>_orders`` with
   the batch number, in the same exactly-once microbatch as the cart state (application
   transaction ``(consumer, batch)``): a retry either finds them committed or recomputes the
   same rows from the same records and prior state.
2. **publish** — `publish_orders` appends the outbox rows of the batches after its cursor to the
   orders topic in one commit that also records the cursor, as the application transaction
   ``(lakelog.outbox:<consumer>, last batch)`` of the topic table. Data and cursor commit
   together: a crash before the commit published nothing, one after it advanced the cursor, so
   the next relay starts after it. Batches reach the outbox in order (a batch starts only once
   the one before committed), so nothing at or below the cursor can appear later. Two relays at
   once conflict on the log's append guard; the loser re-reads the cursor and publishes only
   what is still missing, or nothing.

Downstream consumers read the orders topic like any other: offsets, lag, exactly-once batches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakelog.consumers import BatchResult, run_until_caught_up
from lakelog.demo.carts.aggregate import CartAggregate
from lakelog.lake import AppTxn, Lake, Snapshot
from lakelog.log.offsets import append
from lakelog.log.topics import Topic

METADATA_KEY = "lakelog.outbox"
ORDER_BY = ("_batch", "_partition", "_offset")


@dataclass(frozen=True)
class PublishResult:
    orders: int
    #: The consumer batches published, ``(first, last)``; None if there was nothing to publish.
    batches: tuple[int, int] | None = None
    version: int | None = None  # the topic version written


def relay_app_id(aggregate: CartAggregate) -> str:
    return f"lakelog.outbox:{aggregate.consumer.name}"


def published_through(lake: Lake, aggregate: CartAggregate) -> int:
    """The last consumer batch whose orders are in the topic (-1 if none)."""
    topic = aggregate.orders_topic
    if not lake.exists(topic.path):
        return -1
    version = lake.snapshot(topic.path).txn_version(relay_app_id(aggregate))
    return -1 if version is None else version


def decided_through(lake: Lake, aggregate: CartAggregate) -> int:
    """The last consumer batch whose orders are in the outbox (-1 if none), from file statistics."""
    path = aggregate.orders.path
    if not lake.exists(path):
        return -1
    return max((int(f.max_values["batch"]) for f in lake.snapshot(path).files()), default=-1)


def _events(outbox: DataFrame, *, source: str, now: datetime) -> DataFrame:
    """Outbox rows as orders-topic records (envelope without partition and offset)."""
    return outbox.select(
        F.col("user_id").alias("key"),
        F.col("order_id").alias("event_id"),
        F.col("checkout_time").alias("event_time"),
        "user_id", "session_id", "order_id", "cart_id", "items", "total", "checkout_time",
        F.create_map(
            F.lit("source"), F.lit(source), F.lit("batch"), F.col("batch").cast("string")
        ).alias("headers"),
        F.lit(now).cast("timestamp").alias("ingest_time"),
        F.col("batch").alias("_batch"),
        F.col("partition").alias("_partition"),
        F.col("offset").alias("_offset"),
    )


def publish_orders(lake: Lake, aggregate: CartAggregate, *, now: datetime) -> PublishResult:
    """Append the orders of every consumer batch not yet published, as one commit."""
    last = decided_through(lake, aggregate)
    if last <= published_through(lake, aggregate):
        return PublishResult(0)
    outbox = lake.snapshot(aggregate.orders.path)
    topic = aggregate.orders_topic
    app = relay_app_id(aggregate)
    source = aggregate.consumer.name

    def prepare(snapshot: Snapshot) -> tuple[DataFrame, Mapping[str, Any]]:
        done = snapshot.txn_version(app)
        first = 0 if done is None else done + 1
        files = [f for f in outbox.files() if f.overlaps("batch", first, last)]
        rows = lake.read(outbox, files=files).where(F.col("batch").between(first, last))
        return _events(rows, source=source, now=now), {
            METADATA_KEY: {"consumer": source, "first_batch": first, "last_batch": last}
        }

    done = append(lake, topic, prepare, order_by=ORDER_BY, txns=[AppTxn(app, last)])
    if done is None:  # another relay published through `last` first
        return PublishResult(0)
    result, metadata = done
    return PublishResult(
        result.records, (metadata[METADATA_KEY]["first_batch"], last), result.version
    )


def consume_and_publish(
    lake: Lake,
    aggregate: CartAggregate,
    topics: Mapping[str, Topic],
    *,
    now: Callable[[], datetime],
    max_batches: int | None = None,
) -> tuple[list[BatchResult], PublishResult]:
    """Microbatches of the cart consumer until caught up, then the relay.

    The relay also publishes what an earlier run decided but did not publish (it crashed between
    the two steps), so calling this again after any crash completes the work.
    """
    results = run_until_caught_up(
        lake, aggregate.consumer, topics, now=now, max_batches=max_batches
    )
    return results, publish_orders(lake, aggregate, now=now())
