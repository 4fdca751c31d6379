"""Which files of a window table a microbatch must read, from their min/max statistics.

Two kinds of stored windows matter to a batch: those its events can change (by event-time range,
per window kind) and those the watermark passes in this batch (``window_end`` in
``(watermark before, watermark after]``: every window ending at or before the earlier watermark
was made final by an earlier batch). Under ``late='drop'`` a fixed window that ended by the
earlier watermark cannot change either. Every other file is skipped unread. The window tables are
clustered by ``window_start`` (`rows_per_file`), so for event-time data both sets are a few
recent files.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lakelog.consumers.watermarks import from_us
from lakelog.lake import DataFile
from lakelog.windows.kinds import Hopping, Session, Sliding, Tumbling

if TYPE_CHECKING:
    from lakelog.windows.spec import WindowedAggregate

#: Timestamp statistics may be truncated to milliseconds; widen every bound by that much.
SLACK_US = 1_000


def _between(file: DataFile, column: str, low_us: int | None, high_us: int | None) -> bool:
    low = None if low_us is None else from_us(low_us - SLACK_US)
    high = None if high_us is None else from_us(high_us + SLACK_US)
    return file.overlaps(column, low, high)


def may_change(agg: WindowedAggregate, file: DataFile, low_us: int, high_us: int) -> bool:
    """Whether `file` may hold a window that events in ``[low_us, high_us]`` change."""
    window = agg.window
    if isinstance(window, Session):
        return _between(file, "window_start", None, high_us + window.gap_us) and _between(
            file, "window_end", low_us, None
        )
    if isinstance(window, Sliding):
        size = window.size_us
        return _between(file, "window_end", low_us - size, high_us + size)
    return _between(file, "window_start", low_us - window.size_us, high_us)


def files_to_read(
    agg: WindowedAggregate,
    files: Sequence[DataFile],
    *,
    events_us: tuple[int, int] | None,
    watermark_before_us: int | None,
    watermark_after_us: int | None,
) -> list[DataFile]:
    """The files holding windows the batch may change or finalize.

    `events_us` is the batch's (least, greatest) event time in epoch microseconds, None when
    it has no events.
    """
    finalizing = watermark_after_us is not None and watermark_after_us != watermark_before_us
    # A fixed window that ended by the earlier watermark was made final then; under 'drop' a
    # record for it is late (`lakelog.windows.late`) and it stays as it is. Without this, one
    # late record a batch had every file since its time read and rewritten whole (the demo's
    # page views: the whole table in every batch).
    settled = (agg.late == "drop" and isinstance(agg.window, (Tumbling, Hopping))
               and watermark_before_us is not None)
    chosen = []
    for file in files:
        if settled and not _between(file, "window_end", watermark_before_us + 1, None):
            continue
        if events_us is not None and may_change(agg, file, *events_us):
            chosen.append(file)
        elif finalizing and _between(file, "window_end", watermark_before_us, watermark_after_us):
            chosen.append(file)
    return chosen
