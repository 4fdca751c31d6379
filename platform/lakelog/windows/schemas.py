"""The schemas of a windowed aggregate's tables, derived from its declaration.

Window table (``streams/<name>``, and ``_state/windows/<name>`` in final mode): the group-by
columns, ``window_start``/``window_end``, (``event_id`` for sliding windows), the public values,
(``duration_seconds`` for sessions), ``is_final``, ``revision``, ``batch``, ``hour``, then the
``_``-prefixed partials (and, for sliding windows, each event's own normalized inputs
``_in_<name>``, from which later rows are recomputed).

The key starts with ``window_start``: event-time data arrives roughly in time order, so files
clustered by key range are clustered by time, and a microbatch's windows prune to the newest few.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import types as T

from lakelog.windows.kinds import Session, Sliding

if TYPE_CHECKING:
    from lakelog.windows.spec import WindowedAggregate

RESERVED = (
    "window_start", "window_end", "event_id", "event_time", "is_final", "revision", "batch",
    "hour", "duration_seconds", "watermark", "reason", "policy",
)


def keys(agg: WindowedAggregate) -> tuple[str, ...]:
    base = ("window_start", *agg.group_names)
    return (*base, "event_id") if isinstance(agg.window, Sliding) else base


def window_schema(agg: WindowedAggregate) -> T.StructType:
    fields = [
        *agg.group_fields,
        T.StructField("window_start", T.TimestampType()),
        T.StructField("window_end", T.TimestampType()),
    ]
    if isinstance(agg.window, Sliding):
        fields.append(T.StructField("event_id", T.StringType()))
    fields += [T.StructField(a.name, a.value_type()) for a in agg.aggregates]
    if isinstance(agg.window, Session):
        fields.append(T.StructField("duration_seconds", T.DoubleType()))
    fields += [
        T.StructField("is_final", T.BooleanType()),
        T.StructField("revision", T.IntegerType()),
        T.StructField("batch", T.LongType()),
        T.StructField("hour", T.TimestampType()),
    ]
    fields += [p for a in agg.aggregates for p in a.partials()]
    if isinstance(agg.window, Sliding):
        fields += [T.StructField(a.input_name, a.input_type()) for a in agg.aggregates]
    return T.StructType(fields)


def late_schema(agg: WindowedAggregate) -> T.StructType:
    """One row per record (and window) not applied on time: late, or without a window.

    ``window_start``/``window_end`` is the window the record was late for (for a session event,
    its own interval ``[t, t + gap)``; null for a record without a window), ``watermark`` the
    watermark when it arrived, ``policy`` what was done with it.
    """
    return T.StructType(
        [
            T.StructField("event_id", T.StringType()),
            T.StructField("event_time", T.TimestampType()),
            *agg.group_fields,
            T.StructField("window_start", T.TimestampType()),
            T.StructField("window_end", T.TimestampType()),
            T.StructField("watermark", T.TimestampType()),
            T.StructField("reason", T.StringType()),
            T.StructField("policy", T.StringType()),
            T.StructField("batch", T.LongType()),
        ]
    )
