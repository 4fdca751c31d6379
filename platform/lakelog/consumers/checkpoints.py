"""Consumer checkpoints: committed offsets and the write-ahead plan of the next microbatch.

A consumer's checkpoint is the small Delta table ``_checkpoints/<consumer>``, one row per topic
and log partition, rewritten whole by every commit (its history is the audit trail of every
plan and commit). Each commit carries the application transaction
``lakelog.checkpoint:<consumer>`` versioned by the table version it read, so of two runs that
plan or commit from the same checkpoint, exactly one succeeds and the other fails cleanly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pyspark.sql import types as T

from lakelog.lake import Lake, Snapshot
from lakelog.lake.guarded_rewrite import guarded_rewrite

TopicPartition = tuple[str, int]

SCHEMA = T.StructType(
    [
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("committed", T.LongType()),
        T.StructField("batch", T.LongType()),
        T.StructField("planned_batch", T.LongType()),
        T.StructField("planned_start", T.LongType()),
        T.StructField("planned_end", T.LongType()),
        T.StructField("skipped", T.LongType()),
        T.StructField("state", T.StringType()),
        T.StructField("updated_at", T.TimestampType()),
    ]
)



@dataclass(frozen=True)
class Plan:
    """The offset ranges ``[start, end)`` one microbatch will process, fixed before it runs."""

    batch: int
    ranges: Mapping[TopicPartition, tuple[int, int]]
    #: Records between the committed offset and the log-start offset that retention removed.
    skipped: Mapping[TopicPartition, int] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())


@dataclass(frozen=True)
class Checkpoint:
    consumer: str
    snapshot: Snapshot | None  # None: no checkpoint table yet (nothing was ever committed)
    batch: int  # the last committed batch id; -1 before the first
    committed: Mapping[TopicPartition, int]
    plan: Plan | None
    state: Mapping[str, Any]
    updated_at: datetime | None = None


def checkpoint_path(consumer: str) -> str:
    return f"_checkpoints/{consumer}"


def guard_app_id(consumer: str) -> str:
    return f"lakelog.checkpoint:{consumer}"


def load(lake: Lake, consumer: str) -> Checkpoint:
    """The consumer's checkpoint; reading it never writes (a new consumer has no table yet)."""
    path = checkpoint_path(consumer)
    if not lake.exists(path):
        return Checkpoint(consumer, None, -1, {}, None, {})
    snapshot = lake.snapshot(path)
    rows = lake.read_arrow(snapshot).to_pylist()
    if not rows:
        return Checkpoint(consumer, snapshot, -1, {}, None, {})
    committed = {(r["topic"], r["partition"]): r["committed"] for r in rows if r["topic"]}
    batch = rows[0]["batch"]
    planned = rows[0]["planned_batch"]
    plan = None
    if planned is not None and planned > batch:
        plan = Plan(
            batch=planned,
            ranges={
                (r["topic"], r["partition"]): (r["planned_start"], r["planned_end"])
                for r in rows
                if r["planned_start"] is not None
            },
            skipped={(r["topic"], r["partition"]): r["skipped"] or 0 for r in rows if r["topic"]},
        )
    state = json.loads(rows[0]["state"]) if rows[0]["state"] else {}
    return Checkpoint(consumer, snapshot, batch, committed, plan, state, rows[0]["updated_at"])


def _save(
    lake: Lake,
    checkpoint: Checkpoint,
    *,
    batch: int,
    committed: Mapping[TopicPartition, int],
    plan: Plan | None,
    state: Mapping[str, Any],
    now: datetime,
) -> int:
    """Replace the checkpoint by these offsets, plan and state; the table's new version."""
    keys = sorted(set(committed) | set(plan.ranges if plan else {}))
    rows = []
    for topic, partition in keys:
        planned = plan.ranges.get((topic, partition)) if plan else None
        rows.append(
            {
                "topic": topic,
                "partition": partition,
                "committed": committed.get((topic, partition), 0),
                "batch": batch,
                "planned_batch": plan.batch if plan else None,
                "planned_start": planned[0] if planned else None,
                "planned_end": planned[1] if planned else None,
                "skipped": plan.skipped.get((topic, partition), 0) if plan else None,
                "state": json.dumps(state, sort_keys=True) if state else None,
                "updated_at": now,
            }
        )
    if not rows and state:  # nothing committed yet: a row without a partition keeps the state
        rows.append({"topic": None, "partition": None, "committed": None, "batch": batch,
                     "state": json.dumps(state, sort_keys=True), "updated_at": now})
    return guarded_rewrite(
        lake, checkpoint_path(checkpoint.consumer), SCHEMA, checkpoint.snapshot, rows,
        guard=guard_app_id(checkpoint.consumer),
        metadata={"lakelog.checkpoint": {"batch": batch, "planned": plan.batch if plan else None}},
    )


def save_plan(
    lake: Lake, checkpoint: Checkpoint, plan: Plan, *, now: datetime,
    state: Mapping[str, Any] | None = None,
) -> Checkpoint:
    """Step 1 of a microbatch: record what it will process before any work is done (`state`:
    the state to keep meanwhile, if not the checkpoint's). The checkpoint with the plan, on the
    table's new version, which step 4 commits against."""
    state = checkpoint.state if state is None else state
    version = _save(
        lake, checkpoint, batch=checkpoint.batch, committed=checkpoint.committed, plan=plan,
        state=state, now=now,
    )
    snapshot = lake.snapshot(checkpoint_path(checkpoint.consumer), version)
    return Checkpoint(checkpoint.consumer, snapshot, checkpoint.batch, dict(checkpoint.committed),
                      plan, dict(state), now)


def save_commit(
    lake: Lake,
    checkpoint: Checkpoint,
    plan: Plan,
    *,
    now: datetime,
    state: Mapping[str, Any] | None = None,
) -> int:
    """Step 4: the batch's outputs are committed; advance the offsets to the plan's ends. The
    table's new version (`load` reads the checkpoint: nothing after a batch needs its snapshot,
    a Delta table load of its own)."""
    committed = dict(checkpoint.committed)
    committed.update({tp: end for tp, (_, end) in plan.ranges.items()})
    return _save(
        lake, checkpoint, batch=plan.batch, committed=committed, plan=None,
        state=checkpoint.state if state is None else state, now=now,
    )


def save_state(
    lake: Lake, checkpoint: Checkpoint, state: Mapping[str, Any], *, now: datetime
) -> int:
    """Replace the state alone: offsets and a pending plan stay as they are. The table's new
    version."""
    return _save(
        lake, checkpoint, batch=checkpoint.batch, committed=checkpoint.committed,
        plan=checkpoint.plan, state=state, now=now,
    )


def save_offsets(
    lake: Lake, checkpoint: Checkpoint, offsets: Mapping[TopicPartition, int], *, now: datetime
) -> int:
    """Set committed offsets directly (an offset reset); batch ids keep increasing. The table's
    new version."""
    committed = dict(checkpoint.committed)
    committed.update(offsets)
    return _save(
        lake, checkpoint, batch=checkpoint.batch, committed=committed, plan=None,
        state=checkpoint.state, now=now,
    )
