"""Small event DataFrames and an in-memory window table for the windowed-aggregate tests."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from pyspark.sql import DataFrame, SparkSession

from lakelog.consumers.watermarks import Watermark, to_us, watermark_of
from lakelog.windows import WindowedAggregate, apply_batch
from lakelog.windows.updates import Scanned, known
from lakelog.windows.schemas import window_schema

BASE = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
EVENTS = "event_id string, event_time timestamp, g string, x double, user string"
#: Columns that depend on how events were split into batches, not on the events.
BOOKKEEPING = ("is_final", "revision", "batch")


def at(seconds: float) -> datetime:
    return BASE + timedelta(seconds=seconds)


def local(seconds: float) -> datetime:
    """`at(seconds)` as PySpark returns timestamps: naive, in the local time zone."""
    return at(seconds).astimezone().replace(tzinfo=None)


def events(spark: SparkSession, rows: list[tuple]) -> DataFrame:
    """Events from (event_id, seconds after BASE, group, x, user) tuples."""
    return spark.createDataFrame(
        [(e, None if s is None else at(s), g, x, u) for e, s, g, x, u in rows], EVENTS
    )


def with_span(
    agg: WindowedAggregate, df: DataFrame, span: str | None, *, lo: float, hi: float,
    watermark_before: datetime,
) -> DataFrame | Scanned:
    """A batch's events as `apply_batch` takes them, by how the span of their times (`lo`..`hi`
    seconds) is known: "scan", by the batch's own pass (the events as they are); "wide", given
    100 s wider on each side, as a log's file statistics may give it; None, not known."""
    if span == "scan":
        return df
    if span == "wide":
        return known(agg, df, span_us=(to_us(at(lo - 100)), to_us(at(hi + 100))),
                     any_invalid=False, watermark_before=watermark_before)
    assert span is None, span
    return known(agg, df, span_us=None, any_invalid=False, watermark_before=watermark_before,
                 span_known=False)


def stored(spark: SparkSession, agg: WindowedAggregate, windows: list[dict]) -> DataFrame:
    """Window-table rows, hand-built, of an aggregate of ``Count("n")`` and ``Sum("total", "x")``.

    Each window gives ``g``, ``start`` and ``end`` (seconds after BASE), ``n``, ``total``,
    ``revision`` and ``is_final``; sliding rows also ``event_id`` and the event's own ``x``.
    """
    rows = []
    for w in windows:
        start = at(w["start"])
        rows.append({
            "g": w["g"], "window_start": start, "window_end": at(w["end"]), "n": w["n"],
            "total": w["total"], "is_final": w["is_final"], "revision": w["revision"],
            "batch": 0, "hour": start.replace(minute=0, second=0, microsecond=0),
            "_n_count": w["n"], "_total_sum": w["total"], "event_id": w.get("event_id"),
            "_in_n": True, "_in_total": w.get("x"), "duration_seconds": None,
        })
    schema = window_schema(agg)
    return spark.createDataFrame(
        [tuple(r[f.name] for f in schema.fields) for r in rows], schema
    )


def public(df: DataFrame, *, keep: tuple[str, ...] = ()) -> DataFrame:
    """The columns a reader sees, without the partials (and the bookkeeping unless kept)."""
    return df.select(
        *[c for c in df.columns if not c.startswith("_") and (c not in BOOKKEEPING or c in keep)]
    )


def by_key(df: DataFrame, *keys: str) -> dict:
    return {tuple(r[k] for k in keys): r.asDict() for r in df.collect()}


class MemoryTable:
    """A window table kept as a DataFrame, updated the way the consumer's upsert does."""

    def __init__(self, spark: SparkSession, agg: WindowedAggregate) -> None:
        self.agg = agg
        self.rows = spark.createDataFrame([], window_schema(agg))
        self.late: DataFrame | None = None
        self.state: dict = {}
        self.batch = 0

    def run(self, batch_events: DataFrame, max_time: datetime | None, now: datetime) -> None:
        """One microbatch of `batch_events` (greatest event time `max_time`) at `now`."""
        before = watermark_of(self.state)
        self.state = self.agg.watermark.advance(self.state, max_time, now)
        update = apply_batch(
            self.agg, self.rows, batch_events, watermark_before=before,
            watermark_after=watermark_of(self.state), batch=self.batch,
        )
        keys = list(self.agg.keys)
        changed = update.rows.select(*keys)
        if update.deletes is not None:
            changed = changed.unionByName(update.deletes.select(*keys))
        self.rows = (
            self.rows.join(changed, keys, "left_anti")
            .select(*self.rows.columns)
            .unionByName(update.rows)
            .localCheckpoint(eager=True)
        )
        self.late = update.late if self.late is None else self.late.unionByName(update.late)
        self.batch += 1


def watermark(lateness_s: float = 0, idle_s: float | None = None) -> Watermark:
    idle = None if idle_s is None else timedelta(seconds=idle_s)
    return Watermark(lateness=timedelta(seconds=lateness_s), idle_timeout=idle)
