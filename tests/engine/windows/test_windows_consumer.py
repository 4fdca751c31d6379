"""The windowed-aggregate consumer end to end: topic records in, exactly-once microbatches out.

Watermarks advance with the records and, on an idle tick, with the clock; late records go to
the late table; final mode publishes a window once; a crash between two outputs is retried
without doubling anything. Few microbatches on purpose: each costs seconds.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from pyspark.sql import functions as F
from engine_helpers import BASE, CrashAfterCommit, make_topic, record

from lakelog import consumers
from lakelog.consumers import BatchInput, checkpoints
from lakelog.consumers.watermarks import Watermark, watermark_of
from lakelog.errors import ConfigError
from lakelog.lake import AppTxn, already_committed, driver_write
from lakelog.log import ingest, offsets
from lakelog.log.offsets import RangeStats, ensure_topic_table, read_offsets, topic_snapshot
from lakelog.windows import Count, Session, Sum, Tumbling, WindowedAggregate
from lakelog.windows import consumer as window_consumer
from lakelog.windows.consumer import _scanned
from lakelog.windows.frames import check_events

SECOND = timedelta(seconds=1)


def produce(lake, spark, topic, records, now):
    ingest.produce(lake, spark, topic, [json.dumps(r) for r in records], source="test", now=now)


def table(lake, path):
    return lake.read(lake.snapshot(path))


def at(hh_mm_ss: str):
    """A time of the test records' day, naive and local as PySpark returns timestamps."""
    h, m, s = (int(p) for p in hh_mm_ss.split(":"))
    return BASE.replace(hour=h, minute=m, second=s).astimezone().replace(tzinfo=None)


def test_update_mode_late_records_and_idle_ticks(spark, lake, topic, now):
    agg = WindowedAggregate(
        "per_minute", (topic.name,), Tumbling(timedelta(minutes=1)),
        (Count("n"), Sum("amount", "amount")), group_by=("product_id",),
        watermark=Watermark(lateness=30 * SECOND, idle_timeout=timedelta(minutes=5)),
    )
    consumer, topics = agg.consumer, {topic.name: topic}
    # event_time = 10:00:00 + seconds + 1 s; e0, e3 (and e6, e9) are product p0, e1, e4 p1.
    produce(lake, spark, topic, [record(0, seconds=0), record(1, seconds=20),
                                 record(3, seconds=70), record(4, seconds=100)], now)
    consumers.run_batch(lake, consumer, topics, now=now)
    # Nothing was late: the late table's commit records the batch (a retry skips it), no rows.
    late_table = lake.snapshot(agg.late_records.path)
    assert already_committed(late_table, AppTxn(consumer.app_id, 0))
    assert late_table.files() == []
    # The watermark is 10:01:11, so [10:00, 10:01) is final and e6 (10:00:11) is late for it.
    produce(lake, spark, topic, [record(6, seconds=10), record(9, seconds=160)], now + SECOND)
    consumers.run_batch(lake, consumer, topics, now=now + SECOND)

    rows = {(r.product_id, r.window_start): r for r in table(lake, agg.windows.path).collect()}
    first = rows[("p0", at("10:00:00"))]
    assert (first.n, first.amount, first.is_final, first.revision, first.batch) == (
        1, 0.0, True, 1, 0,
    )
    # Final in batch 1, which had no record for it: the watermark passed its end.
    quiet = rows[("p1", at("10:01:00"))]
    assert (quiet.n, quiet.is_final, quiet.revision, quiet.batch) == (1, True, 1, 1)
    assert not rows[("p0", at("10:02:00"))].is_final
    (late,) = table(lake, agg.late_records.path).collect()
    assert (late.event_id, late.policy, late.batch, late.watermark) == (
        "e6", "drop", 1, at("10:01:11"),
    )
    assert late.reason.startswith("window [2026-03-01 10:00:00, 2026-03-01 10:01:00) closed")
    assert sum(r.n for r in rows.values()) + 1 == 6  # records in = applied + late

    assert consumers.run_batch(lake, consumer, topics, now=now + 2 * SECOND) is None
    tick = consumers.run_batch(lake, consumer, topics, now=now + timedelta(minutes=10))
    assert tick is not None and tick.records == 0
    state = checkpoints.load(lake, consumer.name).state
    assert watermark_of(state) > at("10:03:00").astimezone()
    rows = {(r.product_id, r.window_start): r for r in table(lake, agg.windows.path).collect()}
    closed = rows[("p0", at("10:02:00"))]
    assert (closed.is_final, closed.batch, closed.revision) == (True, 2, 1)
    assert all(r.is_final for r in rows.values())
    # Every window is final: the quiet stream's ticks stop (they resume once records arrive).
    assert consumers.run_batch(lake, consumer, topics, now=now + timedelta(minutes=20)) is None
    assert agg.watermark.idle(state, now + timedelta(minutes=20))  # without the windows' horizon


