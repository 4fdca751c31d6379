"""Session windows: Spark's convention, and a late event that bridges two final sessions."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual
from windows_helpers import at, by_key, events, local, public, stored, watermark, with_span

from lakelog.windows import (
    ApproxDistinct,
    Count,
    Session,
    Sum,
    WindowedAggregate,
    apply_batch,
    batch_windows,
)
from lakelog.windows.schemas import window_schema

AGGREGATES = (Count("n"), Sum("total", "x"))


def sessions(**options) -> WindowedAggregate:
    return WindowedAggregate(
        "w", ("t",), Session(timedelta(seconds=30)), AGGREGATES, group_by=("g",), **options
    )


def test_sessions_match_sparks_session_window(spark):
    """Same sessions as Spark's `session_window`, except for events exactly `gap` apart (see
    `lakelog.windows.sessions`), which these are not."""
    df = events(spark, [
        (f"e{i}", s, "ab"[i % 2], float(i), "u")
        for i, s in enumerate([0, 0, 10, 25, 29, 54, 70, 83, 130, 160, 161, 300])
    ])
    expected = df.groupBy("g", F.session_window("event_time", "30 seconds")).agg(
        F.count("*").alias("n"), F.sum("x").alias("total")
    ).select(
        "g", F.col("session_window.start").alias("window_start"),
        F.col("session_window.end").alias("window_end"), "n", "total",
    )
    got = batch_windows(sessions(), df).select("g", "window_start", "window_end", "n", "total")
    assertDataFrameEqual(got, expected)


@pytest.mark.parametrize("policy", ["drop", "correct"])
def test_a_late_event_between_two_sessions(spark, policy):
    agg = sessions(watermark=watermark(0), late=policy)
    table = stored(spark, agg, [
        {"g": "a", "start": 0, "end": 40, "n": 2, "total": 3.0, "revision": 1, "is_final": True},
        {"g": "a", "start": 60, "end": 100, "n": 2, "total": 12.0, "revision": 1,
         "is_final": True},
        {"g": "a", "start": 200, "end": 230, "n": 1, "total": 16.0, "revision": 1,
         "is_final": False},
    ])
    # e35 is within 30 s of both final sessions, [12:00:00, 12:00:40) and [12:01:00, 12:01:40).
    update = apply_batch(
        agg, table, events(spark, [("e35", 35, "a", 32.0, "u")]),
        watermark_before=at(200), watermark_after=at(200), batch=1,
    )

    got = by_key(public(update.rows, keep=("is_final", "revision")), "window_start")
    summary = {
        start: (r["window_end"], r["n"], r["total"], r["revision"], r["is_final"])
        for (start,), r in got.items()
    }
    deleted = {r.window_start for r in update.deletes.collect()}
    if policy == "correct":
        assert summary == {local(0): (local(100), 5, 47.0, 2, True)}
        assert deleted == {local(0), local(60)}  # replaced by the merged session
    else:
        assert summary == {} and deleted == set()
    (late,) = update.late.collect()
    assert (late.event_id, late.policy, late.window_start, late.window_end) == (
        "e35", policy, local(35), local(65),
    )
    assert late.reason == (
        "event time 2026-03-01 12:00:35 is before watermark 2026-03-01 12:03:20: "
        "its session may already be final"
    )


def test_sessions_keep_distinct_counts_of_any_sketch_size(spark):
    """A new session (no stored side) and one merged with a stored session, both with a sketch
    of a size other than the default: the stored side of a new session is empty, not an empty
    sketch of the default size, which could not be merged with these."""
    agg = WindowedAggregate("w", ("t",), Session(timedelta(seconds=30)),
                            (Count("n"), ApproxDistinct("users", "user", lg_config_k=10)),
                            group_by=("g",), watermark=watermark(0))
    first = apply_batch(agg, spark.createDataFrame([], window_schema(agg)), events(spark, [
        ("e1", 0, "a", 1.0, "u"), ("e2", 10, "a", 1.0, "v"), ("e3", 100, "b", 1.0, "u"),
    ]), watermark_before=None, watermark_after=at(10), batch=0)
    table = first.rows.localCheckpoint()
    got = {r.g: (r.n, r.users) for r in first.rows.collect()}
    assert got == {"a": (2, 2), "b": (1, 1)}
    second = apply_batch(agg, table, events(spark, [
        ("e4", 20, "a", 1.0, "w"), ("e5", 25, "a", 1.0, "u"), ("e6", 300, "a", 1.0, "x"),
    ]), watermark_before=at(10), watermark_after=at(25), batch=1)
    got = {(r.g, r.window_start): (r.n, r.users, r.revision) for r in second.rows.collect()}
    assert got == {("a", local(0)): (4, 3, 2), ("a", local(300)): (1, 1, 1)}


@pytest.mark.parametrize("span", ["scan", "wide", None], ids=["span", "wide-span", "no-span"])
@pytest.mark.parametrize("watermark_after", [200, 30])
def test_sessions_the_watermark_closes_beside_those_an_event_reaches(
    spark, watermark_after, span
):
    """One pass finds both the stored sessions an event reaches and the open ones the watermark
    closes: a closed session no event reached comes out final with its revision and is not
    deleted; one an event reached is merged, revised and deleted under its old key; a final
    one, a touching one and ones of other groups stay as they are. Found by the events' span,
    as the first pass finds it or wider, as a log's file statistics may give it (sessions of
    other groups within it join the pass and are left out), or, the span unknown, by a join
    with the events."""
    agg = sessions(watermark=watermark(0))
    table = stored(spark, agg, [
        {"g": "a", "start": 0, "end": 40, "n": 2, "total": 3.0, "revision": 1,
         "is_final": False},  # closed by the watermark, not reached
        {"g": "a", "start": 100, "end": 130, "n": 1, "total": 5.0, "revision": 2,
         "is_final": False},  # closed, and reached by e1
        {"g": "a", "start": 130, "end": 160, "n": 1, "total": 7.0, "revision": 1,
         "is_final": False},  # touches the one e1 reaches: closed, not reached
        {"g": "a", "start": -200, "end": -160, "n": 1, "total": 1.0, "revision": 3,
         "is_final": True},  # final already
        {"g": "b", "start": 150, "end": 300, "n": 1, "total": 2.0, "revision": 1,
         "is_final": False},  # open after the watermark, not reached
        {"g": "b", "start": 90, "end": 120, "n": 1, "total": 6.0, "revision": 1,
         "is_final": False},  # within the events' span, not reached
        {"g": "c", "start": 80, "end": 110, "n": 1, "total": 3.0, "revision": 4,
         "is_final": True},  # final already, within the span, not reached
    ])
    batch_events = with_span(agg, events(spark, [("e1", 100, "a", 4.0, "u")]), span,
                             lo=100, hi=100, watermark_before=at(30))
    update = apply_batch(
        agg, table, batch_events,
        watermark_before=at(30), watermark_after=at(watermark_after), batch=5,
    )

    got = by_key(public(update.rows, keep=("is_final", "revision", "batch")), "g", "window_start")
    assert update.rows.count() == len(got)  # one row a key
    summary = {
        (g, start): (r["window_end"], r["n"], r["total"], r["revision"], r["is_final"], r["batch"])
        for (g, start), r in got.items()
    }
    deleted = {(r.g, r.window_start) for r in update.deletes.collect()}
    merged = {("a", local(100)): (local(130), 2, 9.0, 3, watermark_after == 200, 5)}
    if watermark_after == 200:
        assert summary == {
            ("a", local(0)): (local(40), 2, 3.0, 1, True, 5),
            **merged,
            ("a", local(130)): (local(160), 1, 7.0, 1, True, 5),
            ("b", local(90)): (local(120), 1, 6.0, 1, True, 5),
        }
    else:  # the watermark did not move: only the reached session changes
        assert summary == merged
    assert deleted == {("a", local(100))}
