"""Stream–stream window join (left, right or full outer), e.g. searches with the clicks on
their results.

A right record joins a left record with equal `keys` whose event time lies in
``[left_time, left_time + within]``. The consumer ``join.<name>`` reads both topics and writes,
per microbatch (`lakelog.joins.matching` has the rules step by step):

- ``streams/<name>`` (appended) — one row per (left, right) match, in the first batch in which
  both have been seen, in either arrival order. A left join (`how="left"`) also writes one row
  per left record that matched nothing, with null right columns and `matched` false, in the
  batch in which the watermark passes ``left_time + within`` (its window closed); a right join
  (`how="right"`) one row per right record that matched nothing, with null left columns, in the
  batch in which the watermark passes ``right_time`` (no left record still to come could match
  it: it would be late); a full join both. A record that matched appears only as matched,
  never also as unmatched; each row is written exactly once.
- ``streams/<name>_late`` (appended) — records not joined because they came too late (or, on
  the right, have a null key), with the reason and the watermark they were judged against
  (`lakelog.joins.late`).
- ``_state/joins/<name>/buffer`` (upserted, internal) — left records whose window is open and
  right records that a future left record could still match, one row each. A left record
  leaves it when its window closes, a right record when the watermark passes its time, so the
  state holds the last ``within + lateness`` of the left stream and the last ``lateness`` of
  the right one (in event time, behind the slower input), however long the join runs.

The watermark (`lakelog.consumers.watermarks`, in the consumer's checkpoint) follows the slower
input: the least of the inputs' greatest event times, minus `watermark.lateness` (an input quiet
for `idle_timeout` holds nothing back). A record older than the watermark
before its batch is late. In particular a right record for a left record whose window already
closed is always late (the window closed because the watermark passed ``left_time + within``,
which is at or after the right record's time): it goes to the late table, and **the left
record's unmatched row stays as written** — the output is append-only and never corrected. A
right record older than the watermark is late even if some window it falls in is still open (it
may belong to one already closed; the allowed lateness is the knob for stragglers). A left
record older than the watermark is late too (the right records it could match may already be
gone from the state) and appears in the late table only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from lakelog.consumers import BatchInput, Changes, Consumer, Output, Role
from lakelog.consumers import event_times
from lakelog.consumers.watermarks import Watermark, watermark_of
from lakelog.errors import ConfigError
from lakelog.joins import late, matching
from lakelog.joins.side import TRAILER, Side, check_choice, check_columns, check_name


How = Literal["left", "right", "full"]


@dataclass(frozen=True)
class WindowJoin:
    """`left` records with the `right` records of equal `keys` within `within` after them; `how`
    says whose unmatched records are emitted too (left, right or both: full)."""

    name: str
    left: Side
    right: Side
    #: Topic columns present in both inputs, with the same types.
    keys: tuple[str, ...]
    within: timedelta
    watermark: Watermark
    #: The output column saying whether the left record found a match.
    matched: str = "matched"
    how: How = "left"
    max_records_per_batch: int = 250_000

    def __post_init__(self) -> None:
        check_name("window join", self.name)
        owner = f"window join {self.name}"
        if self.left.topic.name == self.right.topic.name:
            raise ConfigError(f"{owner}: joins two different topics, not one with itself")
        if not self.keys:
            raise ConfigError(f"{owner}: needs at least one key column")
        for key in self.keys:
            for side in (self.left, self.right):
                if key not in side.topic.table_schema.fieldNames():
                    raise ConfigError(f"{owner}: key {key!r} is not a column of "
                                      f"{side.topic.name}")
            if self.left.type_of(key) != self.right.type_of(key):
                raise ConfigError(f"{owner}: key {key!r} has different types in "
                                  f"{self.left.topic.name} and {self.right.topic.name}")
        if self.within < timedelta(0):
            raise ConfigError(f"{owner}: within must be >= 0")
        check_choice(owner, "how", self.how, How)
        check_columns(owner, self.output.schema.fieldNames())

    @property
    def output(self) -> Output:
        schema = T.StructType([
            *self.left.fields, *self.right.fields,
            T.StructField(self.matched, T.BooleanType()), *TRAILER,
        ])
        return Output(f"streams/{self.name}", schema)

    @property
    def late(self) -> Output:
        return Output(f"streams/{self.name}_late", late.SCHEMA, role=Role.LATE)

    @property
    def buffer(self) -> Output:
        return Output(f"_state/joins/{self.name}/buffer", matching.buffer_schema(self),
                      keys=matching.BUFFER_KEY, role=Role.STATE)

    @property
    def consumer(self) -> Consumer:
        return Consumer(
            name=f"join.{self.name}",
            topics=(self.left.topic.name, self.right.topic.name),
            outputs=(self.output, self.late, self.buffer),  # the state last
            transform=self.transform,
            max_records_per_batch=self.max_records_per_batch,
            advance=self.advance,
            idle_tick=self.idle_tick,
            # What the buffer and the rows written hold (`lakelog.consumers.definitions`): a
            # buffered record's window and who is emitted unmatched follow from these.
            definition=(("keys", ", ".join(self.keys)), ("within", str(self.within)),
                        ("how", self.how)),
        )

    def idle_tick(self, state: Mapping[str, Any], now: datetime) -> bool:
        """Whether a quiet join's watermark should move on (`Watermark.idle`): until it is
        `within` past the greatest event time, when no buffered record can match or expire."""
        return self.watermark.idle(state, now, horizon=self.within)

    def advance(self, batch: BatchInput) -> dict[str, Any]:
        """The watermark after this batch: from each input's greatest event time (it follows
        the slower input; a batch cut short by its cap, also its slowest log partition), or the
        idle rule of `Watermark` for an empty batch. The batch's
        `RangeStats` know them when both inputs join on their records' `event_time` and the
        batch took whole files or was read in this process."""
        sides = (self.left, self.right)
        known = self.left.time == self.right.time == "event_time"
        latest = (event_times.from_stats(batch.stats, [s.topic.name for s in sides], batch.cut)
                  if known else None) or event_times.greatest(
            [(s.topic.name, batch.records[s.topic.name], s.time) for s in sides], batch.cut)
        return self.watermark.advance(batch.state, latest.by_input, batch.now, hold=latest.hold)

    def transform(self, batch: BatchInput) -> dict[str, DataFrame | Changes]:
        result = matching.match_batch(
            self,
            batch.records[self.left.topic.name],
            batch.records[self.right.topic.name],
            batch.current(self.buffer),
            before=watermark_of(batch.state),
            after=watermark_of(batch.next_state),
            batch=batch.batch,
            cache=batch.cached,
            together=batch.few(self.buffer),
        )
        return {
            self.output.path: result.joined,
            self.late.path: result.late,
            self.buffer.path: Changes(result.buffered, deletes=result.expired),
        }
