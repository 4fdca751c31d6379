"""Property: any split of any arrival order into microbatches gives the one-pass windows.

Events arrive in a random order, cut into random microbatches with a random allowed lateness.
With policy ``correct`` nothing is held back, so the incremental table must equal
`batch_windows` over all events; with ``drop`` it must equal `batch_windows` over the events not
in the late table — nothing else lost, nothing added. Bookkeeping columns (``is_final``,
``revision``, ``batch``) depend on the split and are left out of the comparison.
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual
from windows_helpers import MemoryTable, at, events, public, watermark

from lakelog.consumers.watermarks import watermark_of
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
    batch_windows,
)

AGGREGATES = (
    Count("n"), Sum("total", "x"), Avg("mean", "x"), Min("low", "x"), Max("high", "x"),
    ApproxDistinct("users", "user"),
)
KINDS = {
    "tumbling": Tumbling(timedelta(seconds=60)),
    "hopping": Hopping(size=timedelta(seconds=60), hop=timedelta(seconds=20)),
    "sliding": Sliding(timedelta(seconds=45)),
    "session": Session(timedelta(seconds=30)),
}

#: Each example runs Spark jobs; shrinking a failure would take minutes, so it is reported as found.
PHASES = (Phase.explicit, Phase.reuse, Phase.generate)

event = st.tuples(
    st.sampled_from(["a", "b"]), st.integers(0, 240), st.integers(0, 9), st.sampled_from("uvw")
)


@st.composite
def arrivals(draw):
    """(events as tuples, the batches they arrive in, allowed lateness in seconds)."""
    drawn = draw(st.lists(event, min_size=1, max_size=10))
    rows = [(f"e{i}", s, g, float(x), u) for i, (g, s, x, u) in enumerate(drawn)]
    order = draw(st.permutations(rows))
    cuts = sorted(draw(st.sets(st.integers(1, max(len(rows) - 1, 1)), max_size=2)))
    bounds = [0, *[c for c in cuts if c < len(rows)], len(rows)]
    batches = [order[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
    return rows, batches, draw(st.sampled_from([0, 20, 90]))


def run(spark, agg, batches):
    table = MemoryTable(spark, agg)
    for i, batch in enumerate(batches):
        table.run(events(spark, batch), at(max(r[1] for r in batch)), at(1000 + 60 * i))
    return table


@settings(max_examples=5, deadline=None, phases=PHASES)
@given(kind=st.sampled_from(sorted(KINDS)), arrival=arrivals())
def test_corrected_microbatches_equal_one_batch(spark, kind, arrival):
    rows, batches, lateness = arrival
    agg = WindowedAggregate(
        "prop", ("t",), KINDS[kind], AGGREGATES, group_by=("g",),
        watermark=watermark(lateness), late="correct",
    )
    table = run(spark, agg, batches)
    assertDataFrameEqual(public(table.rows), public(batch_windows(agg, events(spark, rows))))
    # Every window the watermark has passed is final, touched by the last batch or not.
    passed = F.col("window_end") <= F.lit(watermark_of(table.state))
    assert table.rows.where(passed & ~F.col("is_final")).isEmpty()


@settings(max_examples=3, deadline=None, phases=PHASES)
@given(kind=st.sampled_from(["tumbling", "sliding", "session"]), arrival=arrivals())
def test_dropped_records_are_exactly_the_late_ones(spark, kind, arrival):
    rows, batches, lateness = arrival
    agg = WindowedAggregate(
        "prop", ("t",), KINDS[kind], AGGREGATES, group_by=("g",), watermark=watermark(lateness)
    )
    table = run(spark, agg, batches)
    late = {r.event_id: r.policy for r in table.late.select("event_id", "policy").collect()}
    assert set(late.values()) <= {"drop"}
    on_time = [r for r in rows if r[0] not in late]
    expected = batch_windows(agg, events(spark, on_time)) if on_time else None
    if expected is None:
        assert table.rows.isEmpty()
    else:
        assertDataFrameEqual(public(table.rows), public(expected))
