"""Consumer groups: members sharing a consumer's log partitions, each partition exactly-once,
generations that fence a member whose partition moved, and takeover of a dead member's work."""

from __future__ import annotations

import random
import threading
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from engine_helpers import TOTALS, CrashAfterCommit, add_to_totals, drop, record
from pyspark.sql import types as T

from lakelog import consumers
from lakelog.consumers import BatchInput, Consumer, Output, checkpoints, groups, membership
from lakelog.consumers import definitions, resets, units
from lakelog.errors import ConfigError, DefinitionChangedError, FencedError
from lakelog.lake import AppTxn
from lakelog.log import ingest
from lakelog.pipeline import Pipeline

COPY = Output(
    "streams/copy",
    T.StructType([T.StructField("event_id", T.StringType()),
                  T.StructField("partition", T.IntegerType()),
                  T.StructField("offset", T.LongType())]),
)


def copy_and_total(batch: BatchInput):
    copied = batch.records["events"].select("event_id", "partition", "offset")
    return {COPY.path: copied, **add_to_totals(batch)}


def grouped(members=2, max_records=7, fn=copy_and_total):
    return Consumer("shared", ("events",), (COPY, TOTALS), fn, max_records_per_batch=max_records,
                    members=members)


def clock():
    return datetime.now(timezone.utc)


def land(lake, spark, topic, now, records, pieces=1, rng=None):
    """Land `records` as `pieces` files (cut at random points) and ingest each."""
    cuts = sorted((rng or random).sample(range(1, len(records)), pieces - 1)) if pieces > 1 else []
    for n, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(records)])):
        drop(lake.root, topic.name, f"{now:%H%M%S%f}-{n}.ndjson", records[a:b])
        ingest.ingest(lake, spark, topic, now=now)


def expected(records):
    totals = {}
    for r in records:
        n, amount = totals.get(r["product_id"], (0, 0.0))
        totals[r["product_id"]] = (n + 1, amount + r["amount"])
    return sorted(r["event_id"] for r in records), totals


def outcome(lake):
    copy = lake.read(lake.snapshot(COPY.path)).select("event_id", "partition", "offset").collect()
    totals = {r.product_id: (r.n, r.amount) for r in lake.read(lake.snapshot(TOTALS.path)).collect()}
    assert len({(r.partition, r.offset) for r in copy}) == len(copy)  # no record twice
    return sorted(r.event_id for r in copy), totals


def run_members(lake, consumer, topics, names, **kwargs):
    """Run the members at once, each in a thread of its own (runs of one Spark session)."""
    results, errors = {}, []

    def member(name):
        try:
            results[name] = groups.run_member(lake, consumer, topics, member=name, now=clock,
                                              **kwargs)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=member, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_members_together_equal_one_computation_over_all_records(lake, spark, topic, now, seed):
    rng = random.Random(seed)
    records = [record(i) for i in range(rng.randint(30, 45))]
    half = rng.randint(5, len(records) - 5)
    land(lake, spark, topic, now, records[:half], pieces=rng.randint(1, 3), rng=rng)
    consumer = grouped(members=rng.randint(2, 3), max_records=rng.randint(6, 15))
    topics = {"events": topic}
    names = [f"m{k}" for k in range(consumer.members)]
    run_members(lake, consumer, topics, names)
    land(lake, spark, topic, now + timedelta(seconds=1), records[half:], pieces=2, rng=rng)
    run_members(lake, consumer, topics, names[:rng.randint(1, len(names))])

    ids, totals = outcome(lake)
    want_ids, want_totals = expected(records)
    assert ids == want_ids
    assert totals == want_totals
    assert sum(p.lag for p in consumers.lag(lake, consumer, topics)) == 0
    assert membership.load(lake, "shared").members == {}  # every member left


def test_membership_generations_and_round_robin_assignment(lake, now):
    first = membership.heartbeat(lake, "g", "a", now=now)
    assert first.assignment(3) == {"a": (0, 1, 2)} and first.generation >= 1
    again = membership.heartbeat(lake, "g", "a", now=now + timedelta(seconds=1))
    assert again.generation == first.generation  # a fresh heartbeat writes nothing
    both = membership.heartbeat(lake, "g", "b", now=now + timedelta(seconds=2))
    assert both.generation > first.generation
    assert both.assignment(3) == {"a": (0, 2), "b": (1,)}
    # a's heartbeat is older than the session timeout: the next heartbeat of b removes it
    later = now + membership.SESSION_TIMEOUT + timedelta(seconds=3)
    alone = membership.heartbeat(lake, "g", "b", now=later)
    assert alone.assignment(3) == {"b": (0, 1, 2)} and alone.generation > both.generation
    left = membership.heartbeat(lake, "g", "b", now=later, leave=True)
    assert left.members == {} and membership.load(lake, "g").generation > alone.generation


