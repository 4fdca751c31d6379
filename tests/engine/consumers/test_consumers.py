"""Consumers: planning with backpressure, exactly-once microbatches, crash and resume, lag, reset."""

from __future__ import annotations

import random
import threading
from datetime import datetime, timedelta, timezone

import pytest
from engine_helpers import drop, record, table_loads
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog import consumers
from lakelog.consumers import BatchInput, Consumer, Output
from lakelog.consumers import checkpoints, resets, units
from lakelog.consumers.checkpoints import Checkpoint
from lakelog.errors import ConcurrentWriteError, ConfigError, ConsumerBusyError
from lakelog.lake import EmbeddedLake, driver_write
from lakelog.log import ingest
from lakelog.spark import local_checkpoints

COPY = Output(
    "streams/copy",
    T.StructType(
        [
            T.StructField("event_id", T.StringType()),
            T.StructField("partition", T.IntegerType()),
            T.StructField("offset", T.LongType()),
            T.StructField("batch", T.LongType()),
        ]
    ),
)
COUNTS = Output(
    "streams/counts",
    T.StructType([T.StructField("product_id", T.StringType()), T.StructField("n", T.LongType())]),
    keys=("product_id",),
)


def transform(batch: BatchInput):
    records = batch.records["events"]
    copy = records.select("event_id", "partition", "offset", F.lit(batch.batch).alias("batch"))
    delta = records.groupBy("product_id").agg(F.count("*").alias("d"))
    current = batch.current(COUNTS)
    counts = delta.join(current, "product_id", "left").select(
        "product_id", (F.col("d") + F.coalesce("n", F.lit(0))).alias("n")
    )
    return {COPY.path: copy, COUNTS.path: counts}


def make_consumer(max_records=15, fn=transform):
    return Consumer("test", ("events",), (COPY, COUNTS), fn, max_records_per_batch=max_records)


def clock():
    return datetime.now(timezone.utc)


@pytest.fixture
def loaded(lake, spark, topic, now):
    drop(lake.root, topic.name, "a.ndjson", [record(i) for i in range(40)])
    ingest.ingest(lake, spark, topic, now=now)
    return {"events": topic}


def assert_exactly_once(lake, total=40):
    copy = lake.read(lake.snapshot(COPY.path))
    assert copy.count() == total
    assert copy.select("event_id").distinct().count() == total
    counts = {r.product_id: r.n for r in lake.read(lake.snapshot(COUNTS.path)).collect()}
    expected = {f"p{k}": len([i for i in range(total) if i % 3 == k]) for k in range(3)}
    assert counts == expected


def empty_checkpoint(lake, committed=None):
    cp = checkpoints.load(lake, "plan-test")
    return Checkpoint(cp.consumer, cp.snapshot, -1, committed or {}, None, {})


def test_plan_shares_the_cap_by_backlog_and_counts_retention_gaps(lake):
    positions = {("t", 0): (0, 100), ("t", 1): (0, 3), ("t", 2): (50, 60)}
    plan = consumers.make_plan(empty_checkpoint(lake, {("t", 2): 40}), positions, max_records=20)
    assert plan.batch == 0 and plan.records == 20
    # By backlog (100, 3 and 10 of 113): 17.7, 0.5 and 1.8 records; the two the fractions add
    # up to go to the largest (partitions 2 and 0). Partition 1 waits for a larger fraction.
    assert plan.ranges == {("t", 0): (0, 18), ("t", 2): (50, 52)}
    assert plan.skipped == {("t", 2): 10}
    latest = consumers.make_plan(empty_checkpoint(lake), positions, max_records=10, start="latest")
    assert latest.ranges == {}


@pytest.mark.parametrize("seed", range(3))
def test_plan_shares_stay_within_the_cap_and_the_backlogs(lake, seed):
    rng = random.Random(seed)
    checkpoint = empty_checkpoint(lake)
    for _ in range(300):
        heads = [rng.choice([0, rng.randint(1, 40), rng.randint(1, 10**6)])
                 for _ in range(rng.randint(1, 6))]
        cap = rng.randint(1, 2000)
        plan = consumers.make_plan(checkpoint, {("t", p): (0, h) for p, h in enumerate(heads)},
                                   max_records=cap)
        took = [plan.ranges.get(("t", p), (0, 0))[1] for p in range(len(heads))]
        assert sum(took) == min(cap, sum(heads)) and all(t <= h for t, h in zip(took, heads))
        if cap < sum(heads):  # in proportion: each within one record of its exact share
            assert all(abs(t - cap * h / sum(heads)) < 1 for t, h in zip(took, heads))


