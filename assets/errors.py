"""Engine errors as Dagster failures: the one-line message, not a stack trace."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from lakelog.errors import LakelogError
from lakelog.spark.session import server_lost

#: Step retries when the Spark Connect server went away mid-step (killed, out of memory): the
#: retry opens a session on a new server (the local one is restarted) and redoes the step,
#: which the exactly-once protocol makes safe — a planned microbatch or ingest is resumed.
SERVER_LOST_RETRIES = 2


@contextmanager
def engine_errors() -> Iterator[None]:
    """Turn a `LakelogError` into a `dagster.Failure` that shows its message, and a lost Spark
    server into a retry of the step.

    E.g. a `ConcurrentWriteError`: another run of the same consumer committed first, and nothing
    of this run was written.
    """
    try:
        yield
    except LakelogError as exc:
        raise dg.Failure(description=f"{type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        if server_lost(exc):
            raise dg.RetryRequested(max_retries=SERVER_LOST_RETRIES, seconds_to_wait=1) from exc
        raise