def test_a_member_whose_partition_moved_is_fenced_and_nothing_doubles(lake, spark, topic, now):
    records = [record(i) for i in range(24)]
    land(lake, spark, topic, now, records)
    topics = {"events": topic}
    consumer = grouped(max_records=100)
    unit = units.units_of(consumer, topics)[0]
    units.seed(lake, consumer, topics, now=now)
    a = groups.Owner("a", membership.heartbeat(lake, "shared", "a", now=clock()).generation)
    assert groups.claim(lake, unit, a, now=clock())

    def rebalanced_meanwhile(batch):
        # while a computes its batch, b joins and claims the partition in a newer generation
        b_gen = membership.heartbeat(lake, "shared", "b", now=clock()).generation
        assert groups.claim(lake, unit, groups.Owner("b", b_gen), now=clock())
        return copy_and_total(batch)

    with pytest.raises(FencedError, match="partition 0 belongs to member b"):
        groups.run_units(lake, replace(consumer, transform=rebalanced_meanwhile), topics, [unit],
                         groups.fence("shared", a), now=clock)
    assert checkpoints.load(lake, unit.checkpoint).plan is not None  # a did not commit
    assert groups.owners(lake, consumer, topics, now=clock()) == {0: "b"}  # lakelog lag's MEMBER
    # a stale member cannot claim the partition back
    assert not groups.claim(lake, unit, a, now=clock())
    # b finishes a's batch from its plan, and then the rest as the group's only member
    membership.heartbeat(lake, "shared", "a", now=clock(), leave=True)
    groups.run_member(lake, consumer, topics, member="b", now=clock)
    assert outcome(lake) == expected(records)


def test_a_killed_members_partitions_are_taken_over_exactly_once(lake, spark, topic, now):
    records = [record(i) for i in range(45)]
    land(lake, spark, topic, now, records, pieces=3)
    topics = {"events": topic}
    consumer = grouped(max_records=4)
    start = clock()
    units.seed(lake, consumer, topics, now=start)
    dead = groups.Owner("dead", membership.heartbeat(lake, "shared", "dead", now=start).generation)
    every = units.units_of(consumer, topics)
    filled = tuple(p.partition for p in consumers.lag(lake, consumer, topics) if p.head)
    assert len(filled) >= 2 and 1 in filled
    assert all(groups.claim(lake, unit, dead, now=start) for unit in every)
    first = groups.run_units(lake, consumer, topics, every, groups.fence("shared", dead),
                             now=clock)  # the member works a batch of all its partitions ...
    assert first.partitions == filled and first.records <= 4
    # ... and dies in a batch of partition 1 after writing one of its two outputs, before
    # committing its offsets; it never leaves the group
    dying = CrashAfterCommit(spark, lake.root, COPY.path)
    dying.armed = True
    unit = units.Unit("shared", 1)
    with pytest.raises(RuntimeError, match="crash after committing"):
        groups.run_units(dying, consumer, topics, [unit], groups.fence("shared", dead),
                         now=clock)
    assert checkpoints.load(lake, unit.checkpoint).plan is not None
    # a survivor joins; once the dead member's session has timed out, it owns every partition
    later = start + membership.SESSION_TIMEOUT + timedelta(seconds=1)
    results = groups.run_member(lake, consumer, topics, member="survivor",
                                now=lambda: later + (clock() - start))
    # partition 1 (its copy written, its totals not) and the others (nothing written) finish in
    # one batch, each output written once for each
    assert results[0].resumed and results[0].partitions == filled
    assert results[0].outputs_written == (COPY.path, TOTALS.path)
    assert outcome(lake) == expected(records)


def test_a_consumer_becomes_a_group_with_its_offsets(lake, spark, topic, now):
    records = [record(i) for i in range(30)]
    land(lake, spark, topic, now, records)
    topics = {"events": topic}
    alone = grouped(members=0, max_records=10)
    consumers.run_batch(lake, alone, topics, now=clock())
    with pytest.raises(ConfigError, match="is a group"):
        consumers.run_batch(lake, grouped(), topics, now=clock())
    assert sum(p.lag for p in consumers.lag(lake, grouped(), topics)) == 20  # not seeded yet
    consumers.run_until_caught_up(lake, grouped(), topics, now=clock)  # no member: run alone
    assert outcome(lake) == expected(records)
    with pytest.raises(ConfigError, match="ran as a group"):  # declared alone again
        consumers.run_batch(lake, alone, topics, now=clock())
    assert sum(p.lag for p in consumers.lag(lake, alone, topics)) == 0  # its group's offsets


def test_group_offsets_reset_and_rebuild_per_partition(lake, spark, topic, now):
    records = [record(i) for i in range(20)]
    land(lake, spark, topic, now, records)
    topics = {"events": topic}
    consumer = grouped(fn=lambda b: {COPY.path: b.records["events"].select(
        "event_id", "partition", "offset"), TOTALS.path: None})
    consumers.run_until_caught_up(lake, consumer, topics, now=clock)
    resets.reset_offsets(lake, consumer, topics, to="earliest", now=now)
    assert sum(p.lag for p in consumers.lag(lake, consumer, topics)) == 20
    for unit in units.units_of(consumer, topics):
        committed = checkpoints.load(lake, unit.checkpoint).committed
        assert set(committed) <= {("events", unit.partition)}
    consumers.run_until_caught_up(lake, consumer, topics, now=clock)
    ids = sorted(r.event_id for r in lake.read(lake.snapshot(COPY.path)).collect())
    assert ids == sorted([r["event_id"] for r in records] * 2)  # appends take a replay


