"""The `lakelog` command line, in the spirit of Kafka's tools.

Every command takes ``--pipeline module[:attribute]`` (default: $LAKELOG_PIPELINE, else
``[tool.lakelog] pipeline`` of ./pyproject.toml, else the demo shop; `lakelog.cli.pipelines`),
``--home`` (default: $LAKELOG_HOME, else ./.lakelog) and ``--json``. Errors are one line on
stderr and a non-zero exit, never a traceback (set LAKELOG_DEBUG=1 to see one). Commands that
only read offsets (topics, lag) start no Spark. The others use the local Spark Connect server
(`lakelog spark`), started on first use, unless ``--master`` (a Spark of the command's own) or
``--remote`` (another Connect server) says so. `demo`, `run`, `erase` and `offsets reset --rebuild` run
the pipeline through Dagster (`lakelog.cli.runs`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from pyspark.sql import functions as F

from lakelog import consumers
from lakelog.cli.common import emit, lake, now, timestamp
from lakelog.cli.erase import add_erase_command
from lakelog.cli.init import add_init_command
from lakelog.cli.pipelines import VARIABLE, resolve
from lakelog.cli.runs import cmd_demo, cmd_offsets_reset, cmd_run
from lakelog.cli.spark import add_spark_commands
from lakelog.consumers.groups import owners
from lakelog.errors import ConfigError, LakelogError
from lakelog.log import ingest
from lakelog.log.offsets import offsets_for_time, partition_states, read_offsets, topic_snapshot


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def cmd_topics(args: argparse.Namespace) -> None:
    the_lake = lake(args)
    pipeline = resolve(args.pipeline)
    rows = []
    for name, topic in sorted(pipeline.all_topics.items()):
        if not the_lake.exists(topic.path):
            continue
        states = partition_states(the_lake.snapshot(topic.path), topic.partitions)
        rows.append(
            {
                "topic": name,
                "partitions": topic.partitions,
                "records": sum(s.records for s in states.values()),
                "bytes": sum(s.bytes for s in states.values()),
                "offsets": [
                    {"partition": p, "start": s.start_offset, "head": s.head, "records": s.records}
                    for p, s in states.items()
                ],
            }
        )
    width = max([len(r["topic"]) + 2 for r in rows] + [14])
    lines = [f"{'TOPIC':<{width}}{'PARTITION':>10}{'START':>12}{'HEAD':>12}{'RECORDS':>12}"]
    for row in rows:
        for o in row["offsets"]:
            lines.append(f"{row['topic']:<{width}}{o['partition']:>10}{o['start']:>12}"
                         f"{o['head']:>12}{o['records']:>12}")
    emit(args, rows, "\n".join(lines) if rows else f"no topics in {the_lake.root}")


def cmd_produce(args: argparse.Namespace) -> None:
    topic = resolve(args.pipeline).topic(args.topic)
    if args.file == "-":
        lines, source = sys.stdin.read().splitlines(), "produce:stdin"
    else:
        try:
            with open(args.file, encoding="utf-8") as handle:
                lines = handle.read().splitlines()
        except OSError as exc:
            raise LakelogError(f"cannot read {args.file}: {exc.strerror}") from exc
        source = f"produce:{os.path.abspath(args.file)}"
    the_lake = lake(args)
    result = ingest.produce(the_lake, the_lake.spark, topic, lines, source=source, now=now())
    emit(
        args,
        result.as_dict(),
        f"{result.read} read: {result.appended} appended, {result.duplicates} duplicates, "
        f"{result.dead_letters} dead letters",
    )


def cmd_tail(args: argparse.Namespace) -> None:
    topic = resolve(args.pipeline).topic(args.topic)
    the_lake = lake(args)
    snapshot = topic_snapshot(the_lake, topic)
    states = partition_states(snapshot, topic.partitions)
    if args.partition is not None and args.partition not in states:
        raise LakelogError(f"topic {topic.name} has partitions 0..{topic.partitions - 1}")
    chosen = [args.partition] if args.partition is not None else sorted(states)
    if args.from_time is not None:
        starts = offsets_for_time(the_lake, snapshot, topic.partitions, timestamp(args.from_time))
    elif args.from_offset is not None:
        starts = dict.fromkeys(chosen, args.from_offset)
    else:
        starts = {p: max(states[p].head - args.n, states[p].start_offset) for p in chosen}
    ranges = {p: (max(starts[p], states[p].start_offset), states[p].head) for p in chosen}
    df = read_offsets(the_lake, snapshot, ranges)
    if args.from_offset is None and args.from_time is None:  # the newest n, printed oldest first
        newest = df.orderBy(F.desc("ingest_time"), F.desc("offset"), F.desc("partition"))
        rows = list(reversed(newest.limit(args.n).collect()))
    else:
        rows = df.orderBy("partition", "offset").limit(args.n).collect()
    records = [r.asDict(recursive=True) for r in rows]
    emit(args, records, "\n".join(json.dumps(r, default=str) for r in records))


def cmd_lag(args: argparse.Namespace) -> None:
    the_lake = lake(args)
    pipeline = resolve(args.pipeline)
    declared = pipeline.all_consumers
    chosen = [pipeline.consumer(args.consumer)] if args.consumer else list(declared.values())
    rows = []
    for c in chosen:  # a group's partitions name the live member that owns them
        members = owners(the_lake, c, pipeline.all_topics, now=now()) if c.members else {}
        rows += [
            {"consumer": c.name, "topic": p.topic, "partition": p.partition,
             "committed": p.committed, "head": p.head, "lag": p.lag,
             "member": members.get(p.partition)}
            for p in consumers.lag(the_lake, c, pipeline.all_topics)
        ]
    wide = max([len(r["consumer"]) + 2 for r in rows] + [20])
    at = max([len(r["topic"]) + 2 for r in rows] + [14])
    lines = [f"{'CONSUMER':<{wide}}{'TOPIC':<{at}}{'PARTITION':>10}{'COMMITTED':>12}"
             f"{'HEAD':>12}{'LAG':>10}  MEMBER"]
    lines += [
        f"{r['consumer']:<{wide}}{r['topic']:<{at}}{r['partition']:>10}{r['committed']:>12}"
        f"{r['head']:>12}{r['lag']:>10}  {r['member'] or '-'}"
        for r in rows
    ]
    emit(args, rows, "\n".join(lines))


def cmd_compact(args: argparse.Namespace) -> None:
    from lakelog.log.compaction import compact_topic

    topic = resolve(args.pipeline).topic(args.topic)
    the_lake = lake(args)
    result = compact_topic(the_lake, topic, now=now())
    _emit_compaction(
        args, result, "compact",
        f"{topic.name}: {result.files_before} closed files, {result.records_before:,} records "
        f"-> {result.records_after:,} ({result.tombstones_removed:,} tombstones removed)",
    )


def _emit_compaction(args: argparse.Namespace, result: Any, verb: str, text: str) -> None:
    """A compaction's result (with its `ratio`), saying so when there was nothing to `verb`."""
    emit(args, {**result.__dict__, "ratio": result.ratio},
         text + ("" if result.version is not None else f"; nothing to {verb}"))