def test_a_capped_catch_up_keeps_partitions_together_in_event_time(spark, lake, now):
    """Two partitions over the same ten minutes, one three times as busy, caught up ten records
    a batch: each batch takes from each partition in proportion to its backlog, so the quiet
    partition does not run ahead and push the watermark past the busy one's windows (with
    equal shares, 18 of the 40 records were late)."""
    topic = make_topic("events", partitions=2)
    candidates = spark.createDataFrame([(f"u{i}",) for i in range(20)], "user string")
    partition = dict(candidates.select(
        offsets.partition_of(F.col("user"), 2).alias("p"), "user").collect())
    records = ([record(i, user=partition[0], seconds=20 * i) for i in range(30)]
               + [record(100 + i, user=partition[1], seconds=60 * i) for i in range(10)])
    produce(lake, spark, topic, records, now)
    agg = WindowedAggregate(
        "per_minute", (topic.name,), Tumbling(timedelta(minutes=1)), (Count("n"),),
        watermark=Watermark(lateness=30 * SECOND, idle_timeout=timedelta(hours=1)),
        max_records_per_batch=10,
    )
    done = consumers.run_until_caught_up(lake, agg.consumer, {topic.name: topic},
                                         now=lambda: now)
    assert [r.records for r in done] == [10, 10, 10, 10]
    assert table(lake, agg.late_records.path).count() == 0
    assert table(lake, agg.windows.path).agg(F.sum("n")).first()[0] == 40


def test_a_consumer_of_two_topics_keeps_its_watermark_with_the_slower(spark, lake, now):
    """Orders that come minutes after the page views (the end of a visit), caught up ten records
    a batch: each batch's orders run ahead of its views in event time. The watermark follows the
    slower topic, so no view is late (with the greatest time of both, 24 of the 31 were). The
    last batch takes less than its cap: one that takes all of it holds the watermark at its
    partitions (it cannot tell whether it left records)."""
    views, orders = make_topic("views"), make_topic("orders")
    produce(lake, spark, views, [record(i, seconds=20 * i) for i in range(31)], now)
    produce(lake, spark, orders, [record(100 + i, seconds=300 + 60 * i) for i in range(10)], now)
    agg = WindowedAggregate(
        "per_minute", (views.name, orders.name), Tumbling(timedelta(minutes=1)), (Count("n"),),
        watermark=Watermark(lateness=30 * SECOND, idle_timeout=timedelta(hours=1)),
        prepare=lambda r: r[views.name].unionByName(r[orders.name]), max_records_per_batch=10,
    )
    done = consumers.run_until_caught_up(
        lake, agg.consumer, {views.name: views, orders.name: orders}, now=lambda: now)
    assert [r.records for r in done] == [10, 10, 10, 10, 1]
    assert table(lake, agg.late_records.path).count() == 0
    assert table(lake, agg.windows.path).agg(F.sum("n")).first()[0] == 41
    state = checkpoints.load(lake, agg.consumer.name).state
    # the views' last (600 s, 1 s more once corrected for the device clock) less 30 s
    assert watermark_of(state) == BASE + timedelta(seconds=601 - 30)


