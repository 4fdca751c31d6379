"""Tumbling and hopping windows: the aggregations, window assignment, late records."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual
from windows_helpers import at, by_key, events, local, public, stored, watermark, with_span

from lakelog.windows import (
    ApproxDistinct,
    Avg,
    Count,
    Hopping,
    Max,
    Min,
    Session,
    Sliding,
    Sum,
    Tumbling,
    WindowedAggregate,
    apply_batch,
    batch_windows,
)
from lakelog.consumers.watermarks import to_us
from lakelog.windows.frames import aggregated, merged, partial_names
from lakelog.windows.schemas import window_schema
from lakelog.windows.updates import known, scan

MINUTE = timedelta(minutes=1)
EVERYTHING = (
    Count("n"), Count("nx", "x"), Sum("total", "x"), Avg("mean", "x"), Min("low", "x"),
    Max("high", "x"), ApproxDistinct("users", "user"),
)


def test_tumbling_aggregations_and_records_without_a_window(spark):
    agg = WindowedAggregate("w", ("t",), Tumbling(MINUTE), EVERYTHING, group_by=("g",))
    rows = [
        ("e1", 5, "a", 1.0, "u"), ("e2", 30, "a", 3.0, "v"), ("e3", 50, "a", None, "u"),
        ("e4", 65, "a", 10.0, "w"), ("e5", 10, "b", 2.0, "u"),
        ("e6", 20, None, 4.0, "u"), ("e7", None, "a", 4.0, "u"),
    ]
    update = apply_batch(
        agg, spark.createDataFrame([], window_schema(agg)), events(spark, rows),
        watermark_before=None, watermark_after=at(60), batch=3,
    )
    got = by_key(public(update.rows, keep=("is_final", "revision", "batch")), "g", "window_start")
    assert got == {
        ("a", local(0)): {
            "g": "a", "window_start": local(0),
            "window_end": local(60), "n": 3, "nx": 2, "total": 4.0,
            "mean": 2.0, "low": 1.0, "high": 3.0, "users": 2, "is_final": True, "revision": 1,
            "batch": 3, "hour": local(0),
        },
        ("a", local(60)): {
            "g": "a", "window_start": local(60),
            "window_end": local(120), "n": 1, "nx": 1, "total": 10.0,
            "mean": 10.0, "low": 10.0, "high": 10.0, "users": 1, "is_final": False,
            "revision": 1, "batch": 3, "hour": local(0),
        },
        ("b", local(0)): {
            "g": "b", "window_start": local(0),
            "window_end": local(60), "n": 1, "nx": 1, "total": 2.0,
            "mean": 2.0, "low": 2.0, "high": 2.0, "users": 1, "is_final": True, "revision": 1,
            "batch": 3, "hour": local(0),
        },
    }
    late = {r.event_id: (r.reason, r.policy, r.window_start) for r in update.late.collect()}
    assert late == {
        "e6": ("group-by column g is null", "drop", None),
        "e7": ("event_time is null", "drop", None),
    }


def test_the_first_pass_finds_span_lateness_and_records_without_a_window(spark):
    agg = WindowedAggregate("w", ("t",), Hopping(size=MINUTE, hop=timedelta(seconds=30)),
                            (Count("n"),), group_by=("g",))
    rows = [("e1", 50, "a", 1.0, "u"), ("e2", 100, "b", 1.0, "u"), ("e3", 130, None, 1.0, "u")]
    clean = scan(agg, events(spark, rows[:2]), watermark_before=at(30))
    # e1 (12:00:50) is in [12:00:00, 12:01:00) and [12:00:30, 12:01:30): neither is final yet.
    assert (clean.span_us, clean.latest_us) == ((to_us(at(50)), to_us(at(100))), to_us(at(100)))
    assert (clean.any_late, clean.any_invalid, clean.windows) == (False, False, 4)
    dirty = scan(agg, events(spark, rows), watermark_before=at(60))
    assert (dirty.any_late, dirty.any_invalid, dirty.latest_us) == (True, True, to_us(at(130)))
    assert dirty.span_us == (to_us(at(50)), to_us(at(100)))  # e3 has no window
    empty = scan(agg, events(spark, []), watermark_before=None)
    assert (empty.span_us, empty.latest_us, empty.any_late, empty.windows) == (
        None, None, False, 0)
    update = apply_batch(agg, spark.createDataFrame([], window_schema(agg)), clean,
                         watermark_before=at(30), watermark_after=at(100), batch=0)
    assert not update.may_have_late and update.late.isEmpty()


@pytest.mark.parametrize("kind", [Session(gap=MINUTE), Sliding(MINUTE)])
def test_a_session_or_sliding_pass_finds_lateness_and_records_without_a_window(spark, kind):
    """Their pass finds what the fixed windows' pass does, so a batch with neither late events
    nor events without a window writes no late rows (and reads its events for none)."""
    agg = WindowedAggregate("w", ("t",), kind, (Count("n"),), group_by=("g",))
    rows = [("e1", 50, "a", 1.0, "u"), ("e2", 100, "b", 1.0, "u"), ("e3", 130, None, 1.0, "u")]
    clean = scan(agg, events(spark, rows[:2]), watermark_before=at(50))
    assert (clean.span_us, clean.latest_us) == ((to_us(at(50)), to_us(at(100))), to_us(at(100)))
    # A session event at the watermark is on time; a sliding one's window (which ends at it) is
    # final there.
    assert (clean.any_late, clean.any_invalid) == (isinstance(kind, Sliding), False)
    clean = scan(agg, events(spark, rows[:2]), watermark_before=at(40))
    assert (clean.any_late, clean.any_invalid) == (False, False)
    update = apply_batch(agg, spark.createDataFrame([], window_schema(agg)), clean,
                         watermark_before=at(40), watermark_after=at(100), batch=0)
    assert not update.may_have_late  # so the consumer commits no late rows
    dirty = scan(agg, events(spark, rows), watermark_before=at(60))
    assert (dirty.any_late, dirty.any_invalid, dirty.latest_us) == (True, True, to_us(at(130)))
    update = apply_batch(agg, spark.createDataFrame([], window_schema(agg)), dirty,
                         watermark_before=at(60), watermark_after=at(130), batch=0)
    assert sorted(r.event_id for r in update.late.collect()) == ["e1", "e3"]


@pytest.mark.parametrize("kind", [Tumbling(MINUTE), Hopping(MINUTE, timedelta(seconds=20)),
                                  Session(gap=MINUTE), Sliding(MINUTE)])
def test_facts_known_from_statistics_say_late_whenever_a_pass_finds_late_events(spark, kind):
    """`known` decides lateness from the least event time alone: never "no late event" where
    the pass (`scan`) finds one, and exactly the pass's answer for a single event."""
    agg = WindowedAggregate("w", ("t",), kind, (Count("n"),), group_by=("g",))
    for times, mark in [([50], 59), ([50], 60), ([50], 61), ([40], 120), ([40, 200], 80),
                        ([119, 130], 120), ([130, 119], 121), ([0], 0)]:
        rows = [(f"e{i}", t, "a", 1.0, "u") for i, t in enumerate(times)]
        span = (to_us(at(min(times))), to_us(at(max(times))))
        found = scan(agg, events(spark, rows), watermark_before=at(mark))
        facts = known(agg, events(spark, rows), span_us=span, watermark_before=at(mark),
                      any_invalid=False)
        assert facts.any_late or not found.any_late, (times, mark)
        if len(times) == 1:
            assert facts.any_late == found.any_late, (times, mark)
        assert facts.latest_us == found.latest_us
    nothing = known(agg, events(spark, []), span_us=None, watermark_before=at(60),
                    any_invalid=False)
    assert (nothing.any_late, nothing.latest_us) == (False, None)


