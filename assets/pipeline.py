"""The pipeline job: every asset that is kept live, advanced by one run per sensor tick.

Live are the captures, the topics (changelogs, relayed topics and change streams too), the consumer outputs and
the SQL models — not the hourly `replays/*`, which are backfilled by hand. One run per tick
instead of one per topic and consumer: Dagster's launch cost is paid once, and with the
threaded executor (`lakelog.assets.executor`) every step of a run shares one process and so one
Spark Connect session, two steps at a time where the graph allows.

Time partitions: the hourly SQL models (``partition_by='hour'``) are partitioned by `HOURLY`,
everything else in the job is not. Dagster 1.13 accepts one partitions definition per asset job
besides unpartitioned assets (the job is then partitioned by it, and the unpartitioned assets'
materializations carry no partition), so no split is needed: a run that includes an hourly
model is launched for the newest hour. An incremental model applies all of its inputs' changes
whichever hour it runs for (`lakelog.views.materialize.run_model`); the run's own hour is merely
recomputed besides, a read pruned to that hour, and every other hour the changes touched is
reported as materialized too. A run without an hourly model has no partition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

import dagster as dg

from lakelog.assets.executor import threaded_executor
from lakelog.assets.naming import capture_key, topic_key
from lakelog.assets.partitions import HOUR_KEY
from lakelog.cdc.captured import CapturedSource
from lakelog.cdc.change_streams import ChangeStream
from lakelog.consumers import Consumer
from lakelog.log.topics import Topic
from lakelog.sourcing import Aggregate
from lakelog.views import ModelGraph

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

PIPELINE = "pipeline"
AUDIT = "audit"

#: Derived assets not materialized for this long show as failing freshness in the UI: well
#: past the one-minute target, so it flags a stuck pipeline rather than a slow tick. A quiet
#: input (no new records, no idle tick) leaves its derived assets stale too: nothing flows.
FRESHNESS = dg.FreshnessPolicy.time_window(
    fail_window=timedelta(minutes=5), warn_window=timedelta(minutes=2)
)


def fresh(asset: dg.AssetsDefinition, policy: dg.FreshnessPolicy) -> dg.AssetsDefinition:
    """`asset` with `policy` on each of its assets."""
    return asset.map_asset_specs(lambda spec: spec.replace_attributes(freshness_policy=policy))


@dataclass(frozen=True)
class LiveGraph:
    """What the pipeline job keeps live, as its sensor and the runner need it: the assets, and
    the declarations behind them that say from metadata alone which have new input."""

    assets: tuple[dg.AssetsDefinition, ...]
    #: Topics ingested from the landing zone (declared topics and changelogs), by name.
    topics: Mapping[str, Topic]
    consumers: Mapping[str, Consumer]
    #: Per consumer, the blocking checks of the tables it reads (`lakelog.assets.gates`).
    gates: Mapping[str, tuple[dg.AssetCheckKey, ...]] = field(default_factory=dict)
    sources: tuple[CapturedSource, ...] = ()
    aggregates: tuple[Aggregate, ...] = ()
    models: ModelGraph | None = None
    #: Tables whose changes are published to a topic (`lakelog.cdc.change_streams`).
    change_streams: tuple[ChangeStream, ...] = ()
    #: The checks a pipeline run evaluates with the assets it selects: the blocking ones that
    #: gate consumers, and the models' warnings.
    checks: frozenset[dg.AssetCheckKey] = frozenset()
    #: Checks that audit what the pipeline keeps (a rebuild compared with the live state, a table
    #: with its source): not run by the pipeline job, but by the `audit` job on a schedule.
    audits: frozenset[dg.AssetCheckKey] = frozenset()

    @property
    def keys(self) -> frozenset[dg.AssetKey]:
        return frozenset(k for a in self.assets for k in a.keys)

    @property
    def inputs(self) -> frozenset[dg.AssetKey]:
        """The assets that take input from outside the lake: the topics ingested from the
        landing zone and the captures of sources."""
        return frozenset({*(topic_key(t) for t in self.topics.values()),
                          *(capture_key(s.server_name) for s in self.sources)}) & self.keys

    @property
    def partitioned(self) -> frozenset[dg.AssetKey]:
        return frozenset(k for a in self.assets if a.partitions_def is not None for k in a.keys)

    def job(self, audited: bool = True) -> "UnresolvedAssetJobDefinition":
        """Every live asset and its checks but the audits: a microbatch pays for the checks that
        gate it, not for rebuilding state to compare (the `audit` job's). `audited=False` is for
        definitions that hold no audits to leave out (a job without check steps)."""
        selection = dg.AssetSelection.assets(*self.keys)
        if audited:
            selection -= dg.AssetSelection.checks(*self.audits)
        return dg.define_asset_job(
            PIPELINE,
            selection=selection,
            executor_def=threaded_executor,
            description="Every live asset in dependency order, in one process and one Spark "
            "session (two steps at a time where the graph allows): the pipeline sensor requests "
            "the assets with new input and everything downstream of them.",
        )

    def audit_job(self) -> "UnresolvedAssetJobDefinition":
        return dg.define_asset_job(
            AUDIT,
            selection=dg.AssetSelection.checks(*self.audits),
            executor_def=dg.in_process_executor,
            description="The audits of the live tables (a cart state rebuilt from the log, a "
            "compacted table against its source database), in one process and one Spark "
            "session; its schedule runs it every few minutes.",
        )

    def checks_of(self, selected: Iterable[dg.AssetKey]) -> list[dg.AssetCheckKey]:
        """The checks a run of `selected` evaluates (a run selecting assets would otherwise get
        every check on them, the audits too)."""
        chosen = set(selected)
        return sorted((k for k in self.checks if k.asset_key in chosen),
                      key=lambda k: (k.asset_key.to_user_string(), k.name))

    def closure(self, roots: Iterable[dg.AssetKey]) -> set[dg.AssetKey]:
        """`roots`, everything downstream of them and the other outputs of their multi-assets."""
        selection = dg.AssetSelection.assets(*roots).downstream().required_multi_asset_neighbors()
        return set(selection.resolve(self.assets)) & self.keys

    def runnable(
        self, selected: set[dg.AssetKey], exists: Callable[[str], bool]
    ) -> tuple[set[dg.AssetKey], list[str]]:
        """`selected` without the models that cannot run yet — an input neither in the lake
        nor written by the run — and why each was left out."""
        if self.models is None:
            return selected, []
        kept, left_out = set(selected), []
        changed = True
        while changed:
            changed = False
            for name in self.models.models:
                key = dg.AssetKey(["views", name])
                if key not in kept:
                    continue
                missing = [p for p in self.models.inputs(name)
                           if not exists(p) and dg.AssetKey(p.split("/")) not in kept]
                if missing:
                    kept.discard(key)
                    left_out.append(f"views/{name} waits for {', '.join(missing)}")
                    changed = True
        return kept, left_out

    def partition_key(self, selected: Iterable[dg.AssetKey], now: datetime) -> str | None:
        """The newest hour when the selection has an hourly asset, else None."""
        if not set(selected) & self.partitioned:
            return None
        hour = now.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)
        return (hour - timedelta(hours=1)).strftime(HOUR_KEY)  # the last complete hour


def gates_of(
    consumers: Mapping[str, Consumer], checks: Sequence[dg.AssetChecksDefinition]
) -> dict[str, tuple[dg.AssetCheckKey, ...]]:
    """Per consumer, the blocking checks among `checks` on the topics and tables it reads."""
    blocking: dict[dg.AssetKey, list[dg.AssetCheckKey]] = {}
    for checks_def in checks:
        for spec in checks_def.check_specs:
            if spec.blocking:
                blocking.setdefault(spec.asset_key, []).append(spec.key)
    found = {}
    for name, consumer in consumers.items():
        reads = [dg.AssetKey(["log", t]) for t in consumer.topics]
        reads += [dg.AssetKey(p.split("/")) for p in consumer.reads]
        found[name] = tuple(k for key in reads for k in blocking.get(key, ()))
    return found
