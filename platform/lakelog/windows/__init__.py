"""Windowed aggregates over event time: tumbling, hopping, sliding and session windows, kept
incrementally per microbatch with watermarks, late records and two emit modes (DESIGN "Event
time").

Declare a `WindowedAggregate` and run its `.consumer`; `batch_windows` computes the same windows
over all events in one pass (replay, backfill, tests); `apply_batch` is one microbatch as a pure
DataFrame computation.
"""

from lakelog.windows.aggregates import (
    Aggregation,
    ApproxDistinct,
    Avg,
    Count,
    Max,
    Min,
    Sum,
)
from lakelog.windows.kinds import Hopping, Session, Sliding, Tumbling, WindowKind
from lakelog.windows.spec import Emit, LatePolicy, Prepare, WindowedAggregate
from lakelog.windows.updates import Update, apply_batch, batch_windows

__all__ = [
    "Aggregation",
    "ApproxDistinct",
    "Avg",
    "Count",
    "Emit",
    "Hopping",
    "LatePolicy",
    "Max",
    "Min",
    "Prepare",
    "Session",
    "Sliding",
    "Sum",
    "Tumbling",
    "Update",
    "WindowKind",
    "WindowedAggregate",
    "apply_batch",
    "batch_windows",
]
