"""Topic assets: one per declared topic, materialized by ingesting its landing-zone files."""

from datetime import datetime, timezone
from collections.abc import Sequence
from typing import Optional

import dagster as dg
from pydantic import Field

from lakelog.assets.errors import engine_errors
from lakelog.assets.metadata import partition_table
from lakelog.assets.naming import TOPIC_TAG, ingest_pool, topic_key
from lakelog.ingest import ingest
from lakelog.log import ensure_topic_table, partition_states
from lakelog.resources import LakeResource, SparkResource
from lakelog.topics import Topic


class IngestConfig(dg.Config):
    max_files: Optional[int] = Field(
        default=None, description="Ingest at most this many landing files (oldest name first)."
    )


def topic_asset(topic: Topic, deps: Sequence[dg.AssetKey] = ()) -> dg.AssetsDefinition:
    """The topic's log `log/<name>`: ingesting materializes it, as one exactly-once batch.

    `deps` are the assets that land its files (a capture for a changelog), if lakelog's own.
    """
    kind = "compacted " if topic.compaction else ""

    @dg.asset(
        key=topic_key(topic),
        deps=list(deps),
        group_name="log",
        kinds={"spark", "delta"},
        description=f"Append-only {kind}log of topic {topic.name} "
        f"({topic.partitions} log partitions).",
        op_tags={TOPIC_TAG: topic.name},
        pool=ingest_pool(topic),
    )
    def _ingest(
        context: dg.AssetExecutionContext, config: IngestConfig, spark: SparkResource,
        lake: LakeResource,
    ) -> dg.MaterializeResult:
        the_lake = lake.open()
        with engine_errors():
            result = ingest(
                the_lake, spark.session(), topic, now=datetime.now(timezone.utc),
                max_files=config.max_files,
            )
            ensure_topic_table(the_lake, topic)
        context.log.info(f"ingest of {topic.name}: {result.as_dict()}")
        states = partition_states(the_lake.snapshot(topic.path), topic.partitions)
        return dg.MaterializeResult(
            metadata={
                "files": len(result.files),
                "records_read": result.read,
                "records_appended": result.appended,
                "duplicates": result.duplicates,
                "dead_letters": result.dead_letters,
                "batch": result.batch,
                "resumed": result.resumed,
                "log_partitions": partition_table(states),
                "head_total": sum(s.head for s in states.values()),
                "dagster/row_count": sum(s.records for s in states.values()),
            }
        )

    return _ingest
