"""Window kinds: how event time is cut into the windows an aggregate is kept for.

Tumbling and hopping windows are aligned to the Unix epoch (a 1-minute window starts on the
minute), like Spark's `window()`, so every microbatch and a replay cut time the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from lakelog.errors import ConfigError

MICROSECOND = timedelta(microseconds=1)


def _positive(kind: str, label: str, value: timedelta) -> int:
    if not isinstance(value, timedelta):
        raise ConfigError(f"{kind} window: {label} must be a timedelta, got {value!r}")
    if value < MICROSECOND or value % MICROSECOND:
        raise ConfigError(f"{kind} window: {label} must be a positive whole number of microseconds")
    return value // MICROSECOND


@dataclass(frozen=True)
class Hopping:
    """Windows of `size` starting every `hop`: each event falls into ``size / hop`` of them."""

    size: timedelta
    hop: timedelta

    def __post_init__(self) -> None:
        size = _positive("hopping", "size", self.size)
        hop = _positive("hopping", "hop", self.hop)
        if hop > size:
            raise ConfigError(f"hopping window: hop {self.hop} is longer than size {self.size}")
        if size % hop:
            raise ConfigError(
                f"hopping window: size {self.size} must be a whole multiple of hop {self.hop}"
            )

    @property
    def size_us(self) -> int:
        return self.size // MICROSECOND

    @property
    def hop_us(self) -> int:
        return self.hop // MICROSECOND

    @property
    def windows_per_event(self) -> int:
        return self.size_us // self.hop_us

    @property
    def horizon(self) -> timedelta:
        """How long after an event the last window holding it ends."""
        return self.size


@dataclass(frozen=True)
class Tumbling:
    """Back-to-back windows of `size`: each event falls into exactly one."""

    size: timedelta

    def __post_init__(self) -> None:
        _positive("tumbling", "size", self.size)

    @property
    def size_us(self) -> int:
        return self.size // MICROSECOND

    @property
    def hop_us(self) -> int:
        return self.size_us

    @property
    def windows_per_event(self) -> int:
        return 1

    @property
    def horizon(self) -> timedelta:
        """How long after an event the last window holding it ends."""
        return self.size


@dataclass(frozen=True)
class Sliding:
    """For each event at `t`, the window ``(t - size, t]`` of its group (see `sliding`)."""

    size: timedelta

    def __post_init__(self) -> None:
        _positive("sliding", "size", self.size)

    @property
    def size_us(self) -> int:
        return self.size // MICROSECOND

    @property
    def horizon(self) -> timedelta:
        """How long after an event a row it is an input of can still change: the frame of a
        later event up to `size` after it (an event's own row ends at the event)."""
        return self.size


@dataclass(frozen=True)
class Session:
    """Events of a group closer than `gap` to each other form one session."""

    gap: timedelta

    def __post_init__(self) -> None:
        _positive("session", "gap", self.gap)

    @property
    def gap_us(self) -> int:
        return self.gap // MICROSECOND

    @property
    def horizon(self) -> timedelta:
        """How long after its last event a session ends."""
        return self.gap


Fixed = Tumbling | Hopping
WindowKind = Tumbling | Hopping | Sliding | Session