def test_a_capped_catch_up_holds_the_watermark_at_its_slowest_partition(spark, lake, now):
    """Two log partitions whose records span different stretches of event time (ten minutes of
    one user, three of another), caught up ten records a batch, five from each: the faster runs
    ahead. A batch cut short holds the watermark at the slower partition it left records in,
    so none of those comes late (with the topic's greatest time, 11 of the 40 did);
    the last batch, which took all there was, moves it to the greatest time."""
    clicks = make_topic("clicks", partitions=2)
    produce(lake, spark, clicks, [record(i, user="ua", seconds=30 * i) for i in range(20)]
            + [record(100 + i, user="ub", seconds=10 * i) for i in range(20)], now)
    agg = WindowedAggregate(
        "per_minute", (clicks.name,), Tumbling(timedelta(minutes=1)), (Count("n"),),
        watermark=Watermark(lateness=30 * SECOND), max_records_per_batch=10,
    )
    done = consumers.run_until_caught_up(lake, agg.consumer, {clicks.name: clicks},
                                         now=lambda: now)
    assert [sorted(r.ranges) for r in done] == [[(clicks.name, 0), (clicks.name, 1)]] * 4
    assert table(lake, agg.late_records.path).count() == 0
    assert table(lake, agg.windows.path).agg(F.sum("n")).first()[0] == 40
    state = checkpoints.load(lake, agg.consumer.name).state
    # The fourth batch took its whole cap: held at ub's last (190 s, 191 s corrected), less 30 s.
    assert watermark_of(state) == BASE + timedelta(seconds=191 - 30)
    produce(lake, spark, clicks, [record(200, user="ub", seconds=200)], now + SECOND)
    consumers.run_batch(lake, agg.consumer, {clicks.name: clicks}, now=now + SECOND)
    state = checkpoints.load(lake, agg.consumer.name).state
    assert watermark_of(state) == BASE + timedelta(seconds=571 - 30)


def test_final_mode_publishes_each_session_once_across_a_crash(spark, lake, topic, now):
    agg = WindowedAggregate(
        "visits", (topic.name,), Session(gap=timedelta(minutes=1)),
        (Count("n"), Sum("amount", "amount")), group_by=("user_id",), emit="final",
        watermark=Watermark(idle_timeout=timedelta(minutes=5)),
    )
    consumer, topics = agg.consumer, {topic.name: topic}
    produce(lake, spark, topic, [record(0, user="ua", seconds=0), record(1, user="ua", seconds=30),
                                 record(2, user="ub", seconds=10)], now)
    consumers.run_batch(lake, consumer, topics, now=now)
    assert table(lake, agg.windows.path).isEmpty()  # both sessions are still open
    assert table(lake, agg.state.path).count() == 2

    # 10:03:21 closes both sessions; the run crashes after publishing them, before the state.
    produce(lake, spark, topic, [record(3, user="ua", seconds=200)], now + SECOND)
    crashing = CrashAfterCommit(spark, lake.root, agg.windows.path)  # the state is pending
    crashing.armed = True
    with pytest.raises(RuntimeError, match=f"crash after committing {agg.windows.path}"):
        consumers.run_batch(crashing, consumer, topics, now=now + SECOND)
    retry = consumers.run_batch(lake, consumer, topics, now=now + 2 * SECOND)
    assert retry.resumed and retry.outputs_written == (agg.state.path,)

    published = {
        (r.user_id, r.n, r.amount, r.revision) for r in table(lake, agg.windows.path).collect()
    }
    assert published == {("ua", 2, 1.0, 1), ("ub", 1, 2.0, 1)}
    (open_,) = table(lake, agg.state.path).collect()
    assert (open_.user_id, open_.window_start, open_.is_final) == ("ua", at("10:03:21"), False)

    # 10:06:01 closes ua's second session: published beside the first two, whose file stays as
    # written (a published window never changes under 'drop', so nothing is read or rewritten).
    written = {f.path for f in lake.snapshot(agg.windows.path).files()}
    produce(lake, spark, topic, [record(4, user="uc", seconds=360)], now + 3 * SECOND)
    consumers.run_batch(lake, consumer, topics, now=now + 3 * SECOND)
    after = lake.snapshot(agg.windows.path)
    assert written < {f.path for f in after.files()}
    assert sorted((r.user_id, r.window_start, r.n) for r in lake.read(after).collect()) == [
        ("ua", at("10:00:01"), 2), ("ua", at("10:03:21"), 1), ("ub", at("10:00:11"), 1)]


