"""A declared pipeline as a Dagster code location.

`build_definitions(pipeline)` is what a user's own ``definitions.py`` calls (see `lakelog init`):
the same `lakelog.pipeline.Pipeline` object the CLI reads, so the two cannot disagree. Importing
this module builds nothing; the demo shop's location is `lakelog.assets.definitions`.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg

from lakelog.assets.aggregates import outbox_relay_asset, replay_check
from lakelog.assets.cdc import capture_asset, reconciliation_check
from lakelog.assets.change_streams import change_stream_asset
from lakelog.assets.consumers import consumer_asset, consumer_job
from lakelog.assets.erasure import ERASE_JOB, erasure_asset, erasure_check
from lakelog.assets.groups import members_job
from lakelog.assets.maintenance import maintenance_job
from lakelog.assets.naming import capture_key, op_name
from lakelog.assets.pipeline import FRESHNESS, LiveGraph, fresh, gates_of
from lakelog.assets.quality import quality_checks
from lakelog.assets.replay import replay_asset
from lakelog.assets.topics import topic_assets
from lakelog.assets.views import lakelog_tables, model_assets
from lakelog.pipeline import Pipeline
from lakelog.resources import build_resources
from lakelog.sensors import audit_schedule, maintenance_schedule, pipeline_sensor
from lakelog.sensors.pipeline import INTERVAL_S


@dataclass(frozen=True)
class Location:
    """A pipeline's code location, and the live graph its pipeline job and sensor run."""

    defs: dg.Definitions
    live: LiveGraph


@contextlib.contextmanager
def lakelogs_own_choices() -> Iterator[None]:
    """Dagster's beta and preview warnings about what lakelog's definitions use (the backfill
    policy of its hourly assets, ...) not shown: lakelog chose those, its users cannot act on
    them (`dagster dev` printed them at every load of a code location)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        warnings.simplefilter("ignore", dg.PreviewWarning)
        yield


def build_location(
    pipeline: Pipeline,
    *,
    resources: Mapping[str, Any] | None = None,
    pipeline_interval_seconds: int = INTERVAL_S,
) -> Location:
    """`build_definitions`, with the live graph the runner (`lakelog.assets.runner`) needs."""
    with lakelogs_own_choices():
        return _built(pipeline, resources, pipeline_interval_seconds)


def _built(
    pipeline: Pipeline, resources: Mapping[str, Any] | None, pipeline_interval_seconds: int,
) -> Location:
    topics, consumers = pipeline.all_topics, pipeline.all_consumers
    sources, aggregates = pipeline.sources, pipeline.aggregates
    checks = quality_checks({t.name: t for t in pipeline.topics}, sources)
    gates = gates_of(consumers, checks)
    consumer_assets = {
        name: fresh(consumer_asset(c, topics, gates=gates[name]), FRESHNESS)
        for name, c in consumers.items()
    }
    jobs = {name: consumer_job(consumers[name], a) for name, a in consumer_assets.items()}
    member_jobs = [members_job(c, topics, gates=gates[name])
                   for name, c in consumers.items() if c.members]
    captures = {s.server_name: capture_asset(s.server_name, s.tables) for s in sources}
    capture_jobs = {
        name: dg.define_asset_job(op_name("capture", name), selection=[capture_key(name)])
        for name in captures
    }
    landed_by = {t: [capture_key(s.server_name)] for s in sources for t in s.changelogs}
    tables = lakelog_tables(topics, consumers)
    models = pipeline.model_graph
    live_assets = (
        *captures.values(),
        topic_assets(list(pipeline.landed_topics.values()), landed_by),
        *consumer_assets.values(),
        *(fresh(outbox_relay_asset(a), FRESHNESS) for a in aggregates),
        *(fresh(change_stream_asset(s), FRESHNESS) for s in pipeline.published_streams),
        *(fresh(m, FRESHNESS) for m in (model_assets(models, tables) if models else ())),
    )
    audits = [
        *(replay_check(a, topics) for a in aggregates),
        *(reconciliation_check(s.server_name, s.tables, table, s.compacted[table.name],
                               s.consumer_of(table.name), topics)
          for s in sources for table in s.tables),
    ]
    live = LiveGraph(
        live_assets, pipeline.landed_topics, consumers, gates, sources, aggregates, models,
        change_streams=pipeline.published_streams,
        checks=frozenset(k for d in (*checks, *live_assets) for k in d.check_keys),
        audits=frozenset(k for a in audits for k in a.check_keys),
    )
    pipeline_job = live.job()
    maintenance = maintenance_job(topics, consumers, pipeline.compacted_tables)
    audit = [live.audit_job()] if audits else []
    erasure = pipeline.subject_columns != ()
    defs = dg.Definitions(
        assets=[*live_assets, *(replay_asset(w, topics) for w in pipeline.windows),
                *([erasure_asset(pipeline)] if erasure else [])],
        asset_checks=[*checks, *audits, *([erasure_check(pipeline)] if erasure else [])],
        jobs=[pipeline_job, *audit, *jobs.values(), *member_jobs, *capture_jobs.values(),
              maintenance,
              *([ERASE_JOB] if erasure else [])],
        sensors=[pipeline_sensor(live, pipeline_job,
                                 minimum_interval_seconds=pipeline_interval_seconds)],
        schedules=[maintenance_schedule(maintenance), *(audit_schedule(j) for j in audit)],
        resources=dict(resources) if resources is not None else build_resources("local"),
    )
    return Location(defs, live)


def build_definitions(
    pipeline: Pipeline,
    *,
    resources: Mapping[str, Any] | None = None,
    pipeline_interval_seconds: int = INTERVAL_S,
) -> dg.Definitions:
    """Everything Dagster needs for `pipeline`; `resources` default to the local ones.

    Each captured source adds its capture asset, its changelog topics, the consumers of its
    compacted and history tables, and a reconciliation check per compacted table. Each
    event-sourced aggregate adds its consumer, its outbox relay and its replay check. Each change
    stream adds the relay that publishes its table's changes to its topic. Each windowed aggregate
    adds its consumer and its hourly replay asset (the unit of backfill); each join its
    consumer. The SQL models folder adds one asset per model; every topic, compacted and
    history table gets its blocking data-quality checks, which also gate its consumers across
    runs. With `Pipeline.subject_columns`, the ``_erasures`` record asset, its check and the
    ``erase_subject`` job (the subject as config) erase a data subject. Everything but the
    replays and the erasures is kept live by the `pipeline` job and its sensor, ticking
    every `pipeline_interval_seconds`; derived assets get the `FRESHNESS` policy. The
    `microbatch_<consumer>` and `capture_<source>` jobs are for running one by hand; each
    consumer group (`Pipeline.groups`) adds its ``members_<consumer>`` job, one partition per
    member, whose runs share the consumer's log partitions.
    """
    return build_location(pipeline, resources=resources,
                          pipeline_interval_seconds=pipeline_interval_seconds).defs

