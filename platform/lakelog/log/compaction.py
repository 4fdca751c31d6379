"""Log compaction of a topic (Kafka's ``cleanup.policy=compact``).

Per log partition, the closed files — every file but the active one (the file holding the head),
and only files whose newest record is at least the topic's `Compaction.min_lag` old — are
rewritten keeping, per key, only the record with the highest offset among them. Tombstones
(records matching `Compaction.tombstone`) stay as long as `delete_retention` after they were
appended, so that a consumer catching up still sees the deletion, and then go too.

Offsets of surviving records are unchanged, so the log gets gaps (as in Kafka); the head and the
active file are never touched. The rewrite is one Delta commit against the snapshot it read: an
append racing it does not touch the closed files, and `vacuum` later deletes the old files.
Replaying a compacted changelog from offset 0 rebuilds the same compacted table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import functions as F
from pyspark.sql.window import Window

from lakelog.errors import ConfigError
from lakelog.lake import DataFile, Lake, Snapshot
from lakelog.log.offsets import topic_snapshot
from lakelog.log.topics import Topic
from lakelog.spark import literals


@dataclass(frozen=True)
class CompactionResult:
    topic: str
    files_before: int  # closed files compacted
    files_after: int
    records_before: int
    records_after: int
    tombstones_removed: int
    version: int | None

    @property
    def ratio(self) -> float:
        """Records kept per record in the compacted files (1.0: nothing to compact)."""
        return self.records_after / self.records_before if self.records_before else 1.0


def closed_files(snapshot: Snapshot, topic: Topic, *, now: datetime) -> list[DataFile]:
    """Per log partition, every file but the active one whose records are all old enough."""
    assert topic.compaction is not None
    by_partition: dict[int, list[DataFile]] = {}
    for f in snapshot.files():
        by_partition.setdefault(int(f.partition_values["partition"]), []).append(f)
    cutoff = now - topic.compaction.min_lag
    closed = []
    for files in by_partition.values():
        files.sort(key=lambda f: f.max_values["offset"])
        for f in files[:-1]:
            newest = f.max_values.get("ingest_time")  # no statistics: not known to be old
            if newest is not None and newest <= cutoff:
                closed.append(f)
    return closed


def compact_topic(lake: Lake, topic: Topic, *, now: datetime) -> CompactionResult:
    """Compact the topic's closed files in one commit (see the module docstring)."""
    policy = topic.compaction
    if policy is None:
        raise ConfigError(f"topic {topic.name} is not compacted (it has no compaction policy)")
    snapshot = topic_snapshot(lake, topic)
    files = closed_files(snapshot, topic, now=now)
    before = sum(f.num_records for f in files)
    if not files:
        return CompactionResult(topic.name, 0, 0, 0, 0, 0, None)
    records = lake.read(snapshot, files=files)
    latest = records.withColumn(
        "_rank",
        F.row_number().over(Window.partitionBy("partition", "key").orderBy(F.desc("offset"))),
    ).where(F.col("_rank") == 1).drop("_rank")
    expired = F.lit(False)
    if policy.tombstone:
        cutoff = now - policy.delete_retention
        expired = F.expr(policy.tombstone) & (F.col("ingest_time") < literals.timestamp(cutoff))
    kept = latest.where(~F.coalesce(expired, F.lit(False))).persist()
    try:
        after = kept.count()
        removed_tombstones = latest.where(F.coalesce(expired, F.lit(False))).count()
        if after == before:  # no record superseded, no tombstone expired
            return CompactionResult(topic.name, len(files), len(files), before, before, 0, None)
        ordered = kept.repartition("partition").sortWithinPartitions("partition", "offset")
        version = lake.write(
            snapshot, ordered, remove=files,
            metadata={"lakelog.compaction": {"files": len(files), "records_before": before,
                                             "records_after": after,
                                             "tombstones_removed": removed_tombstones}},
        )
    finally:
        kept.unpersist()
    files_after = sum(1 for f in lake.snapshot(topic.path, version).files()) - (
        len(snapshot.files()) - len(files)
    )
    return CompactionResult(
        topic.name, len(files), files_after, before, after, removed_tombstones, version
    )