def test_runs_until_caught_up_exactly_once(lake, loaded):
    consumer = make_consumer()
    results = consumers.run_until_caught_up(lake, consumer, loaded, now=clock)
    assert [r.batch for r in results] == list(range(len(results)))
    assert all(r.records <= 15 for r in results) and sum(r.records for r in results) == 40
    assert_exactly_once(lake)
    assert all(p.lag == 0 for p in consumers.lag(lake, consumer, loaded))
    assert consumers.run_batch(lake, consumer, loaded, now=clock()) is None


@pytest.fixture
def collects(monkeypatch, loaded):
    """The frames `driver_write.collect` collects once the records are ingested (`loaded`),
    each a Spark job."""
    found = []
    alone = driver_write.collect

    def counted(df):
        found.append(df)
        return alone(df)

    monkeypatch.setattr(driver_write, "collect", counted)
    return found


def test_a_batchs_writes_done_here_collect_their_rows_in_one_spark_job(lake, loaded, collects):
    """The copy (an append) and the counts (an upsert merged here) of a batch are collected in
    one Spark job (`driver_write.collect_together`), and written as each alone would be."""
    consumer = make_consumer(max_records=100)
    assert consumers.run_batch(lake, consumer, loaded, now=clock()).records == 40
    assert len(collects) == 1
    assert_exactly_once(lake)


NEWEST = T.StructType([T.StructField("user_id", T.StringType()),
                       T.StructField("offset", T.LongType()),
                       T.StructField("partition", T.IntegerType())])
#: Each user's newest record, as new versions of a merge-on-read table.
VERSIONS = Output("streams/versions", NEWEST, keys=("user_id",), newer_by="offset",
                  merge_on_read=True, rows_per_file=2)


def with_newest(batch: BatchInput):
    records = batch.records["events"]
    copy = records.select("event_id", "partition", "offset", F.lit(batch.batch).alias("batch"))
    newest = records.groupBy("user_id").agg(F.max("offset").alias("offset"),
                                            F.max("partition").alias("partition"))
    return {COPY.path: copy, VERSIONS.path: newest}


def test_new_versions_collect_with_the_batchs_other_writes(lake, loaded, collects):
    """A merge-on-read output's new versions are collected with the batch's other writes by
    one Spark job, and keep the key order their files are cut in: each commit's files hold
    disjoint key ranges."""
    consumer = Consumer("newest", ("events",), (COPY, VERSIONS), with_newest,
                        max_records_per_batch=15)
    results = consumers.run_until_caught_up(lake, consumer, loaded, now=clock)
    assert len(results) == 3 and len(collects) == 3
    log = lake.read(lake.snapshot(loaded["events"].path))
    expected = {r.user_id: (r.offset, r.partition) for r in log.groupBy("user_id").agg(
        F.max("offset").alias("offset"), F.max("partition").alias("partition")).collect()}
    found = lake.read(lake.snapshot(VERSIONS.path)).collect()
    assert {r.user_id: (r.offset, r.partition) for r in found} == expected
    assert lake.read(lake.snapshot(COPY.path)).count() == 40
    for version in range(1, lake.snapshot(VERSIONS.path).version + 1):  # each batch's commit
        before = {f.path for f in lake.snapshot(VERSIONS.path, version - 1).files()}
        added = sorted((f for f in lake.snapshot(VERSIONS.path, version).files()
                        if f.path not in before), key=lambda f: f.min_values["user_id"])
        assert added and all(f.num_records <= 2 for f in added)
        assert all(a.max_values["user_id"] < b.min_values["user_id"]
                   for a, b in zip(added, added[1:]))


def test_a_batch_loads_its_topics_log_once_and_its_checkpoint_twice(lake, loaded, monkeypatch):
    """A batch plans on the log as it finds it and reads its records from that same snapshot:
    one Delta table load (a few ms, more as the log's files grow) where it took three. Its
    checkpoint is loaded, then again after the plan is saved (step 4 commits against that
    version), and not after step 4."""
    loads = table_loads(monkeypatch)
    consumer = make_consumer(max_records=10)
    # The first batch creates the checkpoint table; the loads of the ones after it are counted.
    assert consumers.run_batch(lake, consumer, loaded, now=clock()).records == 10
    for _ in range(2):
        del loads[:]
        assert consumers.run_batch(lake, consumer, loaded, now=clock()).records == 10
        assert loads.count(loaded["events"].path) == 1
        assert loads.count(checkpoints.checkpoint_path(consumer.name)) == 2
    results = consumers.run_until_caught_up(lake, consumer, loaded, now=clock)
    assert sum(r.records for r in results) == 10
    assert_exactly_once(lake)


