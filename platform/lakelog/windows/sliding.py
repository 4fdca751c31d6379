"""Sliding windows: for every event, the aggregate over the interval of event time before it.

Semantics (chosen like SQL's ``RANGE BETWEEN size PRECEDING AND CURRENT ROW``, and like Kafka
Streams' sliding windows, which also materialize one window per event rather than one per
possible instant): each event at ``t`` gets a row for the window ``(t - size, t]`` of its group —
``window_start = t - size``, ``window_end = t``, keyed by group, ``window_start`` and
``event_id``. Events at the same instant are peers: each one's window includes the others.
Why this and not windows that hop every instant: the answer to "what was the rolling value when
this event happened" is the one rolling dashboards and fraud rules ask, the number of rows is the
number of events (bounded, unlike per-instant windows), and every row is final exactly when the
watermark passes its event, so late handling works as for any window.

Incrementally: an event at ``t`` belongs to the rows of its group's events in ``[t, t + size)``,
so a new (out-of-order or late) event also revises those later rows. Each row keeps its event's
own normalized inputs (``_in_<name>``), so the affected rows are recomputed from the table: the
batch reads the stored rows of its groups with ``window_end`` in ``(min t - size, max t + size]``,
adds its events, recomputes the frames with a range window, and writes only the rows whose frame
holds a new event. A row is late when its own window is final (``t <= watermark``); an on-time
event only revises rows later than itself, which are not final either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakelog.windows.frames import (
    END, START, T_US, aggregated, final_at, input_names, partial_names, per_group,
)
from lakelog.windows.kinds import Sliding
from lakelog.windows.late import late_rows, window_closed

if TYPE_CHECKING:
    from lakelog.windows.spec import WindowedAggregate


def late_event(watermark_before_us: int | None) -> Column:
    """Whether an event (working form) is late: its own window, which ends at it, is final."""
    return final_at(F.col(T_US), watermark_before_us)


def _near(stored: DataFrame, bounds: DataFrame, groups: list[str]) -> DataFrame:
    """Stored rows whose event lies in its group's bounds."""
    joined = stored.join(bounds, groups, "inner") if groups else stored.crossJoin(bounds)
    return joined.where((F.col(END) > F.col("_lo")) & (F.col(END) <= F.col("_hi")))


def step(
    agg: WindowedAggregate,
    stored: DataFrame,
    events: DataFrame,
    *,
    watermark_before_us: int | None,
    watermark_after_us: int | None,
    batch: int,
) -> tuple[DataFrame, DataFrame]:
    """(changed rows in working form, late rows) for one batch of valid events.

    `stored` is the window table in working form (any superset of the rows needed).
    """
    window = agg.window
    assert isinstance(window, Sliding)
    size = window.size_us
    groups = list(agg.group_names)
    event_key = [*groups, "event_id", T_US]
    inputs = input_names(agg)
    ev = events.dropDuplicates(event_key).select(
        *groups, "event_id", "event_time", T_US, *inputs,
        (F.col(T_US) - F.lit(size)).alias(START), F.col(T_US).alias(END),
    )
    is_late = late_event(watermark_before_us)
    late_out = late_rows(
        agg, ev.where(is_late),
        reason=window_closed(watermark_before_us, opening="(", closing="]"),
        policy=agg.late, watermark_us=watermark_before_us, batch=batch,
    )
    applied = ev if agg.late == "correct" else ev.where(~is_late)
    bounds = applied.groupBy(*groups).agg(
        (F.min(T_US) - F.lit(size)).alias("_lo"), (F.max(T_US) + F.lit(size)).alias("_hi")
    )
    near = _near(stored, bounds, groups).select(
        *groups, "event_id", F.col(END).alias(T_US), *inputs,
        F.col("revision").alias("_rev"), F.col("is_final").alias("_was_final"),
    )
    fresh = applied.join(
        near.select(*event_key, "_rev", "_was_final"), event_key, "left"
    ).select(*event_key, *inputs, "_rev", "_was_final", F.lit(1).alias("_new"))
    kept = near.join(applied.select(*event_key), event_key, "left_anti").select(
        *event_key, *inputs, "_rev", "_was_final", F.lit(0).alias("_new")
    )
    frame = per_group(groups).orderBy(T_US).rangeBetween(-(size - 1), 0)
    computed = fresh.unionByName(kept).select(
        "*", F.max("_new").over(frame).alias("_touched"), *aggregated(agg, over=frame)
    )
    t = F.col(T_US)
    rows = computed.where(F.col("_touched") == 1).select(
        *groups, (t - F.lit(size)).alias(START), t.alias(END), "event_id",
        *partial_names(agg), *inputs,
        F.coalesce(F.col("_rev") + 1, F.lit(1)).alias("revision"),
        (F.coalesce(F.col("_was_final"), F.lit(False)) | final_at(t, watermark_after_us)).alias(
            "is_final"
        ),
    )
    return rows, late_out
