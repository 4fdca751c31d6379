"""The log sensor of a consumer: offsets beyond its committed ones become a microbatch run."""


import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import dagster as dg

from lakelog import checkpoints
from lakelog.assets.naming import CONSUMER_TAG, op_name
from lakelog.consumers import Consumer, lag
from lakelog.resources import LakeResource
from lakelog.sensors.cursors import digest
from lakelog.topics import Topic

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )


def log_sensor(
    consumer: Consumer,
    topics: Mapping[str, Topic],
    job: "UnresolvedAssetJobDefinition",
    *,
    minimum_interval_seconds: int = 30,
) -> dg.SensorDefinition:
    """Requests `job` when a log partition the consumer reads has a head past its committed offset.

    The cursor is the heads ``{"topic/partition": head}`` requested last: while those heads are
    unchanged no new run is requested, even if the requested run is still queued or running
    (it consumes up to the heads it finds, which are at least these). The run key is a digest of
    the heads, so the same heads are never requested twice.

    A consumer with an idle tick (a windowed consumer's watermark on a quiet stream) also gets a
    run when it is caught up but its tick is due; the run key then names the tick's minute.
    """
    reads = {name: topics[name] for name in consumer.topics}

    @dg.sensor(
        name=op_name("offsets", consumer.name),
        job=job,
        minimum_interval_seconds=minimum_interval_seconds,
        description=f"Requests microbatches of {consumer.name} when its topics have new offsets.",
    )
    def _offsets(context: dg.SensorEvaluationContext, lake: LakeResource) -> dg.SensorResult:
        the_lake = lake.open()
        lags = lag(the_lake, consumer, reads)
        heads = {f"{x.topic}/{x.partition}": x.head for x in lags}
        if not any(x.lag > 0 for x in lags):
            now = datetime.now(timezone.utc)
            if consumer.idle_tick and consumer.idle_tick(
                checkpoints.load(the_lake, consumer.name).state, now
            ):
                return dg.SensorResult(
                    run_requests=[
                        dg.RunRequest(
                            run_key=f"{consumer.name}:idle:{now:%Y%m%dT%H%M}",
                            tags={CONSUMER_TAG: consumer.name},
                        )
                    ]
                )
            return dg.SensorResult(skip_reason=f"{consumer.name} is caught up")
        if context.cursor and json.loads(context.cursor) == heads:
            return dg.SensorResult(skip_reason="a run was already requested for these offsets")
        return dg.SensorResult(
            run_requests=[
                dg.RunRequest(
                    run_key=f"{consumer.name}:{digest(heads)}", tags={CONSUMER_TAG: consumer.name}
                )
            ],
            cursor=json.dumps(heads, sort_keys=True),
        )

    return _offsets