@pytest.mark.parametrize("kind", [Tumbling(MINUTE), Hopping(MINUTE, timedelta(seconds=20)),
                                  Session(gap=MINUTE), Sliding(MINUTE)])
def test_a_pass_over_prepared_events_finds_the_latest_time_of_all_records(spark, kind):
    """A `prepare` may drop records, and the watermark moves with every record: given the
    records' times, the pass's `latest_us` is theirs, while everything else it finds is the
    events' alone (the records it dropped, one without a time among them, are neither invalid
    nor late events, nor windows)."""
    agg = WindowedAggregate("w", ("t",), kind, (Count("n"),), group_by=("g",))
    rows = [("e1", 50, "a", 1.0, "u"), ("e2", 70, "a", 1.0, "u"), ("e3", 200, "b", 1.0, "u"),
            ("e4", 10, "c", 1.0, "u"), ("e5", None, "c", 1.0, "u")]
    kept = events(spark, rows[:2])  # what a prepare left of them
    found = scan(agg, kept, watermark_before=at(40),
                 records={"t": events(spark, rows)})
    alone = scan(agg, kept, watermark_before=at(40))
    assert found.latest_us == to_us(at(200))
    assert alone.latest_us == to_us(at(70))
    assert found.span_us == alone.span_us == (to_us(at(50)), to_us(at(70)))
    assert (found.any_late, found.any_invalid, found.windows) == (False, False, alone.windows)
    # and when the events themselves are late and invalid, the records change nothing of it
    dirty = events(spark, [rows[0], rows[3], rows[4]])
    found = scan(agg, dirty, watermark_before=at(60),
                 records={"t": events(spark, rows)})
    alone = scan(agg, dirty, watermark_before=at(60))
    assert (found.any_late, found.any_invalid, found.windows, found.span_us) == (
        True, True, alone.windows, alone.span_us)
    assert found.latest_us == to_us(at(200))
    # of several topics, each topic's greatest time too, for a watermark of the slowest
    found = scan(agg, dirty, watermark_before=at(60),
                 records={"a": events(spark, rows[:2]), "b": events(spark, rows[2:]),
                          "c": events(spark, [])})
    assert found.latest_us == to_us(at(200)) and alone.latest_by_topic == {}
    assert found.latest_by_topic == {"a": to_us(at(70)), "b": to_us(at(200)), "c": None}


