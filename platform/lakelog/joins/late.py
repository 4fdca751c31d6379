"""The late table of a window join: records it did not join, each with its reason.

Nothing is dropped silently: a record the join cannot use is kept here whole (``record``: all
its columns as JSON) with its position in the log, the reason, and the watermark it was judged
against, so an operator can count, inspect or replay it.
"""

from __future__ import annotations

from typing import Literal, get_args

from pyspark.sql import types as T

from lakelog.joins.side import TRAILER

Reason = Literal["window_closed", "behind_watermark", "null_key"]
#: ``window_closed``: a right record whose every possible left match has had its window closed
#: (its time + within is older than the watermark); ``behind_watermark``: any other record older
#: than the watermark; ``null_key``: a record with a null key column, which matches nothing, on a
#: side whose unmatched records the join does not emit (the right of a left join, the left of a
#: right join).
REASONS: tuple[str, ...] = get_args(Reason)

SCHEMA = T.StructType([
    T.StructField("side", T.StringType()),  # left | right
    T.StructField("topic", T.StringType()),
    T.StructField("partition", T.IntegerType()),
    T.StructField("offset", T.LongType()),
    T.StructField("event_id", T.StringType()),
    T.StructField("event_time", T.TimestampType()),  # the input's time column
    T.StructField("reason", T.StringType()),
    T.StructField("watermark", T.TimestampType()),
    T.StructField("record", T.StringType()),
    *TRAILER,
])

