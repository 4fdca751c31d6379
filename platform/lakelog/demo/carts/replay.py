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
from functools import reduce
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from lakelog.consumers import checkpoints
from lakelog.demo.carts import fold
from lakelog.demo.carts.schemas import COMMAND, STATE
from lakelog.errors import ConsumerBusyError
from lakelog.lake import Lake
from lakelog.log.offsets import partition_states, read_offsets, topic_snapshot
from lakelog.log.topics import Topic
from lakelog.sourcing import REBUILDS, Difference, Rebuild, ReplayCheck

if TYPE_CHECKING:
    from lakelog.demo.carts.aggregate import CartAggregate


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


def rebuilds(
    lake: Lake, aggregate: CartAggregate, topic: Topic, *, upto: Mapping[int, int]
) -> DataFrame:
    """Per cart, both rebuilds up to `upto` (per log partition, exclusive), from one read.

    Columns: ``cart_id``; ``full_replay``, the cart folded from its first command;
    ``snapshot_replay``, its latest snapshot with the commands after it folded on (from its
    first command if it has no snapshot); ``snapshot_offset``, the last offset that snapshot
    covers. A rebuild in which the cart has no accepted event is null.
    """
    commands = fold.per_cart(_commands(lake, topic, upto))
    snapshots = latest_snapshots(lake, aggregate, upto=upto).select(
        "cart_id", F.struct(*STATE.fieldNames()).cast(STATE).alias("snapshot")
    )
    every = F.coalesce(F.col("commands"), F.array().cast(T.ArrayType(COMMAND)))
    mark = F.col("snapshot")

    def after_snapshot(c: Column) -> Column:
        p, o = c["partition"], c["offset"]
        return mark.isNull() | (p > mark["partition"]) | (
            (p == mark["partition"]) & (o > mark["last_offset"])
        )

    def rebuilt(start: Column, commands: Column) -> Column:
        state = fold.fold_commands(
            start, commands, topic=topic.name, snapshot_every=aggregate.snapshot_every
        )["state"]
        return F.when(state["version"] > 0, state)

    empty = fold.empty_state(F.col("cart_id"))
    return commands.join(snapshots, "cart_id", "full_outer").select(
        "cart_id",
        rebuilt(empty, every).alias("full_replay"),
        rebuilt(F.coalesce(mark, empty), F.filter(every, after_snapshot)).alias("snapshot_replay"),
        mark["last_offset"].alias("snapshot_offset"),
    )


def replay_full(
    lake: Lake, aggregate: CartAggregate, topic: Topic, *, upto: Mapping[int, int]
) -> DataFrame:
    """Every cart folded from the start of the log up to `upto`, as `STATE` rows."""
    rebuilt = rebuilds(lake, aggregate, topic, upto=upto)
    return rebuilt.where(F.col("full_replay").isNotNull()).select("full_replay.*")


def replay_from_snapshots(
    lake: Lake, aggregate: CartAggregate, topic: Topic, *, upto: Mapping[int, int]
) -> DataFrame:
    """Every cart rebuilt from its latest snapshot and the commands after it, up to `upto`."""
    rebuilt = rebuilds(lake, aggregate, topic, upto=upto)
    return rebuilt.where(F.col("snapshot_replay").isNotNull()).select("snapshot_replay.*")


def _difference(row: Any, rebuild: Rebuild) -> Difference:
    expected, found = row[rebuild], row["live"]
    return Difference(
        key=row["cart_id"],
        rebuild=rebuild,
        expected=expected.asDict(recursive=True) if expected else None,
        found=found.asDict(recursive=True) if found else None,
    )


def verify(
    lake: Lake, aggregate: CartAggregate, topic: Topic, *, limit: int = 20
) -> ReplayCheck:
    """Compare the live cart state with a full replay and with a snapshot replay.

    Runs between microbatches: if a batch is in progress (or commits while this reads), the live
    state and the committed offsets may not match, and it raises `ConsumerBusyError`.
    """
    consumer = aggregate.consumer
    nothing = dict.fromkeys(REBUILDS, 0)
    if not lake.exists(aggregate.state.path):
        return ReplayCheck(-1, {}, 0, 0, nothing, nothing)
    state = lake.snapshot(aggregate.state.path)
    committed = state.txn_version(consumer.app_id)
    batch = -1 if committed is None else committed
    checkpoint = checkpoints.load(lake, consumer.name)
    if checkpoint.plan is not None or batch != checkpoint.batch:
        raise ConsumerBusyError(
            f"consumer {consumer.name} is between batches (state at batch {batch}, offsets at "
            f"batch {checkpoint.batch}); verify the replay after the batch commits"
        )
    upto = {p: o for (t, p), o in checkpoint.committed.items() if t == topic.name}
    live = lake.read(state).select("cart_id", F.struct(*STATE.fieldNames()).alias("live"))
    joined = live.join(rebuilds(lake, aggregate, topic, upto=upto), "cart_id", "full_outer")
    # A cart is checked only if the log still holds what the rebuild needs (see module doc).
    start = _by_partition(F.col("live.partition"), log_starts(lake, topic), default=0)
    need = {
        "full_replay": F.col("live.opened_offset"),
        "snapshot_replay": F.coalesce(
            F.col("snapshot_offset") + 1, F.col("live.opened_offset")
        ),
    }
    lost = {r: F.coalesce(need[r] < start, F.lit(False)) for r in REBUILDS}
    differs = {r: ~F.col(r).eqNullSafe(F.col("live")) & ~lost[r] for r in REBUILDS}
    checked = joined.select(
        "cart_id", "live", *REBUILDS, "snapshot_offset",
        *[lost[r].alias(f"_lost_{r}") for r in REBUILDS],
        *[differs[r].alias(f"_differs_{r}") for r in REBUILDS],
    ).persist()
    try:
        counts = checked.agg(
            F.count("live").alias("carts"),
            F.count("snapshot_offset").alias("from_snapshots"),
            *[F.count(F.when(F.col(f"_{k}_{r}"), 1)).alias(f"{k}_{r}")
              for k in ("lost", "differs") for r in REBUILDS],
        ).first()
        sample = (
            checked.where(F.col("_differs_full_replay") | F.col("_differs_snapshot_replay"))
            .orderBy("cart_id")
            .limit(limit)
            .collect()
        )
    finally:
        checked.unpersist()
    differences = [
        _difference(row, r) for row in sample for r in REBUILDS if row[f"_differs_{r}"]
    ]
    return ReplayCheck(
        batch=batch,
        offsets=upto,
        states=counts["carts"],
        from_snapshots=counts["from_snapshots"],
        unverifiable={r: counts[f"lost_{r}"] for r in REBUILDS},
        mismatches={r: counts[f"differs_{r}"] for r in REBUILDS},
        differences=tuple(differences[:limit]),
    )
