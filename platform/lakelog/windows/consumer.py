"""The consumer that keeps a windowed aggregate's tables, one exactly-once microbatch at a time.

Per microbatch (`lakelog.consumers.run_batch` does the plan, the writes and the offset commit):

1. `advance` moves the watermark with each topic's greatest event time of the batch's records
   (all of them, before `prepare` filters any; the watermark follows the slowest topic,
   `lakelog.consumers.watermarks`), or with the wall clock when an idle tick runs an empty
   batch; the state is committed with the batch, so a retry sees the same watermarks. When the
   batch's `RangeStats` do not know that time (a batch cut inside log files and read by Spark),
   `advance` finds it in the events' first pass (`updates.scan`, given the records' times when a `prepare` made
   the events), which `transform` then reuses.
2. `transform` scans the events once (`updates.scan`: their event-time span and, for tumbling and
   hopping windows, the batch's partials), reads only the stored windows the batch can change or
   finalize (`pruning`), computes `updates.apply_batch`, and returns the outputs in commit order:
   the late rows first (None, an empty commit, when the scan found none), then
   ``streams/<name>``, then (final mode) the state. The table the transform reads is committed
   last, so a retry after a partial write recomputes from unchanged input.

Emit modes: ``update`` keeps every window in ``streams/<name>`` and revises it each batch.
``final`` keeps windows in ``_state/windows/<name>`` until the watermark passes their end and
only then upserts them into ``streams/<name>``; with ``late="correct"`` the state also keeps the
final windows, since a correction merges into them (and is published again, with its revision),
and so does a sliding aggregate's, whose final rows hold the inputs later events' frames are
computed from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.consumers import BatchInput, Changes, Consumer, event_times
from lakelog.consumers.definitions import described
from lakelog.consumers.watermarks import from_us, to_us, watermark_of
from lakelog.errors import ConfigError
from lakelog.lake import DataFile
from lakelog.lake.base import is_small
from lakelog.log.offsets import RangeStats
from lakelog.windows import sessions
from lakelog.windows.frames import check_events, needed_columns
from lakelog.windows.kinds import Sliding
from lakelog.windows.pruning import files_to_read
from lakelog.windows.updates import Scanned, Update, apply_batch, known, scan

if TYPE_CHECKING:
    from lakelog.windows.spec import WindowedAggregate


#: The `updates.scan` of the batch's events, when `advance` made it (see `BatchInput.scratch`).
SCANNED = "window.scanned"


def build_consumer(agg: WindowedAggregate) -> Consumer:
    outputs = (agg.late_records, agg.windows) + ((agg.state,) if agg.state else ())
    return Consumer(
        name=f"window.{agg.name}",
        topics=tuple(agg.topics),
        outputs=outputs,
        transform=partial(transform, agg),
        max_records_per_batch=agg.max_records_per_batch,
        advance=partial(advance, agg),
        idle_tick=partial(agg.watermark.idle, horizon=agg.window.horizon),
        definition=definition(agg),
    )


def definition(agg: WindowedAggregate) -> tuple[tuple[str, str], ...]:
    """What the aggregate's tables hold (`Consumer.definition`): its window, emit mode, group-by
    columns and aggregations, and in final mode the late policy of a window that leaves the
    state once published (under 'correct' a late record for it would make a window of its own,
    which replaces the published one). Not the watermark's lateness, the layout or `prepare`,
    nor the late policy elsewhere: the stored windows stay what they were."""
    described_late = agg.emit == "final" and not isinstance(agg.window, Sliding)
    return (
        ("window", described(agg.window)),
        ("emit", agg.emit),
        ("group_by", ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in agg.group_fields)),
        ("aggregates", ", ".join(described(a) for a in agg.aggregates)),
        *((("late", agg.late),) if described_late else ()),
    )


#: `prepare`s found to make the columns an aggregate needs, by identity (each held here, so
#: its id is not reused), needed columns and the records' topics and schemas: of records
#: of the same columns a `prepare` makes the same columns, and asking Spark for a prepared
#: frame's columns is a round trip over Spark Connect.
_CHECKED: dict[tuple[Any, ...], Any] = {}


def prepared(
    agg: WindowedAggregate, records: Mapping[str, DataFrame],
    schemas: Mapping[str, T.StructType] | None = None,
) -> DataFrame:
    """The batch's events: `prepare` of the records, or the single topic's records, checked to
    have the columns the aggregate needs (`frames.check_events`). Given the records' `schemas`
    (`BatchInput.schemas`), the records' columns are known without asking Spark, and a
    `prepare`'s are asked once per needed columns and schemas."""
    known = schemas is not None and all(t in schemas for t in agg.topics)
    if agg.prepare is None:
        events = records[agg.topics[0]]
        check_events(agg, events, schemas[agg.topics[0]].fieldNames() if known else None)
        return events
    events = agg.prepare(records)
    key = (id(agg.prepare), needed_columns(agg),
           *((t, schemas[t].json()) for t in agg.topics)) if known else None
    if key is None or key not in _CHECKED:
        check_events(agg, events)
        if key is not None:
            _CHECKED[key] = agg.prepare
    return events


