"""Consumer state in the checkpoint (a watermark), idle ticks, and upserts that delete keys."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from engine_helpers import BASE, CrashAfterCommit, drop, make_topic, record
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog import consumers
from lakelog.consumers import BatchInput, Changes, Consumer, Output
from lakelog.consumers import checkpoints, event_times
from lakelog.consumers.watermarks import Watermark, from_us, to_us, watermark_of
from lakelog.errors import ConfigError
from lakelog.log import ingest
from lakelog.log.offsets import RangeStats

MARK = Watermark(lateness=timedelta(seconds=10), idle_timeout=timedelta(minutes=5))
SEEN = Output(
    "streams/seen",
    T.StructType([T.StructField("event_id", T.StringType()), T.StructField("mark", T.LongType())]),
    keys=("event_id",),
)
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def advance(batch: BatchInput):
    top = batch.records["events"].agg(F.max("event_time")).first()[0]
    return MARK.advance(batch.state, top, batch.now)


def transform(batch: BatchInput):
    mark = batch.next_state["watermark_us"]
    rows = batch.records["events"].select("event_id", F.lit(mark).alias("mark"))
    gone = batch.current(SEEN).select("event_id")  # only this batch's rows remain
    return {SEEN.path: Changes(rows, deletes=gone)}


CONSUMER = Consumer(
    "marked", ("events",), (SEEN,), transform, max_records_per_batch=12,
    advance=advance, idle_tick=MARK.idle,
)


def test_the_watermark_of_several_inputs_follows_the_slowest():
    s = timedelta(seconds=1)
    state = MARK.advance({}, {"views": BASE + 60 * s, "orders": BASE + 300 * s}, T0)
    assert watermark_of(state) == BASE + 50 * s  # the views hold it, less the lateness
    assert state["max_event_us"] == to_us(BASE + 300 * s)  # what an idle tick moves on from
    # An input with no record yet does not hold the others back.
    assert watermark_of(MARK.advance({}, {"views": BASE + 60 * s, "orders": None}, T0)) == (
        BASE + 50 * s)
    # The views pass the orders: now the orders, seen before, hold it.
    state = MARK.advance(state, {"views": BASE + 400 * s, "orders": None}, T0 + s)
    assert watermark_of(state) == BASE + 290 * s
    # An input quiet for the idle timeout holds no one back, until its records come again.
    quiet = MARK.advance(state, {"views": BASE + 500 * s, "orders": None}, T0 + 5 * 60 * s)
    assert watermark_of(quiet) == BASE + 490 * s
    back = MARK.advance(quiet, {"views": BASE + 600 * s, "orders": BASE + 350 * s},
                        T0 + 6 * 60 * s)
    assert watermark_of(back) == BASE + 490 * s  # the orders hold it there: it never moves back
    assert watermark_of(MARK.advance(back, {"views": BASE + 700 * s, "orders": None},
                                     T0 + 7 * 60 * s)) == BASE + 490 * s
    # Without an idle timeout, a silent input holds the watermark, as in Spark.
    held = Watermark(lateness=10 * s)
    state = held.advance({}, {"views": BASE + 60 * s, "orders": BASE + 30 * s}, T0)
    state = held.advance(state, {"views": BASE + 900 * s, "orders": None}, T0 + 3600 * s)
    assert watermark_of(state) == BASE + 20 * s
    # One input is the plain rule: no per-input state.
    assert MARK.advance({}, {"views": BASE + 60 * s}, T0) == MARK.advance({}, BASE + 60 * s, T0)
    assert "inputs" not in MARK.advance({}, {"views": BASE}, T0)


def test_each_inputs_greatest_event_time(spark):
    """From the batch's statistics when each topic's are known, else in one pass; a topic with
    no record has none, and frames of one input (a topic joined with itself) count together."""
    s = timedelta(seconds=1)
    stats = {"a": RangeStats(2, (BASE, BASE + 5 * s), {}, {0: BASE + 5 * s, 1: BASE + 2 * s}),
             "b": RangeStats(0, None, {})}
    assert event_times.from_stats(stats, ["a", "b"]) == event_times.Latest(
        {"a": BASE + 5 * s, "b": None})
    assert event_times.from_stats(stats, ["a", "b"], {"a": (0, 1), "b": ()}).hold == BASE + 2 * s
    assert event_times.from_stats({**stats, "b": None}, ["a", "b"]) is None
    schema = "t timestamp, u timestamp, partition int"
    a = spark.createDataFrame([(BASE, BASE + 9 * s, 0), (BASE + 3 * s, None, 1)], schema)
    b = spark.createDataFrame([(None, BASE, 0)], schema)
    c = spark.createDataFrame([], schema)
    times = [("a", a, "t"), ("b", b, "t"), ("a", a, "u"), ("c", c, "t")]

    def utc(v):
        return v if v is None else v.astimezone(timezone.utc)

    found = event_times.greatest(times)
    assert {k: utc(v) for k, v in found.by_input.items()} == {"a": BASE + 9 * s, "b": None,
                                                              "c": None}
    assert found.hold is None
    # A batch cut short in partitions 0 and 1 of `a`: the slower of them, 1 (3 s), holds.
    assert utc(event_times.greatest(times, {"a": (0, 1)}).hold) == BASE + 3 * s
    assert utc(event_times.greatest(times, {"a": (0,)}).hold) == BASE + 9 * s


def test_a_batch_cut_short_holds_the_watermark_at_its_slowest_partition():
    """The hold caps the watermark (less the lateness) in its batch alone; it never moves the
    watermark back, nor lowers the greatest event time, which the next batch goes on from."""
    s = timedelta(seconds=1)
    state = MARK.advance({}, BASE + 600 * s, T0, hold=BASE + 240 * s)
    assert watermark_of(state) == BASE + 230 * s
    assert state["max_event_us"] == to_us(BASE + 600 * s)
    held = MARK.advance(state, BASE + 700 * s, T0 + s, hold=BASE + 100 * s)
    assert watermark_of(held) == BASE + 230 * s
    several = MARK.advance(held, {"a": BASE + 800 * s, "b": BASE + 500 * s}, T0 + 2 * s,
                           hold=BASE + 300 * s)
    assert watermark_of(several) == BASE + 290 * s
    assert watermark_of(MARK.advance(several, BASE + 900 * s, T0 + 3 * s)) == BASE + 890 * s


def test_watermark_rules():
    state = MARK.advance({}, BASE + timedelta(seconds=30), T0)
    assert watermark_of(state) == BASE + timedelta(seconds=20)
    older = MARK.advance(state, BASE, T0 + timedelta(seconds=1))  # never moves back
    assert watermark_of(older) == BASE + timedelta(seconds=20)
    assert not MARK.idle(older, T0 + timedelta(minutes=4))
    assert MARK.idle(older, T0 + timedelta(minutes=6))
    idle = MARK.advance(older, None, T0 + timedelta(minutes=6, seconds=1))
    # event time moves on with the wall clock since the last arrival: 6 min later
    assert watermark_of(idle) == BASE + timedelta(minutes=6, seconds=20)
    assert not MARK.idle(idle, T0 + timedelta(minutes=8))  # at most one tick per timeout
    assert MARK.advance({}, None, T0) == {} and watermark_of({}) is None
    assert from_us(to_us(T0)) == T0
    with pytest.raises(ConfigError, match="lateness"):
        Watermark(lateness=timedelta(seconds=-1))
    with pytest.raises(ConfigError, match="idle_timeout"):
        Watermark(idle_timeout=timedelta(0))


def test_idle_ticks_stop_once_the_horizon_is_closed_and_resume_with_records():
    horizon = timedelta(minutes=1)  # e.g. a one-minute window: it ends a minute after an event
    state = MARK.advance({}, BASE, T0)  # the watermark is 10 s behind the event
    assert MARK.idle(state, T0 + timedelta(minutes=6), horizon=horizon)
    ticked = MARK.advance(state, None, T0 + timedelta(minutes=6))
    assert watermark_of(ticked) >= BASE + horizon  # everything an event at BASE is in is closed
    assert not MARK.idle(ticked, T0 + timedelta(minutes=12), horizon=horizon)
    assert MARK.idle(ticked, T0 + timedelta(minutes=12))  # with no horizon: every idle_timeout
    # A new record opens a window again: a tick is due once the stream is quiet for the timeout.
    again = MARK.advance(ticked, BASE + timedelta(minutes=10), T0 + timedelta(minutes=13))
    assert not MARK.idle(again, T0 + timedelta(minutes=14), horizon=horizon)
    assert MARK.idle(again, T0 + timedelta(minutes=19), horizon=horizon)


def test_state_is_committed_with_the_batch_and_idle_ticks_close_quiet_streams(spark, lake):
    topic = make_topic()
    topics = {"events": topic}
    drop(lake.root, topic.name, "a.ndjson", [record(i) for i in range(20)])
    ingest.ingest(lake, spark, topic, now=T0)
    crashing = CrashAfterCommit(spark, lake.root, SEEN.path)  # dies before the offset commit
    consumers.run_batch(crashing, CONSUMER, topics, now=T0)
    first = checkpoints.load(lake, "marked").state
    crashing.armed = True
    with pytest.raises(RuntimeError, match="crash after committing streams/seen"):
        consumers.run_batch(crashing, CONSUMER, topics, now=T0 + timedelta(seconds=1))
    retry = consumers.run_batch(lake, CONSUMER, topics, now=T0 + timedelta(minutes=1))
    assert retry.resumed and retry.outputs_written == ()
    state = checkpoints.load(lake, "marked").state
    # the retry recomputed the state from the same records at the plan's time, not its own
    assert state["arrival_us"] == to_us(T0 + timedelta(seconds=1))
    assert state["watermark_us"] >= first["watermark_us"]
    newest = lake.read(lake.snapshot(topic.path)).agg(F.max("event_time")).first()[0]
    assert watermark_of(state) == newest.replace(tzinfo=timezone.utc) - MARK.lateness

    seen = {r.event_id: r.mark for r in lake.read(lake.snapshot(SEEN.path)).collect()}
    assert len(seen) == 8  # batch 1 deleted batch 0's 12 rows in the commit that added its own
    assert set(seen.values()) == {state["watermark_us"]}
    assert consumers.run_batch(lake, CONSUMER, topics, now=T0 + timedelta(minutes=3)) is None
    tick = consumers.run_until_caught_up(
        lake, CONSUMER, topics, now=lambda: T0 + timedelta(minutes=7)
    )
    assert [r.records for r in tick] == [0]
    ticked = checkpoints.load(lake, "marked").state
    assert ticked["watermark_us"] == state["watermark_us"] + to_us(
        T0 + timedelta(minutes=7) - from_us(state["arrival_us"])
    )
    assert consumers.run_batch(lake, CONSUMER, topics, now=T0 + timedelta(minutes=8)) is None
