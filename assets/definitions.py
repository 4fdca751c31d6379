"""The code location: the demo shop's topics, consumers and captured database as assets,
checks, the pipeline job and its sensor, and a schedule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from lakelog.assets.carts import orders_relay_asset, replay_check
from lakelog.assets.cdc import capture_asset, reconciliation_check
from lakelog.assets.consumers import consumer_asset, consumer_job
from lakelog.assets.maintenance import maintenance_job
from lakelog.assets.naming import capture_key, op_name
from lakelog.assets.pipeline import FRESHNESS, Pipeline, fresh, gates_of
from lakelog.assets.quality import quality_checks
from lakelog.assets.replay import replay_asset
from lakelog.assets.views import default_models_dir, lakelog_tables, model_assets
from lakelog.assets.topics import topic_assets
from lakelog.captured import CapturedSource
from lakelog.carts import CartAggregate
from lakelog.consumers import Consumer
from lakelog.demo.shop import CARTS, CONSUMERS, TOPICS
from lakelog.demo.shop_cdc import SHOP
from lakelog.demo.shop_joins import JOINS
from lakelog.demo.shop_windows import WINDOWS
from lakelog.resources import build_resources
from lakelog.sensors import maintenance_schedule, pipeline_sensor
from lakelog.topics import Topic
from lakelog.views import load_models
from lakelog.windows import WindowedAggregate


def build_definitions(
    topics: Mapping[str, Topic],
    consumers: Mapping[str, Consumer],
    *,
    sources: Sequence[CapturedSource] = (),
    aggregates: Sequence[CartAggregate] = (),
    windows: Sequence[WindowedAggregate] = (),
    views_dir: str | None = None,
    resources: Mapping[str, Any] | None = None,
    pipeline_interval_seconds: int = 10,
) -> dg.Definitions:
    """Everything Dagster needs for a declared pipeline; `resources` default to the local ones.

    Each captured source adds its capture asset, its changelog topics, the consumers of its
    compacted and history tables, and a reconciliation check per compacted table. Each cart
    aggregate (whose consumer is among `consumers`) adds its orders relay and replay check.
    Each windowed aggregate adds its consumer and its hourly replay asset (the unit of backfill).
    `views_dir` (a `dbt_like_views/` folder) adds one asset per SQL model; every topic, compacted
    and history table gets its blocking data-quality checks, which also gate its consumers
    across runs. Everything but the replays is kept live by the `pipeline` job and its sensor,
    ticking every `pipeline_interval_seconds`; derived assets get the `FRESHNESS` policy. The
    `microbatch_<consumer>` and `capture_<source>` jobs are for running one by hand.
    """
    declared = dict(topics)
    topics = {**topics, **{n: t for s in sources for n, t in s.changelogs.items()}}
    consumers = {
        **consumers,
        **{n: c for s in sources for n, c in s.consumers.items()},
        **{w.consumer.name: w.consumer for w in windows},
    }
    checks = quality_checks(declared, sources)
    gates = gates_of(consumers, checks)
    consumer_assets = {
        name: fresh(consumer_asset(c, topics, gates=gates[name]), FRESHNESS)
        for name, c in consumers.items()
    }
    jobs = {name: consumer_job(consumers[name], a) for name, a in consumer_assets.items()}
    captures = {s.server_name: capture_asset(s.server_name, s.tables) for s in sources}
    capture_jobs = {
        name: dg.define_asset_job(op_name("capture", name), selection=[capture_key(name)])
        for name in captures
    }
    landed_by = {t: [capture_key(s.server_name)] for s in sources for t in s.changelogs}
    compacted = [t for s in sources for t in s.compacted.values()]
    tables = lakelog_tables(topics, consumers)
    models = load_models(views_dir, tables.keys()) if views_dir else None
    live = (
        *captures.values(),
        topic_assets(list(topics.values()), landed_by),
        *consumer_assets.values(),
        *(fresh(orders_relay_asset(a), FRESHNESS) for a in aggregates),
        *(fresh(m, FRESHNESS) for m in (model_assets(models, tables) if models else ())),
    )
    pipeline = Pipeline(live, topics, consumers, gates, tuple(sources), tuple(aggregates), models)
    pipeline_job = pipeline.job()
    maintenance = maintenance_job(topics, consumers, compacted)
    return dg.Definitions(
        assets=[*live, *(replay_asset(w, topics) for w in windows)],
        asset_checks=[
            *checks,
            *(replay_check(a, topics) for a in aggregates),
            *(reconciliation_check(s.server_name, s.tables, table, s.compacted[table.name],
                                   s.consumer_of(table.name), topics)
              for s in sources for table in s.tables),
        ],
        jobs=[pipeline_job, *jobs.values(), *capture_jobs.values(), maintenance],
        sensors=[pipeline_sensor(pipeline, pipeline_job,
                                 minimum_interval_seconds=pipeline_interval_seconds)],
        schedules=[maintenance_schedule(maintenance)],
        resources=dict(resources) if resources is not None else build_resources("local"),
    )


def shop_definitions(resources: Mapping[str, Any] | None = None) -> dg.Definitions:
    """The demo shop: its topics, consumers and joins, captured database, carts, windows and
    SQL models."""
    return build_definitions(
        TOPICS,
        {**CONSUMERS, **{j.consumer.name: j.consumer for j in JOINS.values()}},
        sources=[SHOP],
        aggregates=[CARTS],
        windows=list(WINDOWS.values()),
        views_dir=str(default_models_dir()),
        resources=resources,
    )


defs = shop_definitions()
