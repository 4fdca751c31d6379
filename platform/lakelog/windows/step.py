"""One microbatch of a windowed aggregate as a pure DataFrame computation, and the batch form.

`apply_batch` takes the stored windows (any superset of those the batch can touch: the consumer
passes only the files that may hold them), the batch's prepared events and the watermark before
and after the batch, and returns what to write: the changed windows, the keys of windows to
delete (sessions absorbed by a merge) and the late rows. Besides the windows the events change,
windows that the watermark passed in this batch become final (``is_final`` set) even when no
event touched them.

`batch_windows` is the same computation over all events at once, with nothing stored and nothing
late: what a replay of the retained log computes, and what the incremental result must equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakelog.watermarks import to_us
from lakelog.windows import fixed, late, sessions, sliding
from lakelog.windows.frames import finish, from_table, normalize, ts
from lakelog.windows.kinds import Session, Sliding
from lakelog.windows.tables import window_schema

if TYPE_CHECKING:
    from lakelog.windows.spec import WindowedAggregate


@dataclass(frozen=True)
class Update:
    """What one microbatch writes: window rows to upsert, window keys to delete, late rows."""

    rows: DataFrame
    deletes: DataFrame | None
    late: DataFrame


def _us(moment: datetime | None) -> int | None:
    return None if moment is None else to_us(moment)


def apply_batch(
    agg: WindowedAggregate,
    stored: DataFrame,
    events: DataFrame,
    *,
    watermark_before: datetime | None,
    watermark_after: datetime | None,
    batch: int,
) -> Update:
    """The windows, deletions and late rows of one microbatch (see the module docstring)."""
    before, after = _us(watermark_before), _us(watermark_after)
    normalized = normalize(agg, events)
    valid = normalized.where(F.col("_invalid").isNull())
    invalid = late.invalid_rows(agg, normalized, watermark_us=before, batch=batch)
    working = from_table(agg, stored)
    options = {"watermark_before_us": before, "watermark_after_us": after, "batch": batch}
    deletes = None
    if isinstance(agg.window, Session):
        changed, deletes, late_rows = sessions.step(agg, working, valid, **options)
    elif isinstance(agg.window, Sliding):
        changed, late_rows = sliding.step(agg, working, valid, **options)
    else:
        changed, late_rows = fixed.step(agg, working, valid, **options)
    rows = finish(agg, changed, batch=batch)
    if isinstance(agg.window, (Session, Sliding)) and after is not None and after != before:
        # Fixed windows find these in their merge; sliding and session rows are recomputed
        # from a range of stored rows, so the open ones the watermark passed are found here.
        rows = rows.unionByName(_newly_final(agg, stored, rows, deletes, after, batch))
    return Update(rows=rows, deletes=deletes, late=invalid.unionByName(late_rows))


def _newly_final(
    agg: WindowedAggregate,
    stored: DataFrame,
    rows: DataFrame,
    deletes: DataFrame | None,
    watermark_us: int,
    batch: int,
) -> DataFrame:
    """Stored open windows the watermark has passed, not otherwise changed by the batch."""
    keys = list(agg.keys)
    changed = rows.select(*keys)
    if deletes is not None:
        changed = changed.unionByName(deletes.select(*keys))
    due = stored.where(~F.col("is_final") & (F.col("window_end") <= ts(watermark_us)))
    return due.join(changed, keys, "left_anti").withColumns(
        {"is_final": F.lit(True), "batch": F.lit(batch).cast("long")}
    ).select(*rows.columns)


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
