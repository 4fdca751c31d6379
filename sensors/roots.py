"""What has new input, from metadata alone: the roots of the next pipeline run, and why.

A sensor tick runs in the code server every few seconds, so nothing here reads rows or starts
Spark: landing manifests and file listings, checkpoints, Delta file statistics and
application transactions, the capture source's positions, and Dagster's check records.

Each root is recorded with the state that makes it one (offsets, landing files and sizes,
positions, versions, check records): that state changes exactly when there is new work, so its
digest is a run key that never requests the same work twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import dagster as dg

from lakelog.assets.gates import describe, verdicts
from lakelog.assets.naming import capture_key, output_key, topic_key
from lakelog.assets.pipeline import LiveGraph
from lakelog.cdc import change_streams
from lakelog.cdc.lag import capture_lag
from lakelog.consumers import checkpoints
from lakelog.consumers.backlog import Backlog, backlog
from lakelog.errors import LakelogError
from lakelog.lake import Lake
from lakelog.log import landing
from lakelog.resources import SourceResource
from lakelog.sourcing import decided_through, published_through
from lakelog.views import why_stale


@dataclass
class Found:
    roots: set[dg.AssetKey] = field(default_factory=set)
    #: Per root label (``topic:orders``), the state that makes it a root.
    work: dict[str, Any] = field(default_factory=dict)
    #: Why something with new input is not a root this tick.
    notes: list[str] = field(default_factory=list)
    #: Every consumer's backlog and checkpoint state, for the lag observations.
    backlogs: dict[str, tuple[Backlog, dict[str, Any]]] = field(default_factory=dict)
    #: Per input (``topic:orders``, ``capture:shop``), with or without new input: its asset and
    #: what a run moves on when it takes the input (the topic's ingest batch, the capture's
    #: position).
    marks: dict[str, tuple[dg.AssetKey, Any]] = field(default_factory=dict)

    def add(self, keys: Iterable[dg.AssetKey], label: str, state: Any) -> None:
        self.roots.update(keys)
        self.work[label] = state


def _captures(
    found: Found, live: LiveGraph, source: SourceResource | None, root: str, now: datetime
) -> None:
    for captured in live.sources:
        if source is None:
            found.notes.append(f"capture of {captured.server_name}: no source resource")
            continue
        try:
            behind = capture_lag(source.open(captured.server_name, captured.tables, root=root),
                                 root, now=now)
        except LakelogError as exc:
            found.notes.append(f"source {captured.server_name} unavailable: {exc}")
            continue
        key, label = capture_key(captured.server_name), f"capture:{captured.server_name}"
        found.marks[label] = (key, behind.position)
        if behind.pending:
            found.add([key], label, [behind.position, behind.head])


def _topics(found: Found, live: LiveGraph, lake: Lake) -> None:
    for topic in live.topics.values():
        if not lake.list_files(landing.landing_path(topic.name)):
            continue
        manifest = landing.load_manifest(lake, topic.name)
        key, label = topic_key(topic), f"topic:{topic.name}"
        found.marks[label] = (key, manifest.batch)
        pending = landing.pending_files(lake, manifest)
        if pending or manifest.plan is not None:  # a plan left by a crash is resumed
            found.add([key], label, {
                "batch": manifest.batch, "files": sorted(pending),
                "plan": manifest.plan.batch if manifest.plan else None,
            })


def _consumers(
    found: Found, live: LiveGraph, lake: Lake, instance: dg.DagsterInstance, now: datetime
) -> None:
    for name, consumer in live.consumers.items():
        behind = backlog(lake, consumer, live.topics)
        state = dict(checkpoints.load(lake, name).state)
        found.backlogs[name] = (behind, state)
        idle = behind.records == 0 and bool(consumer.idle_tick and consumer.idle_tick(state, now))
        if behind.records == 0 and not idle:
            continue
        gate = verdicts(instance, live.gates.get(name, ()))
        stopped = [v for v in gate if v.blocks and not v.unfinished]
        if stopped:
            found.notes.append(f"consumer {name} waits: {describe(stopped)}")
            continue
        for v in gate:  # a check its run never got to: run it again, before the consumer
            if v.unfinished and v.check.asset_key in live.keys:
                found.add([v.check.asset_key], f"recheck:{v.name}", v.record)
        found.add([output_key(o) for o in consumer.outputs], f"consumer:{name}", {
            "lag": {f"{x.topic}/{x.partition}": [x.committed, x.head] for x in behind.lags},
            "idle": f"{now:%Y%m%dT%H%M}" if idle else None,
            "gates": [v.record for v in gate],
        })


def _relays(found: Found, live: LiveGraph, lake: Lake) -> None:
    for aggregate in live.aggregates:
        done, decided = published_through(lake, aggregate), decided_through(lake, aggregate)
        if decided > done:
            found.add([topic_key(aggregate.outbox_topic)], f"relay:{aggregate.consumer.name}",
                      [done, decided])
    for stream in live.change_streams:
        version = change_streams.table_version(lake, stream)
        done = change_streams.published_through(lake, stream)
        if version is not None and (done is None or version > done):
            found.add([topic_key(stream.topic)], f"changes:{stream.path}", [done, version])


def _models(found: Found, live: LiveGraph, lake: Lake) -> None:
    if live.models is None:
        return
    for name, model in live.models.models.items():
        reason = why_stale(lake, live.models, name)
        if reason:
            found.add([dg.AssetKey(model.path.split("/"))], f"model:{name}", reason)


def find_inputs(
    live: LiveGraph, lake: Lake, source: SourceResource | None, *, root: str, now: datetime
) -> Found:
    """The roots with input from outside: captures behind their source, topics with landing
    files not ingested; and the marks of every capture and topic with landing files."""
    found = Found()
    _captures(found, live, source, root, now)
    _topics(found, live, lake)
    return found


def find_roots(
    live: LiveGraph,
    lake: Lake,
    instance: dg.DagsterInstance,
    source: SourceResource | None,
    *,
    root: str,
    now: datetime,
    inputs: Found | None = None,
) -> Found:
    """Captures behind their source, topics with landing files not ingested, consumers behind
    their topics (or with an idle tick due) and not stopped by a failed blocking check, relays
    with orders not published, tables with changes not published to their change streams, and stored models whose inputs changed since they last ran.
    `inputs`: what `find_inputs` found this tick already."""
    found = inputs if inputs is not None else find_inputs(live, lake, source, root=root, now=now)
    _consumers(found, live, lake, instance, now)
    _relays(found, live, lake)
    _models(found, live, lake)
    return found
