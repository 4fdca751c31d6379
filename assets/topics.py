"""Topic assets: `log/<topic>` per declared topic, materialized by ingesting its landing files.

All topics are one multi-asset, `ingest`, whose step ingests the selected topics concurrently
(one exactly-once batch each): topics are independent tables, so their Spark jobs and commits
overlap instead of paying each step's latency one topic after another, as one asset per topic
did. Any subset can be materialized, from the UI as from the pipeline sensor.
"""

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Iterator, Optional

import dagster as dg
from pydantic import Field

from lakelog.assets.errors import engine_errors
from lakelog.assets.metadata import partition_table
from lakelog.assets.naming import INGEST_POOL, topic_key
from lakelog.assets.quality import checks_follow, preload_checks
from lakelog.lake import Lake
from lakelog.log.ingest import IngestResult, ingest
from lakelog.log.offsets import ensure_topic_table, partition_states
from lakelog.log.topics import Topic
from lakelog.quality import names
from lakelog.resources import LakeResource, SparkResource

INGEST = "ingest"


class IngestConfig(dg.Config):
    max_files: Optional[int] = Field(
        default=None,
        description="Ingest at most this many landing files per topic (oldest name first).",
    )


def ingest_metadata(lake: Lake, topic: Topic, result: IngestResult) -> dict:
    states = partition_states(lake.snapshot(topic.path), topic.partitions)
    return {
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


def topic_assets(
    topics: Sequence[Topic], landed_by: Mapping[str, Sequence[dg.AssetKey]] | None = None
) -> dg.AssetsDefinition:
    """The logs of `topics`, one asset each, ingested by one step.

    `landed_by` are, per topic name, the assets that land its files (a capture for a changelog),
    if lakelog's own.
    """
    landed_by = landed_by or {}
    by_key = {topic_key(t): t for t in topics}
    specs = [
        dg.AssetSpec(
            key,
            deps=list(landed_by.get(t.name, ())),
            group_name="log",
            kinds={"spark", "delta"},
            description=f"Append-only {'compacted ' if t.compaction else ''}log of topic "
            f"{t.name} ({t.partitions} log partitions).",
        )
        for key, t in by_key.items()
    ]

    @dg.multi_asset(specs=specs, name=INGEST, can_subset=True, pool=INGEST_POOL)
    def _ingest(
        context: dg.AssetExecutionContext, config: IngestConfig, spark: SparkResource,
        lake: LakeResource,
    ) -> Iterator[dg.MaterializeResult]:
        checks = checks_follow(context)
        if checks & names.WHOLE_TABLE_CHECKS:  # validated whatever the ingest finds
            preload_checks()
        planned = preload_checks if checks else None  # the checks will see the new records
        the_lake, session = lake.open(), spark.session()
        chosen = [t for key, t in by_key.items() if key in context.selected_asset_keys]

        def one(topic: Topic) -> IngestResult:
            result = ingest(the_lake, session, topic, now=datetime.now(timezone.utc),
                            max_files=config.max_files, on_plan=planned)
            ensure_topic_table(the_lake, topic)
            return result

        with engine_errors(), ThreadPoolExecutor(max_workers=max(len(chosen), 1)) as pool:
            futures = [(t, pool.submit(one, t)) for t in chosen]
            failed = None
            for topic, future in futures:
                if future.exception() is not None:  # the others are reported all the same
                    failed = failed or future.exception()
                    continue
                result = future.result()
                context.log.info(f"ingest of {topic.name}: {result.as_dict()}")
                yield dg.MaterializeResult(asset_key=topic_key(topic),
                                           metadata=ingest_metadata(the_lake, topic, result))
            if failed is not None:
                raise failed

    return _ingest


def topic_asset(topic: Topic, deps: Sequence[dg.AssetKey] = ()) -> dg.AssetsDefinition:
    """The one topic's log, ingested by a step of its own."""
    return topic_assets([topic], {topic.name: deps})
