"""The demo's search_clicks window join as a consumer: topics in, microbatches, tables out."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from pyspark.sql import functions as F

from joins_helpers import at, click_line, local, search_line

from lakelog import consumers
from lakelog.consumers import checkpoints
from lakelog.consumers.watermarks import watermark_of
from lakelog.demo.shop import CLICKS, SEARCHES
from lakelog.demo.shop_joins import SEARCH_CLICKS
from lakelog.log import ingest
from lakelog.log.offsets import partition_of

TOPICS = {SEARCHES.name: SEARCHES, CLICKS.name: CLICKS}
JOIN = SEARCH_CLICKS  # within 1 hour, lateness 10 minutes, idle timeout 5 minutes


def deliver(lake, spark, now, searches=(), clicks=()):
    if searches:
        ingest.produce(lake, spark, SEARCHES, list(searches), source="test", now=now)
    if clicks:
        ingest.produce(lake, spark, CLICKS, list(clicks), source="test", now=now)
    return consumers.run_until_caught_up(lake, JOIN.consumer, TOPICS, now=lambda: now)


def table(lake, path):
    return lake.read(lake.snapshot(path)).collect()


def test_search_clicks_end_to_end(lake, spark, now, partitions):
    # s3 at minute 100 moves the watermark to 90: s1 and s9 close unmatched at once.
    deliver(lake, spark, now, searches=[
        search_line("s1", 22, query="q1"), search_line("s9", 25, query="q9"),
        search_line("s3", 100, query="q3"), search_line("s4", 99, query="q4"),
    ])
    # Clicks for the closed s1 and s9 are late, and their unmatched rows stay; c3 joins s3; c5's
    # search never comes.
    deliver(lake, spark, now, clicks=[
        click_line("c1", 23, query="q1"), click_line("c9", 85, query="q9"),
        click_line("c3", 105, query="q3"), click_line("c5", 104, query="q5"),
    ])
    # Nothing arrives for two hours: an idle tick moves the watermark on, closing s3 and s4,
    # and passing c5 (a full join: its unmatched row is written).
    ticked = consumers.run_until_caught_up(lake, JOIN.consumer, TOPICS,
                                           now=lambda: now + timedelta(hours=2))
    assert [r.records for r in ticked] == [0]

    rows = table(lake, JOIN.output.path)
    assert sorted(((r["search_event_id"], r["click_event_id"], r["clicked"], r["batch"])
                   for r in rows), key=str) == [
        ("s1", None, False, 0), ("s3", "c3", True, 1), ("s4", None, False, 2),
        ("s9", None, False, 0), (None, "c5", False, 2),
    ]
    s3 = next(r for r in rows if r["search_event_id"] == "s3")
    assert (s3["search_time"], s3["click_time"], s3["hour"]) == (
        local(at(100)), local(at(105)), local(at(60))
    )
    assert (s3["user_id"], s3["session_id"], s3["query"], s3["product_id"]) == (
        "u-000123", "s1", "red shoes", "p-1"
    )
    late = table(lake, JOIN.late.path)
    assert sorted((r["event_id"], r["reason"], r["watermark"], r["batch"]) for r in late) == [
        ("c1", "window_closed", local(at(90)), 1), ("c9", "behind_watermark", local(at(90)), 1),
    ]
    assert table(lake, JOIN.buffer.path) == []  # every window closed: no state left
    state = checkpoints.load(lake, JOIN.consumer.name).state
    assert watermark_of(state) == at(105) + timedelta(hours=2) - timedelta(minutes=10)
    # The watermark is `within` past the last event: nothing is left to close, so the quiet join
    # gets no more ticks (a watermark without that horizon would tick every idle timeout).
    later = now + timedelta(hours=4)
    assert JOIN.watermark.idle(state, later) and not JOIN.consumer.idle_tick(state, later)
    assert consumers.run_until_caught_up(lake, JOIN.consumer, TOPICS, now=lambda: later) == []


def test_a_capped_catch_up_with_clicks_ahead_of_searches_drops_nothing(lake, spark, now):
    """Thirty searches a minute apart, then clicks on the last ten, caught up ten records a
    batch: the clicks' share of each batch runs minutes ahead of the searches' in event time.
    The watermark follows the searches, so none is late and every click finds its search
    (with the greatest time of both, 6 of the searches were late)."""
    join = replace(JOIN, max_records_per_batch=10)
    ingest.produce(lake, spark, SEARCHES, [search_line(f"s{i}", i, query=f"q{i}")
                                           for i in range(30)], source="test", now=now)
    ingest.produce(lake, spark, CLICKS, [click_line(f"c{i}", i + 0.5, query=f"q{i}")
                                         for i in range(20, 30)], source="test", now=now)
    done = consumers.run_until_caught_up(lake, join.consumer, TOPICS, now=lambda: now)
    assert [r.records for r in done] == [10, 10, 10, 10]
    assert table(lake, join.late.path) == []
    clicked = {r["search_event_id"]: r["click_event_id"] for r in table(lake, join.output.path)
               if r["clicked"]}
    assert clicked == {f"s{i}": f"c{i}" for i in range(20, 30)}


def test_a_capped_catch_up_holds_its_watermark_at_the_slower_partition(lake, spark, now):
    """One user's searches every two minutes, another's every minute, in two log partitions,
    caught up ten records a batch, five of each: the first user's partition runs ahead in event
    time. Each batch cut short holds the watermark at the slower partition, so none of the
    second user's searches is late (with the topic's greatest time, 13 of the 30 were)."""
    join = replace(JOIN, max_records_per_batch=10)
    keys = spark.createDataFrame([(f"u-{n}",) for n in range(20)], "user string").select(
        "user", partition_of(F.col("user"), SEARCHES.partitions).alias("p")).collect()
    fast, slow = keys[0].user, next(k.user for k in keys if k.p != keys[0].p)
    ingest.produce(lake, spark, SEARCHES, [
        *(search_line(f"a{i}", 2 * i, query=f"qa{i}", user=fast) for i in range(30)),
        *(search_line(f"b{i}", i, query=f"qb{i}", user=slow) for i in range(30))],
        source="test", now=now)
    done = consumers.run_until_caught_up(lake, join.consumer, TOPICS, now=lambda: now)
    assert [r.records for r in done] == [10] * 6
    assert all(len(r.ranges) == 2 for r in done)
    assert table(lake, join.late.path) == []
    # No search found a click: each is still buffered, or was emitted unmatched once it closed.
    kept = {r["search_event_id"] for r in table(lake, join.output.path)} | {
        r["_event_id"] for r in table(lake, join.buffer.path) if r["_side"] == "left"}
    assert kept == {f"{u}{i}" for u in "ab" for i in range(30)}
