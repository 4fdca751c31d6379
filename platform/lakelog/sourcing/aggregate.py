"""What the engine asks of an event-sourced aggregate, and what its replay check reports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from pyspark.sql import DataFrame

from lakelog.consumers import Consumer, Output
from lakelog.lake import Lake
from lakelog.log.topics import Topic

Rebuild = Literal["full_replay", "snapshot_replay"]
REBUILDS: tuple[Rebuild, ...] = ("full_replay", "snapshot_replay")


@dataclass(frozen=True)
class Difference:
    key: str  # the aggregate instance (e.g. a cart id)
    rebuild: Rebuild
    expected: Mapping[str, Any] | None  # the rebuilt state; None: the rebuild has no such key
    found: Mapping[str, Any] | None  # the live state; None: the live table has no such key


@dataclass(frozen=True)
class ReplayCheck:
    """The live state compared with the state rebuilt by replaying the command log."""

    batch: int  # the consumer batch the live state is at (-1: nothing consumed yet)
    offsets: Mapping[int, int]  # per log partition, the committed offset the rebuilds stop at
    states: int  # instances in the live state
    from_snapshots: int  # instances the snapshot replay started from a snapshot
    unverifiable: Mapping[Rebuild, int]  # instances whose needed commands retention removed
    mismatches: Mapping[Rebuild, int]
    differences: tuple[Difference, ...] = field(default_factory=tuple)  # the first few

    @property
    def passed(self) -> bool:
        return not any(self.mismatches.values())


@runtime_checkable
class Aggregate(Protocol):
    """An aggregate folded from the command topic `topic` by its `consumer`.

    The consumer's microbatch writes `state` (the current state, keyed) and `outbox` (the events
    it decided, each row carrying the consumer ``batch`` that decided it) exactly once. The relay
    (`lakelog.sourcing.publish_outbox`) publishes the outbox to `outbox_topic`.
    """

    @property
    def name(self) -> str: ...

    @property
    def topic(self) -> str: ...

    @property
    def consumer(self) -> Consumer: ...

    @property
    def state(self) -> Output: ...

    @property
    def outbox(self) -> Output: ...

    @property
    def outbox_topic(self) -> Topic: ...

    #: Columns of `outbox_records` the relay orders the published records by (dropped after).
    @property
    def outbox_order(self) -> tuple[str, ...]: ...

    def outbox_records(self, rows: DataFrame, *, now: datetime) -> DataFrame:
        """Outbox rows as `outbox_topic` records: the envelope without partition and offset,
        plus the `outbox_order` columns."""
        ...

    def verify(self, lake: Lake, commands: Topic) -> ReplayCheck:
        """Rebuild the state from the command log and compare it with the live state; raises
        `lakelog.errors.ConsumerBusyError` while a batch is in progress."""
        ...
