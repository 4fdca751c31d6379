"""Sliding windows: one row per event over ``(t - size, t]``, revised by earlier arrivals."""

from __future__ import annotations

import warnings
from datetime import timedelta

import pytest
from pyspark.sql import Window
from pyspark.sql import functions as F
from pyspark.sql import types as T
from windows_helpers import at, by_key, events, local, public, stored, watermark, with_span

from lakelog.windows import (
    Avg, Count, Min, Sliding, Sum, WindowedAggregate, apply_batch, batch_windows,
)
from lakelog.windows.sliding import framed as sliding_framed

AGGREGATES = (Count("n"), Sum("total", "x"))


def sliding(group_by=("g",), **options) -> WindowedAggregate:
    return WindowedAggregate(
        "w", ("t",), Sliding(timedelta(seconds=30)), AGGREGATES, group_by=group_by, **options
    )


def test_each_event_gets_the_interval_before_it(spark):
    rows = [
        ("e1", 0, "a", 1.0, "u"), ("e2", 10, "a", 2.0, "u"), ("e3", 10, "a", 4.0, "u"),
        ("e4", 40, "a", 8.0, "u"), ("e5", 5, "b", 16.0, "u"),
    ]
    got = by_key(batch_windows(sliding(), events(spark, rows)), "event_id")
    summary = {
        e: (r["window_start"], r["window_end"], r["n"], r["total"]) for (e,), r in got.items()
    }
    assert summary == {
        "e1": (local(-30), local(0), 1, 1.0),
        "e2": (local(-20), local(10), 3, 7.0),  # e3 at the same instant is a peer
        "e3": (local(-20), local(10), 3, 7.0),
        "e4": (local(10), local(40), 1, 8.0),  # (10, 40]: the events at 10 are out
        "e5": (local(-25), local(5), 1, 16.0),
    }


