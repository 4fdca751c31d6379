"""Engine errors as Dagster failures: the one-line message, not a stack trace."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from lakelog.errors import LakelogError


@contextmanager
def engine_errors() -> Iterator[None]:
    """Turn a `LakelogError` into a `dagster.Failure` that shows its message.

    E.g. a `ConcurrentWriteError`: another run of the same consumer committed first, and nothing
    of this run was written.
    """
    try:
        yield
    except LakelogError as exc:
        raise dg.Failure(description=f"{type(exc).__name__}: {exc}") from exc
