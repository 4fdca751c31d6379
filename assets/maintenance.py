"""The maintenance job: log retention and vacuum for every topic."""

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Optional

import dagster as dg
from pydantic import Field

from lakelog.assets.errors import engine_errors
from lakelog.assets.metadata import retention_metadata
from lakelog.assets.naming import topic_key
from lakelog.consumers import Consumer
from lakelog.resources import LakeResource
from lakelog.retention import enforce_retention
from lakelog.topics import Topic


class RetentionConfig(dg.Config):
    vacuum_after_hours: Optional[int] = Field(
        default=1,
        description="Delete files unreferenced for this long; null skips vacuum. Never 0 while "
        "writers are active: a write moves its files into the table moments before it commits.",
    )


def maintenance_job(
    topics: Mapping[str, Topic], consumers: Mapping[str, Consumer]
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

    @dg.job(name="maintenance", description="Retention and vacuum of every topic's log.")
    def _maintenance() -> None:
        _enforce()

    return _maintenance
