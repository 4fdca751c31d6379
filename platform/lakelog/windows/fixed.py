"""Tumbling and hopping windows: fixed, epoch-aligned windows that merge by key.

An event at ``t`` falls into the windows starting at ``floor(t / hop) * hop - k * hop`` for
``k < size / hop`` (one window when tumbling). A microbatch aggregates its events into partials
per (window, group) in one pass (`partials`, which also finds the batch's event-time span and
whether any event is late or has no window), merges them with the stored partials of exactly
those windows, and upserts the result; windows the batch has no events for are not touched,
except to mark them final. Only a batch with late events reads its events a second time, to
list them. When the batch knows its events' span, the stored windows outside it (`reachable`)
stay out of that merge: they come out as they are stored (`untouched`), only marked final.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakelog.windows.frames import (
    BATCH, END, START, T_US, aggregated, closing, final_at, partial_names, us,
)
from lakelog.windows.kinds import Fixed, Hopping, Tumbling
from lakelog.windows.late import late_rows, window_closed
from lakelog.windows.pruning import SLACK_US

#: Prefixes the batch's partials in `step`'s join: no partial name (``_<letter>...``) starts so.
_NEW = "__new"

if TYPE_CHECKING:
    from lakelog.windows.spec import WindowedAggregate


def assign(window: Fixed, events: DataFrame) -> DataFrame:
    """One row per (event, window it falls into), with ``_start_us`` and ``_end_us``."""
    t = F.col(T_US)
    start = t - F.pmod(t, F.lit(window.hop_us))
    if window.windows_per_event > 1:
        k = F.explode(F.sequence(F.lit(0), F.lit(window.windows_per_event - 1)))
        events = events.withColumn("_k", k)
        start = start - F.col("_k").cast("long") * F.lit(window.hop_us)
    return events.withColumn(START, start).withColumn(END, F.col(START) + F.lit(window.size_us))


def partials(agg: WindowedAggregate, events: DataFrame) -> DataFrame:
    """The batch's partials per (window, group), with the events' count (``_events``) and least
    and greatest event time (``_lo_us``, ``_hi_us``): one pass over normalized `events`.

    Events without a window (``_invalid`` set) are counted in rows whose ``_start_us`` is null.
    """
    groups = list(agg.group_names)
    pairs = assign(agg.window, events)
    windowed = F.when(F.col("_invalid").isNull(), F.col(START))
    return pairs.withColumn(START, windowed).groupBy(START, *groups).agg(
        *aggregated(agg),
        F.count(F.lit(1)).alias("_events"),
        F.min(T_US).alias("_lo_us"),
        F.max(T_US).alias("_hi_us"),
    )


def step(
    agg: WindowedAggregate,
    stored: DataFrame,
    found: DataFrame,
    events: DataFrame | None,
    *,
    watermark_before_us: int | None,
    watermark_after_us: int | None,
    batch: int,
    complete: bool = False,
) -> tuple[DataFrame, DataFrame | None]:
    """(changed windows in working form, late rows or None) for one batch; with `complete`,
    every window of `stored` too, the unchanged ones as they were (``_batch`` their batch).

    `found` is the batch's `partials`; `events` its normalized events, needed only to list the
    late ones (None when `found` has no window that was final before the batch). Changed windows
    are those the events touch and the stored open ones the watermark passed (made final, their
    revision unchanged). `stored` is the window table in working form (any superset of the
    windows touched or due).
    """
    window = agg.window
    assert isinstance(window, (Tumbling, Hopping))
    groups = list(agg.group_names)
    found = found.where(F.col(START).isNotNull())
    late_out = None
    if events is not None:
        pairs = assign(window, events.where(F.col("_invalid").isNull()))
        late_out = late_rows(
            agg, pairs.where(final_at(F.col(END), watermark_before_us)),
            reason=window_closed(watermark_before_us),
            policy=agg.late, watermark_us=watermark_before_us, batch=batch,
        )
        if agg.late == "drop":
            found = found.where(~final_at(F.col(START) + F.lit(window.size_us),
                                          watermark_before_us))
    # One row a window on each side: a full outer join on the window's key merges the touched
    # windows row by row and keeps the stored ones beside them. (A grouping of the two sides'
    # union made a per-group buffer for every stored row, twice: in Spark 4.2 each of those
    # reads the session's settings anew.)
    names = partial_names(agg)
    new = found.select(START, *groups, *[F.col(p).alias(_NEW + p) for p in names],
                       F.lit(True).alias("_touched"))
    old = stored.select(START, *groups, *names, "revision", "is_final", BATCH)
    combined = old.join(new, [START, *groups], "full")
    end = F.col(START) + F.lit(window.size_us)
    is_final, closes = closing(F.col("is_final"), end, watermark_after_us)
    touched = F.coalesce(F.col("_touched"), F.lit(False))
    changed = touched | closes
    partials = [
        column.cast(f.dataType).alias(f.name)
        for a in agg.aggregates
        for column, f in zip(a.combine(F.col, lambda p: F.col(_NEW + p)), a.partials())
    ]
    rows = (combined if complete else combined.where(changed)).select(
        *groups, START, end.alias(END), *partials,
        F.when(touched, F.coalesce(F.col("revision") + 1, F.lit(1)))
        .otherwise(F.col("revision"))
        .alias("revision"),
        is_final.alias("is_final"),
        F.when(~changed, F.col(BATCH)).alias(BATCH),
    )
    return rows, late_out


def reachable(window: Fixed, span_us: tuple[int, int] | None) -> Column:
    """Whether an event of a batch whose events lie within `span_us` (None: no event has a
    window) may fall into a stored window (a table row): ``window_start`` in
    ``(lo - size, hi]``, widened as file pruning widens its bounds (`pruning.SLACK_US`). A row
    without a start is counted as reachable, so the merge sees it as it always did."""
    if span_us is None:
        return F.lit(False)
    start = us("window_start")
    lo, hi = span_us[0] - window.size_us - SLACK_US, span_us[1] + SLACK_US
    return F.coalesce((start > F.lit(lo)) & (start <= F.lit(hi)), F.lit(True))


def untouched(
    stored: DataFrame, *, watermark_after_us: int | None, batch: int, complete: bool,
) -> DataFrame:
    """Stored windows (table rows) no event of the batch falls into, as the batch writes them:
    final once the watermark passed their end, their revision and values as stored, the
    batch that made them final (else their own) as ``batch``. With `complete` all of them,
    else only those the watermark made final in this batch (what `step` gives of them)."""
    is_final, closes = closing(F.col("is_final"), us("window_end"), watermark_after_us)
    rows = stored if complete else stored.where(closes)
    return rows.withColumns({
        "is_final": is_final,
        "batch": F.coalesce(F.when(~closes, F.col("batch")), F.lit(batch)).cast("long"),
    })
