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
holds a new event. The open rows the watermark passes in the batch are read with them and come
out as they are stored, now final, in the same pass. A row is late when its own window is final
(``t <= watermark``); an on-time event only revises rows later than itself, which are not final
either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from lakelog.windows.frames import (
    END, START, T_US, final_at, input_names, partial_names, per_group,
)
from lakelog.windows.aggregates import over_difference
from lakelog.windows.kinds import Sliding
from lakelog.windows.late import late_rows, window_closed
from lakelog.windows.pruning import SLACK_US

if TYPE_CHECKING:
    from lakelog.windows.spec import WindowedAggregate


def late_event(watermark_before_us: int | None) -> Column:
    """Whether an event (working form) is late: its own window, which ends at it, is final."""
    return final_at(F.col(T_US), watermark_before_us)


def _old(name: str) -> str:
    """The stored partial `name` beside the recomputed one (`step`)."""
    return f"_old_{name}"


def _wanted(
    stored: DataFrame, applied: DataFrame, groups: list[str], size: int,
    span_us: tuple[int, int] | None, due: Column | None,
) -> DataFrame:
    """The stored rows a batch needs: those within `size` of an applied event of their group
    (their frames hold a new event, or rows whose frames do; see the module docstring), and
    the `due` ones (open rows the watermark closes now), wherever they are.

    `span_us` (least and greatest time of the batch's events, or a range holding them) bounds
    the rows by literals, which the scan filters by; without groups that is all it takes.
    With groups each group's own bounds come from the events (a small aggregate, joined), so a
    group's rows far from its own events are not recomputed."""
    near: Column | None = None
    if span_us is not None:  # widened as file pruning widens it (`pruning.SLACK_US`)
        lo, hi = span_us[0] - size - SLACK_US, span_us[1] + size + SLACK_US
        near = (F.col(END) > F.lit(lo)) & (F.col(END) <= F.lit(hi))
    if groups or span_us is None:
        bounds = applied.groupBy(*groups).agg(
            (F.min(T_US) - F.lit(size)).alias("_lo"), (F.max(T_US) + F.lit(size)).alias("_hi")
        )
        if near is not None:  # a literal bound first: the scan filters by it
            stored = stored.where(near if due is None else near | due)
        own = (F.col(END) > F.col("_lo")) & (F.col(END) <= F.col("_hi"))
        near = F.coalesce(own, F.lit(False))
        stored = (stored.join(bounds, groups, "left") if groups
                  else stored.crossJoin(bounds))  # one row, null bounds when nothing applies
    return stored.where(near if due is None else near | due)


def framed(agg: WindowedAggregate, groups: list[str], size: int) -> list[Column]:
    """``_touched`` (1 when a new row is in the frame) and the partials over each row's frame
    ``(t - size, t]`` of its group.

    Spark aggregates a frame that also loses rows at the back anew at every row: for a batch's
    ~1,700 rows of a shop-wide hour (~720 rows a frame) that was 0.46 s of interpreted
    aggregates a batch. So each partial that can be taken back (`Aggregation.between`) is the
    aggregate over all the rows up to ``t`` less the one over all up to ``t - size``, two frames
    that only grow, each aggregated in one pass; only the others (least and greatest values,
    sketches) are aggregated over the frame itself."""
    order = per_group(groups).orderBy(T_US)
    upto = order.rangeBetween(Window.unboundedPreceding, 0)
    before = order.rangeBetween(Window.unboundedPreceding, -size)
    frame = order.rangeBetween(-(size - 1), 0)
    touched = over_difference(F.sum("_new"), upto, before) > 0
    columns = [F.when(touched, 1).otherwise(0).alias("_touched")]
    for a in agg.aggregates:
        inp = F.col(a.input_name)
        parts = a.between(inp, upto, before)
        if parts is None:
            parts = [column.over(frame) for column in a.aggregate(inp)]
        columns += [c.cast(f.dataType).alias(f.name) for c, f in zip(parts, a.partials())]
    return columns


