"""One microbatch of a windowed aggregate as a pure DataFrame computation, and the batch form.

`apply_batch` takes the stored windows (any superset of those the batch can touch: the consumer
passes only the files that may hold them), the batch's prepared events (or their `scan`) and the
watermark before and after the batch, and returns what to write: the changed windows, the keys
of windows to delete (sessions absorbed by a merge) and the late rows. Besides the windows the
events change, windows that the watermark passed in this batch become final (``is_final`` set)
even when no event touched them.

`scan` is the batch's first pass over its events: their event-time span, which the consumer
needs to choose the stored files to read, whether any event is late or has no window (so a
batch without such events does not read its events again to list them), and what it keeps so
the events are read once: for tumbling and hopping windows the batch's partials, for session
and sliding windows (which read their events again for the stored windows they reach, their
own windows and the late rows) the normalized events.
`known` is the same without a pass, from facts the batch's `RangeStats` give (the log's file
statistics, or the records read in the step's process): a Spark job saved, most of a small
batch's cost.

`batch_windows` is the same computation over all events at once, with nothing stored and nothing
late: what a replay of the retained log computes, and what the incremental result must equal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import reduce
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from lakelog.consumers import event_times
from lakelog.consumers.watermarks import to_us
from lakelog.windows import fixed, late, sessions, sliding
from lakelog.windows.frames import START, T_US, final_at, finish, from_table, normalize
from lakelog.windows.kinds import Hopping, Session, Sliding, Tumbling
from lakelog.windows.schemas import late_schema, window_schema

if TYPE_CHECKING:
    from lakelog.windows.spec import WindowedAggregate


@dataclass(frozen=True)
class Update:
    """What one microbatch writes: window rows to upsert, window keys to delete, late rows.

    `may_have_late` is False when the batch is known to have no late rows (`late` is empty).
    `complete`: `rows` also hold every stored window passed in unchanged, so they can replace
    the files those came from.
    """

    rows: DataFrame
    deletes: DataFrame | None
    late: DataFrame
    may_have_late: bool = True
    complete: bool = False
    #: `rows` and `deletes` as one frame, the deletions flagged by `sessions.ABSORBED` (their
    #: keys only hold), when one pass computes both: what to compute once and cut in two.
    together: DataFrame | None = None


@dataclass(frozen=True)
class Scanned:
    """A batch's normalized events and what the first pass over them found (see `scan`).

    `span_us` is the least and greatest event time of the events that have a window, or a
    range containing them (None: no such event), `latest_us` the greatest event time of all
    events, or of all records when the pass was given them (what moves the watermark), and
    `latest_by_topic` each topic's greatest record time when it was given them (else empty),
    and `hold_us` the least greatest record time of the log partitions a batch cut short left
    records in, when it was given them and those (`BatchInput.cut`; else None).
    `partials` (tumbling and hopping windows) are `fixed.partials` of the events (None: not
    computed yet). `any_late` / `any_invalid`: whether an event may fall into a window final
    before the batch / have no window (True when not known). `windows`: how many (window,
    group) rows the partials have (None when not known).
    `span_known` false: `span_us` is the records', not the events' (a `prepare` may change
    times), so it cannot choose the stored windows to read; `latest_us` is the records' too.
    """

    events: DataFrame
    span_us: tuple[int, int] | None
    latest_us: int | None
    partials: DataFrame | None = None
    latest_by_topic: Mapping[str, int | None] = field(default_factory=dict)
    hold_us: int | None = None
    any_late: bool = True
    any_invalid: bool = True
    windows: int | None = None
    span_known: bool = True


def _us(moment: datetime | None) -> int | None:
    return None if moment is None else to_us(moment)


def _checkpoint(df: DataFrame) -> DataFrame:
    return df.localCheckpoint(eager=True)


def _normalized(
    agg: WindowedAggregate, events: DataFrame, keep: Callable[[DataFrame], DataFrame] | None
) -> DataFrame:
    """`normalize` of the events; kept (`keep`, when given) for session and sliding windows,
    whose batch reads them again for the stored windows they reach, their own windows and the
    late rows (tumbling and hopping windows read them once, for their partials)."""
    normalized = normalize(agg, events)
    if keep is not None and not isinstance(agg.window, (Tumbling, Hopping)):
        return keep(normalized)
    return normalized


#: Marks the rows of `_facts`' own frame, apart from the records' times unioned in.
_MINE = "_lakelog_mine"
_RECORD_US = "_lakelog_record_us"
_TOPIC = "_lakelog_topic"


def _facts(
    frame: DataFrame, facts: Callable[[Column], dict[str, Column]], latest: Column,
    records: Mapping[str, DataFrame] | None, *, one_task: bool,
    cut: Mapping[str, Sequence[int]] | None = None,
) -> tuple[Row, dict[str, int | None], int | None]:
    """One row of `facts` (given a column true on `frame`'s rows: an aggregate must count only
    those) and ``latest``: `latest` over `frame`, or the greatest time of `records` when given;
    then each topic's greatest time in `records`, and the hold of the partitions `cut` names in
    them (`event_times.tagged`; None: no such partition).

    One Spark job: the records' times are unioned under `frame`'s rows, where an aggregate of
    each joined took four jobs over Spark Connect (each side's shuffle and final aggregate under
    adaptive execution). With `one_task`, for a microbatch's kept rows and records (250,000 at
    most by default), in one task, which reads them in well under a second where every job
    more costs tens of ms; otherwise (a replay's pass over a whole log) in parallel.
    """
    mine, by_topic, hold = F.col(_MINE), {}, None
    if records:
        marked = frame.withColumn(_MINE, F.lit(True))
        times, by_topic, hold = event_times.tagged(
            [(t, F.unix_micros(F.col("event_time"))) for t in records], list(records.values()),
            value=_RECORD_US, tag=_TOPIC, cut=cut)
        frame, latest = marked.unionByName(times, allowMissingColumns=True), F.max(_RECORD_US)
    else:
        mine = F.lit(True)
    aggregates = [c.alias(name) for name, c in facts(mine).items()] + [
        c.alias(f"_latest{i}") for i, c in enumerate(by_topic.values())] + (
        [] if hold is None else [hold.alias("_hold")])
    row = (frame.coalesce(1) if one_task else frame).agg(*aggregates,
                                                         latest.alias("latest")).first()
    return (row, {t: row[f"_latest{i}"] for i, t in enumerate(by_topic)},
            None if hold is None else row["_hold"])


def scan(
    agg: WindowedAggregate,
    events: DataFrame,
    *,
    watermark_before: datetime | None,
    keep: Callable[[DataFrame], DataFrame] | None = None,
    records: Mapping[str, DataFrame] | None = None,
    cut: Mapping[str, Sequence[int]] | None = None,
) -> Scanned:
    """The batch's first pass over `events` (prepared): see `Scanned`.

    `records` (each topic's records of the batch, or their `event_time` column, when a `prepare`
    made the events of them and may have dropped some) gives `latest_us` and `latest_by_topic`
    in the same Spark job: the watermark moves with every record, of the slowest topic. With
    `cut` (`BatchInput.cut`; `records` then have their `partition`), also `hold_us`.

    `keep` computes a frame once, now, and keeps its rows (`BatchInput.cached`): tumbling and
    hopping windows keep their partials (a local checkpoint without it); session and sliding
    windows, given `keep`, keep the normalized events, which a batch reads again for the stored
    windows they reach, their own windows, and the late rows (without it they are recomputed).
    """
    normalized = _normalized(agg, events, keep)
    if not isinstance(agg.window, (Tumbling, Hopping)):
        valid = F.col("_invalid").isNull()
        late_event = (sessions if isinstance(agg.window, Session) else sliding).late_event
        span, latest, hold = _facts(normalized, lambda mine: {
            "lo": F.min(F.when(mine & valid, F.col(T_US))),
            "hi": F.max(F.when(mine & valid, F.col(T_US))),
            "late": F.max(mine & valid & late_event(_us(watermark_before))),
            "invalid": F.max(mine & ~valid),
        }, F.max(T_US), records, one_task=keep is not None, cut=cut)
        return Scanned(
            normalized, None if span["lo"] is None else (span["lo"], span["hi"]), span["latest"],
            any_late=bool(span["late"]), any_invalid=bool(span["invalid"]),
            latest_by_topic=latest, hold_us=hold,
        )
    found = (keep or _checkpoint)(fixed.partials(agg, normalized))
    windowed = F.col(START).isNotNull()
    end = F.col(START) + F.lit(agg.window.size_us)
    facts, latest, hold = _facts(found, lambda mine: {  # a few rows per window
        "lo": F.min(F.when(mine & windowed, F.col("_lo_us"))),
        "hi": F.max(F.when(mine & windowed, F.col("_hi_us"))),
        "late": F.max(mine & windowed & final_at(end, _us(watermark_before))),
        "invalid": F.max(mine & ~windowed),
        "windows": F.count(F.when(mine & windowed, F.lit(1))),
    }, F.max("_hi_us"), records, one_task=records is None or keep is not None, cut=cut)
    return Scanned(
        normalized,
        None if facts["lo"] is None else (facts["lo"], facts["hi"]),
        facts["latest"],
        partials=found,
        any_late=bool(facts["late"]),
        any_invalid=bool(facts["invalid"]),
        windows=facts["windows"],
        latest_by_topic=latest,
        hold_us=hold,
    )


def known(
    agg: WindowedAggregate,
    events: DataFrame,
    *,
    span_us: tuple[int, int] | None,
    watermark_before: datetime | None,
    any_invalid: bool,
    span_known: bool = True,
    keep: Callable[[DataFrame], DataFrame] | None = None,
) -> Scanned:
    """A `Scanned` of `events` from facts known without reading them: `span_us` is the least and
    greatest event time of all the events (None: none has one), `any_invalid` whether one may
    have no window. Whether one is late follows from the least time. With `span_known` false,
    `span_us` is only the records' (see `Scanned`): lateness is then not ruled out. `keep`
    keeps the normalized events of session and sliding windows, as in `scan`: the facts need no
    pass, but the batch reads its events two or three times all the same."""
    window = agg.window
    normalized = _normalized(agg, events, keep)
    any_late = watermark_before is not None  # nothing is final before the first watermark
    if any_late and span_known and isinstance(window, (Tumbling, Hopping)):
        # The earliest window of the earliest event ends first: if it is not final, none is.
        first = None if span_us is None else span_us[0] - span_us[0] % window.hop_us
        any_late = first is not None and (
            first - (window.windows_per_event - 1) * window.hop_us + window.size_us
            <= to_us(watermark_before))
    elif any_late and span_known:  # a session or sliding event is late by its own time
        mark = to_us(watermark_before)
        any_late = span_us is not None and (
            span_us[0] < mark if isinstance(window, Session) else span_us[0] <= mark)
    return Scanned(normalized, span_us, None if span_us is None else span_us[1],
                   any_late=any_late, any_invalid=any_invalid, span_known=span_known)


def apply_batch(
    agg: WindowedAggregate,
    stored: DataFrame,
    events: DataFrame | Scanned,
    *,
    watermark_before: datetime | None,
    watermark_after: datetime | None,
    batch: int,
    complete: bool = False,
) -> Update:
    """The windows, deletions and late rows of one microbatch (see the module docstring).

    With `complete`, tumbling and hopping windows return every stored window as well
    (`Update.complete`); other kinds ignore it. Session windows give their rows and deletions
    together as well (`Update.together`).
    """
    scanned = events if isinstance(events, Scanned) else scan(
        agg, events, watermark_before=watermark_before
    )
    before, after = _us(watermark_before), _us(watermark_after)
    normalized = scanned.events
    valid = normalized.where(F.col("_invalid").isNull())
    late_parts = []
    if scanned.any_invalid:
        late_parts.append(late.invalid_rows(agg, normalized, watermark_us=before, batch=batch))
    options = {"watermark_before_us": before, "watermark_after_us": after, "batch": batch}
    span = scanned.span_us if scanned.span_known else None
    aside = None  # stored rows no event reaches, as written (tumbling and hopping windows)
    if isinstance(agg.window, Session):  # with the sessions the watermark closed
        changed, late_rows = sessions.step(agg, from_table(agg, stored), valid, **options,
                                           span_us=span)
    elif isinstance(agg.window, Sliding):  # with the rows the watermark closed
        changed, late_rows = sliding.step(agg, from_table(agg, stored), valid, **options,
                                          span_us=span)
    else:
        found = scanned.partials
        if found is None:
            found = fixed.partials(agg, normalized)
        if scanned.span_known:
            reach = fixed.reachable(agg.window, scanned.span_us)
            aside = fixed.untouched(stored.where(~reach), watermark_after_us=after,
                                    batch=batch, complete=complete)
            stored = stored.where(reach)
        changed, late_rows = fixed.step(
            agg, from_table(agg, stored), found, normalized if scanned.any_late else None,
            **options, complete=complete,
        )
    if late_rows is not None and scanned.any_late:
        late_parts.append(late_rows)
    if late_parts:
        late_out = reduce(DataFrame.unionByName, late_parts)
    else:
        late_out = normalized.sparkSession.createDataFrame([], late_schema(agg))
    if isinstance(agg.window, Session):
        together = finish(agg, changed, batch=batch, extra=(sessions.ABSORBED,))
        rows, deletes = sessions.cut(together, agg.keys)
        return Update(rows=rows, deletes=deletes, late=late_out,
                      may_have_late=bool(late_parts), together=together)
    rows = finish(agg, changed, batch=batch)
    if aside is not None:
        rows = rows.unionByName(aside)
    return Update(rows=rows, deletes=None, late=late_out,
                  may_have_late=bool(late_parts),
                  complete=complete and isinstance(agg.window, (Tumbling, Hopping)))


def batch_windows(
    agg: WindowedAggregate,
    events: DataFrame,
    *,
    watermark: datetime | None = None,
    batch: int = 0,
) -> DataFrame:
    """Every window of `events`, computed in one pass; nothing is late.

    ``is_final`` is ``window_end <= watermark``, or true for every window without a watermark
    (all events seen). Events without a window (null time or group-by value) are left out.
    """
    stored = events.sparkSession.createDataFrame([], window_schema(agg))
    update = apply_batch(
        agg, stored, events, watermark_before=None, watermark_after=watermark, batch=batch
    )
    if watermark is None:
        return update.rows.withColumn("is_final", F.lit(True))
    return update.rows
