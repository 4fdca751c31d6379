"""The working forms of events and windows inside a microbatch, and the way back to the table.

Times are handled as epoch microseconds (``_t_us``, ``_start_us``, ``_end_us``): window
arithmetic on integers is exact and independent of the session time zone. A window in working
form has the group-by columns, ``_start_us``, ``_end_us``, the partials, ``revision`` and
``is_final`` (plus ``event_id`` and the inputs for sliding windows); `finish` turns it into
table rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, Window, WindowSpec
from pyspark.sql import functions as F

from lakelog.errors import ConfigError
from lakelog.windows import schemas
from lakelog.windows.kinds import Session, Sliding

if TYPE_CHECKING:
    from lakelog.windows.spec import WindowedAggregate

T_US = "_t_us"
START = "_start_us"
END = "_end_us"
#: A window row's writing batch, kept when a rewrite leaves the row unchanged (null: this batch).
BATCH = "_batch"
HOUR_US = 3_600_000_000


def us(column: str | Column) -> Column:
    return F.unix_micros(F.col(column) if isinstance(column, str) else column)


def ts(micros: str | Column | int | None) -> Column:
    if micros is None:
        return F.lit(None).cast("timestamp")
    return F.timestamp_micros(F.lit(micros) if isinstance(micros, int) else F.col(micros))


def per_group(groups: Sequence[str]) -> WindowSpec:
    """A window frame over each group's rows; over all rows, as one group, without groups (a
    shop-wide rolling hour). Spark then moves them to one partition, as it must: said with a
    constant, not left out, which Spark Connect's client would warn about at every batch."""
    return Window.partitionBy(*(groups or [F.lit(0)]))


def partial_names(agg: WindowedAggregate) -> list[str]:
    return [p.name for a in agg.aggregates for p in a.partials()]


def input_names(agg: WindowedAggregate) -> list[str]:
    return [a.input_name for a in agg.aggregates]


def aggregated(agg: WindowedAggregate) -> list[Column]:
    """The partials aggregated from the events' inputs, per group (a sliding window's frames:
    `lakelog.windows.sliding.framed`)."""
    return [column.cast(field.dataType).alias(field.name)
            for a in agg.aggregates
            for column, field in zip(a.aggregate(F.col(a.input_name)), a.partials())]


def merged(agg: WindowedAggregate) -> list[Column]:
    """The partials merged from stored (or freshly aggregated) partials, per group."""
    return [
        column.cast(field.dataType).alias(field.name)
        for a in agg.aggregates
        for column, field in zip(a.merge(), a.partials())
    ]


def needed_columns(agg: WindowedAggregate) -> tuple[str, ...]:
    """The columns the aggregate reads of its events."""
    needed = ["event_id", "event_time", *agg.group_names]
    needed += [a.column for a in agg.aggregates if a.column is not None]
    return tuple(dict.fromkeys(needed))


def check_events(
    agg: WindowedAggregate, events: DataFrame, columns: Sequence[str] | None = None
) -> None:
    """Fail clearly when `prepare` did not produce the columns the aggregate needs. `columns`
    are the events' columns when known; else they are asked of Spark (over Spark Connect an
    analysis of the events' plan, a round trip)."""
    have = list(events.columns if columns is None else columns)
    missing = [c for c in needed_columns(agg) if c not in have]
    if missing:
        raise ConfigError(
            f"windowed aggregate {agg.name}: the prepared events lack columns "
            f"{', '.join(missing)} (they have {', '.join(have)})"
        )


def invalid_reason(agg: WindowedAggregate) -> Column:
    """Why an event cannot be placed in a window (null when it can)."""
    checks = [(F.col("event_time").isNull(), "event_time is null")]
    checks += [(F.col(g).isNull(), f"group-by column {g} is null") for g in agg.group_names]
    if isinstance(agg.window, Sliding):
        checks.append((F.col("event_id").isNull(), "event_id is null"))
    reason = F.lit(None).cast("string")
    for condition, text in reversed(checks):
        reason = F.when(condition, F.lit(text)).otherwise(reason)
    return reason


def normalize(agg: WindowedAggregate, events: DataFrame) -> DataFrame:
    """Events with ``event_id``, ``event_time``, typed group-by columns, ``_t_us``, the inputs
    and ``_invalid`` (why the event has no window, else null). The events have the columns the
    aggregate needs (`check_events`)."""
    return events.select(
        F.col("event_id").cast("string").alias("event_id"),
        F.col("event_time").cast("timestamp").alias("event_time"),
        *[F.col(f.name).cast(f.dataType).alias(f.name) for f in agg.group_fields],
        *[a.input().alias(a.input_name) for a in agg.aggregates],
    ).select(
        "*", us("event_time").alias(T_US), invalid_reason(agg).alias("_invalid")
    )


def carries_batch(agg: WindowedAggregate) -> bool:
    """Whether `agg`'s windows in working form carry the batch that wrote each (``_batch``):
    tumbling and hopping windows do; session and sliding ones are recomputed."""
    return not isinstance(agg.window, (Session, Sliding))


def from_table(agg: WindowedAggregate, stored: DataFrame) -> DataFrame:
    """Stored window rows in working form (tumbling and hopping windows keep the batch that
    wrote each, as ``_batch``: a rewrite of their files keeps it for the rows it does not
    change)."""
    extra: list[str | Column] = []
    if isinstance(agg.window, Sliding):
        extra = ["event_id", *input_names(agg)]
    elif carries_batch(agg):
        extra = [F.col("batch").alias(BATCH)]
    return stored.select(
        *agg.group_names,
        us("window_start").alias(START),
        us("window_end").alias(END),
        *extra,
        *partial_names(agg),
        "revision",
        "is_final",
    )


def final_at(end: Column, watermark_us: int | None) -> Column:
    """Whether a window ending at `end` (µs) is final under the watermark."""
    if watermark_us is None:
        return F.lit(False)
    return end <= F.lit(watermark_us)


def closing(is_final: Column, end: Column, watermark_after_us: int | None) -> tuple[Column, Column]:
    """(final after the batch, made final by the batch) for a window stored with `is_final`
    (null: not stored) that ends at `end`, under the watermark after the batch."""
    was_final = F.coalesce(is_final, F.lit(False))
    now_final = final_at(end, watermark_after_us)
    return was_final | now_final, ~was_final & now_final


def finish(
    agg: WindowedAggregate, windows: DataFrame, *, batch: int, extra: Sequence[str] = ()
) -> DataFrame:
    """Windows in working form as table rows written by `batch` (the table's columns,
    `schemas.window_schema`, then the `extra` columns of `windows` as they are)."""
    schema = schemas.window_schema(agg)
    start = F.col(START)
    derived = {
        "window_start": ts(START),
        "window_end": ts(END),
        "batch": (F.coalesce(F.col(BATCH), F.lit(batch)) if carries_batch(agg)
                  else F.lit(batch)).cast("long"),
        "hour": F.timestamp_micros(start - F.pmod(start, F.lit(HOUR_US))),
        "revision": F.col("revision").cast("int"),
    }
    derived.update({a.name: a.value().cast(a.value_type()) for a in agg.aggregates})
    if isinstance(agg.window, Session):
        gap = agg.window.gap_us
        derived["duration_seconds"] = (F.col(END) - F.lit(gap) - start) / F.lit(1_000_000.0)
    columns = [
        derived[f.name].alias(f.name) if f.name in derived else F.col(f.name).cast(f.dataType)
        for f in schema.fields
    ]
    return windows.select(*columns, *extra)