def test_a_consumer_becomes_a_group_with_its_definition(lake, spark, topic, now):
    """The definition a consumer's batches kept goes to its group's units with the offsets:
    declared otherwise as it becomes a group, it is refused."""
    land(lake, spark, topic, now, [record(i) for i in range(30)])
    topics = {"events": topic}
    declared = {"definition": (("amount", "sum"),)}
    consumers.run_batch(lake, replace(grouped(members=0, max_records=10), **declared), topics,
                        now=clock())
    with pytest.raises(DefinitionChangedError, match="amount 'sum' -> 'max'"):
        consumers.run_until_caught_up(lake, replace(grouped(), definition=(("amount", "max"),)),
                                      topics, now=clock)
    consumers.run_until_caught_up(lake, replace(grouped(), **declared), topics, now=clock)
    assert sum(p.lag for p in consumers.lag(lake, grouped(), topics)) == 0


def test_a_rebuild_lets_a_group_take_a_new_definition(lake, spark, topic, now):
    """A member's unit keeps the consumer's definition; a rebuild empties it with the rest of
    the unit's state, keeping only its owner, so the new declaration is taken."""
    records = [record(i) for i in range(20)]
    land(lake, spark, topic, now, records)
    topics = {"events": topic}
    declared = replace(grouped(max_records=100), definition=(("amount", "sum"),))
    run_members(lake, declared, topics, ["a", "b"])
    states = [checkpoints.load(lake, u.checkpoint).state for u in units.units_of(declared, topics)]
    kept = [s[definitions.DEFINITION] for s in states if definitions.DEFINITION in s]
    assert kept and all(d == {"topics": "events", "amount": "sum"} for d in kept)  # each batch's
    assert all(units.OWNER in s for s in states)
    otherwise = replace(declared, definition=(("amount", "max"),))
    land(lake, spark, topic, now, [record(i) for i in range(20, 24)])
    with pytest.raises(DefinitionChangedError, match="amount 'sum' -> 'max'"):
        groups.run_member(lake, otherwise, topics, member="a", now=clock)
    owners = [checkpoints.load(lake, u.checkpoint).state[units.OWNER]
              for u in units.units_of(otherwise, topics)]
    pipeline = Pipeline("grouped", topics=[topic], consumers=[otherwise])
    resets.rebuild_consumer(lake, pipeline, "shared", to="earliest", now=now)
    assert [checkpoints.load(lake, u.checkpoint).state for u in units.units_of(
        otherwise, topics)] == [{units.OWNER: owner} for owner in owners]
    run_members(lake, otherwise, topics, ["a", "b"])
    assert outcome(lake) == expected([*records, *(record(i) for i in range(20, 24))])
    after = [checkpoints.load(lake, u.checkpoint).state for u in units.units_of(otherwise, topics)]
    assert {s[definitions.DEFINITION]["amount"] for s in after if definitions.DEFINITION in s} == {
        "max"}


def test_a_group_declaration_refuses_state_across_partitions():
    with pytest.raises(ConfigError, match="cannot share them"):
        Consumer("w", ("events",), (COPY,), copy_and_total, members=2,
                 advance=lambda batch: {})
    with pytest.raises(ConfigError, match="members must be"):
        Consumer("w", ("events",), (COPY,), copy_and_total, members=-1)


def test_a_lost_race_for_a_keyed_output_is_retried_from_the_plan(lake, spark, topic, now):
    records = [record(i) for i in range(12)]
    land(lake, spark, topic, now, records)
    topics = {"events": topic}
    consumer = grouped(max_records=100)
    units.seed(lake, consumer, topics, now=now)
    unit, attempts = units.Unit("shared", 0), []

    def another_member_commits_first(batch):
        attempts.append(batch.batch)
        if len(attempts) == 1:  # another member's keyed commit lands before this one's
            other = batch.lake.snapshot(TOTALS.path)
            batch.lake.write(other, None, txns=[AppTxn("lakelog.group:shared", 99)])
        return copy_and_total(batch)

    solo = groups.fence("shared", groups.Owner(None, 0), solo=True)
    result = groups.run_units(lake, replace(consumer, transform=another_member_commits_first),
                              topics, [unit], solo, now=clock)
    assert attempts == [0, 0] and result.resumed and result.outputs_skipped == (COPY.path,)
    copy = lake.read(lake.snapshot(COPY.path)).collect()
    assert len(copy) == len({r.offset for r in copy}) == result.records > 0
    assert {r.partition for r in copy} == {0}