def advance(agg: WindowedAggregate, batch: BatchInput) -> dict[str, Any]:
    if batch.now is None:
        raise ConfigError(f"windowed aggregate {agg.name}: a batch needs its planned time `now`")
    latest = event_times.from_stats(batch.stats, agg.topics, batch.cut)
    if latest is None:  # one pass over the events, for both steps, which also finds the times
        # The records' own times when a `prepare` made the events (it may drop some), or when
        # the cut partitions' hold is wanted: the events need not keep the records' partition.
        columns = ["partition", "event_time"] if batch.cut else ["event_time"]
        records = None if agg.prepare is None and not batch.cut else {
            t: batch.records[t].select(*columns) for t in agg.topics}
        scanned = scan(agg, prepared(agg, batch.records, batch.schemas), keep=batch.cached,
                       records=records, watermark_before=watermark_of(batch.state),
                       cut=batch.cut)
        batch.scratch[SCANNED] = scanned
        latest = event_times.Latest(
            {t: None if us is None else from_us(us) for t, us in (
                scanned.latest_by_topic or {agg.topics[0]: scanned.latest_us}).items()},
            None if scanned.hold_us is None else from_us(scanned.hold_us))
    return agg.watermark.advance(batch.state, latest.by_input, batch.now, hold=latest.hold)


def _scanned(agg: WindowedAggregate, batch: BatchInput, *, small: bool) -> Scanned:
    """The batch's `Scanned`: from the log's statistics when they tell enough, else a pass.

    Statistics describe the records, so they give the events' span only when the events have
    the records' times (no `prepare`, or one that keeps them); a small table needs no span, it
    is read whole (`Scanned.span_known` false).
    """
    before = watermark_of(batch.state)
    if SCANNED in batch.scratch:
        return batch.scratch[SCANNED]
    stats = RangeStats.combined(batch.stats.values())
    events = prepared(agg, batch.records, batch.schemas)
    if stats is not None and not stats.records:  # an idle tick: no event, and no Spark job
        return known(agg, events, span_us=None, watermark_before=before, any_invalid=False)
    same_times = agg.prepare is None or agg.prepare_keeps_time
    if stats is None or not (same_times or small):
        return scan(agg, events, watermark_before=before, keep=batch.cached)
    span = stats.event_time and (to_us(stats.event_time[0]), to_us(stats.event_time[1]))
    return known(agg, events, span_us=span, span_known=same_times, watermark_before=before,
                 any_invalid=agg.prepare is not None or _may_be_invalid(agg, stats),
                 keep=batch.cached)


def _may_be_invalid(agg: WindowedAggregate, stats: RangeStats) -> bool:
    """Whether a record may have no window: a null time or group-by value (string group-by
    columns only: a cast to another type could make a value null), or a null event id."""
    needed = ["event_time", *agg.group_names] + (["event_id"] if isinstance(agg.window, Sliding)
                                                 else [])
    if any(f.dataType != T.StringType() for f in agg.group_fields):
        return True
    return any(stats.nulls.get(column, 1) for column in needed)


