"""The main job: generate the web-shop workload and let the pipeline catch up with it, batch by
batch, through the runner Dagster's runs use (`lakelog.assets.runner`).

Each of the workload's batches is landed (files already there are kept) and, with a shop
database, the database changes (inserts, updates, deletes); then one run of the `pipeline` job
catches up the streaming nodes: the capture, ingest, every consumer, the orders relay. The last
batch's run catches up the SQL models too: a model applies all the changes since it last ran,
so once at the end equals once per batch, and each batch's run stays as short as the
microbatches it simulates. The asset checks that are steps of their own (data quality of the
topics and tables, the carts' replay) read whole tables: the demo leaves them to `lakelog run`
and the pipeline sensor.

Every step is exactly-once and resumable, so a run that was killed at any moment, run again
with the same seed and home, finishes the remaining work and leaves the tables an uninterrupted
run leaves. The runs are recorded on the Dagster instance (`lakelog.assets.runner`), so the UI
shows every asset materialized afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakelog import consumers
from lakelog.consumers import Consumer
from lakelog.demo import shop_cdc, shop_search
from lakelog.demo.workload import TOPICS as WORKLOAD_TOPICS
from lakelog.demo.workload import Workload
from lakelog.errors import ConfigError, LakelogError
from lakelog.lake import Lake
from lakelog.log.offsets import partition_states

if TYPE_CHECKING:
    from dagster import AssetKey

    from lakelog.assets.runner import Runner, RunReport


@dataclass
class DemoSummary:
    events: int
    seed: int
    batches: int
    landed: int = 0  # lines in the workload's landing files
    files_written: int = 0  # by this run (a resumed run writes only what was missing)
    read: int = 0
    appended: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    ingests: int = 0
    microbatches: int = 0  # with records (an idle tick, which only moves a watermark, is not one)
    heads: dict[str, int] = field(default_factory=dict)
    lag: dict[str, int] = field(default_factory=dict)
    source: str | None = None  # the captured shop database: sqlite or postgresql
    source_changes: int = 0  # change events captured (snapshot rows included)
    models: int = 0  # SQL models materialized by the last run
    #: The models' own checks (warnings) that failed.
    checks_failed: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)  # Dagster run ids
    seconds: float = 0.0

    @property
    def records_per_second(self) -> float:
        return self.read / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "records_per_second": round(self.records_per_second, 1)}


def run_demo(
    runner: Runner,
    lake: Lake,
    *,
    workload: Workload,
    progress: Callable[[str], None] = lambda _: None,
    source_dsn: str | None = None,
    with_source: bool = True,
    with_streams: bool = True,
) -> DemoSummary:
    """The demo over `runner`'s pipeline, which must ingest the shop's topics; its captured
    source named like the shop's database (`shop_cdc.SERVER`) gets the shop's activity."""
    pipeline = runner.pipeline
    missing = [t for t in WORKLOAD_TOPICS if t not in pipeline.landed_topics]
    if missing:
        raise ConfigError(f"lakelog demo lands the web shop's workload, but pipeline "
                          f"{pipeline.name} has no topic {', '.join(missing)}; run a pipeline "
                          "of your own with `lakelog run`")
    started = time.perf_counter()
    summary = DemoSummary(workload.events, workload.seed, workload.batches)
    leave_out: set[AssetKey] = set()
    if not with_source:
        leave_out |= runner.capture_keys()
    if not with_streams:
        leave_out |= runner.output_keys([*(w.consumer for w in pipeline.windows),
                                         *(j.consumer for j in pipeline.joins)])
    shop = [s for s in pipeline.sources if s.server_name == shop_cdc.SERVER and with_source]
    conn = dialect = None
    if shop:
        conn, dialect = shop_cdc.connect(lake.root, source_dsn)
        shop_cdc.prepare(conn, dialect, seed=workload.seed)
        summary.source = "postgresql" if source_dsn else "sqlite"
    try:
        for k in range(workload.batches):
            written = workload.write_batch(k, lake.root)
            if k == 0 and shop_search.ALERTS.name in pipeline.landed_topics:
                alerts = shop_search.land_alerts(lake.root, workload.seed)
                written += [alerts] if alerts else []
            summary.files_written += len(written)
            progress(f"batch {k + 1}/{workload.batches}: landed {len(written)} new files")
            if conn is not None:
                changes = max(workload.events // (20 * workload.batches), 10)
                if shop_cdc.mutate_batch(conn, dialect, k, changes=changes, seed=workload.seed,
                                         start=workload.start):
                    progress(f"  shop database: about {changes} row changes")
            models = set() if k == workload.batches - 1 else runner.model_keys()
            report = runner.catch_up(leave_out=leave_out | models, checks=False)
            _count(summary, runner, report, progress)
    finally:
        if conn is not None:
            conn.close()
    summary.landed = sum(workload.summary(k).lines for k in range(workload.batches))
    for topic in pipeline.topics:
        states = partition_states(lake.snapshot(topic.path), topic.partitions)
        summary.heads[topic.name] = sum(s.head for s in states.values())
    left_out = runner.live.closure(leave_out) if leave_out else set()
    ran = [c for c in pipeline.all_consumers.values()
           if not runner.output_keys([c]) & left_out]
    summary.lag = _lag(lake, ran, pipeline.all_topics)
    summary.seconds = time.perf_counter() - started
    return summary


def _count(
    summary: DemoSummary, runner: Runner, report: RunReport, progress: Callable[[str], None]
) -> None:
    """Add what a run did to `summary`, and say it; a failed run stops the demo."""
    summary.runs.append(report.run_id)
    pipeline = runner.pipeline
    # The workload's events (changelogs count as changes, the demo's price alerts not at all).
    events = [t.path for t in pipeline.topics if t.name in WORKLOAD_TOPICS]
    for topic in pipeline.landed_topics.values():
        for done in report.of(topic.path):
            if done.get("files"):
                summary.ingests += topic.path in events
                progress(f"  ingest {topic.name}: {done['records_read']} read, "
                         f"{done['records_appended']} appended, {done['duplicates']} duplicates,"
                         f" {done['dead_letters']} dead letters")
    summary.read += report.total("records_read", events)
    summary.appended += report.total("records_appended", events)
    summary.duplicates += report.total("duplicates", events)
    summary.dead_letters += report.total("dead_letters", events)
    for source in pipeline.sources:
        for done in report.of(f"cdc/{source.server_name}"):
            changes = int(done.get("changes") or 0) + int(done.get("snapshot_rows") or 0)
            summary.source_changes += changes
            progress(f"  capture of {source.server_name}: {changes} change events")
    for consumer in pipeline.all_consumers.values():
        for done in report.of(consumer.outputs[0].path):
            batches = int(done.get("batches") or 0) - int(done.get("idle_ticks") or 0)
            summary.microbatches += batches
            if batches:
                progress(f"  {consumer.name}: {batches} microbatches, {done['records']} records")
    for aggregate in pipeline.aggregates:
        for done in report.of(aggregate.outbox_topic.path):
            progress(f"  {done['events_published']} events of {aggregate.consumer.name} "
                     f"published to {aggregate.outbox_topic.name}")
    models = [k for k in report.selected if k.startswith("views/")]
    if models or report.left_out:
        summary.models = len([k for k in models if report.of(k)])
        summary.checks_failed = sorted(c for c, passed in report.checks.items() if not passed)
        progress(f"  {summary.models} SQL models materialized"
                 + "".join(f"; {n}" for n in report.left_out)
                 + (f"; their checks failed: {', '.join(summary.checks_failed)}"
                    if summary.checks_failed else ""))
    for key, why in sorted(report.blocked.items()):
        progress(f"  {key} held back: {why}")
    if not report.success:
        raise LakelogError(f"pipeline run {report.run_id} failed: "
                           f"{'; '.join(report.failures) or 'see the run in Dagster'}")


def _lag(lake: Lake, chosen: Collection[Consumer], topics: Any) -> dict[str, int]:
    return {c.name: sum(p.lag for p in consumers.lag(lake, c, topics)) for c in chosen}