@pytest.mark.parametrize("kind", [Tumbling(MINUTE), Session(gap=MINUTE), Sliding(MINUTE)])
def test_facts_known_from_statistics_keep_session_and_sliding_events(spark, kind):
    """Without a pass for the facts, a session or sliding batch still reads its events for the
    stored windows, its own and the late rows: `known` keeps them as `scan` does, and the
    batch's update is the same as from events not kept."""
    agg = WindowedAggregate("w", ("t",), kind, (Count("n"),), group_by=("g",))
    rows = [("e1", 50, "a", 1.0, "u"), ("e2", 70, "a", 1.0, "u"), ("e3", 100, "b", 1.0, "u")]
    span = (to_us(at(50)), to_us(at(100)))
    kept = []

    def keep(df):
        kept.append(df.localCheckpoint(eager=True))
        return kept[-1]

    facts = known(agg, events(spark, rows), span_us=span, watermark_before=at(40),
                  any_invalid=False, keep=keep)
    if isinstance(kind, Tumbling):  # its events are read once, for its partials
        assert not kept
    else:
        assert len(kept) == 1 and facts.events is kept[0]
    plain = known(agg, events(spark, rows), span_us=span, watermark_before=at(40),
                  any_invalid=False)
    empty = spark.createDataFrame([], window_schema(agg))
    updates = [apply_batch(agg, empty, f, watermark_before=at(40), watermark_after=at(100),
                           batch=0) for f in (facts, plain)]
    assertDataFrameEqual(*[u.rows for u in updates])


def test_hopping_windows_match_sparks_window_function(spark):
    agg = WindowedAggregate(
        "w", ("t",), Hopping(size=MINUTE, hop=timedelta(seconds=20)),
        (Count("n"), Sum("total", "x")), group_by=("g",),
    )
    df = events(spark, [
        (f"e{i}", i * 13 % 200, "ab"[i % 2], float(i), "u") for i in range(12)
    ])
    expected = df.groupBy("g", F.window("event_time", "60 seconds", "20 seconds")).agg(
        F.count("*").alias("n"), F.sum("x").alias("total")
    ).select(
        "g", F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
        "n", "total",
    )
    got = batch_windows(agg, df).select("g", "window_start", "window_end", "n", "total")
    assertDataFrameEqual(got, expected)


