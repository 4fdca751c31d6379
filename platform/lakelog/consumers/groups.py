"""Consumer groups (DDIA ch. 11, "Multiple consumers"): the members of a group share a
consumer's log partitions — load balancing — while separate consumers each read everything
(fan-out) with their own offsets.

A group's work is its units, one per log partition index (`lakelog.consumers.units`), each
with its own checkpoint and output transaction, so each is exactly-once on its own. Members
join the group's members table (`lakelog.consumers.membership`), which assigns the partitions;
before working on a partition a member claims its unit, writing its member id and generation
into the unit's checkpoint. That claim is the fence: every batch checks it on the checkpoint it
commits against, so a member whose partition moved to a newer generation has its commit refused
(`FencedError`, nothing of its batch committed), and the new owner finishes a batch left in
progress from its write-ahead plan, as any retry does.

`run_member` is one member's life: join, then rounds of one batch over the partitions it owns
(`lakelog.consumers.batch.run_batch` runs them as one microbatch) — heartbeating and re-reading
the assignment between rounds, so joins, leaves and dead members rebalance the partitions —
until a round finds nothing new, then leave. `run_group` runs all of a group's partitions from
one process when no member is live (a consumer run by hand, or by a Dagster step); with live
members it joins them as a member.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from lakelog.consumers import checkpoints, membership, units
from lakelog.consumers.batch import BatchResult, run_batch
from lakelog.consumers.checkpoints import Checkpoint
from lakelog.consumers.consumer import Consumer
from lakelog.consumers.membership import SESSION_TIMEOUT
from lakelog.consumers.units import OWNER, Unit, seed, units_of
from lakelog.errors import ConcurrentWriteError, FencedError
from lakelog.lake import Lake
from lakelog.log.topics import Topic

#: How often a batch that lost a race for a keyed output (another member committed first) is
#: tried again from its plan.
RETRIES = 8


@dataclass(frozen=True)
class Owner:
    member: str | None
    generation: int


def owner(checkpoint: Checkpoint) -> Owner:
    found = checkpoint.state.get(OWNER) or {}
    return Owner(found.get("member"), int(found.get("generation", 0)))


def claim(lake: Lake, unit: Unit, me: Owner, *, now: datetime) -> bool:
    """Make `me` the owner of `unit`; False when a newer generation owns it (`me` is stale)."""
    for _ in range(RETRIES):
        checkpoint = checkpoints.load(lake, unit.checkpoint)
        current = owner(checkpoint)
        if current == me:
            return True
        if current.generation > me.generation:
            return False
        state = {**checkpoint.state, OWNER: {"member": me.member, "generation": me.generation}}
        try:
            checkpoints.save_state(lake, checkpoint, state, now=now)
            return True
        except ConcurrentWriteError:
            continue  # a batch or another claim came first: look again
    raise ConcurrentWriteError(f"{unit.checkpoint}: lost {RETRIES} races to claim it")


def fence(consumer: str, me: Owner, *, solo: bool = False) -> Callable[[Unit, Checkpoint], None]:
    """The check a member's batch makes on each checkpoint it commits against: the unit is
    still its own. `solo`: run without membership, refused only by a claim newer than `me`."""

    def check(unit: Unit, checkpoint: Checkpoint) -> None:
        current = owner(checkpoint)
        moved = current.generation > me.generation if solo else current != me
        if moved:
            raise FencedError(
                f"consumer {consumer}: partition {unit.partition} belongs to member "
                f"{current.member} of generation {current.generation}, not to "
                f"{me.member or 'this run'} (generation {me.generation}); nothing of its batch "
                "was committed here",
                partition=unit.partition,
            )

    return check


def run_units(
    lake: Lake,
    consumer: Consumer,
    topics: Mapping[str, Topic],
    units: Sequence[Unit],
    check: Callable[[Unit, Checkpoint], None],
    *,
    now: Callable[[], datetime],
) -> BatchResult | None:
    """One batch of `units`; a batch that lost a race to another member's commit (a keyed
    output's guard, a plan) is tried again from the checkpoints — and refused with
    `FencedError` once one of the units is no longer ours."""
    for attempt in range(RETRIES):
        try:
            return run_batch(lake, consumer, topics, now=now(), units=units, fence=check)
        except FencedError:
            raise
        except ConcurrentWriteError:
            for unit in units:  # moved: FencedError
                check(unit, checkpoints.load(lake, unit.checkpoint))
            if attempt == RETRIES - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def run_member(
    lake: Lake,
    consumer: Consumer,
    topics: Mapping[str, Topic],
    *,
    member: str,
    now: Callable[[], datetime],
    timeout: timedelta = SESSION_TIMEOUT,
    max_batches: int | None = None,
) -> list[BatchResult]:
    """Run `consumer` as group member `member` until its partitions are caught up, then leave
    (module docstring)."""
    units = units_of(consumer, topics)
    seed(lake, consumer, topics, now=now())
    results: list[BatchResult] = []
    try:
        while max_batches is None or len(results) < max_batches:
            group = membership.heartbeat(lake, consumer.name, member, now=now(), timeout=timeout)
            me = Owner(member, group.generation)
            mine = [units[k] for k in group.assignment(len(units)).get(member, ())]
            try:
                if not all(claim(lake, unit, me, now=now()) for unit in mine):
                    continue  # a newer generation: read the assignment again
                result = run_units(lake, consumer, topics, mine, fence(consumer.name, me),
                                   now=now) if mine else None
            except FencedError:
                continue
            if result is None:
                break
            results.append(result)
    finally:
        membership.heartbeat(lake, consumer.name, member, now=now(), timeout=timeout, leave=True)
    return results


def run_group(
    lake: Lake,
    consumer: Consumer,
    topics: Mapping[str, Topic],
    *,
    now: Callable[[], datetime],
    max_batches: int | None = None,
    timeout: timedelta = SESSION_TIMEOUT,
) -> list[BatchResult]:
    """Run a group's partitions until caught up, all in each batch: alone while no member is
    live (a member that joins meanwhile takes its partitions from this run, which goes on with
    the others), else as one more member."""
    group = membership.load(lake, consumer.name)
    if group.live(now(), timeout):
        return run_member(lake, consumer, topics, member=f"run-{uuid.uuid4().hex[:12]}",
                          now=now, timeout=timeout, max_batches=max_batches)
    seed(lake, consumer, topics, now=now())
    check = fence(consumer.name, Owner(None, group.generation), solo=True)
    results: list[BatchResult] = []
    active = units_of(consumer, topics)
    while active and (max_batches is None or len(results) < max_batches):
        try:
            result = run_units(lake, consumer, topics, active, check, now=now)
        except FencedError as exc:  # a member owns it now
            active = [u for u in active if u.partition != exc.partition]
            continue
        if result is None:
            break
        results.append(result)
    return results


def owners(lake: Lake, consumer: Consumer, topics: Mapping[str, Topic], *, now: datetime,
           timeout: timedelta = SESSION_TIMEOUT) -> dict[int, str]:
    """Which live member owns each log partition of a group now (kafka-consumer-groups
    --describe's CONSUMER-ID); partitions of no live member are left out."""
    group = membership.load(lake, consumer.name)
    live = set(group.live(now, timeout))
    found = {}
    for unit, checkpoint in units.load_units(lake, consumer, topics):
        who = owner(checkpoint)
        if unit.partition is not None and who.member in live and who.generation == group.generation:
            found[unit.partition] = who.member
    return found
