"""Literals a Spark Connect client sends as they are, without asking the server anything.

PySpark's Connect client asks the server for the session's timestamp type to type a `datetime`
literal (`F.lit`), and for its time zone among other settings to build a frame of rows
(`createDataFrame`): a round trip per literal or frame. The same instant as microseconds since
the epoch needs none.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def micros(moment: datetime) -> int:
    """`moment` as microseconds since the epoch (a naive one is local time, as Python's)."""
    return (moment.astimezone(timezone.utc) - EPOCH) // timedelta(microseconds=1)


def timestamp(moment: datetime | None) -> Column:
    """`moment` as a Spark timestamp literal, folded by the optimizer like any literal (None: a
    null timestamp)."""
    if moment is None:
        return F.lit(None).cast(T.TimestampType())  # not the session's default timestamp type
    return F.timestamp_micros(F.lit(micros(moment)))
