"""The commands that run the pipeline: `demo`, `run`, and `offsets reset` (whose ``--rebuild``
replays the consumer). They go through the runner Dagster's runs use (`lakelog.assets.runner`),
so this is where the command line imports the Dagster layer — lazily: the other commands do not
pay for it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lakelog.cli.common import emit, lake, now, open_spark_meanwhile, timestamp
from lakelog.cli.pipelines import resolve
from lakelog.errors import LakelogError
from lakelog.pipeline import Pipeline

if TYPE_CHECKING:
    from lakelog.assets.runner import Runner, RunReport
    from lakelog.resources import SparkResource

#: The numbers `lakelog run` shows per materialized asset, when its metadata has them.
SHOWN = ("records_appended", "records", "batches", "events_published", "changes", "mode")


@contextlib.contextmanager
def dagster_quiet() -> Iterator[None]:
    """While Dagster runs: its banners on stderr (stdout holds --json output), its beta and
    preview warnings about lakelog's own definitions not shown to users."""
    from lakelog.assets.location import lakelogs_own_choices

    with lakelogs_own_choices(), contextlib.redirect_stdout(sys.stderr):
        yield


def spark_resource(args: argparse.Namespace) -> SparkResource:
    """The Spark resource of the command's runs: the session `common.spark_session` opens."""
    from lakelog.resources import SparkResource

    return SparkResource(master=args.master, remote=args.remote,
                         app_name=f"lakelog-{args.command}")


def open_runner(
    args: argparse.Namespace, pipeline: Pipeline, *, source_dsn: str | None = None
) -> tuple[Runner, str]:
    """A runner on the command's Spark and lake, and the Dagster instance it records runs on."""
    from lakelog.assets.runner import Runner, open_instance
    from lakelog.resources import LakeResource, SourceResource

    spark = spark_resource(args)
    resources = {"spark": spark, "lake": LakeResource(spark=spark, root=args.home),
                 "source": SourceResource(dsn=source_dsn)}
    instance, where = open_instance(args.home, os.environ)
    return Runner(pipeline, resources=resources, instance=instance,
                  tags={"lakelog/command": f"lakelog {args.command}"}), where


def see_it(where: str) -> str:
    """How to open the runs in the Dagster UI."""
    if os.environ.get("DAGSTER_HOME") or where.startswith("ephemeral"):
        return f"Dagster instance {where}"
    return f"Dagster instance {where} (to see the runs: DAGSTER_HOME={where} dagster dev)"


def cmd_demo(args: argparse.Namespace) -> None:
    from lakelog.demo.run import run_demo
    from lakelog.demo.workload import Workload

    if args.events < 1 or args.batches < 1:
        raise LakelogError("--events and --batches must be positive")
    pipeline = resolve(args.pipeline)
    # The demo's first step needs Spark: a server starts while Dagster and the workload do.
    open_spark_meanwhile(args)
    say = (lambda m: print(m, file=sys.stderr)) if not args.json else (lambda m: None)
    with dagster_quiet():
        runner, where = open_runner(args, pipeline, source_dsn=args.source_dsn)
        summary = run_demo(
            runner, lake(args),
            workload=Workload(args.events, seed=args.seed, batches=args.batches),
            progress=say, source_dsn=args.source_dsn, with_source=not args.no_source,
            with_streams=not args.no_streams,
        )
    heads = "\n".join(f"  {name:<24} {head:>12,}" for name, head in summary.heads.items())
    lags = "\n".join(f"  {name:<32} {lag:>10,}" for name, lag in summary.lag.items())
    failed = (f" (warning checks failed: {', '.join(summary.checks_failed)})"
              if summary.checks_failed else "")
    emit(
        args,
        {**summary.as_dict(), "home": runner.lake_root, "dagster_instance": where},
        f"lakelog demo: {summary.events:,} events, seed {summary.seed}, {summary.batches} batches"
        f" in {runner.lake_root}\n"
        f"landed       {summary.landed:,} lines ({summary.files_written} files written by this run)\n"
        f"ingested     {summary.read:,} read = {summary.appended:,} appended + "
        f"{summary.duplicates:,} duplicates skipped + {summary.dead_letters:,} dead letters"
        f" ({summary.ingests} ingest batches)\n"
        f"log heads (records per topic)\n{heads}\n"
        f"shop database ({summary.source or 'not captured'}): {summary.source_changes:,}"
        " change events captured\n"
        f"consumer lag ({summary.microbatches} microbatches)\n{lags}\n"
        f"SQL models   {summary.models} materialized{failed}\n"
        f"runs         {len(summary.runs)} pipeline runs on the {see_it(where)}\n"
        f"wall time    {summary.seconds:.1f} s, {summary.records_per_second:,.0f} records/s",
    )


