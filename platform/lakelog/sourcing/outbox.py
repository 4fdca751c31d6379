"""Publishing an aggregate's decided events to a topic exactly once: the outbox and its relay.

Why not append to the topic from inside the microbatch: a consumer's transform may run several
times for one batch (retries, a run racing a resumed one) and should stay a pure function of its
input. Why not stop at the table: downstream consumers read topics (offsets, lag, sensors), not
tables. So each of the two steps gets the guarantee it needs:

1. **decide** — the aggregate's consumer writes each batch's events to its outbox table with the
   batch number, in the same exactly-once microbatch as its state (application transaction
   ``(consumer, batch)``): a retry either finds them committed or recomputes the same rows from
   the same records and prior state.
2. **publish** — `publish_outbox` appends the outbox rows of the batches after its cursor to the
   topic in one commit that also records the cursor, as the application transaction
   ``(lakelog.outbox:<consumer>, last batch)`` of the topic table. Data and cursor commit
   together: a crash before the commit published nothing, one after it advanced the cursor, so
   the next relay starts after it. Batches reach the outbox in order (a batch starts only once
   the one before committed), so nothing at or below the cursor can appear later. Two relays at
   once conflict on the log's append guard; the loser re-reads the cursor and publishes only
   what is still missing, or nothing.

Downstream consumers read the topic like any other: offsets, lag, exactly-once batches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakelog.consumers import BatchResult, run_until_caught_up
from lakelog.lake import AppTxn, Lake, Snapshot
from lakelog.log.offsets import append
from lakelog.log.topics import Topic
from lakelog.sourcing.aggregate import Aggregate

METADATA_KEY = "lakelog.outbox"


@dataclass(frozen=True)
class PublishResult:
    events: int
    #: The consumer batches published, ``(first, last)``; None if there was nothing to publish.
    batches: tuple[int, int] | None = None
    version: int | None = None  # the topic version written


def relay_app_id(aggregate: Aggregate) -> str:
    return f"lakelog.outbox:{aggregate.consumer.name}"


def published_through(lake: Lake, aggregate: Aggregate) -> int:
    """The last consumer batch whose events are in the topic (-1 if none)."""
    topic = aggregate.outbox_topic
    if not lake.exists(topic.path):
        return -1
    version = lake.snapshot(topic.path).txn_version(relay_app_id(aggregate))
    return -1 if version is None else version


def decided_through(lake: Lake, aggregate: Aggregate) -> int:
    """The last consumer batch whose events are in the outbox (-1 if none), from file statistics."""
    path = aggregate.outbox.path
    if not lake.exists(path):
        return -1
    return max((int(f.max_values["batch"]) for f in lake.snapshot(path).files()), default=-1)


def publish_outbox(lake: Lake, aggregate: Aggregate, *, now: datetime) -> PublishResult:
    """Append the events of every consumer batch not yet published, as one commit."""
    last, published = decided_through(lake, aggregate), published_through(lake, aggregate)
    if last <= published:
        return PublishResult(0)
    outbox = lake.snapshot(aggregate.outbox.path)
    # The outbox rows still to publish, at most (their files may hold earlier batches too): a
    # record per row is what a relay publishes, so few rows are written without a Spark job.
    pending = sum(f.num_records for f in outbox.files() if f.overlaps("batch", published + 1, last))
    app = relay_app_id(aggregate)
    source = aggregate.consumer.name

    def prepare(snapshot: Snapshot) -> tuple[DataFrame, Mapping[str, Any]]:
        done = snapshot.txn_version(app)
        first = 0 if done is None else done + 1
        files = [f for f in outbox.files() if f.overlaps("batch", first, last)]
        rows = lake.read(outbox, files=files).where(F.col("batch").between(first, last))
        return aggregate.outbox_records(rows, now=now), {
            METADATA_KEY: {"consumer": source, "first_batch": first, "last_batch": last}
        }

    done = append(lake, aggregate.outbox_topic, prepare, order_by=aggregate.outbox_order,
                  txns=[AppTxn(app, last)], rows_hint=pending)
    if done is None:  # another relay published through `last` first
        return PublishResult(0)
    result, metadata = done
    return PublishResult(
        result.records, (metadata[METADATA_KEY]["first_batch"], last), result.version
    )


def consume_and_publish(
    lake: Lake,
    aggregate: Aggregate,
    topics: Mapping[str, Topic],
    *,
    now: Callable[[], datetime],
    max_batches: int | None = None,
) -> tuple[list[BatchResult], PublishResult]:
    """Microbatches of the aggregate's consumer until caught up, then the relay.

    The relay also publishes what an earlier run decided but did not publish (it crashed between
    the two steps), so calling this again after any crash completes the work.
    """
    results = run_until_caught_up(
        lake, aggregate.consumer, topics, now=now, max_batches=max_batches
    )
    return results, publish_outbox(lake, aggregate, now=now())