def test_an_output_that_fails_raises_its_own_error_after_the_writes_before_it(lake, loaded):
    """When the query collecting a batch's outputs together fails, each write collects its own
    rows: the outputs before the one at fault commit, as they would alone, and it raises its
    own error; the retry, the fault mended, finishes the same batch."""
    def failing(batch):
        produced = transform(batch)
        counts = produced[COUNTS.path]
        produced[COUNTS.path] = counts.withColumn("n", F.when(
            F.col("n") > 0, F.raise_error(F.lit("no counts today"))).otherwise(F.col("n")))
        return produced

    with pytest.raises(Exception, match="no counts today"):
        consumers.run_batch(lake, make_consumer(max_records=100, fn=failing), loaded, now=clock())
    assert lake.read(lake.snapshot(COPY.path)).count() == 40
    assert lake.read(lake.snapshot(COUNTS.path)).count() == 0
    results = consumers.run_until_caught_up(lake, make_consumer(max_records=100), loaded,
                                            now=clock)
    assert results[0].resumed and results[0].outputs_written == (COUNTS.path,)
    assert_exactly_once(lake)


def test_a_batch_that_fails_reports_its_own_error_even_if_freeing_its_rows_fails(
    lake, loaded, monkeypatch
):
    """The rows a batch kept (`BatchInput.cached`) are freed whether it succeeds or fails; a
    failure to free them must not replace the batch's own error."""
    def bad(batch):
        batch.cached(batch.records["events"].select("event_id"))
        raise ConfigError("the transform's own error")

    def unfreeable(df):
        raise RuntimeError("cannot free")

    monkeypatch.setattr(local_checkpoints, "free", unfreeable)
    with pytest.raises(ConfigError, match="the transform's own error"):
        consumers.run_batch(lake, make_consumer(fn=bad), loaded, now=clock())
    # A batch that succeeds still reports a failure to free its rows: nothing hides it.
    def good(batch):
        batch.cached(batch.records["events"].select("event_id"))
        return transform(batch)

    with pytest.raises(RuntimeError, match="cannot free"):
        consumers.run_batch(lake, make_consumer(fn=good), loaded, now=clock())


def test_lag_counts_unconsumed_records(lake, loaded):
    consumer = make_consumer()
    consumers.run_batch(lake, consumer, loaded, now=clock())
    assert sum(p.lag for p in consumers.lag(lake, consumer, loaded)) == 25


def test_lag_of_a_checkpoint_the_caller_holds_does_not_load_it_again(lake, loaded, monkeypatch):
    consumer = make_consumer()
    consumers.run_batch(lake, consumer, loaded, now=clock())
    held = units.load_all(lake, consumer, loaded)
    loads = table_loads(monkeypatch)
    given = consumers.lag(lake, consumer, loaded, checkpoint=held)
    assert not [p for p in loads if p.startswith("_checkpoints/")]
    assert given == consumers.lag(lake, consumer, loaded)  # which loads it
    assert [p for p in loads if p.startswith("_checkpoints/")]


def test_crash_after_planning_resumes_the_same_plan(lake, loaded):
    calls = []

    def failing(batch):
        calls.append(batch.batch)
        if len(calls) == 1:
            raise RuntimeError("executor lost")
        return transform(batch)

    with pytest.raises(RuntimeError):
        consumers.run_batch(lake, make_consumer(fn=failing), loaded, now=clock())
    planned = checkpoints.load(lake, "test").plan
    assert planned is not None and planned.batch == 0
    result = consumers.run_batch(lake, make_consumer(fn=failing), loaded, now=clock())
    assert result.resumed and result.ranges == dict(planned.ranges)
    consumers.run_until_caught_up(lake, make_consumer(), loaded, now=clock)
    assert_exactly_once(lake)


class CrashingLake(EmbeddedLake):
    """Fails once at a chosen point of the commit protocol."""

    def __init__(self, spark, root, point):
        super().__init__(spark, root)
        self.point, self.armed, self.fired = point, False, False

    def _fire(self):
        if self.armed and not self.fired:
            self.fired = True
            raise RuntimeError(f"crash at {self.point}")

    def _commit(self, snapshot, adds, removed, txns, metadata):
        if self.point == "after-output-files" and snapshot.path == COPY.path and adds:
            self._fire()  # files are written, the commit never happens
        version = super()._commit(snapshot, adds, removed, txns, metadata)
        if self.point == "between-outputs" and snapshot.path == COPY.path:
            self._fire()
        if self.point == "after-outputs" and snapshot.path == COUNTS.path:
            self._fire()  # both outputs committed, offsets not
        return version


