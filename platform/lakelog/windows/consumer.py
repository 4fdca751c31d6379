"""The consumer that keeps a windowed aggregate's tables, one exactly-once microbatch at a time.

Per microbatch (`lakelog.consumers.run_batch` does the plan, the writes and the offset commit):

1. `advance` moves the watermark with the greatest event time of the batch's records (all of
   them, before `prepare` filters any), or with the wall clock when an idle tick runs an empty
   batch; the state is committed with the batch, so a retry sees the same watermarks.
2. `transform` reads only the stored windows the batch can change or finalize (`pruning`),
   computes `step.apply_batch`, and returns the outputs in commit order: the late rows first,
   then ``streams/<name>``, then (final mode) the state. The table the transform reads is
   committed last, so a retry after a partial write recomputes from unchanged input.

Emit modes: ``update`` keeps every window in ``streams/<name>`` and revises it each batch.
``final`` keeps windows in ``_state/windows/<name>`` until the watermark passes their end and
only then upserts them into ``streams/<name>``; with ``late="correct"`` the state also keeps the
final windows, since a correction merges into them (and is published again, with its revision).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial, reduce
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakelog.consumers import BatchInput, Changes, Consumer
from lakelog.errors import ConfigError
from lakelog.watermarks import from_us, watermark_of
from lakelog.windows.frames import check_events
from lakelog.windows.pruning import files_to_read
from lakelog.windows.step import Update, apply_batch

if TYPE_CHECKING:
    from lakelog.windows.spec import WindowedAggregate


def build_consumer(agg: WindowedAggregate) -> Consumer:
    outputs = (agg.late_records, agg.windows) + ((agg.state,) if agg.state else ())
    return Consumer(
        name=f"window.{agg.name}",
        topics=tuple(agg.topics),
        outputs=outputs,
        transform=partial(transform, agg),
        max_records_per_batch=agg.max_records_per_batch,
        advance=partial(advance, agg),
        idle_tick=agg.watermark.idle,
    )


def prepared(agg: WindowedAggregate, records: Mapping[str, DataFrame]) -> DataFrame:
    """The batch's events: `prepare` of the records, or the single topic's records."""
    if agg.prepare is None:
        return records[agg.topics[0]]
    return agg.prepare(records)


def advance(agg: WindowedAggregate, batch: BatchInput) -> dict[str, Any]:
    if batch.now is None:
        raise ConfigError(f"windowed aggregate {agg.name}: a batch needs its planned time `now`")
    times = reduce(DataFrame.unionByName, [r.select("event_time") for r in batch.records.values()])
    top = times.agg(F.unix_micros(F.max("event_time")).alias("top")).first()
    latest = None if top is None or top["top"] is None else from_us(top["top"])
    return agg.watermark.advance(batch.state, latest, batch.now)


def _span(events: DataFrame) -> tuple[int, int] | None:
    """The least and greatest event time of `events` in epoch microseconds (None if empty)."""
    span = events.agg(
        F.unix_micros(F.min("event_time")).alias("lo"),
        F.unix_micros(F.max("event_time")).alias("hi"),
    ).first()
    return None if span is None or span["lo"] is None else (span["lo"], span["hi"])


def transform(agg: WindowedAggregate, batch: BatchInput) -> dict[str, DataFrame | Changes]:
    events = prepared(agg, batch.records)
    check_events(agg, events)
    before, after = watermark_of(batch.state), watermark_of(batch.next_state)
    table = agg.state or agg.windows
    snapshot = batch.outputs[table.path]
    files = snapshot.files()
    if files:  # an empty table needs no event-time bounds to be pruned
        files = files_to_read(
            agg,
            files,
            events_us=_span(events),
            watermark_before_us=batch.state.get("watermark_us"),
            watermark_after_us=batch.next_state.get("watermark_us"),
        )
    stored = batch.lake.read(snapshot, files=files)
    update = apply_batch(
        agg, stored, events, watermark_before=before, watermark_after=after, batch=batch.batch
    )
    return outputs(agg, update)


def outputs(agg: WindowedAggregate, update: Update) -> dict[str, DataFrame | Changes]:
    """The batch's writes per table, by emit mode and late policy (in commit order)."""
    late = {agg.late_records.path: update.late}
    if agg.state is None:
        return {**late, agg.windows.path: Changes(update.rows, update.deletes)}
    rows = update.rows.localCheckpoint(eager=True)  # cut into two outputs; computed once
    final = rows.where(F.col("is_final"))
    if agg.late == "correct":
        published = Changes(final, update.deletes)
        kept = Changes(rows, update.deletes)
    else:
        gone = final.select(*agg.keys)
        if update.deletes is not None:
            gone = gone.unionByName(update.deletes.select(*agg.keys))
        published = Changes(final)
        kept = Changes(rows.where(~F.col("is_final")), gone)
    return {**late, agg.windows.path: published, agg.state.path: kept}
