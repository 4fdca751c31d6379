"""The code location: the demo shop's topics and consumers as assets, sensors and a schedule."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from lakelog.assets.consumers import consumer_asset, consumer_job
from lakelog.assets.maintenance import maintenance_job
from lakelog.assets.topics import topic_asset
from lakelog.consumers import Consumer
from lakelog.demo.shop import CONSUMERS, TOPICS
from lakelog.resources import build_resources
from lakelog.sensors import landing_sensor, log_sensor, maintenance_schedule
from lakelog.topics import Topic


def build_definitions(
    topics: Mapping[str, Topic],
    consumers: Mapping[str, Consumer],
    *,
    resources: Mapping[str, Any] | None = None,
) -> dg.Definitions:
    """Everything Dagster needs for a declared pipeline; `resources` default to the local ones."""
    consumer_assets = {name: consumer_asset(c, topics) for name, c in consumers.items()}
    jobs = {name: consumer_job(consumers[name], a) for name, a in consumer_assets.items()}
    maintenance = maintenance_job(topics, consumers)
    return dg.Definitions(
        assets=[*(topic_asset(t) for t in topics.values()), *consumer_assets.values()],
        jobs=[*jobs.values(), maintenance],
        sensors=[
            landing_sensor(topics),
            *(log_sensor(consumers[name], topics, job) for name, job in jobs.items()),
        ],
        schedules=[maintenance_schedule(maintenance)],
        resources=dict(resources) if resources is not None else build_resources("local"),
    )


defs = build_definitions(TOPICS, CONSUMERS)