def transform(agg: WindowedAggregate, batch: BatchInput) -> dict[str, DataFrame | Changes | None]:
    before, after = watermark_of(batch.state), watermark_of(batch.next_state)
    table = agg.state or agg.windows
    snapshot = batch.outputs[table.path]
    files = snapshot.files()
    # The events are checked to have the columns the aggregate needs (`prepared`).
    scanned = _scanned(agg, batch, small=is_small(files))
    if files and scanned.span_known:
        files = files_to_read(
            agg,
            files,
            events_us=scanned.span_us,
            watermark_before_us=batch.state.get("watermark_us"),
            watermark_after_us=batch.next_state.get("watermark_us"),
        )
    stored = batch.lake.read(snapshot, files=files)
    update = apply_batch(
        agg, stored, scanned, watermark_before=before, watermark_after=after, batch=batch.batch,
        complete=agg.state is None,  # update mode: the read files are rewritten whole
    )
    hint = None if scanned.windows is None else scanned.windows + sum(
        f.num_records for f in files)
    return outputs(agg, update, read=files, rows_hint=hint, cached=batch.cached)


def outputs(
    agg: WindowedAggregate,
    update: Update,
    *,
    read: Sequence[DataFile] | None = None,
    rows_hint: int | None = None,
    cached: Callable[[DataFrame], DataFrame],
) -> dict[str, DataFrame | Changes | None]:
    """The batch's writes per table, by emit mode and late policy (in commit order).

    `read` are the files of the table the batch read its stored windows from (the state in final
    mode): they hold every stored window the batch changes, so its upsert rewrites just those;
    in update mode the rows are their complete new content (`Update.complete`), written in
    their place without a merge. `cached` (`BatchInput.cached`) keeps the rows both final-mode
    outputs are cut from, and a session window's rows and deletions, which come out of one
    pass (`Update.together`). Final windows leave the state once published, unless a later batch
    may still need them.
    """
    late = {agg.late_records.path: update.late if update.may_have_late else None}
    if agg.state is None:
        rows, deletes = (update.rows, None) if update.together is None else \
            _computed_once(update, agg.keys, cached)
        return {**late, agg.windows.path: Changes(
            rows, deletes, read, rows_hint, replace=update.complete)}
    # Cut into two outputs, computed once.
    rows, deletes = _computed_once(update, agg.keys, cached)
    final = rows.where(F.col("is_final"))
    # A sliding row keeps its event's inputs, which the frames of later events are computed
    # from: a final row must stay in the state, as it must for a correction to merge into.
    if agg.late == "correct" or isinstance(agg.window, Sliding):
        published = Changes(final, deletes)
        kept = Changes(rows, deletes, read, rows_hint)
    else:
        gone = final.select(*agg.keys)
        if deletes is not None:
            gone = gone.unionByName(deletes.select(*agg.keys))
        # A window leaves the state as it is published, and under 'drop' nothing opens it
        # again (a record for it is late): its key is new to the published table, so no stored
        # row is read or rewritten. Found by the published keys' range, the files to rewrite
        # were all of them for sessions (a 1,000,000-event demo rewrote the whole
        # `streams/user_sessions` in each batch: 6,800, 14,800, 22,700, 31,400 rows).
        published = Changes(final, files=())
        kept = Changes(rows.where(~F.col("is_final")), gone, read, rows_hint)
    return {**late, agg.windows.path: published, agg.state.path: kept}


def _computed_once(
    update: Update, keys: Sequence[str], cached: Callable[[DataFrame], DataFrame],
) -> tuple[DataFrame, DataFrame | None]:
    """The update's rows, and the `keys` of its deletes when it has some, computed in one
    Spark job and kept (`cached`) for the outputs cut from them. A session window's rows and
    deletes come out of one pass (`Update.together`), which a write of each apart would make
    twice; other kinds have rows only."""
    if update.together is None:
        assert update.deletes is None, "deletes come with `Update.together`"
        return cached(update.rows), None
    return sessions.cut(cached(update.together), keys)
