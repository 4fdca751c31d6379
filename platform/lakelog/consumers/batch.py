"""A consumer's exactly-once microbatch over its topics, and running it until caught up.

One microbatch, in this order (DESIGN "Exactly-once microbatches"):

1. **plan** — read the committed offsets and the log heads, cap the ranges at
   `max_records_per_batch` (backpressure), and commit the plan to the checkpoint before any work.
   A pending plan found here is a retry: it is reused unchanged, so the retry reads exactly the
   same records.
2. **process** — read the planned ranges and run the consumer's transform with Spark.
3. **write** — commit each output as one Delta transaction carrying the application transaction
   ``(lakelog.consumer:<name>, batch)``; an output that already holds that version (the batch
   was written before a crash) is skipped. The rows of the writes done in this process are
   collected first, all outputs' by one query (`lakelog.consumers.writes`).
4. **commit** — advance the committed offsets to the plan's ends and clear the plan.

A crash anywhere is followed by a retry that finishes the same batch: nothing lost, nothing twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from lakelog.consumers import checkpoints, definitions, writes
from lakelog.consumers.backlog import positions
from lakelog.consumers.checkpoints import Checkpoint, Plan, TopicPartition
from lakelog.consumers.consumer import BatchInput, Consumer, Output
from lakelog.consumers.units import Unit, refuse_if_grouped
from lakelog.errors import ConfigError
from lakelog.lake import AppTxn, Lake, Snapshot, already_committed
from lakelog.lake.merge_on_read import merge_keys
from lakelog.lake.nulls_apart import NULLS_APART, nulls_apart
from lakelog.lake.squash import ensure_layout
from lakelog.log.offsets import ensure_topic_table, read_range
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
    #: The log partitions of a consumer group's batch; empty: the consumer whole.
    partitions: tuple[int, ...] = ()


def make_plan(
    checkpoint: Checkpoint,
    positions: Mapping[TopicPartition, tuple[int, int]],
    *,
    max_records: int,
    start: Literal["earliest", "latest"] = "earliest",
) -> Plan:
    """The next batch's ranges: from the committed offset to the head, at most `max_records`.

    The cap is shared among the partitions in proportion to their backlogs (`_shares`). A
    committed offset below the log-start offset (retention removed those records) starts at the
    log start and counts the gap as skipped.
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
    take = _shares(available, max_records)
    ranges = {tp: (first[tp], first[tp] + n) for tp, n in take.items() if n > 0}
    return Plan(checkpoint.batch + 1, ranges, {tp: n for tp, n in skipped.items() if n})


def _shares(available: Mapping[TopicPartition, int], budget: int) -> dict[TopicPartition, int]:
    """`budget` records shared among the partitions in proportion to their backlogs (the whole
    shares, then one more each to the largest fractions), as Spark's Kafka source shares
    ``maxOffsetsPerTrigger`` but for its rounding up of shares under one.

    Shares in proportion keep partitions together in event time while a consumer catches up:
    backlogs that span the same time drain at the same pace, however unequal their rates. Equal
    shares ran the quieter partitions ahead, and the watermark they pushed made the busier
    ones' records late (a 10-minute hopping window capped at 1,000 records a batch turned
    ~2,500 on-time (record, window) pairs a batch into late rows). So did one record to every
    partition first: a consumer of page views and orders took ~25 orders a batch where ~20
    were its share, and within five batches its orders ran minutes ahead of its page views,
    whose records all came late. A partition whose share of a batch is under one record gets
    one when its fraction is among the largest; the shares of the others shrink as they drain,
    so it never waits past that.
    """
    total = sum(available.values())
    if total <= budget:
        return dict(available)
    take, rest = {}, {}
    for tp, n in available.items():
        take[tp], rest[tp] = divmod(budget * n, total)
    for tp in sorted(rest, key=lambda tp: -rest[tp])[:budget - sum(take.values())]:
        take[tp] += 1
    return take