def step(
    agg: WindowedAggregate,
    stored: DataFrame,
    events: DataFrame,
    *,
    watermark_before_us: int | None,
    watermark_after_us: int | None,
    batch: int,
    span_us: tuple[int, int] | None = None,
) -> tuple[DataFrame, DataFrame]:
    """(changed rows in working form, late rows) for one batch of valid events.

    The changed rows are those whose frame holds an event of the batch (recomputed, revision
    up) and, when the watermark moves, the stored open ones it closes (their partials and
    revision as stored, now final). `stored` is the window table in working form (any superset
    of the rows needed); `span_us` the least and greatest time of the events, or a range
    holding them (None: not known).

    The stored rows the batch needs and its events are one union, read once: an event the
    table already holds (delivered again) replaces its stored row, whose revision it carries on,
    and an event twice in the batch counts once; told apart by neighbours in the frame's own
    order, so no join of the events with the stored rows (a shuffle of each) is needed.
    """
    window = agg.window
    assert isinstance(window, Sliding)
    size = window.size_us
    groups = list(agg.group_names)
    inputs, partials = input_names(agg), partial_names(agg)
    before, after = watermark_before_us, watermark_after_us
    ev = events.select(
        *groups, "event_id", "event_time", T_US, *inputs,
        (F.col(T_US) - F.lit(size)).alias(START), F.col(T_US).alias(END),
    )
    is_late = late_event(before)
    late_out = late_rows(
        agg, ev.dropDuplicates([*groups, "event_id", T_US]).where(is_late),
        reason=window_closed(before, opening="(", closing="]"),
        policy=agg.late, watermark_us=before, batch=batch,
    )
    applied = ev if agg.late == "correct" else ev.where(~is_late)
    due = None
    if after is not None and after != before:  # open rows the watermark closes now
        due = ~F.col("is_final") & final_at(F.col(END), after)
    old = _wanted(stored, applied, groups, size, span_us, due).select(
        *groups, "event_id", F.col(END).alias(T_US), *inputs,
        *[F.col(p).alias(_old(p)) for p in partials],
        F.col("revision").alias("_rev"), F.col("is_final").alias("_was_final"),
        F.lit(0).alias("_new"),
    )
    new = applied.select(
        *groups, "event_id", T_US, *inputs,
        *[F.lit(None).cast(f.dataType).alias(_old(f.name)) for a in agg.aggregates
          for f in a.partials()],
        F.lit(None).cast("int").alias("_rev"), F.lit(None).cast("boolean").alias("_was_final"),
        F.lit(1).alias("_new"),
    )
    # In each event's place: its stored row (_new 0), then its arrivals (_new 1).
    order = per_group(groups).orderBy(T_US, "event_id", "_new")

    def same_event(neighbour) -> Column:
        return F.coalesce(
            (neighbour("event_id").over(order) == F.col("event_id"))
            & (neighbour(T_US).over(order) == F.col(T_US)), F.lit(False))

    is_new = F.col("_new") == 1
    after_stored = same_event(F.lag) & (F.lag("_new").over(order) == 0)
    both = new.unionByName(old).select(
        *groups, "event_id", T_US, *inputs, *[_old(p) for p in partials], "_new",
        F.when(is_new & after_stored, F.lag("_rev").over(order)).otherwise(F.col("_rev"))
        .alias("_rev"),
        F.when(is_new & after_stored, F.lag("_was_final").over(order))
        .otherwise(F.col("_was_final")).alias("_was_final"),
        F.when(is_new, same_event(F.lag) & (F.lag("_new").over(order) == 1))
        .otherwise(same_event(F.lead)).alias("_replaced"),
    ).where(~F.col("_replaced"))
    computed = both.select("*", *framed(agg, groups, size))
    t = F.col(T_US)
    touched = F.col("_touched") == 1
    closes = F.lit(False) if due is None else (~is_new & ~F.col("_was_final") & final_at(t, after))
    rows = computed.where(touched | closes).select(
        *groups, (t - F.lit(size)).alias(START), t.alias(END), "event_id",
        *[F.when(touched, F.col(p)).otherwise(F.col(_old(p))).alias(p) for p in partials],
        *inputs,
        F.when(touched, F.coalesce(F.col("_rev") + 1, F.lit(1))).otherwise(F.col("_rev"))
        .alias("revision"),
        (F.coalesce(F.col("_was_final"), F.lit(False)) | final_at(t, after)).alias("is_final"),
    )
    return rows, late_out