def cmd_squash(args: argparse.Namespace) -> None:
    from lakelog.cdc.compacted import squash_table

    pipeline = resolve(args.pipeline)
    tables = {t.path: t for t in pipeline.compacted_tables if t.merge_on_read}
    table = tables.get(args.table)
    if table is None:
        raise ConfigError(f"{args.table!r} is not a merge-on-read table of pipeline "
                          f"{pipeline.name}; those are: "
                          f"{', '.join(sorted(tables)) or 'none'}")
    result = squash_table(lake(args), table, now=now())
    _emit_compaction(
        args, result, "squash",
        f"{table.path}: {result.files_squashed} of {result.files_before} files squashed, "
        f"{result.versions_read:,} versions -> {result.rows_written:,} rows "
        f"({result.rows_dropped:,} expired tombstones dropped)",
    )


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--pipeline", metavar="MODULE[:ATTRIBUTE]",
                        help=f"the pipeline to work on (default: ${VARIABLE}, else [tool.lakelog]"
                        " pipeline in ./pyproject.toml, else the demo shop)")
    common.add_argument("--home", default=os.environ.get("LAKELOG_HOME", ".lakelog"),
                        help="lake root (default: $LAKELOG_HOME or ./.lakelog)")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("--master", default=os.environ.get("LAKELOG_SPARK_MASTER"),
                        help="run a Spark of this process's own on this master, e.g. local[*] "
                        "(default: $LAKELOG_SPARK_MASTER; else the local Spark server)")
    common.add_argument("--remote", default=os.environ.get("LAKELOG_SPARK_REMOTE"),
                        help="use this Spark Connect server, e.g. sc://host:15002 "
                        "(default: $LAKELOG_SPARK_REMOTE; else the local Spark server)")
    parser = _Parser(prog="lakelog", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    add_spark_commands(sub, emit, _Parser)
    add_init_command(sub, emit)

    demo = sub.add_parser("demo", parents=[common], help="run the web-shop demo end to end")
    demo.add_argument("--events", type=int, default=100_000)
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument("--batches", type=int, default=4)
    demo.add_argument("--source-dsn", default=os.environ.get("LAKELOG_SOURCE_DSN"),
                      help="PostgreSQL shop database to capture (default: $LAKELOG_SOURCE_DSN, "
                      "else SQLite under the home)")
    demo.add_argument("--no-source", action="store_true",
                      help="events only: no shop database and no change data capture")
    demo.add_argument("--no-streams", action="store_true",
                      help="leave out the windowed aggregates and stream joins (streams/...)")
    demo.set_defaults(func=cmd_demo)

    run = sub.add_parser("run", parents=[common], help="catch every node of the pipeline up "
                         "once, as one run of its Dagster pipeline job")
    _source_dsn(run)
    run.set_defaults(func=cmd_run)

    compact = sub.add_parser("compact", parents=[common],
                             help="compact a topic's log (keep the latest record per key)")
    compact.add_argument("topic")
    compact.set_defaults(func=cmd_compact)

    squash = sub.add_parser("squash", parents=[common],
                            help="squash a merge-on-read table (one version per key)")
    squash.add_argument("table", help="its path, e.g. tables/customers")
    squash.set_defaults(func=cmd_squash)

    sub.add_parser("topics", parents=[common], help="topics with offsets per log partition").set_defaults(func=cmd_topics)

    produce = sub.add_parser("produce", parents=[common], help="append NDJSON records to a topic")
    produce.add_argument("topic")
    produce.add_argument("file", help="NDJSON file, or - for standard input")
    produce.set_defaults(func=cmd_produce)

    tail = sub.add_parser("tail", parents=[common], help="print records of a topic")
    tail.add_argument("topic")
    tail.add_argument("--partition", type=int)
    start = tail.add_mutually_exclusive_group()
    start.add_argument("--from-offset", type=int)
    start.add_argument("--from-time", help="ISO timestamp: first records appended at or after it")
    tail.add_argument("-n", type=int, default=10, help="number of records (default 10)")
    tail.set_defaults(func=cmd_tail)

    lag = sub.add_parser("lag", parents=[common], help="committed offset, head and lag")
    lag.add_argument("consumer", nargs="?")
    lag.set_defaults(func=cmd_lag)

    offsets = sub.add_parser("offsets", help="manage consumer offsets")
    offsets_sub = offsets.add_subparsers(dest="action", required=True, parser_class=_Parser)
    reset = offsets_sub.add_parser("reset", parents=[common], help="move a consumer's offsets")
    reset.add_argument("consumer")
    reset.add_argument("--to", required=True, help="earliest, latest or an ISO timestamp")
    reset.add_argument("--rebuild", action="store_true",
                       help="empty the consumer's outputs and state and rebuild them from the "
                       "retained log from there (needed where a replay would count twice)")
    _source_dsn(reset)
    reset.set_defaults(func=cmd_offsets_reset)
    add_erase_command(sub, common, emit, _source_dsn)
    return parser


def _source_dsn(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source-dsn", default=os.environ.get("LAKELOG_SOURCE_DSN"),
                        help="PostgreSQL database the captured sources read (default: "
                        "$LAKELOG_SOURCE_DSN, else SQLite under the home)")


#: Commands renamed, old name -> new: the old name still works, with a note on stderr.
RENAMED = {"fold": "squash"}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in RENAMED:
        old, argv[0] = argv[0], RENAMED[argv[0]]
        print(f"lakelog: note: '{old}' is deprecated, use 'lakelog {argv[0]}'", file=sys.stderr)
    args = build_parser().parse_args(argv)
    if getattr(args, "n", 1) is not None and getattr(args, "n", 1) < 1:
        print("lakelog: error: -n must be at least 1", file=sys.stderr)
        return 2
    try:
        code = args.func(args)
    except LakelogError as exc:
        print(f"lakelog: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("lakelog: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the one place a bug becomes a one-line message
        if os.environ.get("LAKELOG_DEBUG"):
            traceback.print_exc()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"lakelog: error: {type(exc).__name__}: {first}", file=sys.stderr)
        return 1
    return code or 0

