"""How far behind a consumer is: its lag per log partition, in records and in time, from Delta
metadata alone.

Sensors ask this on every tick, so it reads no rows and starts no Spark: the committed offsets
come from the checkpoint, the heads and the ingest times from the topics' file statistics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from lakelog.consumers import units
from lakelog.consumers.checkpoints import Checkpoint, TopicPartition
from lakelog.consumers.consumer import Consumer
from lakelog.lake import Lake, Snapshot
from lakelog.log.offsets import partition_states
from lakelog.log.topics import Topic


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int
    head: int

    @property
    def lag(self) -> int:
        return self.head - self.committed


def positions(
    lake: Lake, topics: Mapping[str, Topic], logs: Mapping[str, Snapshot] | None = None,
) -> dict[TopicPartition, tuple[int, int]]:
    """(log-start, head) per topic and log partition; a topic never written has none. `logs`:
    snapshots of the topics' logs the caller holds already (by topic name), not loaded again."""
    found = {}
    for name, topic in topics.items():
        log = (logs or {}).get(name)
        if log is None:
            if not lake.exists(topic.path):
                continue
            log = lake.snapshot(topic.path)
        for p, state in partition_states(log, topic.partitions).items():
            found[(name, p)] = (state.start_offset, state.head)
    return found


def lag(
    lake: Lake, consumer: Consumer, topics: Mapping[str, Topic], *,
    checkpoint: Checkpoint | None = None,
) -> list[PartitionLag]:
    """Committed offset and head per topic and log partition. `checkpoint`: the consumer's
    units read together (`units.load_all`), when the caller holds them already."""
    topic_map = consumer.topics_in(topics)
    if checkpoint is None:
        checkpoint = units.load_all(lake, consumer, topic_map)
    rows = []
    for (topic, partition), (log_start, head) in sorted(positions(lake, topic_map).items()):
        default = head if consumer.start == "latest" else log_start
        committed = checkpoint.committed.get((topic, partition), default)
        rows.append(PartitionLag(topic, partition, committed, head))
    return rows


@dataclass(frozen=True)
class Backlog:
    lags: tuple[PartitionLag, ...]
    #: The `ingest_time` of the oldest record not consumed yet; None when caught up. Read from
    #: file statistics: the oldest ingest time of a file holding an unconsumed offset, which is
    #: exact when an append writes one ingest time per file (lakelog's appends do).
    oldest: datetime | None

    @property
    def records(self) -> int:
        return sum(max(x.lag, 0) for x in self.lags)

    def seconds(self, now: datetime) -> float:
        """Age of the oldest unconsumed record at `now` (0 when caught up)."""
        if self.oldest is None:
            return 0.0
        return max((now - self.oldest).total_seconds(), 0.0)


def _aware(value: datetime) -> datetime:
    """Delta file statistics are UTC (delta-rs gives them tz-aware; a naive one is UTC too)."""
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def backlog(lake: Lake, consumer: Consumer, topics: Mapping[str, Topic]) -> Backlog:
    """The consumer's lag per topic and log partition, and when its oldest unconsumed record was
    appended."""
    lags = tuple(lag(lake, consumer, topics))
    behind: dict[str, dict[int, int]] = {}
    for x in lags:
        if x.lag > 0:
            behind.setdefault(x.topic, {})[x.partition] = x.committed
    oldest: datetime | None = None
    for name, committed in behind.items():
        for f in lake.snapshot(topics[name].path).files():
            start = committed.get(int(f.partition_values["partition"]))
            top, at = f.max_values.get("offset"), f.min_values.get("ingest_time")
            if start is None or top is None or top < start or at is None:
                continue
            at = _aware(at)
            oldest = at if oldest is None or at < oldest else oldest
    return Backlog(lags, oldest)
