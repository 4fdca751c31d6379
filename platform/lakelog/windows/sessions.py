"""Session windows: per group, events closer than `gap` to each other form one session.

A session's ``window_start`` is its first event time and ``window_end`` its last event time plus
the gap (Spark's `session_window` convention), so a session is the union of its events'
intervals ``[t, t + gap)`` and two sessions merge exactly when those intervals overlap. Unlike
Spark, which also merges events exactly `gap` apart, events must be strictly closer: then a
session ``[s, e)`` is final once the watermark reaches ``e``, like every other window.

Incrementally: a batch takes the stored sessions its events can join (an event at ``t`` joins
a session ``[s, e)`` when ``s - gap < t < e``; only new events can bridge stored sessions, which
were maximal), and the open ones, of any group, that the batch's watermark closes. When the
batch knows its events' span (it usually does: the log's statistics or its first pass), the
stored sessions within it are taken by literal bounds, reached or not, with no join (a session
no event reaches stays alone and unchanged, and is not written); otherwise a join with the
events finds the ones they reach. These and the events' intervals are re-sessionized together
(gaps and islands over intervals sorted by start), their partials merged, and the merged
sessions upserted while every stored session they absorbed is deleted, in one commit. A closed
session no event reached comes out alone, unchanged but final and written by this batch. Each
merged session carries the starts of the stored ones it absorbed, so the deletions come out of
the same pass as the rows (`ABSORBED`).

Lateness: whether an event changes a final session depends on the sessions around it, and must
not depend on the table (a retry has to route the same records). An event before the watermark
from before the batch is late (Spark drops exactly these), with its own interval
``[t, t + gap)`` as the window it was late for; an event at or after it can never reach a session
the watermark closed, whose end is at or before that watermark. Once final, a session stays
final: a correction (policy ``correct``) that merges it with others makes a merged session that
is final too, and whose revision goes up with every later change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from lakelog.windows.frames import (
    END, START, T_US, aggregated, closing, input_names, merged, partial_names, per_group,
)
from lakelog.windows.kinds import Session
from lakelog.windows.late import before_watermark, late_rows
from lakelog.windows.pruning import SLACK_US

if TYPE_CHECKING:
    from lakelog.windows.spec import WindowedAggregate


def late_event(watermark_before_us: int | None) -> Column:
    """Whether an event (working form) is late: before the watermark from before its batch."""
    if watermark_before_us is None:
        return F.lit(False)
    return F.col(T_US) < F.lit(watermark_before_us)


def reachable(stored: DataFrame, events: DataFrame, groups: list[str], gap: int) -> DataFrame:
    """Stored sessions (working form) that an event of `events` joins."""
    probes = events.select(*groups, T_US)
    condition = (probes[T_US] > stored[START] - F.lit(gap)) & (probes[T_US] < stored[END])
    for g in groups:
        condition = condition & (stored[g] == probes[g])
    return stored.join(probes, condition, "left_semi")


#: Marks the entries of `step`'s output that delete an absorbed stored session.
ABSORBED = "_lakelog_absorbed"


def cut(together: DataFrame, keys: Sequence[str]) -> tuple[DataFrame, DataFrame]:
    """(rows, `keys` of the deletions) of `step`'s output (finished, `ABSORBED` kept)."""
    gone = F.col(ABSORBED)
    return together.where(~gone).drop(ABSORBED), together.where(gone).select(*keys)


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
    """(changed sessions, late rows) for one batch of valid events. `stored` is the window table
    in working form (any superset of the sessions the events can join and the open ones the
    watermark closes). The changed sessions are in working form, with `ABSORBED` false, and
    then the stored sessions they absorbed, to delete, with it true (their keys only hold).

    `span_us` (the least and greatest time of the events, or a range holding them; None: not
    known) bounds the stored sessions an event can join by literals: those within it join the
    sessionization as they are, where a session no event reaches stays alone and unchanged,
    and is left out. Without it, the sessions the events reach are found by a join."""
    window = agg.window
    assert isinstance(window, Session)
    gap = window.gap_us
    groups = list(agg.group_names)
    ev = events.select("*", F.col(T_US).alias(START), (F.col(T_US) + F.lit(gap)).alias(END))
    is_late = late_event(watermark_before_us)
    late_out = late_rows(
        agg, ev.where(is_late), reason=before_watermark(watermark_before_us),
        policy=agg.late, watermark_us=watermark_before_us, batch=batch,
    )
    applied = ev if agg.late == "correct" else ev.where(~is_late)
    after = watermark_after_us
    due = None  # the open sessions the watermark closes, reached or not
    if after is not None and after != watermark_before_us:
        due = ~F.coalesce(F.col("is_final"), F.lit(False)) & (F.col(END) <= F.lit(after))
    if span_us is not None:  # widened as file pruning widens it (`pruning.SLACK_US`)
        lo, hi = span_us[0] - SLACK_US, span_us[1] + SLACK_US
        near = (F.col(START) - F.lit(gap) < F.lit(hi)) & (F.col(END) > F.lit(lo))
        candidates = stored.where(near if due is None else near | due)
    elif due is None:
        candidates = reachable(stored, applied, groups, gap)
    else:  # two disjoint parts
        candidates = stored.where(due).unionByName(
            reachable(stored.where(~due), applied, groups, gap))
    partials = partial_names(agg)
    intervals = applied.select(*groups, START, END, *input_names(agg)).unionByName(
        candidates.select(*groups, START, END, *partials, "revision", "is_final"),
        allowMissingColumns=True,
    )
    ordered = per_group(groups).orderBy(START, END)
    previous_end = F.max(END).over(ordered.rowsBetween(Window.unboundedPreceding, -1))
    opens = (previous_end.isNull() | (F.col(START) >= previous_end)).cast("int")
    numbered = intervals.withColumn("_opens", opens).withColumn(
        "_session", F.sum("_opens").over(ordered.rowsBetween(Window.unboundedPreceding, 0))
    )
    # One pass over the sessions, so Spark computes them once: the events' inputs aggregate
    # and the stored sessions' partials merge side by side (each ignores the other's rows,
    # whose columns are null), then the two sets of partials merge. A session without stored
    # rows has no stored side (every stored row has a revision): a merge over no rows is not
    # always null (an HLL union of nothing is an empty sketch of the default size, which
    # another size cannot be merged with). A session without events is one stored session
    # (stored sessions do not overlap) that the watermark closed: it keeps its revision.
    per_session = [*groups, "_session"]
    stored_row = F.col("revision").isNotNull()
    stored_side = F.when(F.count("revision") > 0, F.struct(*merged(agg)))
    sides = numbered.groupBy(*per_session).agg(
        F.min(START).alias(START), F.max(END).alias(END),
        F.struct(*aggregated(agg)).alias("_fresh"), stored_side.alias("_stored"),
        F.max("revision").alias("_rev"), F.max("is_final").alias("_final"),
        F.count(F.when(~stored_row, 1)).alias("_events"),
        F.collect_list(F.when(stored_row, F.col(START))).alias("_starts"),
    )
    session = [*per_session, START, END, "_rev", "_final", "_events", "_starts"]
    combined = sides.select(*session, F.explode(F.array("_fresh", "_stored")).alias("_side")) \
        .select(*session, "_side.*").groupBy(*session).agg(*merged(agg))
    # (Stored sessions do not overlap; if two did, they merge here like any others.)
    changed = (F.col("_events") > 0) | (F.size("_starts") > 1)
    is_final, closes = closing(F.col("_final"), F.col(END), watermark_after_us)
    if due is None:  # the watermark did not move: no stored session closes
        closes = F.lit(False)
    entry = F.struct(F.col(START).alias("start"), F.lit(False).alias("gone"))
    absorbed = F.transform(
        "_starts", lambda s: F.struct(s.alias("start"), F.lit(True).alias("gone")))
    entries = F.when(changed, F.concat(F.array(entry), absorbed)).otherwise(F.array(entry))
    rows = combined.where(changed | closes).select(  # a session left as it was: not written
        *groups, END, *partials,
        F.when(changed, F.coalesce(F.col("_rev") + 1, F.lit(1))).otherwise(F.col("_rev"))
        .alias("revision"),
        is_final.alias("is_final"),
        F.explode(entries).alias("_entry"),
    ).select(
        *groups, F.col("_entry.start").alias(START), END, *partials, "revision", "is_final",
        F.col("_entry.gone").alias(ABSORBED),
    )
    return rows, late_out
