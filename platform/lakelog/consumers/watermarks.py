"""Event-time watermarks, kept in a consumer's checkpoint state (DESIGN "Event time").

The watermark is the greatest corrected event time seen minus the allowed lateness: the
consumer's claim that no record older than it is still expected. It only moves forward.

A consumer of several inputs (topics) keeps each input's greatest event time, and its watermark
follows the slowest of them: the least of the inputs' greatest times, minus the lateness (as
Spark's default ``multipleWatermarkPolicy=min`` and Flink's per-input watermarks do). One
input ahead of another, an orders topic whose records come at the end of the sessions of a
page-views topic, or a catch-up that reads one topic's backlog faster, would otherwise make the
slower input's records late. An input counts from its first record on; one that has had no
record for `idle_timeout` (when set) stops holding the others back until it has records again,
as Flink's idleness does. Without `idle_timeout`, a silent input holds the watermark, as in
Spark. A batch cut short by its cap also holds the watermark at the slowest log partition it
left records in (`hold`: `lakelog.consumers.event_times`).

A quiet stream would otherwise never close its last windows. So when no record has arrived for
`idle_timeout` of processing time, event time is taken to move on with the wall clock: the
watermark becomes ``max_event_time + (now - last_arrival) - lateness`` (a sensor or schedule
tick runs the consumer's empty batch that does this, at most once per `idle_timeout`, and only
until everything the consumer holds is closed: see `Watermark.idle`). A record that arrives
later for a window closed this way is late, like any other.

State (JSON, in the checkpoint): ``max_event_us``, ``watermark_us``, ``arrival_us`` (processing
time of the last batch with records) and ``tick_us`` (of the last idle advance), all epoch
microseconds; a consumer that has seen no record has none of them. A consumer of several inputs
also keeps ``inputs``: per input that has had records, ``max_event_us`` and ``arrival_us``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from lakelog.errors import ConfigError

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def to_us(t: datetime | timedelta) -> int:
    if isinstance(t, timedelta):
        return t // timedelta(microseconds=1)
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return (t - EPOCH) // timedelta(microseconds=1)


def from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


@dataclass(frozen=True)
class Watermark:
    """How far behind the greatest event time a consumer still accepts records on time."""

    lateness: timedelta = timedelta(0)
    idle_timeout: timedelta | None = None

    def __post_init__(self) -> None:
        if self.lateness < timedelta(0):
            raise ConfigError("watermark: allowed lateness must be >= 0")
        if self.idle_timeout is not None and self.idle_timeout <= timedelta(0):
            raise ConfigError("watermark: idle_timeout must be > 0")

    def advance(
        self, state: Mapping[str, Any],
        max_event_time: datetime | Mapping[str, datetime | None] | None, now: datetime, *,
        hold: datetime | None = None,
    ) -> dict[str, Any]:
        """The state after a batch whose greatest event time is `max_event_time` (None: empty).

        A consumer of several inputs gives a mapping instead: each input's greatest event time
        in the batch (None: no record of it), every input named, so that the watermark follows
        the slowest one (see the module's doc). `hold`: an event time the watermark does not
        pass, less the lateness, in this batch (that of log partitions with records still
        waiting: `lakelog.consumers.event_times`); it never moves the watermark back."""
        inputs = max_event_time if isinstance(max_event_time, Mapping) else None
        times = [t for t in (inputs.values() if inputs is not None else [max_event_time])
                 if t is not None]
        new = dict(state)
        at = to_us(now)
        if times:
            latest = to_us(max(times))
            top = max(latest, state.get("max_event_us", latest))
            new["max_event_us"] = top
            new["arrival_us"] = at
            if inputs is not None and len(inputs) > 1:
                new["inputs"] = self._inputs(state.get("inputs", {}), inputs, at)
                top = min(seen["max_event_us"] for seen in new["inputs"].values()
                          if not self._quiet(seen, at))
            mark = min(top, to_us(hold) if hold is not None else top) - to_us(self.lateness)
        elif self.idle(state, now):
            idle_for = at - state["arrival_us"]
            mark = state["max_event_us"] + idle_for - to_us(self.lateness)
            new["tick_us"] = at
        else:
            return new
        new["watermark_us"] = max(mark, state.get("watermark_us", mark))
        return new

    @staticmethod
    def _inputs(seen: Mapping[str, Mapping[str, int]], latest: Mapping[str, datetime | None],
                at: int) -> dict[str, dict[str, int]]:
        """Each input's greatest event time and last arrival, after a batch at `at`."""
        inputs = {name: dict(facts) for name, facts in seen.items()}
        for name, t in latest.items():
            if t is not None:
                us = max(to_us(t), inputs.get(name, {}).get("max_event_us", to_us(t)))
                inputs[name] = {"max_event_us": us, "arrival_us": at}
        return inputs

    def _quiet(self, seen: Mapping[str, int], at: int) -> bool:
        """Whether an input has had no record for `idle_timeout`: it holds no one back."""
        return self.idle_timeout is not None and at - seen["arrival_us"] >= to_us(
            self.idle_timeout)

    def idle(self, state: Mapping[str, Any], now: datetime, *,
             horizon: timedelta | None = None) -> bool:
        """Whether an empty batch at `now` should advance the watermark of a quiet stream.

        `horizon`: how far past an event the consumer can still close something that holds it
        (a window's end, a pattern's or a join's `within`). Once the watermark is that far past
        the greatest event time, every window, match or buffered record is closed and a further
        advance would change nothing: no more ticks, until records arrive again.
        """
        if self.idle_timeout is None or "arrival_us" not in state:
            return False
        if horizon is not None:
            closed_at = state["max_event_us"] + to_us(horizon)
            if state.get("watermark_us", closed_at - 1) >= closed_at:
                return False
        timeout, at = to_us(self.idle_timeout), to_us(now)
        last = max(state["arrival_us"], state.get("tick_us", state["arrival_us"]))
        return at - state["arrival_us"] >= timeout and at - last >= timeout


def watermark_of(state: Mapping[str, Any]) -> datetime | None:
    """The watermark in a consumer's state; None before the first record."""
    us = state.get("watermark_us")
    return None if us is None else from_us(us)
