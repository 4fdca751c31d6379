"""Late records: the side output that makes the aggregate lose nothing silently.

A record is late when it would change a window that was already final when its batch began:
one whose end is at or before the watermark from before the batch. Lateness is decided from the
record and that watermark alone, never from the stored windows, so a retried microbatch routes
exactly the same records. Every record the aggregate does not apply on time gets a row: late ones
(per window, for hopping windows) with the policy that was applied to them, and records that
have no window at all (null event time or group-by value) with policy ``drop``. So: records in =
records applied on time + rows of ``_late`` (counting a hopping record once per window).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakelog.windows import schemas
from lakelog.windows.frames import END, START, ts

if TYPE_CHECKING:
    from lakelog.windows.spec import WindowedAggregate

TIME_FORMAT = "yyyy-MM-dd HH:mm:ss"


def show(column: Column) -> Column:
    return F.date_format(column, TIME_FORMAT)


def window_closed(watermark_us: int | None, *, opening: str = "[", closing: str = ")") -> Column:
    """E.g. ``window [2026-03-01 12:00:00, 2026-03-01 12:01:00) closed at watermark ...``."""
    if watermark_us is None:
        return F.lit(None).cast("string")
    return F.concat(
        F.lit(f"window {opening}"), show(ts(START)), F.lit(", "), show(ts(END)),
        F.lit(f"{closing} closed at watermark "), show(ts(watermark_us)),
    )


def before_watermark(watermark_us: int | None) -> Column:
    """Why a session event is late (sessions before the watermark may be final)."""
    if watermark_us is None:
        return F.lit(None).cast("string")
    return F.concat(
        F.lit("event time "), show(F.col("event_time")),
        F.lit(" is before watermark "), show(ts(watermark_us)),
        F.lit(": its session may already be final"),
    )


def late_rows(
    agg: WindowedAggregate,
    events: DataFrame,
    *,
    reason: Column,
    policy: str,
    watermark_us: int | None,
    batch: int,
    with_window: bool = True,
) -> DataFrame:
    """Rows of the ``_late`` table for `events` (working form, with ``_start_us``/``_end_us``
    when `with_window`)."""
    schema = schemas.late_schema(agg)
    values = {
        "window_start": ts(START) if with_window else ts(None),
        "window_end": ts(END) if with_window else ts(None),
        "watermark": ts(watermark_us),
        "reason": reason,
        "policy": F.lit(policy),
        "batch": F.lit(batch).cast("long"),
    }
    return events.select(
        *[
            values[f.name].alias(f.name) if f.name in values else F.col(f.name).cast(f.dataType)
            for f in schema.fields
        ]
    )


def invalid_rows(
    agg: WindowedAggregate, events: DataFrame, *, watermark_us: int | None, batch: int
) -> DataFrame:
    """``_late`` rows for events that have no window (see `frames.invalid_reason`)."""
    return late_rows(
        agg, events.where(F.col("_invalid").isNotNull()), reason=F.col("_invalid"),
        policy="drop", watermark_us=watermark_us, batch=batch, with_window=False,
    )
