"""Rebuilding cart state from the log, and checking that it equals the live state.

Event sourcing's promise is that the state is derived data: folding the commands again gives the
same carts. Two rebuilds are offered — a full replay of the log from offset 0, and each cart's
latest snapshot plus the commands after it (cheap once history is long, and the only one left
once retention removed a cart's early commands) — and `verify` compares both with the live
``<name>_state`` table, for an asset check.

Both rebuilds stop at the consumer's committed offsets, the point the live state reflects. A
cart is compared only where the log still holds what its rebuild needs — its commands from its
first accepted one (full replay), or after its latest snapshot (snapshot replay) — and the carts
it cannot check are counted, not hidden.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Literal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from lakelog import checkpoints
from lakelog.carts import fold
from lakelog.carts.aggregate import CartAggregate
from lakelog.carts.tables import STATE
from lakelog.errors import ConsumerBusyError
from lakelog.lake import Lake
from lakelog.log import partition_states, read_offsets, topic_snapshot
from lakelog.topics import Topic

Rebuild = Literal["full_replay", "snapshot_replay"]
REBUILDS: tuple[Rebuild, ...] = ("full_replay", "snapshot_replay")


@dataclass(frozen=True)
class Difference:
    cart_id: str
    rebuild: Rebuild
    expected: Mapping[str, Any] | None  # the rebuilt state; None: the rebuild has no such cart
    found: Mapping[str, Any] | None  # the live state; None: the live table has no such cart


@dataclass(frozen=True)
class ReplayCheck:
    batch: int  # the consumer batch the live state is at (-1: nothing consumed yet)
    offsets: Mapping[int, int]  # per log partition, the committed offset the rebuilds stop at
    carts: int  # carts in the live state
    from_snapshots: int  # carts the snapshot replay started from a snapshot
    unverifiable: Mapping[Rebuild, int]  # carts whose needed commands retention removed
    mismatches: Mapping[Rebuild, int]
    differences: tuple[Difference, ...] = field(default_factory=tuple)  # the first few

    @property
    def passed(self) -> bool:
        return not any(self.mismatches.values())


def _by_partition(partition: Column, values: Mapping[int, int], default: int) -> Column:
    """`values[partition]` as a column (`default` for a partition not in `values`)."""
    return reduce(
        lambda acc, item: F.when(partition == item[0], F.lit(item[1])).otherwise(acc),
        sorted(values.items()),
        F.lit(default),
    )


def log_starts(lake: Lake, topic: Topic) -> dict[int, int]:
    """Per log partition, the log-start offset (retention moves it up from 0)."""
    states = partition_states(topic_snapshot(lake, topic), topic.partitions)
    return {p: s.start_offset for p, s in states.items()}


def _commands(lake: Lake, topic: Topic, upto: Mapping[int, int]) -> DataFrame:
    starts = log_starts(lake, topic)
    ranges = {p: (starts.get(p, 0), end) for p, end in upto.items() if end > starts.get(p, 0)}
    return fold.commands(read_offsets(lake, topic_snapshot(lake, topic), ranges))


def replay_full(
    lake: Lake, aggregate: CartAggregate, topic: Topic, *, upto: Mapping[int, int]
) -> DataFrame:
    """Every cart folded from the start of the log up to `upto` (per log partition, exclusive)."""
    commands = _commands(lake, topic, upto)
    nothing = commands.sparkSession.createDataFrame([], STATE)
    folded = fold.fold(commands, nothing, topic=topic.name, snapshot_every=aggregate.snapshot_every)
    return fold.carts(folded)


def latest_snapshots(
    lake: Lake, aggregate: CartAggregate, *, upto: Mapping[int, int]
) -> DataFrame:
    """Per cart, its latest snapshot of the events before `upto`."""
    snapshot = lake.snapshot(aggregate.snapshots.path)
    taken = lake.read(snapshot).where(
        F.col("last_offset") < _by_partition(F.col("partition"), upto, default=0)
    )
    latest = Window.partitionBy("cart_id").orderBy(F.desc("version"))
    return taken.withColumn("_n", F.row_number().over(latest)).where("_n = 1").drop("_n")


def replay_from_snapshots(
    lake: Lake, aggregate: CartAggregate, topic: Topic, *, upto: Mapping[int, int]
) -> DataFrame:
    """Every cart rebuilt from its latest snapshot and the commands after it, up to `upto`.

    A cart without a snapshot is folded from its first command.
    """
    snapshots = latest_snapshots(lake, aggregate, upto=upto)
    marks = snapshots.select(
        "cart_id", F.col("partition").alias("_at_p"), F.col("last_offset").alias("_at_o")
    )
    p, o = F.col("command.partition"), F.col("command.offset")
    after = F.col("_at_p").isNull() | (p > F.col("_at_p")) | ((p == F.col("_at_p")) & (o > F.col("_at_o")))
    tail = _commands(lake, topic, upto).join(marks, "cart_id", "left").where(after)
    tail = tail.select("cart_id", "command")
    folded = fold.fold(tail, snapshots, topic=topic.name, snapshot_every=aggregate.snapshot_every)
    untouched = snapshots.join(tail.select("cart_id"), "cart_id", "left_anti")
    return fold.carts(folded).unionByName(untouched)


def _mismatches(rebuilt: DataFrame, live: DataFrame, skip: DataFrame, rebuild: Rebuild) -> DataFrame:
    columns = STATE.fieldNames()
    expected = rebuilt.select("cart_id", F.struct(*columns).alias("expected"))
    found = live.select("cart_id", F.struct(*columns).alias("found"))
    return (
        expected.join(found, "cart_id", "full_outer")
        .join(skip, "cart_id", "left_anti")
        .where(~F.col("expected").eqNullSafe(F.col("found")))
        .select(F.lit(rebuild).alias("rebuild"), "cart_id", "expected", "found")
    )


def verify(
    lake: Lake, aggregate: CartAggregate, topic: Topic, *, limit: int = 20
) -> ReplayCheck:
    """Compare the live cart state with a full replay and with a snapshot replay.

    Runs between microbatches: if a batch is in progress (or commits while this reads), the live
    state and the committed offsets may not match, and it raises `ConsumerBusyError`.
    """
    consumer = aggregate.consumer
    if not lake.exists(aggregate.state.path):
        return ReplayCheck(-1, {}, 0, 0, dict.fromkeys(REBUILDS, 0), dict.fromkeys(REBUILDS, 0))
    state = lake.snapshot(aggregate.state.path)
    batch = state.txn_version(consumer.app_id)
    checkpoint = checkpoints.load(lake, consumer.name)
    if checkpoint.plan is not None or batch != checkpoint.batch:
        raise ConsumerBusyError(
            f"consumer {consumer.name} is between batches (state at batch {batch}, offsets at "
            f"batch {checkpoint.batch}); verify the replay after the batch commits"
        )
    upto = {p: o for (t, p), o in checkpoint.committed.items() if t == topic.name}
    starts = log_starts(lake, topic)
    live = lake.read(state)
    snapshots = latest_snapshots(lake, aggregate, upto=upto)
    start = _by_partition(F.col("partition"), starts, default=0)
    lost = {
        "full_replay": live.where(F.col("opened_offset") < start).select("cart_id"),
        "snapshot_replay": live.join(
            snapshots.select("cart_id", F.col("last_offset").alias("_snap")), "cart_id", "left"
        )
        .where(F.coalesce(F.col("_snap") + 1, F.col("opened_offset")) < start)
        .select("cart_id"),
    }
    rebuilt = {
        "full_replay": replay_full(lake, aggregate, topic, upto=upto),
        "snapshot_replay": replay_from_snapshots(lake, aggregate, topic, upto=upto),
    }
    found = reduce(
        DataFrame.unionByName,
        [_mismatches(rebuilt[r], live, lost[r], r) for r in REBUILDS],
    ).persist()
    try:
        counts = {r["rebuild"]: r["n"] for r in found.groupBy("rebuild").agg(F.count("*").alias("n")).collect()}
        sample = found.orderBy("cart_id", "rebuild").limit(limit).collect()
    finally:
        found.unpersist()
    retained = all(s == 0 for s in starts.values())
    return ReplayCheck(
        batch=batch,
        offsets=upto,
        carts=sum(f.num_records for f in state.files()),
        from_snapshots=snapshots.count(),
        unverifiable={r: 0 if retained else lost[r].count() for r in REBUILDS},
        mismatches={r: counts.get(r, 0) for r in REBUILDS},
        differences=tuple(
            Difference(
                cart_id=row["cart_id"],
                rebuild=row["rebuild"],
                expected=row["expected"].asDict(recursive=True) if row["expected"] else None,
                found=row["found"].asDict(recursive=True) if row["found"] else None,
            )
            for row in sample
        ),
    )
