"""How far a capture is behind its source database, in position and in time."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime

from lakelog.cdc import checkpoint
from lakelog.cdc.source import Source


@dataclass(frozen=True)
class CaptureLag:
    position: int | None  # the landed position; None before the first snapshot
    head: int  # the source's current position
    pending: bool  # changes exist after `position`
    seconds: float  # age of the oldest change not landed yet (0 when none)

    @property
    def behind(self) -> int:
        """Positions between the landed one and the source's head (PostgreSQL: WAL bytes)."""
        return max(self.head - (self.position or 0), 0)


def capture_lag(source: Source, root: str | os.PathLike[str], *, now: datetime) -> CaptureLag:
    """Read-only: peeks at the next change, lands nothing and changes nothing at the source."""
    saved = checkpoint.load(os.fspath(root), source.server_name, source.connector)
    head = source.head()
    if saved is None:
        return CaptureLag(None, head, True, 0.0)
    oldest = source.changes(saved.position, 1, now=now).events
    seconds = 0.0
    if oldest:
        seconds = max(now.timestamp() - oldest[0]["source"]["ts_ms"] / 1000, 0.0)
    return CaptureLag(saved.position, head, bool(oldest), seconds)
