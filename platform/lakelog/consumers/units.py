"""Units of a consumer's work, each exactly-once on its own: the consumer whole, or one log
partition of a consumer group.

A consumer runs as one unit: its checkpoint ``_checkpoints/<consumer>`` and the application
transaction ``lakelog.consumer:<consumer>`` on its output commits. A consumer declared as a group
(`Consumer.members`) has one unit per log partition index k — partition k of every topic it
reads — with the checkpoint ``_checkpoints/_groups/<consumer>/p<k>`` and the transaction
``lakelog.consumer:<consumer>/p<k>``. A unit's microbatches follow the same plan, write, commit
protocol whoever runs them, so a unit moves between the members of a group without a record
lost or doubled (`lakelog.consumers.groups`).

Readers of offsets (lag, retention, resets, erasure) read a group's units together with
`load_all`; a group's first run takes over the offsets of the single checkpoint it had before
(`seed`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from lakelog.consumers import checkpoints
from lakelog.consumers.checkpoints import Checkpoint, Plan, TopicPartition
from lakelog.consumers.consumer import Consumer
from lakelog.consumers.definitions import DEFINITION
from lakelog.errors import ConcurrentWriteError, ConfigError, ConsumerBusyError
from lakelog.lake import Lake
from lakelog.log.topics import Topic

GROUPS = "_groups"
#: Set in the state of a consumer's own checkpoint once a group took its offsets over.
HANDED_OVER = "lakelog.handed_to_group"
#: Where a unit's checkpoint state names the member that owns it: {"member", "generation"}.
OWNER = "lakelog.group"


@dataclass(frozen=True)
class Unit:
    consumer: str
    #: The log partition index of a group's unit; None: the consumer whole.
    partition: int | None = None

    @property
    def checkpoint(self) -> str:
        """The checkpoint's name (`lakelog.consumers.checkpoints.load` takes it)."""
        if self.partition is None:
            return self.consumer
        return f"{GROUPS}/{self.consumer}/p{self.partition}"

    @property
    def app_id(self) -> str:
        """The application transaction the unit's output commits carry."""
        suffix = "" if self.partition is None else f"/p{self.partition}"
        return f"lakelog.consumer:{self.consumer}{suffix}"

    def owns(self, tp: TopicPartition) -> bool:
        return self.partition is None or tp[1] == self.partition


Loaded = tuple["Unit", Checkpoint]


def units_of(consumer: Consumer, topics: Mapping[str, Topic]) -> list[Unit]:
    """A group's units, one per log partition index of its topics; else the consumer whole."""
    if not consumer.members:
        return [Unit(consumer.name)]
    return _partition_units(consumer, topics)


def _partition_units(consumer: Consumer, topics: Mapping[str, Topic]) -> list[Unit]:
    count = max((topics[t].partitions for t in consumer.topics if t in topics), default=0)
    return [Unit(consumer.name, k) for k in range(count)]


def load_units(lake: Lake, consumer: Consumer, topics: Mapping[str, Topic]) -> list[Loaded]:
    """Each unit with its checkpoint; a group that never ran as one reads as the consumer alone
    (the offsets it had alone, if any: what `seed` gives its units), and a consumer that ran as
    a group reads as its group, however it is declared now (its offsets are there)."""
    if consumer.members and _seeded(lake, consumer.name):
        return [(u, checkpoints.load(lake, u.checkpoint)) for u in units_of(consumer, topics)]
    alone = checkpoints.load(lake, consumer.name)
    handed = alone.state.get(HANDED_OVER) or alone.snapshot is None
    if not consumer.members and handed and _seeded(lake, consumer.name):
        return [(u, checkpoints.load(lake, u.checkpoint))
                for u in _partition_units(consumer, topics)]
    return [(Unit(consumer.name), alone)]


def merged(consumer: str, loaded: list[Loaded]) -> Checkpoint:
    """The units' checkpoints read as one: their offsets, their pending plans merged into one
    (its batch the highest), the state of a consumer alone."""
    if len(loaded) == 1 and loaded[0][0].partition is None:
        return loaded[0][1]
    found = [c for _, c in loaded]
    committed: dict[TopicPartition, int] = {}
    ranges: dict[TopicPartition, tuple[int, int]] = {}
    skipped: dict[TopicPartition, int] = {}
    planned = [c.plan for c in found if c.plan is not None]
    for c in found:
        committed.update(c.committed)
    for plan in planned:
        ranges.update(plan.ranges)
        skipped.update(plan.skipped)
    plan = Plan(max(p.batch for p in planned), ranges, skipped) if planned else None
    updated = [c.updated_at for c in found if c.updated_at is not None]
    return Checkpoint(consumer, None, max((c.batch for c in found), default=-1), committed,
                      plan, {}, max(updated, default=None))


