"""Consumers: exactly-once microbatches over topics, with committed offsets and lag.

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

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from lakelog import checkpoints
from lakelog.checkpoints import Checkpoint, Plan, TopicPartition
from lakelog.errors import ConfigError, ConsumerBusyError
from lakelog.lake import AppTxn, DataFile, Lake, Snapshot, already_committed
from lakelog.log import (
    RangeStats, ensure_topic_table, offsets_for_time, partition_states, range_stats, read_offsets,
    topic_snapshot,
)
from lakelog.fold import ensure_layout
from lakelog.lake.merge_on_read import MergeKeys, merge_keys
from lakelog.merge import clustered, rewrite, upsert
from lakelog.topics import Topic

NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,99}$")


@dataclass(frozen=True)
class Output:
    """A table a consumer writes: appended to, or upserted by `keys`.

    An upserted row replaces the stored one only if its `newer_by` column is greater (when set);
    `rows_per_file` clusters the upserted files by key range so that later upserts prune.
    With `merge_on_read` (needs `keys` and `newer_by`), rows are appended as new versions of
    their keys and readers resolve the newest (`lakelog.lake.merge_on_read`); a `lakelog.fold`
    compacts them.
    """

    path: str
    schema: T.StructType
    keys: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()
    newer_by: str | None = None
    rows_per_file: int | None = None
    merge_on_read: bool = False

    def __post_init__(self) -> None:
        if self.merge_on_read and not (self.keys and self.newer_by):
            raise ConfigError(f"output {self.path}: merge-on-read needs keys and newer_by")
        if self.merge_on_read and self.partition_by:
            # Its reads tell files apart by name, which repeats across partition folders.
            raise ConfigError(f"output {self.path}: a merge-on-read table is not partitioned")

    @property
    def merge_keys(self) -> MergeKeys | None:
        """The merge keys of a merge-on-read output, else None."""
        if not self.merge_on_read:
            return None
        assert self.newer_by is not None
        return MergeKeys(self.keys, self.newer_by)


@dataclass(frozen=True)
class BatchInput:
    """What a transform sees: the batch's records per topic, and the outputs as they are now.

    `current` reads the very snapshot the output will be committed against, so a run that raced
    another run of the same batch cannot commit state computed from a stale read.
    `state` is the consumer's state as committed with the previous batch, `next_state` what the
    consumer's `advance` made of it for this batch (committed with it), and `now` the time the
    batch was planned: a retry sees the same time, so time-driven state (an idle watermark)
    comes out the same. `scratch` is working memory of this attempt that `advance` may fill for
    `transform` (e.g. a pass over the records both need); it is never committed. `stats` are,
    per topic, what file statistics say of the batch's records (`lakelog.log.RangeStats`), or
    None where only a read of the records can tell: facts a transform takes from them cost no
    Spark job.
    """

    lake: Lake
    batch: int
    records: Mapping[str, DataFrame]
    outputs: Mapping[str, Snapshot]
    now: datetime | None = None
    state: Mapping[str, Any] = field(default_factory=dict)
    next_state: Mapping[str, Any] = field(default_factory=dict)
    scratch: dict[str, Any] = field(default_factory=dict)
    stats: Mapping[str, RangeStats | None] = field(default_factory=dict)

    def current(self, output: Output) -> DataFrame:
        return self.lake.read(self.outputs[output.path])

    def cached(self, df: DataFrame) -> DataFrame:
        """`df`, kept in memory by the first of this attempt's writes that computes it, for the
        others (outputs cut from one computation), and released once the writes are done."""
        kept = df.persist()
        self.scratch.setdefault(_CACHED, []).append(kept)
        return kept

    def release(self) -> None:
        """Release what `cached` kept."""
        for df in self.scratch.pop(_CACHED, []):
            df.unpersist()


_CACHED = "lakelog.cached"


@dataclass(frozen=True)
class Changes:
    """A keyed output's rows to upsert and the keys to delete, in one commit.

    A transform that read the stored rows of every key it changes may name the `files` it read
    them from, and about how many rows it upserts (`rows_hint`): the upsert then rewrites those
    files without a pass of its own over `rows` (`lakelog.merge.upsert`'s `candidates`). With
    `replace`, `rows` are the complete new content of `files` (unchanged rows included), written
    in their place without a merge (`lakelog.merge.rewrite`).
    """

    rows: DataFrame
    deletes: DataFrame | None = None
    files: Sequence[DataFile] | None = None
    rows_hint: int | None = None
    replace: bool = False


#: The batch's writes per output path; None: nothing to write (the commit still records the batch).
Transform = Callable[[BatchInput], Mapping[str, DataFrame | Changes | None]]
#: The consumer state to commit with a batch, from the batch's records and the previous state.
Advance = Callable[[BatchInput], Mapping[str, Any]]
#: Whether a consumer with no new records should still run an (empty) batch at `now`.
Tick = Callable[[Mapping[str, Any], datetime], bool]


@dataclass(frozen=True)
class Consumer:
    name: str
    topics: tuple[str, ...]
    outputs: tuple[Output, ...]
    transform: Transform
    max_records_per_batch: int = 250_000
    start: Literal["earliest", "latest"] = "earliest"
    #: Keeps consumer state (e.g. a watermark) in the checkpoint, committed with each batch.
    advance: Advance | None = None
    #: Runs an empty batch when no records arrived, e.g. to advance an idle watermark.
    idle_tick: Tick | None = None
    #: Tables the transform reads besides its topics and outputs (e.g. a join's lookup table).
    reads: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise ConfigError(
                f"consumer name {self.name!r} must be lowercase letters, digits, '_', '.', '-'"
            )
        if self.max_records_per_batch < 1:
            raise ConfigError(f"consumer {self.name}: max_records_per_batch must be >= 1")
        if not self.topics:
            raise ConfigError(f"consumer {self.name}: needs at least one topic")

    @property
    def app_id(self) -> str:
        return f"lakelog.consumer:{self.name}"


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int
    head: int

    @property
    def lag(self) -> int:
        return self.head - self.committed


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


def _topic_map(consumer: Consumer, topics: Mapping[str, Topic]) -> dict[str, Topic]:
    missing = [t for t in consumer.topics if t not in topics]
    if missing:
        raise ConfigError(f"consumer {consumer.name} reads undeclared topics: {', '.join(missing)}")
    return {t: topics[t] for t in consumer.topics}


def _positions(lake: Lake, topics: Mapping[str, Topic]) -> dict[TopicPartition, tuple[int, int]]:
    """(log-start, head) per topic and log partition; a topic never written has none."""
    found = {}
    for name, topic in topics.items():
        if not lake.exists(topic.path):
            continue
        for p, state in partition_states(lake.snapshot(topic.path), topic.partitions).items():
            found[(name, p)] = (state.start_offset, state.head)
    return found


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
    lake: Lake, consumer: Consumer, topics: Mapping[str, Topic], *, now: datetime
) -> BatchResult | None:
    """Run (or finish) one microbatch; None when there is nothing new to consume."""
    topic_map = _topic_map(consumer, topics)
    for topic in topic_map.values():
        ensure_topic_table(lake, topic)
    checkpoint = checkpoints.load(lake, consumer.name)
    plan, resumed = checkpoint.plan, checkpoint.plan is not None
    if plan is None:
        plan = make_plan(
            checkpoint,
            _positions(lake, topic_map),
            max_records=consumer.max_records_per_batch,
            start=consumer.start,
        )
        tick = consumer.idle_tick is not None and consumer.idle_tick(checkpoint.state, now)
        if not plan.ranges and not tick:
            return None
        checkpoint = checkpoints.save_plan(lake, checkpoint, plan, now=now)  # step 1
    planned_at = checkpoint.updated_at or now

    txn = AppTxn(consumer.app_id, plan.batch)
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
                        lake, snapshots[output.path], output, produced[output.path], txn, plan
                    )
        finally:
            batch.release()
    checkpoints.save_commit(lake, checkpoint, plan, now=now, state=state)  # step 4
    return BatchResult(
        consumer=consumer.name,
        batch=plan.batch,
        records=plan.records,
        resumed=resumed,
        ranges=dict(plan.ranges),
        lost_to_retention=sum(plan.skipped.values()),
        outputs_written=tuple(o.path for o in pending),
        outputs_skipped=tuple(o.path for o in consumer.outputs if o not in pending),
    )


def _write_output(
    lake: Lake,
    snapshot: Snapshot,
    output: Output,
    df: DataFrame | Changes | None,
    txn: AppTxn,
    plan: Plan,
) -> None:
    """Commit against `snapshot`: if another run committed this batch since, this one fails."""
    metadata = {"lakelog.batch": {"batch": plan.batch, "records": plan.records}}
    if df is None:  # nothing to write: commit the batch's transaction alone
        lake.write(snapshot, None, txns=[txn], metadata=metadata)
        return
    changes = df if isinstance(df, Changes) else Changes(df)
    if changes.replace:
        if changes.files is None or changes.deletes is not None:
            raise ConfigError(f"output {output.path}: a replacing write names its files, no deletes")
        rewrite(lake, snapshot, changes.rows, files=changes.files, keys=output.keys,
                rows_per_file=output.rows_per_file, rows_hint=changes.rows_hint, txns=[txn],
                metadata=metadata)
    elif output.merge_on_read:
        if changes.deletes is not None or changes.files is not None:
            raise ConfigError(f"output {output.path} is merge-on-read: it takes new versions "
                              "of rows, not deletes or files to replace")
        rows = changes.rows
        if output.rows_per_file:  # at most one row per record; usually one sorted file
            rows = clustered(rows, output.keys, output.rows_per_file,
                             changes.rows_hint or plan.records)
        lake.write(snapshot, rows, txns=[txn], metadata=metadata,
                   max_records_per_file=output.rows_per_file)
    elif output.keys:
        upsert(
            lake, snapshot, changes.rows, keys=output.keys, newer_by=output.newer_by,
            rows_per_file=output.rows_per_file, deletes=changes.deletes,
            candidates=changes.files, rows_hint=changes.rows_hint, txns=[txn], metadata=metadata,
        )
    elif changes.deletes is not None:
        raise ConfigError(f"output {output.path} has no keys, so nothing can be deleted from it")
    else:
        lake.write(snapshot, changes.rows, txns=[txn], metadata=metadata)


def run_until_caught_up(
    lake: Lake,
    consumer: Consumer,
    topics: Mapping[str, Topic],
    *,
    now: Callable[[], datetime],
    max_batches: int | None = None,
) -> list[BatchResult]:
    results: list[BatchResult] = []
    while max_batches is None or len(results) < max_batches:
        result = run_batch(lake, consumer, topics, now=now())
        if result is None:
            break
        results.append(result)
        if result.records == 0:  # an idle tick: one per call is enough
            break
    return results


def lag(lake: Lake, consumer: Consumer, topics: Mapping[str, Topic]) -> list[PartitionLag]:
    """Committed offset and head per topic and log partition."""
    topic_map = _topic_map(consumer, topics)
    checkpoint = checkpoints.load(lake, consumer.name)
    rows = []
    for (topic, partition), (log_start, head) in sorted(_positions(lake, topic_map).items()):
        default = head if consumer.start == "latest" else log_start
        committed = checkpoint.committed.get((topic, partition), default)
        rows.append(PartitionLag(topic, partition, committed, head))
    return rows


def target_offsets(
    lake: Lake,
    consumer: Consumer,
    topics: Mapping[str, Topic],
    *,
    to: Literal["earliest", "latest"] | datetime,
) -> dict[TopicPartition, int]:
    """The offsets a reset `to` commits, per topic and log partition the consumer reads:
    the log start, the head, or the first record appended at or after a time."""
    topic_map = _topic_map(consumer, topics)
    positions = _positions(lake, topic_map)
    if to == "earliest":
        return {tp: start for tp, (start, _) in positions.items()}
    if to == "latest":
        return {tp: head for tp, (_, head) in positions.items()}
    offsets = {}
    for name, topic in topic_map.items():
        if lake.exists(topic.path):
            found = offsets_for_time(lake, lake.snapshot(topic.path), topic.partitions, to)
            offsets.update({(name, p): o for p, o in found.items()})
    return offsets


def reset_offsets(
    lake: Lake,
    consumer: Consumer,
    topics: Mapping[str, Topic],
    *,
    to: Literal["earliest", "latest"] | datetime,
    now: datetime,
) -> dict[TopicPartition, int]:
    """Move the committed offsets (like kafka-consumer-groups --reset-offsets).

    Refused while a batch is planned but not committed: that batch must finish first. Whether
    replaying records into the outputs is right is the caller's question (`lakelog.resets`).
    """
    checkpoint = checkpoints.load(lake, consumer.name)
    if checkpoint.plan is not None:
        raise ConsumerBusyError(
            f"consumer {consumer.name} has batch {checkpoint.plan.batch} in progress; "
            "let it finish (or rerun it if it crashed) before resetting offsets"
        )
    offsets = target_offsets(lake, consumer, topics, to=to)
    checkpoints.save_offsets(lake, checkpoint, offsets, now=now)
    return offsets
