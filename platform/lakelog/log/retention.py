"""Log retention: advance each log partition's start offset by removing its oldest files.

Like Kafka, retention deletes whole segments (here: data files) from the start of a log
partition, never the active one (the file holding the head), and never a file with records
some consumer has not committed past — unless the topic's retention ignores consumers. The
removal is one Delta commit; `vacuum` then deletes the files from storage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from lakelog.consumers import Consumer
from lakelog.consumers import units
from lakelog.lake import DataFile, Lake, Snapshot
from lakelog.log.offsets import partition_states, topic_snapshot
from lakelog.log.topics import Topic


@dataclass(frozen=True)
class RetentionResult:
    topic: str
    removed_files: int
    removed_records: int
    removed_bytes: int
    start_offsets: Mapping[int, int]  # log-start offset per log partition afterwards
    version: int | None
    vacuumed: int = 0


def consumer_floors(lake: Lake, topic: Topic, consumers: Sequence[Consumer]) -> dict[int, int]:
    """Per log partition, the lowest offset committed by a consumer of `topic` (a consumer that
    never committed and starts at the earliest offset holds the whole log)."""
    floors: dict[int, int] = {}
    for consumer in consumers:
        if topic.name not in consumer.topics:
            continue
        committed = units.load_all(lake, consumer, {topic.name: topic}).committed
        for p in range(topic.partitions):
            offset = committed.get((topic.name, p), 0 if consumer.start == "earliest" else None)
            if offset is not None:
                floors[p] = min(floors.get(p, offset), offset)
    return floors


def expired_files(
    snapshot: Snapshot, topic: Topic, *, now: datetime, floors: Mapping[int, int] | None
) -> list[DataFile]:
    """The files retention removes: per log partition, the longest expired prefix."""
    policy = topic.retention
    by_partition: dict[int, list[DataFile]] = {}
    for f in snapshot.files():
        by_partition.setdefault(int(f.partition_values["partition"]), []).append(f)
    expired: list[DataFile] = []
    for p, files in by_partition.items():
        files.sort(key=lambda f: f.min_values["offset"])
        remaining = sum(f.size for f in files)
        for f in files[:-1]:  # the newest file is the active segment
            too_old = policy.time is not None and f.max_values["ingest_time"] < now - policy.time
            too_big = policy.bytes is not None and remaining > policy.bytes
            floor = None if floors is None else floors.get(p)
            consumed = floor is None or f.max_values["offset"] < floor
            if not (too_old or too_big) or not consumed:
                break
            expired.append(f)
            remaining -= f.size
    return expired


def enforce_retention(
    lake: Lake,
    topic: Topic,
    consumers: Sequence[Consumer],
    *,
    now: datetime,
    vacuum_after: timedelta | None = timedelta(hours=1),
) -> RetentionResult:
    """Remove expired files in one commit, then vacuum files unreferenced for `vacuum_after`.

    Vacuum must not run with a zero window while writers are active: a write moves its files
    into the table moments before it commits them.
    """
    snapshot = topic_snapshot(lake, topic)
    floors = None if topic.retention.ignore_consumers else consumer_floors(lake, topic, consumers)
    expired = expired_files(snapshot, topic, now=now, floors=floors)
    version = None
    if expired:
        version = lake.write(
            snapshot,
            None,
            remove=expired,
            metadata={"lakelog.retention": {"files": len(expired)}},
        )
    vacuumed = lake.vacuum(topic.path, retention=vacuum_after) if vacuum_after is not None else []
    after = partition_states(lake.snapshot(topic.path), topic.partitions)
    return RetentionResult(
        topic=topic.name,
        removed_files=len(expired),
        removed_records=sum(f.num_records for f in expired),
        removed_bytes=sum(f.size for f in expired),
        start_offsets={p: s.start_offset for p, s in after.items()},
        version=version,
        vacuumed=len(vacuumed),
    )
