"""The shopping-cart aggregate: a consumer that folds a cart topic's commands into cart state.

Each microbatch reads the stored state of only the carts its records touch
(`lakelog.lake.upsert.candidate_files` prunes the clustered state files by cart id), folds the batch's commands
onto it (`lakelog.demo.carts.fold`) and writes, as one exactly-once microbatch (`lakelog.consumers`):

- ``streams/<name>_rejections`` — appended: every refused command, with its reason;
- ``streams/<name>_snapshots`` — appended: a cart's state every `snapshot_every` accepted events;
- ``streams/<name>_orders`` — appended: the order of every accepted checkout, with the batch
  that decided it (the outbox `lakelog.sourcing.publish_outbox` relays to the orders topic);
- ``streams/<name>_state`` — upserted by cart id: the current state of every changed cart.

The state is committed last. A retry recomputes the outputs its batch has not committed yet,
and reads the state table as it is at the retry; committing the state last means that once it
holds the batch, nothing is left to recompute — so a transform always folds onto the state from
before its batch (and refuses to run otherwise). Carts continue across batches from their stored
state, and a cart's commands are all in one log partition, so any split of the log into
microbatches folds each cart's commands in the same order: the result equals one batch.

`CartAggregate` is the demo's implementation of `lakelog.sourcing.Aggregate`: the engine, the
Dagster assets and the sensors know it only through that interface.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakelog.consumers import BatchInput, Changes, Consumer, Output, Role
from lakelog.demo.carts import fold
from lakelog.demo.carts.schemas import ORDER_EVENT, OUTBOX, REJECTION, STATE
from lakelog.errors import ConcurrentWriteError, ConfigError
from lakelog.lake import AppTxn, Lake, already_committed
from lakelog.lake.upsert import candidate_files
from lakelog.log.topics import EventTime, Retention, Topic
from lakelog.sourcing import ReplayCheck
from lakelog.spark import literals

NAME = re.compile(r"^[a-z][a-z0-9_]{0,49}$")
KEY = ("cart_id",)


@dataclass(frozen=True)
class CartAggregate:
    """The cart aggregate over `topic` (fields as the demo's ``cart_events``)."""

    name: str = "cart"
    topic: str = "cart_events"
    snapshot_every: int = 10
    #: Log partitions of the orders topic the relay publishes to.
    order_partitions: int = 4
    order_retention: Retention = Retention()
    #: Cart states per file, clustered by cart id so a batch reads only its carts' files.
    rows_per_file: int | None = 250_000
    max_records_per_batch: int = 250_000

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise ConfigError(
                f"cart aggregate name {self.name!r} must be lowercase letters, digits and '_'"
            )
        if self.snapshot_every < 1:
            raise ConfigError(f"cart aggregate {self.name}: snapshot_every must be >= 1")

    @property
    def state(self) -> Output:
        return Output(
            f"streams/{self.name}_state", STATE, keys=KEY, newer_by="version",
            rows_per_file=self.rows_per_file,
        )

    @property
    def snapshots(self) -> Output:
        return Output(f"streams/{self.name}_snapshots", STATE)

    @property
    def rejections(self) -> Output:
        return Output(f"streams/{self.name}_rejections", REJECTION, role=Role.REJECTED)

    @property
    def outbox(self) -> Output:
        """The orders of accepted checkouts, each with the batch that decided it."""
        return Output(f"streams/{self.name}_orders", OUTBOX)

    @property
    def outbox_topic(self) -> Topic:
        """The topic checkouts' orders are published to, for downstream consumers."""
        return Topic(
            f"{self.name}_orders", ORDER_EVENT, key="user_id", partitions=self.order_partitions,
            time=EventTime(event="checkout_time"), retention=self.order_retention,
        )

    @property
    def consumer(self) -> Consumer:
        return Consumer(
            name=f"aggregate.{self.name}",
            topics=(self.topic,),
            outputs=(self.rejections, self.snapshots, self.outbox, self.state),  # state last
            transform=self.transform,
            max_records_per_batch=self.max_records_per_batch,
        )

    def transform(self, batch: BatchInput) -> dict[str, DataFrame | Changes]:
        stored = batch.outputs[self.state.path]
        if already_committed(stored, AppTxn(self.consumer.app_id, batch.batch)):
            # Only another run can have committed the state while outputs it read were pending.
            raise ConcurrentWriteError(
                f"consumer {self.consumer.name}: another run committed batch {batch.batch} "
                "first; nothing was written"
            )
        commands = fold.commands(batch.records[self.topic])
        files = candidate_files(stored, commands, KEY)
        prior = batch.lake.read(stored, files=files, keys=commands.select(*KEY).distinct(),
                                key_columns=KEY)
        # Computed once, by the first write: four outputs are cut from it.
        folded = batch.cached(
            fold.fold(commands, prior, topic=self.topic, snapshot_every=self.snapshot_every)
        )
        return {
            self.rejections.path: fold.rejections(folded),
            self.snapshots.path: fold.snapshots(folded),
            self.outbox.path: fold.orders(folded).withColumn("batch", F.lit(batch.batch)),
            # The files read hold every stored state of the batch's carts.
            self.state.path: Changes(fold.states(folded), files=files),
        }

    #: Orders are published in the order they were decided: batch, then log position.
    outbox_order = ("_batch", "_partition", "_offset")

    def outbox_records(self, rows: DataFrame, *, now: datetime) -> DataFrame:
        """Outbox rows as orders-topic records (envelope without partition and offset)."""
        return rows.select(
            F.col("user_id").alias("key"),
            F.col("order_id").alias("event_id"),
            F.col("checkout_time").alias("event_time"),
            "user_id", "session_id", "order_id", "cart_id", "items", "total", "checkout_time",
            F.create_map(
                F.lit("source"), F.lit(self.consumer.name),
                F.lit("batch"), F.col("batch").cast("string"),
            ).alias("headers"),
            literals.timestamp(now).alias("ingest_time"),
            F.col("batch").alias("_batch"),
            F.col("partition").alias("_partition"),
            F.col("offset").alias("_offset"),
        )

    def verify(self, lake: Lake, commands: Topic) -> ReplayCheck:
        """Both rebuilds of `lakelog.demo.carts.replay` compared with the live state."""
        from lakelog.demo.carts.replay import verify  # replay builds on this module

        return verify(lake, self, commands)
