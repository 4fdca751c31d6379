"""An event-sourced aggregate of a user's own, not the demo's carts: account balances folded
from the `PAYMENTS` topic's amounts, and every amount of at least `large` decided as an event
that the outbox relay publishes to a topic. Tests use it to show that the
engine, the Pipeline and the Dagster layer know aggregates only through `lakelog.sourcing`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.consumers import BatchInput, Consumer, Output, checkpoints
from lakelog.errors import ConcurrentWriteError
from lakelog.lake import AppTxn, Lake, already_committed
from lakelog.log.offsets import read_offsets, topic_snapshot
from lakelog.log.topics import EventTime, Topic
from lakelog.sourcing import REBUILDS, Difference, ReplayCheck

PAYMENT = T.StructType([
    T.StructField("event_id", T.StringType(), False),
    T.StructField("user_id", T.StringType(), False),
    T.StructField("amount", T.DoubleType()),
    T.StructField("device_time", T.TimestampType(), False),
])
PAYMENTS = Topic("payments", PAYMENT, key="user_id", partitions=3,
                 time=EventTime("device_time"))
BASE = datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc)


def payment(i: int) -> dict:
    """Payment `i`: user ``u{i % 7}`` moves ``i`` (so payments ``large..`` are large)."""
    moment = BASE + timedelta(seconds=i)
    return {"event_id": f"e{i}", "user_id": f"u{i % 7}", "amount": float(i),
            "device_time": moment.strftime("%Y-%m-%dT%H:%M:%S.000Z")}


BALANCE = T.StructType([
    T.StructField("user_id", T.StringType()),
    T.StructField("balance", T.DoubleType()),
    T.StructField("commands", T.LongType()),
])
LARGE = PAYMENT
OUTBOX = T.StructType([*LARGE.fields, T.StructField("batch", T.LongType()),
                       T.StructField("partition", T.IntegerType()),
                       T.StructField("offset", T.LongType())])


@dataclass(frozen=True)
class Ledger:
    name: str = "ledger"
    topic: str = PAYMENTS.name
    large: float = 10.0

    outbox_order = ("_batch", "_partition", "_offset")

    @property
    def state(self) -> Output:
        return Output(f"streams/{self.name}_balances", BALANCE, keys=("user_id",))

    @property
    def outbox(self) -> Output:
        return Output(f"streams/{self.name}_large", OUTBOX)

    @property
    def outbox_topic(self) -> Topic:
        return Topic(f"{self.name}_large", LARGE, key="user_id", partitions=2,
                     time=EventTime("device_time"))

    @property
    def consumer(self) -> Consumer:
        return Consumer(name=f"aggregate.{self.name}", topics=(self.topic,),
                        outputs=(self.outbox, self.state), transform=self.transform)

    def transform(self, batch: BatchInput) -> dict[str, DataFrame]:
        stored = batch.outputs[self.state.path]
        if already_committed(stored, AppTxn(self.consumer.app_id, batch.batch)):
            raise ConcurrentWriteError(f"batch {batch.batch} of {self.name} is committed")
        records = batch.records[self.topic]
        moved = records.groupBy("user_id").agg(F.sum("amount").alias("moved"),
                                               F.count("*").alias("n"))
        prior = batch.lake.read(stored)
        state = moved.join(prior, "user_id", "left").select(
            "user_id",
            (F.coalesce("balance", F.lit(0.0)) + F.col("moved")).alias("balance"),
            (F.coalesce("commands", F.lit(0)) + F.col("n")).alias("commands"),
        )
        decided = records.where(F.col("amount") >= self.large).select(
            *LARGE.fieldNames(), F.lit(batch.batch).cast("long").alias("batch"),
            "partition", "offset",
        )
        return {self.outbox.path: decided, self.state.path: state}

    def outbox_records(self, rows: DataFrame, *, now: datetime) -> DataFrame:
        return rows.select(
            F.col("user_id").alias("key"), "event_id", F.col("device_time").alias("event_time"),
            "user_id", "amount", "device_time",
            F.create_map(F.lit("source"), F.lit(self.consumer.name)).alias("headers"),
            F.lit(now).cast("timestamp").alias("ingest_time"),
            F.col("batch").alias("_batch"), F.col("partition").alias("_partition"),
            F.col("offset").alias("_offset"),
        )

    def verify(self, lake: Lake, commands: Topic) -> ReplayCheck:
        """The balances summed again from the log up to the committed offsets."""
        checkpoint = checkpoints.load(lake, self.consumer.name)
        upto = {p: o for (t, p), o in checkpoint.committed.items() if t == commands.name}
        log = read_offsets(lake, topic_snapshot(lake, commands),
                           {p: (0, end) for p, end in upto.items()})
        rebuilt = log.groupBy("user_id").agg(F.sum("amount").alias("expected"))
        live = lake.read(lake.snapshot(self.state.path)).select("user_id", "balance")
        rows = live.join(rebuilt, "user_id", "full_outer").collect()
        wrong = [r for r in rows if r["expected"] != r["balance"]]
        differences = tuple(
            Difference(r["user_id"], rebuild, {"balance": r["expected"]}, {"balance": r["balance"]})
            for r in wrong for rebuild in REBUILDS[:1]
        )
        none = dict.fromkeys(REBUILDS, 0)
        return ReplayCheck(
            batch=checkpoint.batch, offsets=upto,
            states=sum(r["balance"] is not None for r in rows), from_snapshots=0,
            unverifiable=none, mismatches={**none, "full_replay": len(wrong)},
            differences=differences,
        )
