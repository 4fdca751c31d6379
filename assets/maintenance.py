"""The maintenance job: log retention, compaction of compacted topics, squashes of merge-on-read
tables, tombstone purges, vacuum."""

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Optional

import dagster as dg
from pydantic import Field

from lakelog.assets.errors import engine_errors
from lakelog.assets.metadata import retention_metadata
from lakelog.assets.naming import output_key, topic_key
from lakelog.cdc.compacted import CompactedTable, squash_table, purge_tombstones
from lakelog.consumers import Consumer
from lakelog.log.compaction import compact_topic
from lakelog.log.retention import enforce_retention
from lakelog.log.topics import Topic
from lakelog.resources import LakeResource


class RetentionConfig(dg.Config):
    vacuum_after_hours: Optional[int] = Field(
        default=1,
        description="Delete files unreferenced for this long; null skips vacuum. Never 0 while "
        "writers are active: a write moves its files into the table moments before it commits.",
    )


def maintenance_job(
    topics: Mapping[str, Topic],
    consumers: Mapping[str, Consumer],
    compacted: Sequence[CompactedTable] = (),
) -> dg.JobDefinition:
    """Retention removes expired files (never past a consumer's offset), then vacuum deletes them.

    Each topic's result is an observation of the topic asset, so it shows in the asset's history.
    """

    @dg.op(name="enforce_retention")
    def _enforce(
        context: dg.OpExecutionContext, config: RetentionConfig, lake: LakeResource
    ) -> None:
        the_lake = lake.open()
        hours = config.vacuum_after_hours
        vacuum_after = None if hours is None else timedelta(hours=hours)
        for topic in topics.values():
            if not the_lake.exists(topic.path):
                continue
            with engine_errors():
                result = enforce_retention(
                    the_lake, topic, list(consumers.values()), now=datetime.now(timezone.utc),
                    vacuum_after=vacuum_after,
                )
            context.log_event(
                dg.AssetObservation(asset_key=topic_key(topic), metadata=retention_metadata(result))
            )

    @dg.op(name="compact_topics")
    def _compact(context: dg.OpExecutionContext, lake: LakeResource) -> None:
        """Kafka-style log compaction of every topic with a compaction policy."""
        the_lake = lake.open()
        for topic in topics.values():
            if topic.compaction is None or not the_lake.exists(topic.path):
                continue
            with engine_errors():
                result = compact_topic(the_lake, topic, now=datetime.now(timezone.utc))
            context.log_event(
                dg.AssetObservation(
                    asset_key=topic_key(topic),
                    metadata={
                        "compacted_files": result.files_before,
                        "records_before": result.records_before,
                        "records_after": result.records_after,
                        "tombstones_removed": result.tombstones_removed,
                        "compaction_ratio": round(result.ratio, 4),
                    },
                )
            )

    @dg.op(name="squash_tables")
    def _squash(context: dg.OpExecutionContext, lake: LakeResource) -> None:
        """Merge-on-read compacted tables are squashed to one version per key, dropping their
        expired tombstones (the purge after it covers files that overlap no other)."""
        the_lake = lake.open()
        for table in compacted:
            if not table.merge_on_read or not the_lake.exists(table.path):
                continue
            with engine_errors():
                result = squash_table(the_lake, table, now=datetime.now(timezone.utc))
            context.log_event(
                dg.AssetObservation(
                    asset_key=output_key(table.output),
                    metadata={
                        "files_squashed": result.files_squashed,
                        "versions_read": result.versions_read,
                        "rows_written": result.rows_written,
                        "tombstones_purged": result.rows_dropped,
                        "squash_ratio": round(result.ratio, 4),
                    },
                )
            )

    @dg.op(name="purge_tombstones", ins={"after_squash": dg.In(dg.Nothing)})
    def _purge(context: dg.OpExecutionContext, lake: LakeResource) -> None:
        """Tombstones older than their table's retention leave the compacted tables."""
        the_lake = lake.open()
        for table in compacted:
            with engine_errors():
                removed = purge_tombstones(the_lake, table, now=datetime.now(timezone.utc))
            context.log_event(
                dg.AssetObservation(
                    asset_key=output_key(table.output), metadata={"tombstones_purged": removed}
                )
            )

    @dg.job(
        name="maintenance",
        description="Retention and vacuum of every topic's log, compaction of compacted topics, "
        "squashes of merge-on-read tables and tombstone purges of compacted tables.",
    )
    def _maintenance() -> None:
        _enforce()
        _compact()
        _purge(after_squash=_squash())

    return _maintenance