@pytest.mark.parametrize("point", ["after-output-files", "between-outputs", "after-outputs"])
def test_crash_and_resume_loses_and_doubles_nothing(spark, lake, loaded, point):
    crashing = CrashingLake(spark, lake.root, point)
    consumer = make_consumer()
    consumers.run_batch(crashing, consumer, loaded, now=clock())  # batch 0 fine
    crashing.armed = True
    with pytest.raises(RuntimeError, match="crash at"):
        consumers.run_until_caught_up(crashing, consumer, loaded, now=clock)
    results = consumers.run_until_caught_up(lake, consumer, loaded, now=clock)
    assert results[0].resumed
    if point == "after-outputs":
        assert results[0].outputs_written == () and len(results[0].outputs_skipped) == 2
    if point == "between-outputs":
        assert results[0].outputs_written == (COUNTS.path,)
    assert_exactly_once(lake)


class RacingLake(EmbeddedLake):
    """Makes two runs look for the checkpoint before either creates it or commits its plan."""

    def __init__(self, spark, root, gate):
        super().__init__(spark, root)
        self.gate, self.waited = gate, False

    def exists(self, path):
        if path == checkpoints.checkpoint_path("test") and not self.waited:
            self.waited = True
            self.gate.wait(timeout=60)
        return super().exists(path)


def test_two_concurrent_runs_one_wins_the_other_writes_nothing(spark, lake, loaded):
    consumer = make_consumer(max_records=100)
    gate = threading.Barrier(2)
    outcomes = []

    def run():
        try:
            racing = RacingLake(spark, lake.root, gate)
            outcomes.append(consumers.run_batch(racing, consumer, loaded, now=clock()))
        except ConcurrentWriteError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [o for o in outcomes if isinstance(o, Exception)]
    assert len(outcomes) == 2 and len(errors) == 1
    assert "nothing was written" in str(errors[0])
    assert lake.snapshot(COPY.path).version == 1  # only the winner's batch
    assert_exactly_once(lake)


def test_a_run_resuming_a_live_plan_cannot_double_apply(lake, loaded):
    """Run B takes run A's pending plan for a crashed one and finishes it; A then loses."""
    in_transform, b_done = threading.Event(), threading.Event()

    def slow(batch):
        in_transform.set()
        b_done.wait(timeout=120)
        return transform(batch)

    outcome = []

    def run_a():
        try:
            outcome.append(consumers.run_batch(lake, make_consumer(100, slow), loaded, now=clock()))
        except ConcurrentWriteError as exc:
            outcome.append(exc)

    a = threading.Thread(target=run_a)
    a.start()
    assert in_transform.wait(timeout=120)
    b = consumers.run_batch(lake, make_consumer(100), loaded, now=clock())
    assert b.resumed and b.batch == 0
    b_done.set()
    a.join()
    assert isinstance(outcome[0], ConcurrentWriteError)
    assert lake.snapshot(COPY.path).version == 1 and lake.snapshot(COUNTS.path).version == 1
    assert_exactly_once(lake)


def test_reset_offsets(lake, spark, loaded, now):
    consumer = make_consumer(max_records=100)
    consumers.run_until_caught_up(lake, consumer, loaded, now=clock)
    offsets = resets.reset_offsets(lake, consumer, loaded, to="earliest", now=now)
    assert set(offsets.values()) == {0}
    assert sum(p.lag for p in consumers.lag(lake, consumer, loaded)) == 40
    offsets = resets.reset_offsets(lake, consumer, loaded, to="latest", now=now)
    assert sum(p.lag for p in consumers.lag(lake, consumer, loaded)) == 0
    # Records ingested after a moment: reset to that moment replays exactly those.
    later = datetime.now(timezone.utc) + timedelta(seconds=1)
    drop(lake.root, "events", "b.ndjson", [record(i) for i in range(40, 45)])
    ingest.ingest(lake, spark, loaded["events"], now=later + timedelta(seconds=1))
    resets.reset_offsets(lake, consumer, loaded, to=later, now=now)
    assert sum(p.lag for p in consumers.lag(lake, consumer, loaded)) == 5
    # Batch ids keep increasing after a reset, so output transactions stay monotonic.
    before = checkpoints.load(lake, "test").batch
    (result,) = consumers.run_until_caught_up(lake, consumer, loaded, now=clock)
    assert result.batch == before + 1


def test_reset_refused_while_a_batch_is_in_progress(lake, loaded, now):
    def failing(batch):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        consumers.run_batch(lake, make_consumer(fn=failing), loaded, now=now)
    with pytest.raises(ConsumerBusyError, match="batch 0 in progress"):
        resets.reset_offsets(lake, make_consumer(), loaded, to="earliest", now=now)


def test_bad_declarations(lake):
    with pytest.raises(ConfigError, match="consumer name"):
        Consumer("Bad Name", ("events",), (), transform)
    with pytest.raises(ConfigError, match="undeclared topics: nope"):
        consumers.run_batch(lake, Consumer("c", ("nope",), (), transform), {}, now=clock())