def test_without_groups_every_event_is_in_one_group_and_spark_connect_does_not_warn(spark):
    agg = WindowedAggregate("w", ("t",), Sliding(timedelta(seconds=30)), AGGREGATES)
    rows = [("e1", 0, "a", 1.0, "u"), ("e2", 10, "b", 2.0, "u"), ("e3", 50, "a", 4.0, "u")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = by_key(batch_windows(agg, events(spark, rows)), "event_id")
    assert {e: (r["n"], r["total"]) for (e,), r in got.items()} == {
        "e1": (1, 1.0), "e2": (2, 3.0), "e3": (1, 4.0),  # e2 counts e1 of the other "g"
    }
    # Spark Connect's client warns of a window without a partition at each use; the shop-wide
    # rolling hour is one partition on purpose.
    assert not [w for w in caught if "No Partition Defined" in str(w.message)]


def rows(spark, agg, windows):
    """Stored sliding rows from (event_id, seconds, x, n, total, is_final) over 30 s."""
    return stored(spark, agg, [
        {"g": "a", "event_id": e, "start": t - 30, "end": t, "x": x, "n": n, "total": total,
         "revision": 1, "is_final": final}
        for e, t, x, n, total, final in windows
    ])


def summary(update, *columns):
    got = by_key(public(update.rows, keep=("is_final", "revision")), "event_id")
    return {e: tuple(r[c] for c in columns) for (e,), r in got.items()}


def test_an_out_of_order_event_revises_the_rows_after_it_within_size(spark):
    agg = sliding(watermark=watermark(600))
    table = rows(spark, agg, [
        ("e0", 0, 1.0, 1, 1.0, False), ("e20", 20, 2.0, 2, 3.0, False),
        ("e40", 40, 4.0, 2, 6.0, False), ("e70", 70, 8.0, 1, 8.0, False),
    ])
    update = apply_batch(
        agg, table, events(spark, [("e15", 15, "a", 16.0, "u")]),
        watermark_before=at(-530), watermark_after=at(-530), batch=1,
    )
    # e15 belongs to the windows of its group's events in [15, 45): e20 and e40, not e70.
    assert summary(update, "n", "total", "revision") == {
        "e15": (2, 17.0, 1),  # (-15, 15]: e0 and itself
        "e20": (3, 19.0, 2),
        "e40": (3, 22.0, 2),  # (10, 40]: e15, e20, e40
    }
    assert update.late.isEmpty()


def test_a_late_event_corrects_final_rows_which_stay_final(spark):
    agg = sliding(watermark=watermark(0), late="correct")
    table = rows(spark, agg, [
        ("e0", 0, 1.0, 1, 1.0, True), ("e20", 20, 2.0, 2, 3.0, True),
        ("e40", 40, 4.0, 2, 6.0, True),
    ])
    update = apply_batch(
        agg, table, events(spark, [("e30", 30, "a", 8.0, "u")]),
        watermark_before=at(40), watermark_after=at(40), batch=1,
    )
    assert summary(update, "n", "total", "revision", "is_final") == {
        "e30": (2, 10.0, 1, True),
        "e40": (3, 14.0, 2, True),
    }
    (late,) = update.late.collect()
    assert (late.event_id, late.policy, late.window_end) == ("e30", "correct", local(30))
    assert late.reason.startswith("window (2026-03-01 12:00:00, 2026-03-01 12:00:30] closed at")


#: How a batch finds the stored rows it needs: by its events' span (known from statistics or
#: the scan; "wide": a range holding the events, as a log's file statistics may give) and,
#: with groups, each group's own bounds; or, its span unknown, by bounds it computes from the
#: events.
FINDING = [
    pytest.param(("g",), "scan", id="groups-span"),
    pytest.param((), "scan", id="no-groups-span"),
    pytest.param(("g",), "wide", id="groups-wide-span"),
    pytest.param((), "wide", id="no-groups-wide-span"),
    pytest.param(("g",), None, id="groups-no-span"),
    pytest.param((), None, id="no-groups-no-span"),
]


def one_batch(spark, agg, table, batch_rows, span, *, before, after):
    """`apply_batch` of `batch_rows`, their span known as `span` says (`with_span`)."""
    times = [r[1] for r in batch_rows]
    given = with_span(agg, events(spark, batch_rows), span, lo=min(times), hi=max(times),
                      watermark_before=before)
    return apply_batch(agg, table, given, watermark_before=before, watermark_after=after,
                       batch=1)


@pytest.mark.parametrize(("groups", "span"), FINDING)
def test_an_event_delivered_again_replaces_its_row_and_one_twice_in_a_batch_counts_once(
    spark, groups, span
):
    agg = sliding(watermark=watermark(600), group_by=groups)
    table = rows(spark, agg, [("e0", 0, 1.0, 1, 1.0, False), ("e20", 20, 2.0, 2, 3.0, False)])
    update = one_batch(spark, agg, table, [
        ("e20", 20, "a", 2.0, "u"), ("e25", 25, "a", 4.0, "u"), ("e25", 25, "a", 4.0, "u"),
    ], span, before=at(-600), after=at(-575))
    assert summary(update, "n", "total", "revision") == {
        "e20": (2, 3.0, 2),  # (-10, 20]: e0 and e20 once; its stored revision carried on
        "e25": (3, 7.0, 1),  # (-5, 25]: e0, e20, e25 once
    }


@pytest.mark.parametrize(("groups", "span"), FINDING)
def test_the_watermark_closes_open_rows_no_event_reaches_as_they_are_stored(
    spark, groups, span
):
    agg = sliding(watermark=watermark(0), group_by=groups)
    # Partials no recomputation from these rows would give: a closed row keeps them.
    table = rows(spark, agg, [
        ("e0", 0, 1.0, 7, 9.0, False), ("e100", 100, 2.0, 5, 8.0, False),
        ("e190", 190, 4.0, 3, 6.0, False), ("e195", 195, 32.0, 2, 9.0, True),
        ("e200", 200, 8.0, 4, 14.0, False), ("e-50", -50, 1.0, 1, 1.0, True),
    ])
    update = one_batch(spark, agg, table, [("e210", 210, "a", 16.0, "u")], span,
                       before=at(50), after=at(195))
    got = by_key(public(update.rows, keep=("is_final", "revision", "batch")), "event_id")
    assert update.rows.count() == len(got)  # one row a key
    assert {e: (r["n"], r["total"], r["revision"], r["is_final"], r["batch"])
            for (e,), r in got.items()} == {
        "e0": (7, 9.0, 1, True, 1),  # far from the event: as stored, now final
        "e100": (5, 8.0, 1, True, 1),
        "e190": (3, 6.0, 1, True, 1),  # near the event, its frame without it: as stored
        # (e195, final already and its frame without the event, is not written again)
        "e210": (4, 60.0, 1, False, 1),  # (180, 210]: e190, e195, e200 and itself
    }


def test_partials_from_growing_frames_equal_the_frames_own(spark):
    """Count, sum and mean over ``(t - size, t]`` are taken as all rows up to ``t`` less all up
    to ``t - size`` (`sliding.framed`); they must equal the frame's own aggregates, with nulls,
    peers, a row exactly ``size`` back, and NaN and infinities that enter and leave the frame."""
    inf, nan = float("inf"), float("nan")
    xs = [1.5, None, 2.0, inf, 3.0, None, -inf, 4.0, nan, 5.0, 6.0, None, 7.25, 8.0]
    times = [0, 5, 5, 10, 30, 31, 40, 45, 60, 75, 100, 101, 130, 131]
    data = [(g, t, x, None if x is None or x != x or abs(x) == inf else int(x))
            for g in ("a", "b") for t, x in zip(times, xs if g == "a" else xs[::-1])]
    df = spark.createDataFrame(data, "g string, _t_us long, x double, k long").withColumn(
        "_new", F.lit(1))
    agg = WindowedAggregate(
        "w", ("t",), Sliding(timedelta(microseconds=30)),
        (Count("n"), Count("xs", "x"), Sum("total", "x"), Sum("ints", "k", dtype=T.LongType()),
         Sum("exact", "k", dtype=T.DecimalType(12, 2)), Avg("mean", "x"), Min("low", "x")),
        group_by=("g",),
    )
    inputs = df.select("g", "_t_us", "_new", *[a.input().alias(a.input_name)
                                                for a in agg.aggregates])
    frame = Window.partitionBy("g").orderBy("_t_us").rangeBetween(-29, 0)
    own = [c.over(frame).cast(f.dataType).alias(f.name) for a in agg.aggregates
           for c, f in zip(a.aggregate(F.col(a.input_name)), a.partials())]
    names = [f.name for a in agg.aggregates for f in a.partials()]
    got = inputs.select("g", "_t_us", *sliding_framed(agg, ["g"], 30)).orderBy("g", "_t_us")
    want = inputs.select("g", "_t_us", *own).orderBy("g", "_t_us")

    def plain(row):  # NaN equal to NaN
        return tuple("NaN" if isinstance(v, float) and v != v else v for v in row)

    got_rows, want_rows = got.collect(), want.collect()
    assert all(r["_touched"] == 1 for r in got_rows)
    assert [plain(r[n] for n in ["g", "_t_us", *names]) for r in got_rows] == [
        plain(r) for r in want_rows]
    assert {r["_total_sum"] for r in got_rows} >= {inf, -inf}  # both are seen
