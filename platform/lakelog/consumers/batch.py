"""A consumer's exactly-once microbatch over its topics, and running it until caught up.

One microbatch, in this order (DESIGN "Exactly-once microbatches"):

1. **plan** — read the committed offsets and the log heads, cap the ranges at
   `max_records_per_batch` (backpressure), and commit the plan to the checkpoint before any work.
   A pending plan found here is a retry: it is reused unchanged, so the retry reads exactly the
   same records.
2. **process** — read the planned ranges and run the consumer's transform with Spark.
3. **write** — commit each output as one Delta transaction carrying the application transaction
   ``(lakelog.consumer:<name>, batch)``; an output that already holds that version (the batch
   was written before a crash) is skipped.
4. **commit** — advance the committed offsets to the plan's ends and clear the plan.

A crash anywhere is followed by a retry that finishes the same batch: nothing lost, nothing twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

from pyspark.sql import DataFrame

from lakelog.consumers import checkpoints
from lakelog.consumers.backlog import positions
from lakelog.consumers.checkpoints import Checkpoint, Plan, TopicPartition
from lakelog.consumers.consumer import BatchInput, Changes, Consumer, Output
from lakelog.consumers.units import Unit, refuse_if_grouped
from lakelog.errors import ConfigError
from lakelog.lake import AppTxn, Lake, Snapshot, already_committed
from lakelog.lake.merge_on_read import merge_keys
from lakelog.lake.squash import ensure_layout
from lakelog.lake.upsert import clustered, rewrite, upsert
from lakelog.log.offsets import ensure_topic_table, range_stats, read_offsets, topic_snapshot
from lakelog.log.topics import Topic


@dataclass(frozen=True)
class BatchResult:
    consumer: str
    batch: int
    records: int
    resumed: bool
    ranges: Mapping[TopicPartition, tuple[int, int]]
    lost_to_retention: int
    outputs_written: tuple[str, ...]
    outputs_skipped: tuple[str, ...] = field(default_factory=tuple)
    #: The log partition of a consumer group's batch; None: the consumer whole.
    partition: int | None = None


def make_plan(
    checkpoint: Checkpoint,
    positions: Mapping[TopicPartition, tuple[int, int]],
    *,
    max_records: int,
    start: Literal["earliest", "latest"] = "earliest",
) -> Plan:
    """The next batch's ranges: from the committed offset to the head, at most `max_records`.

    The cap is shared fairly: each round gives every partition with data an equal share, so one
    busy partition cannot starve the others. A committed offset below the log-start offset
    (retention removed those records) starts at the log start and counts the gap as skipped.
    """
    first: dict[TopicPartition, int] = {}
    skipped: dict[TopicPartition, int] = {}
    available: dict[TopicPartition, int] = {}
    for tp, (log_start, head) in sorted(positions.items()):
        committed = checkpoint.committed.get(tp, head if start == "latest" else log_start)
        begin = max(committed, log_start)
        skipped[tp] = begin - committed
        first[tp] = begin
        available[tp] = max(head - begin, 0)
    budget = max_records
    take = dict.fromkeys(available, 0)
    while budget > 0:
        open_ = [tp for tp in available if available[tp] > take[tp]]
        if not open_:
            break
        share = max(budget // len(open_), 1)
        for tp in open_:
            grant = min(share, available[tp] - take[tp], budget)
            take[tp] += grant
            budget -= grant
            if budget == 0:
                break
    ranges = {tp: (first[tp], first[tp] + n) for tp, n in take.items() if n > 0}
    return Plan(checkpoint.batch + 1, ranges, {tp: n for tp, n in skipped.items() if n})


def run_batch(
    lake: Lake,
    consumer: Consumer,
    topics: Mapping[str, Topic],
    *,
    now: datetime,
    unit: Unit | None = None,
    fence: Callable[[Checkpoint], None] | None = None,
) -> BatchResult | None:
    """Run (or finish) one microbatch of `unit` (default: the consumer whole); None when there
    is nothing new to consume. `fence` sees the checkpoint the batch will commit against and
    may refuse it (a group member whose partition moved, `lakelog.consumers.groups`)."""
    unit = unit or Unit(consumer.name)
    if consumer.members and unit.partition is None:
        raise ConfigError(f"consumer {consumer.name} is a group: run it by its log partitions "
                          "(lakelog.consumers.groups)")
    topic_map = consumer.topics_in(topics)
    for topic in topic_map.values():
        ensure_topic_table(lake, topic)
    checkpoint = checkpoints.load(lake, unit.checkpoint)
    if unit.partition is None and (checkpoint.snapshot is None or checkpoint.state):
        refuse_if_grouped(lake, consumer, checkpoint)
    if fence is not None:
        fence(checkpoint)
    plan, resumed = checkpoint.plan, checkpoint.plan is not None
    if plan is None:
        plan = make_plan(
            checkpoint,
            {tp: p for tp, p in positions(lake, topic_map).items() if unit.owns(tp)},
            max_records=consumer.max_records_per_batch,
            start=consumer.start,
        )
        tick = consumer.idle_tick is not None and consumer.idle_tick(checkpoint.state, now)
        if not plan.ranges and not tick:
            return None
        checkpoint = checkpoints.save_plan(lake, checkpoint, plan, now=now)  # step 1
    planned_at = checkpoint.updated_at or now

    txn = AppTxn(unit.app_id, plan.batch)
    snapshots = {}
    for output in consumer.outputs:
        merge = output.merge_keys
        lake.create_table(output.path, output.schema, partition_by=output.partition_by,
                          properties=None if merge is None else merge.properties())
        snapshots[output.path] = lake.snapshot(output.path)
        if output.keys and merge_keys(snapshots[output.path].properties) != merge:
            ensure_layout(lake, output.path, merge, rows_per_file=output.rows_per_file)
            snapshots[output.path] = lake.snapshot(output.path)
    pending = [o for o in consumer.outputs if not already_committed(snapshots[o.path], txn)]
    state = checkpoint.state
    if pending or consumer.advance:
        records, stats = {}, {}
        for name in consumer.topics:  # step 2
            ranges = {p: r for (t, p), r in plan.ranges.items() if t == name}
            log = topic_snapshot(lake, topic_map[name])
            records[name] = read_offsets(lake, log, ranges)
            stats[name] = range_stats(log, ranges)
        batch = BatchInput(
            lake, plan.batch, records, snapshots, now=planned_at, state=checkpoint.state,
            stats=stats,
        )
        try:
            if consumer.advance:
                state = consumer.advance(batch)
                batch = replace(batch, next_state=state)  # the same scratch
            if pending:
                produced = consumer.transform(batch)
                for output in pending:  # step 3
                    _write_output(
                        lake, snapshots[output.path], output, produced[output.path],
                        _txns(consumer, output, txn), plan,
                    )
        finally:
            batch.release()
    checkpoints.save_commit(lake, checkpoint, plan, now=now, state=state)  # step 4
    return BatchResult(
        consumer=consumer.name,
        partition=unit.partition,
        batch=plan.batch,
        records=plan.records,
        resumed=resumed,
        ranges=dict(plan.ranges),
        lost_to_retention=sum(plan.skipped.values()),
        outputs_written=tuple(o.path for o in pending),
        outputs_skipped=tuple(o.path for o in consumer.outputs if o not in pending),
    )


def _txns(consumer: Consumer, output: Output, txn: AppTxn) -> list[AppTxn]:
    """The batch's transaction; for a keyed output of a group, also the group's guard, which
    serializes its members' keyed commits (Delta fails a commit whose application transaction
    a concurrent commit carried): their upserts read and rewrite rows, and two that insert one
    new key at once would both add it. A member that loses retries its batch."""
    if consumer.members and output.keys:
        return [txn, AppTxn(f"lakelog.group:{consumer.name}", txn.version)]
    return [txn]


def _write_output(
    lake: Lake,
    snapshot: Snapshot,
    output: Output,
    df: DataFrame | Changes | None,
    txns: list[AppTxn],
    plan: Plan,
) -> None:
    """Commit against `snapshot`: if another run committed this batch since, this one fails."""
    metadata = {"lakelog.batch": {"batch": plan.batch, "records": plan.records}}
    if df is None:  # nothing to write: commit the batch's transaction alone
        lake.write(snapshot, None, txns=txns, metadata=metadata)
        return
    changes = df if isinstance(df, Changes) else Changes(df)
    if changes.replace:
        if changes.files is None or changes.deletes is not None:
            raise ConfigError(f"output {output.path}: a replacing write names its files, no deletes")
        rewrite(lake, snapshot, changes.rows, files=changes.files, keys=output.keys,
                rows_per_file=output.rows_per_file, rows_hint=changes.rows_hint, txns=txns,
                metadata=metadata)
    elif output.merge_on_read:
        if changes.deletes is not None or changes.files is not None:
            raise ConfigError(f"output {output.path} is merge-on-read: it takes new versions "
                              "of rows, not deletes or files to replace")
        rows = changes.rows
        if output.rows_per_file:  # at most one row per record; usually one sorted file
            rows = clustered(rows, output.keys, output.rows_per_file,
                             changes.rows_hint or plan.records)
        lake.write(snapshot, rows, txns=txns, metadata=metadata,
                   max_records_per_file=output.rows_per_file)
    elif output.keys:
        upsert(
            lake, snapshot, changes.rows, keys=output.keys, newer_by=output.newer_by,
            rows_per_file=output.rows_per_file, deletes=changes.deletes,
            candidates=changes.files, rows_hint=changes.rows_hint, txns=txns, metadata=metadata,
        )
    elif changes.deletes is not None:
        raise ConfigError(f"output {output.path} has no keys, so nothing can be deleted from it")
    else:
        lake.write(snapshot, changes.rows, txns=txns, metadata=metadata)