def test_approx_distinct_is_close_to_exact(spark):
    agg = WindowedAggregate(
        "w", ("t",), Tumbling(timedelta(hours=1)), (ApproxDistinct("users", "user"),)
    )
    df = spark.range(2000).select(
        F.concat(F.lit("e"), F.col("id").cast("string")).alias("event_id"),
        F.timestamp_seconds(F.lit(int(at(0).timestamp())) + F.col("id") % 3600).alias(
            "event_time"
        ),
        F.lit("a").alias("g"), F.lit(1.0).alias("x"),
        (F.col("id") % 1500).cast("string").alias("user"),
    )
    (row,) = batch_windows(agg, df).collect()
    assert abs(row.users - 1500) <= 0.03 * 1500


def test_a_late_record_corrects_a_final_window(spark):
    agg = WindowedAggregate(
        "w", ("t",), Tumbling(MINUTE), (Count("n"), Sum("total", "x")), group_by=("g",),
        watermark=watermark(0), late="correct",
    )
    table = stored(spark, agg, [
        {"g": "a", "start": 0, "end": 60, "n": 2, "total": 3.0, "revision": 1, "is_final": True},
        {"g": "a", "start": 60, "end": 120, "n": 1, "total": 8.0, "revision": 1,
         "is_final": False},
        {"g": "b", "start": 60, "end": 120, "n": 1, "total": 4.0, "revision": 1,
         "is_final": False},
    ])
    # e5 is for [12:00, 12:01), final since the watermark reached 12:01:10; e6 moves it on.
    batch = events(spark, [("e5", 20, "a", 16.0, "u"), ("e6", 130, "a", 32.0, "u")])
    update = apply_batch(
        agg, table, batch, watermark_before=at(70), watermark_after=at(130), batch=1
    )

    got = by_key(public(update.rows, keep=("is_final", "revision", "batch")), "g", "window_start")
    summary = {k: (r["n"], r["total"], r["revision"], r["is_final"]) for k, r in got.items()}
    assert summary == {
        ("a", local(0)): (3, 19.0, 2, True),  # corrected, still final
        ("a", local(60)): (1, 8.0, 1, True),  # no record for them in this batch, but the
        ("b", local(60)): (1, 4.0, 1, True),  # watermark passed their end: now final
        ("a", local(120)): (1, 32.0, 1, False),
    }
    assert {r["batch"] for r in got.values()} == {1}
    (late,) = update.late.collect()
    assert (late.event_id, late.policy, late.batch, late.watermark) == (
        "e5", "correct", 1, local(70),
    )
    assert late.reason == (
        "window [2026-03-01 12:00:00, 2026-03-01 12:01:00) closed at watermark 2026-03-01 12:01:10"
    )

    # Complete: the stored windows the batch leaves alone come back too, exactly as stored
    # (their batch included), so the rows can replace the files they were read from.
    quiet = apply_batch(agg, table, events(spark, [("e7", 125, "a", 1.0, "u")]),
                        watermark_before=at(130), watermark_after=at(130), batch=2,
                        complete=True)
    assert quiet.complete
    got = by_key(public(quiet.rows, keep=("is_final", "revision", "batch")), "g", "window_start")
    summary = {k: (r["n"], r["revision"], r["is_final"], r["batch"]) for k, r in got.items()}
    assert summary == {
        ("a", local(0)): (2, 1, True, 0),  # untouched and already final: as stored
        ("a", local(60)): (1, 1, True, 2),  # made final by this batch's watermark
        ("b", local(60)): (1, 1, True, 2),
        ("a", local(120)): (1, 1, False, 2),  # new
    }