def run_batch(
    lake: Lake,
    consumer: Consumer,
    topics: Mapping[str, Topic],
    *,
    now: datetime,
    units: Sequence[Unit] = (),
    fence: Callable[[Unit, Checkpoint], None] | None = None,
) -> BatchResult | None:
    """Run (or finish) one microbatch of `units` (default: the consumer whole); None when there
    is nothing new to consume.

    A group's partitions (`lakelog.consumers.units`) run as one batch: each has its own plan and
    offset commit, and the outputs are written once, carrying every partition's transaction.
    The consumer's `max_records_per_batch` is shared among them. `fence` sees each checkpoint
    the batch will commit against and may refuse it (a group member whose partition moved,
    `lakelog.consumers.groups`).
    """
    units = list(units) or [Unit(consumer.name)]
    if consumer.members and any(u.partition is None for u in units):
        raise ConfigError(f"consumer {consumer.name} is a group: run it by its log partitions "
                          "(lakelog.consumers.groups)")
    topic_map = consumer.topics_in(topics)
    # The logs as the batch finds them: its plan's heads and its reads come from these.
    logs = {name: ensure_topic_table(lake, topic) for name, topic in topic_map.items()}
    heads: dict[TopicPartition, tuple[int, int]] | None = None
    planned: list[_Planned] = []
    for unit in units:
        checkpoint = checkpoints.load(lake, unit.checkpoint)
        if unit.partition is None and (checkpoint.snapshot is None or checkpoint.state):
            refuse_if_grouped(lake, consumer, checkpoint)
        if fence is not None:
            fence(unit, checkpoint)
        definitions.check(consumer, checkpoint)
        if checkpoint.plan is not None:
            planned.append(_Planned(unit, checkpoint, checkpoint.plan, resumed=True))
            continue
        heads = positions(lake, topic_map, logs) if heads is None else heads
        plan = make_plan(
            checkpoint,
            {tp: p for tp, p in heads.items() if unit.owns(tp)},
            max_records=max(consumer.max_records_per_batch // len(units), 1),
            start=consumer.start,
        )
        tick = consumer.idle_tick is not None and consumer.idle_tick(checkpoint.state, now)
        if not plan.ranges and not tick:
            continue
        checkpoint = checkpoints.save_plan(  # step 1, with the definition the batch keeps
            lake, checkpoint, plan, now=now, state=definitions.kept(consumer, checkpoint.state))
        planned.append(_Planned(unit, checkpoint, plan, resumed=False))
    if not planned:
        return None

    snapshots = {}
    for output in consumer.outputs:
        merge = output.merge_keys
        snapshots[output.path] = lake.create_table(
            output.path, output.schema, partition_by=output.partition_by,
            properties=output.layout or None)
        properties = snapshots[output.path].properties
        if output.keys and merge_keys(properties) != merge:
            ensure_layout(lake, output.path, merge, rows_per_file=output.rows_per_file)
            snapshots[output.path] = lake.snapshot(output.path)
        if output.nulls_apart and nulls_apart(properties) != output.nulls_apart:
            # A table made before: its later writes keep the nulls apart.
            lake.set_properties(output.path, {NULLS_APART: output.nulls_apart})
            snapshots[output.path] = lake.snapshot(output.path)
    # Units whose outputs were all written, or none, go together; a crash between two outputs
    # leaves a unit part-written, and it goes with those left the same way.
    together: dict[tuple[str, ...], list[_Planned]] = {}
    for p in planned:
        pending = tuple(o.path for o in consumer.outputs
                        if not already_committed(snapshots[o.path], p.txn))
        together.setdefault(pending, []).append(p)
    written: set[str] = set()
    groups = list(together.items())
    for index, (pending, group) in enumerate(groups):
        if pending or consumer.advance:
            _process(lake, consumer, logs, group, snapshots,
                     [o for o in consumer.outputs if o.path in pending], now=now)
            if index + 1 < len(groups):  # the next group writes after this one's commits
                snapshots.update({path: lake.snapshot(path) for path in pending})
            written.update(pending)
    for p in planned:
        state = p.checkpoint.state if p.state is None else p.state
        checkpoints.save_commit(lake, p.checkpoint, p.plan, now=now,  # step 4
                                state=definitions.kept(consumer, state))
    ranges = {tp: r for p in planned for tp, r in p.plan.ranges.items()}
    return BatchResult(
        consumer=consumer.name,
        partitions=tuple(p.unit.partition for p in planned if p.unit.partition is not None),
        batch=max(p.plan.batch for p in planned),
        records=sum(p.plan.records for p in planned),
        resumed=any(p.resumed for p in planned),
        ranges=ranges,
        lost_to_retention=sum(sum(p.plan.skipped.values()) for p in planned),
        outputs_written=tuple(o.path for o in consumer.outputs if o.path in written),
        outputs_skipped=tuple(o.path for o in consumer.outputs if o.path not in written),
    )


@dataclass
class _Planned:
    """One unit's part of a batch: its checkpoint with the plan, and the state to commit."""

    unit: Unit
    checkpoint: Checkpoint
    plan: Plan
    resumed: bool
    state: Mapping[str, Any] | None = None

    @property
    def txn(self) -> AppTxn:
        return AppTxn(self.unit.app_id, self.plan.batch)


def _process(
    lake: Lake,
    consumer: Consumer,
    logs: Mapping[str, Snapshot],
    group: list[_Planned],
    snapshots: Mapping[str, Snapshot],
    pending: list[Output],
    *,
    now: datetime,
) -> None:
    """Steps 2 and 3 for units that go together: read their ranges from `logs` (the topics'
    logs as the batch found them, which its new plans were made on), transform, and write each
    pending output once with all their transactions."""
    ranges = {tp: r for p in group for tp, r in p.plan.ranges.items()}
    records, stats, schemas = {}, {}, {}
    for name in consumer.topics:  # step 2
        mine = {part: r for (t, part), r in ranges.items() if t == name}
        log = logs[name]
        (records[name], stats[name]), schemas[name] = read_range(lake, log, mine), log.schema
    planned_at = max(p.checkpoint.updated_at or now for p in group)  # a retry: the same time
    count = sum(p.plan.records for p in group)
    # Known from the plan alone, so a retry sees the same: the cap's shares took from every
    # partition with a backlog, in proportion, and most of them have more.
    cut = {} if count < consumer.max_records_per_batch else {
        name: tuple(sorted(part for (t, part) in ranges if t == name))
        for name in consumer.topics}
    batch = BatchInput(
        lake, max(p.plan.batch for p in group), records, snapshots, now=planned_at,
        state=group[0].checkpoint.state if len(group) == 1 else {}, stats=stats,
        schemas=schemas, cut=cut,
    )
    try:
        if consumer.advance:  # a consumer alone: a group's partitions keep no state
            group[0].state = consumer.advance(batch)
            batch = replace(batch, next_state=group[0].state)  # the same scratch
        if pending:
            produced = consumer.transform(batch)
            txns = [p.txn for p in group]
            metadata = {"lakelog.batch": {"batch": batch.batch, "records": count}}
            # The rows of the outputs written in this process, collected by one query.
            collected = writes.collected(snapshots, pending, produced, records=count)
            for output in pending:  # step 3
                writes.write_output(lake, snapshots[output.path], output, produced[output.path],
                                    _txns(consumer, output, txns), metadata, records=count,
                                    collected=collected.get(output.path))
    except BaseException:
        # The batch's own error is the one to report: failing to free its kept rows as well
        # (a JVM gone, say) must not replace it.
        with contextlib.suppress(Exception):
            batch.release()
        raise
    batch.release()


def _txns(consumer: Consumer, output: Output, txns: list[AppTxn]) -> list[AppTxn]:
    """The batch's transactions; for a keyed output of a group, also the group's guard, which
    serializes its members' keyed commits (Delta fails a commit whose application transaction
    a concurrent commit carried): their upserts read and rewrite rows, and two that insert one
    new key at once would both add it. A member that loses retries its batch."""
    if consumer.members and output.keys:
        return [*txns, AppTxn(f"lakelog.group:{consumer.name}", max(t.version for t in txns))]
    return txns