def load_all(lake: Lake, consumer: Consumer, topics: Mapping[str, Topic]) -> Checkpoint:
    """The consumer's committed offsets and pending plan, its units read together (`merged`)."""
    return merged(consumer.name, load_units(lake, consumer, topics))


def save_offsets(
    lake: Lake,
    loaded: list[Loaded],
    offsets: Mapping[TopicPartition, int],
    *,
    now: datetime,
    state: Mapping | None = None,
) -> None:
    """Commit `offsets` (an offset reset) to the units that own them, each relative to the
    checkpoint `loaded` with it (a batch committed since fails it); `state`, if given, replaces
    every unit's state (a group's units keep their owners: a rebuild empties a member's kept
    definition too). A unit with a batch in progress refuses (`ConsumerBusyError`) before any
    unit is written."""
    busy = [(u, c.plan.batch) for u, c in loaded if c.plan is not None]
    if busy:
        raise ConsumerBusyError(
            f"consumer {busy[0][0].consumer} has batch {busy[0][1]} in progress; let it finish "
            "(or rerun it if it crashed) before moving its offsets"
        )
    for unit, checkpoint in loaded:
        mine = {tp: o for tp, o in offsets.items() if unit.owns(tp)}
        if state is not None:
            owner = {} if unit.partition is None or OWNER not in checkpoint.state else {
                OWNER: checkpoint.state[OWNER]}
            checkpoint = Checkpoint(checkpoint.consumer, checkpoint.snapshot, checkpoint.batch,
                                    checkpoint.committed, None, {**state, **owner})
        if mine or state is not None:
            checkpoints.save_offsets(lake, checkpoint, mine, now=now)


def seed(lake: Lake, consumer: Consumer, topics: Mapping[str, Topic], *, now: datetime) -> None:
    """Before a group's first batch, create its units' checkpoints, each with the offsets (and
    the kept definition) the consumer committed while it ran alone, if it did (a batch it left
    in progress must finish first, run alone). Unit 0 is written last: once it exists, every
    unit does."""
    if _seeded(lake, consumer.name):
        return
    alone = checkpoints.load(lake, consumer.name)
    if alone.plan is not None:
        raise ConsumerBusyError(
            f"consumer {consumer.name} has batch {alone.plan.batch} in progress from before it "
            "was a group; finish it with the consumer declared without members first"
        )
    if alone.snapshot is not None and not alone.state.get(HANDED_OVER):
        try:
            checkpoints.save_state(lake, alone, {**alone.state, HANDED_OVER: True}, now=now)
        except ConcurrentWriteError:  # a racing seed marked it first; else a batch ran: refuse
            if not checkpoints.load(lake, consumer.name).state.get(HANDED_OVER):
                raise
    # The definition its batches kept goes with the offsets: the group's are checked against it.
    carried = {DEFINITION: alone.state[DEFINITION]} if DEFINITION in alone.state else {}
    for unit in reversed(units_of(consumer, topics)):
        checkpoint = checkpoints.load(lake, unit.checkpoint)
        if checkpoint.snapshot is not None:
            continue
        mine = {tp: o for tp, o in alone.committed.items() if unit.owns(tp)}
        checkpoint = replace(checkpoint, state={**checkpoint.state, **carried})
        try:
            checkpoints.save_offsets(lake, checkpoint, mine, now=now)
        except ConcurrentWriteError:
            pass  # a racing seed wrote it first, with the same offsets


def refuse_if_grouped(lake: Lake, consumer: Consumer, checkpoint: Checkpoint) -> None:
    """A consumer run alone whose offsets a group's units took over would consume again what
    the group consumed."""
    handed = checkpoint.state.get(HANDED_OVER) or (
        checkpoint.snapshot is None and _seeded(lake, consumer.name))
    if handed:
        raise ConfigError(
            f"consumer {consumer.name} ran as a group: its offsets are in "
            f"{checkpoints.checkpoint_path(f'{GROUPS}/{consumer.name}')}/; declare it with "
            "members again"
        )


def _seeded(lake: Lake, name: str) -> bool:
    return lake.exists(checkpoints.checkpoint_path(Unit(name, 0).checkpoint))