def test_two_rows_partials_combine_as_their_merge_does(spark):
    """`combine` (a touched window's stored and new partials, row by row) gives what `merge`
    (the aggregate over both rows) gives: for either side missing, for null partials, and
    for an int sum, a boolean max and a distinct count with overlapping values."""
    aggs = (*EVERYTHING, Sum("itotal", "i", dtype=T.IntegerType()),
            Max("any", "flag", dtype=T.BooleanType()), Min("first", "word", dtype=T.StringType()))
    agg = WindowedAggregate("w", ("t",), Tumbling(MINUTE), aggs)
    rows = [  # (side, pair, x, user, i, flag, word)
        ("old", 1, 2.0, "u", 3, False, "b"), ("new", 1, 5.0, "v", 4, True, "a"),
        ("old", 2, None, "u", None, None, None), ("new", 2, 1.0, "u", 2, False, "c"),
        ("new", 3, 7.0, "w", 1, True, "d"),  # stored side missing
        ("old", 4, 3.0, "x", 9, False, "e"),  # new side missing
        ("old", 5, None, None, None, None, None), ("new", 5, None, None, None, None, None),
    ]
    data = spark.createDataFrame(
        rows, "side string, pair int, x double, user string, i int, flag boolean, word string")
    inputs = data.select("side", "pair", *[a.input().alias(a.input_name) for a in aggs])
    partials = inputs.groupBy("side", "pair").agg(*aggregated(agg))
    names = partial_names(agg)
    merged_rows = partials.groupBy("pair").agg(*merged(agg))
    old = partials.where(F.col("side") == "old").select("pair", *names)
    new = partials.where(F.col("side") == "new").select(
        "pair", *[F.col(p).alias("n" + p) for p in names])
    combined = old.join(new, "pair", "full").select("pair", *[
        c.cast(f.dataType).alias(f.name) for a in aggs
        for c, f in zip(a.combine(F.col, lambda p: F.col("n" + p)), a.partials())])
    values = [a.value().alias(a.name) for a in aggs]
    assertDataFrameEqual(combined.select("pair", *values), merged_rows.select("pair", *values))
    assert combined.count() == 5


@pytest.mark.parametrize("complete", [True, False])
@pytest.mark.parametrize("span", ["scan", "wide", None])
def test_stored_windows_no_event_reaches_come_out_as_stored_final_once_due(spark, span, complete):
    """Stored windows far from the batch's events, before and after their span, stay out of
    the merge when the span is known: a due one comes out final with its revision and this
    batch, a final one and an open one as stored (only with `complete`, which rewrites whole
    files); the touched and new windows as the merge makes them. The same whether the span is
    the batch's own, a wider one, or not known."""
    agg = WindowedAggregate("w", ("t",), Tumbling(MINUTE), (Count("n"), Sum("total", "x")),
                            group_by=("g",))
    table = stored(spark, agg, [
        {"g": "a", "start": 0, "end": 60, "n": 4, "total": 8.0, "is_final": False,
         "revision": 2},  # due: the watermark passes its end
        {"g": "a", "start": 60, "end": 120, "n": 1, "total": 1.0, "is_final": True,
         "revision": 3},
        {"g": "a", "start": 600, "end": 660, "n": 2, "total": 5.0, "is_final": False,
         "revision": 1},  # an event falls into it
        {"g": "a", "start": 1200, "end": 1260, "n": 7, "total": 7.0, "is_final": False,
         "revision": 1},  # after the events: stays open
    ])
    batch = events(spark, [("e1", 610, "a", 1.0, "u"), ("e2", 700, "a", 2.0, "u")])
    update = apply_batch(
        agg, table, with_span(agg, batch, span, lo=610, hi=700, watermark_before=at(30)),
        watermark_before=at(30), watermark_after=at(650), batch=5, complete=complete,
    )
    got = {k: (r["n"], r["total"], r["revision"], r["is_final"], r["batch"])
           for k, r in by_key(update.rows, "window_start").items()}
    unchanged = {(local(60),): (1, 1.0, 3, True, 0), (local(1200),): (7, 7.0, 1, False, 0)}
    assert got == {
        (local(0),): (4, 8.0, 2, True, 5),
        (local(600),): (3, 6.0, 2, False, 5),
        (local(660),): (1, 2.0, 1, False, 5),
        **(unchanged if complete else {}),
    }
    assert update.rows.count() == len(got)