def test_published_windows_are_laid_out_by_their_own_count(spark, lake, topic, now, monkeypatch):
    # Past what is collected here, the batch's records (40) would size the write: a file for
    # every 2 of them, so 4 published sessions in 4 files. Counted, they fill 2 files of 2.
    monkeypatch.setattr(driver_write, "SMALL_WRITE_ROWS", 5)
    agg = WindowedAggregate(
        "visits", (topic.name,), Session(gap=timedelta(minutes=1)), (Count("n"),),
        group_by=("user_id",), emit="final", rows_per_file=2,
    )
    consumer, topics = agg.consumer, {topic.name: topic}
    produce(lake, spark, topic, [record(i, user=f"u{i}", seconds=i) for i in range(4)], now)
    consumers.run_batch(lake, consumer, topics, now=now)
    produce(lake, spark, topic, [record(10 + i, user="late_comer", seconds=600 + i)
                                 for i in range(40)], now + SECOND)
    consumers.run_batch(lake, consumer, topics, now=now + SECOND)
    published = lake.snapshot(agg.windows.path)
    assert sorted(r.user_id for r in lake.read(published).collect()) == ["u0", "u1", "u2", "u3"]
    assert [f.num_records for f in published.files()] == [2, 2]


def test_an_idle_tick_reads_no_events(spark, lake, topic, now):
    """An idle tick's batch has no records: what its events' pass would find is known (no event,
    none late), and nothing is read or kept for it, even for a `prepare` that changes times,
    whose batches are otherwise scanned."""
    agg = WindowedAggregate(
        "idle", (topic.name,), Session(timedelta(minutes=1)), (Count("n"),),
        group_by=("product_id",), watermark=Watermark(lateness=30 * SECOND),
        prepare=lambda records: records[topic.name], prepare_keeps_time=False,
    )
    kept = []

    class Recording(BatchInput):
        def cached(self, df):
            kept.append(df)
            return super().cached(df)

    ensure_topic_table(lake, topic)
    nothing = read_offsets(lake, topic_snapshot(lake, topic), {})
    state = agg.watermark.advance({}, now - timedelta(minutes=5), now)
    batch = Recording(lake, 3, {topic.name: nothing}, {}, now=now, state=state,
                      stats={topic.name: RangeStats(0, None, {})})
    found = _scanned(agg, batch, small=False)
    assert watermark_of(state) is not None  # so a lateness check would have had to look
    assert (found.span_us, found.latest_us, found.any_late, kept) == (None, None, False, [])
    batch.release()


def test_a_prepare_that_lacks_a_needed_column_fails_its_batch_clearly(spark, lake, topic, now):
    """The batch raises a `ConfigError` naming the column, and commits nothing: a fixed
    `prepare` then takes the same records."""
    def declare(prepare):
        return WindowedAggregate(
            "lacking", (topic.name,), Tumbling(timedelta(minutes=1)), (Count("n"),),
            group_by=("product_id",), prepare=prepare, prepare_keeps_time=True,
        )

    produce(lake, spark, topic, [record(0), record(1)], now)
    broken = declare(lambda records: records[topic.name].drop("product_id"))
    with pytest.raises(ConfigError, match="lack columns product_id"):
        consumers.run_batch(lake, broken.consumer, {topic.name: topic}, now=now)
    assert not lake.exists(broken.windows.path) or table(lake, broken.windows.path).count() == 0

    fixed = declare(lambda records: records[topic.name])
    done = consumers.run_batch(lake, fixed.consumer, {topic.name: topic}, now=now)
    assert done.records == 2
    assert table(lake, fixed.windows.path).groupBy().sum("n").first()[0] == 2


def test_a_batch_knows_its_records_columns_and_checks_a_prepare_once(
    spark, lake, topic, now, monkeypatch
):
    """The records' columns come from the log's schema, and a `prepare`'s columns are asked of
    Spark (a round trip over Spark Connect) once for records of the same schema, not each
    batch."""
    asked = []

    def counting(agg, events, columns=None):
        asked.append((agg.name, columns is None))
        return check_events(agg, events, columns)

    monkeypatch.setattr(window_consumer, "check_events", counting)
    plain = WindowedAggregate("plain", (topic.name,), Tumbling(timedelta(minutes=1)),
                              (Count("n"),), group_by=("product_id",))
    prepared = WindowedAggregate(
        "prepared", (topic.name,), Tumbling(timedelta(minutes=1)), (Count("n"),),
        group_by=("product_id",), prepare=lambda records: records[topic.name],
        prepare_keeps_time=True,
    )
    for i in range(2):
        produce(lake, spark, topic, [record(i)], now + i * SECOND)
        for agg in (plain, prepared):
            consumers.run_batch(lake, agg.consumer, {topic.name: topic}, now=now + i * SECOND)
    assert asked == [("plain", False), ("prepared", True), ("plain", False)]