def _described(report: RunReport) -> str:
    lines = []
    for done in report.materialized:
        shown = [f"{k}={done.metadata[k]}" for k in SHOWN if k in done.metadata]
        lines.append(f"  {done.key:<40} {' '.join(shown)}")
    if report.checks:
        failed = sorted(c for c, ok in report.checks.items() if not ok)
        lines.append(f"checks: {sum(report.checks.values())} passed"
                     + (f", failed: {', '.join(failed)}" if failed else ""))
    lines += [f"left out: {why}" for why in report.left_out]
    lines += [f"held back: {key}: {why}" for key, why in sorted(report.blocked.items())]
    return "\n".join(lines)


def succeeded(report: RunReport) -> RunReport:
    if not report.success:
        raise LakelogError(f"pipeline run {report.run_id} failed: "
                           f"{'; '.join(report.failures) or 'see the run in Dagster'}")
    return report


def cmd_run(args: argparse.Namespace) -> None:
    pipeline = resolve(args.pipeline)
    with dagster_quiet():
        runner, where = open_runner(args, pipeline, source_dsn=args.source_dsn)
        report = succeeded(runner.catch_up())
    emit(
        args,
        {**report.as_dict(), "pipeline": pipeline.name, "dagster_instance": where},
        f"lakelog run: pipeline {pipeline.name}, run {report.run_id} ({report.seconds:.1f} s),"
        f" {len(report.materialized)} of {len(report.selected)} assets materialized\n"
        f"{_described(report)}\n{see_it(where)}",
    )


def cmd_offsets_reset(args: argparse.Namespace) -> None:
    from lakelog.consumers.resets import rebuild_consumer, reset_consumer

    pipeline = resolve(args.pipeline)
    consumer = pipeline.consumer(args.consumer)
    to = args.to if args.to in ("earliest", "latest") else timestamp(args.to)
    the_lake = lake(args)
    data: dict[str, Any] = {"consumer": consumer.name}
    if args.rebuild:
        rebuilt = rebuild_consumer(the_lake, pipeline, consumer.name, to=to, now=now())
        offsets, data["emptied"] = rebuilt.offsets, list(rebuilt.emptied)
        with dagster_quiet():
            runner, where = open_runner(args, pipeline, source_dsn=args.source_dsn)
            report = succeeded(runner.catch_up(only=runner.output_keys([consumer])))
        first = consumer.outputs[0].path
        [replayed] = report.of(first) or [{}]
        data["replay"] = {"run_id": report.run_id, "batches": replayed.get("batches", 0),
                          "records": replayed.get("records", 0),
                          "held_back": report.blocked.get(first)}
        done = (f"rebuilt from the log by run {report.run_id}: {data['replay']['records']:,} "
                f"records in {data['replay']['batches']} microbatches" if replayed else
                f"not replayed yet ({report.blocked.get(first, 'see the run')}): the next "
                "pipeline run replays it")
        note = (f"\nemptied {', '.join(rebuilt.emptied) or 'nothing (no output yet)'}; {done}"
                "\ntables downstream of it catch up with the next pipeline run (lakelog run, or "
                f"the pipeline sensor); {see_it(where)}")
    else:
        offsets, note = reset_consumer(the_lake, pipeline, consumer.name, to=to, now=now()), ""
    rows = [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())]
    emit(args, {**data, "offsets": rows},
         "\n".join(f"{r['topic']}[{r['partition']}] -> {r['offset']}" for r in rows) + note)
