"""The `lakelog` command line, in the spirit of Kafka's tools.

Every command takes ``--home`` (default: $LAKELOG_HOME, else ./.lakelog) and ``--json``. Errors
are one line on stderr and a non-zero exit, never a traceback (set LAKELOG_DEBUG=1 to see one).
Commands that only read offsets (topics, lag, offsets reset to earliest/latest) start no Spark.
The others use the local Spark Connect server (`lakelog spark`), started on first use, unless
``--master`` (a Spark of the command's own) or ``--remote`` (another Connect server) says so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, NoReturn

from pyspark.sql import functions as F

from lakelog import consumers, ingest
from lakelog.cli.spark import add_spark_commands
from lakelog.errors import ConfigError, LakelogError, UnknownConsumerError, UnknownTopicError
from lakelog.lake import EmbeddedLake
from lakelog.log import offsets_for_time, partition_states, read_offsets, topic_snapshot
from lakelog.topics import Topic


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _catalog() -> tuple[dict[str, Topic], dict[str, consumers.Consumer]]:
    """The demo's topics and consumers: the web shop's (with the cart aggregate's orders), and
    those of its captured database."""
    from lakelog.demo import shop, shop_cdc

    topics = {**shop.TOPICS, shop.CARTS.orders_topic.name: shop.CARTS.orders_topic,
              **shop_cdc.CHANGELOGS}
    return topics, {**shop.CONSUMERS, **shop_cdc.CONSUMERS, **_streams(with_joins=True)}


def _streams(*, with_joins: bool) -> dict[str, consumers.Consumer]:
    """The demo's windowed aggregates and (they read the shop database's tables) its joins."""
    from lakelog.demo.shop_joins import JOINS
    from lakelog.demo.shop_windows import WINDOWS

    found = [w.consumer for w in WINDOWS.values()]
    if with_joins:
        found += [j.consumer for j in JOINS.values()]
    return {c.name: c for c in found}


def _topic(name: str) -> Topic:
    topics, _ = _catalog()
    if name not in topics:
        raise UnknownTopicError(f"unknown topic {name!r}; topics: {', '.join(sorted(topics))}")
    return topics[name]


def _consumer(name: str) -> consumers.Consumer:
    _, declared = _catalog()
    if name not in declared:
        raise UnknownConsumerError(
            f"unknown consumer {name!r}; consumers: {', '.join(sorted(declared))}"
        )
    return declared[name]


def _timestamp(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise LakelogError(f"not an ISO timestamp: {text!r} (e.g. 2026-01-05T08:00:00Z)") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _lake(args: argparse.Namespace) -> EmbeddedLake:
    def start_spark():
        from lakelog.spark.server import ServerConfig
        from lakelog.spark.session import open_session

        return open_session(
            master=args.master, remote=args.remote, app_name=f"lakelog-{args.command}",
            server=ServerConfig.from_environment(os.environ),
        )

    return EmbeddedLake(start_spark, args.home)


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, indent=2, default=str) if args.json else text)


def cmd_demo(args: argparse.Namespace) -> None:
    from lakelog.demo import shop
    from lakelog.demo.run import run_demo
    from lakelog.demo.workload import Workload

    if args.events < 1 or args.batches < 1:
        raise LakelogError("--events and --batches must be positive")
    lake = _lake(args)
    say = (lambda m: print(m, file=sys.stderr)) if not args.json else (lambda m: None)
    summary = run_demo(
        lake,
        lake.spark,
        topics=shop.TOPICS,
        consumer_list=list(shop.CONSUMERS.values()),
        workload=Workload(args.events, seed=args.seed, batches=args.batches),
        now=_now,
        progress=say,
        source_dsn=args.source_dsn,
        with_source=not args.no_source,
        stream_consumers=[] if args.no_streams else list(
            _streams(with_joins=not args.no_source).values()
        ),
    )
    heads = "\n".join(f"  {name:<12} {head:>12,}" for name, head in summary.heads.items())
    lags = "\n".join(f"  {name:<12} {lag:>12,}" for name, lag in summary.lag.items())
    _emit(
        args,
        {**summary.as_dict(), "home": lake.root},
        f"lakelog demo: {summary.events:,} events, seed {summary.seed}, {summary.batches} batches"
        f" in {lake.root}\n"
        f"landed       {summary.landed:,} lines ({summary.files_written} files written by this run)\n"
        f"ingested     {summary.read:,} read = {summary.appended:,} appended + "
        f"{summary.duplicates:,} duplicates skipped + {summary.dead_letters:,} dead letters"
        f" ({summary.ingests} ingest batches)\n"
        f"log heads (records per topic)\n{heads}\n"
        f"shop database ({summary.source or 'not captured'}): {summary.source_changes:,}"
        " change events captured\n"
        f"consumer lag ({summary.microbatches} microbatches)\n{lags}\n"
        f"wall time    {summary.seconds:.1f} s, {summary.records_per_second:,.0f} records/s",
    )


def cmd_topics(args: argparse.Namespace) -> None:
    lake = _lake(args)
    topics, _ = _catalog()
    rows = []
    for name, topic in sorted(topics.items()):
        if not lake.exists(topic.path):
            continue
        states = partition_states(lake.snapshot(topic.path), topic.partitions)
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
    lines = [f"{'TOPIC':<14}{'PARTITION':>10}{'START':>12}{'HEAD':>12}{'RECORDS':>12}"]
    for row in rows:
        for o in row["offsets"]:
            lines.append(
                f"{row['topic']:<14}{o['partition']:>10}{o['start']:>12}{o['head']:>12}{o['records']:>12}"
            )
    _emit(args, rows, "\n".join(lines) if rows else f"no topics in {lake.root}")


def cmd_produce(args: argparse.Namespace) -> None:
    topic = _topic(args.topic)
    if args.file == "-":
        lines, source = sys.stdin.read().splitlines(), "produce:stdin"
    else:
        try:
            with open(args.file, encoding="utf-8") as handle:
                lines = handle.read().splitlines()
        except OSError as exc:
            raise LakelogError(f"cannot read {args.file}: {exc.strerror}") from exc
        source = f"produce:{os.path.abspath(args.file)}"
    lake = _lake(args)
    result = ingest.produce(lake, lake.spark, topic, lines, source=source, now=_now())
    _emit(
        args,
        result.as_dict(),
        f"{result.read} read: {result.appended} appended, {result.duplicates} duplicates, "
        f"{result.dead_letters} dead letters",
    )


def cmd_tail(args: argparse.Namespace) -> None:
    topic = _topic(args.topic)
    lake = _lake(args)
    snapshot = topic_snapshot(lake, topic)
    states = partition_states(snapshot, topic.partitions)
    if args.partition is not None and args.partition not in states:
        raise LakelogError(f"topic {topic.name} has partitions 0..{topic.partitions - 1}")
    chosen = [args.partition] if args.partition is not None else sorted(states)
    if args.from_time is not None:
        starts = offsets_for_time(lake, snapshot, topic.partitions, _timestamp(args.from_time))
    elif args.from_offset is not None:
        starts = dict.fromkeys(chosen, args.from_offset)
    else:
        starts = {p: max(states[p].head - args.n, states[p].start_offset) for p in chosen}
    ranges = {p: (max(starts[p], states[p].start_offset), states[p].head) for p in chosen}
    df = read_offsets(lake, snapshot, ranges)
    if args.from_offset is None and args.from_time is None:  # the newest n, printed oldest first
        newest = df.orderBy(F.desc("ingest_time"), F.desc("offset"), F.desc("partition"))
        rows = list(reversed(newest.limit(args.n).collect()))
    else:
        rows = df.orderBy("partition", "offset").limit(args.n).collect()
    records = [r.asDict(recursive=True) for r in rows]
    _emit(args, records, "\n".join(json.dumps(r, default=str) for r in records))


def cmd_lag(args: argparse.Namespace) -> None:
    lake = _lake(args)
    topics, declared = _catalog()
    chosen = [_consumer(args.consumer)] if args.consumer else list(declared.values())
    rows = [
        {"consumer": c.name, "topic": p.topic, "partition": p.partition,
         "committed": p.committed, "head": p.head, "lag": p.lag}
        for c in chosen
        for p in consumers.lag(lake, c, topics)
    ]
    lines = [f"{'CONSUMER':<20}{'TOPIC':<14}{'PARTITION':>10}{'COMMITTED':>12}{'HEAD':>12}{'LAG':>10}"]
    lines += [
        f"{r['consumer']:<20}{r['topic']:<14}{r['partition']:>10}{r['committed']:>12}{r['head']:>12}{r['lag']:>10}"
        for r in rows
    ]
    _emit(args, rows, "\n".join(lines))


def cmd_offsets_reset(args: argparse.Namespace) -> None:
    consumer = _consumer(args.consumer)
    to = args.to if args.to in ("earliest", "latest") else _timestamp(args.to)
    lake = _lake(args)
    topics, _ = _catalog()
    offsets = consumers.reset_offsets(lake, consumer, topics, to=to, now=_now())
    rows = [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())]
    stateful = [o.path for o in consumer.outputs if o.keys]
    note = (
        f"\nnote: {', '.join(stateful)} keep their state; replayed records are applied again"
        if stateful else ""
    )
    _emit(
        args,
        {"consumer": consumer.name, "offsets": rows},
        "\n".join(f"{r['topic']}[{r['partition']}] -> {r['offset']}" for r in rows) + note,
    )


def cmd_compact(args: argparse.Namespace) -> None:
    from lakelog.log_compaction import compact_topic

    topic = _topic(args.topic)
    lake = _lake(args)
    result = compact_topic(lake, topic, now=_now())
    _emit_compaction(
        args, result, "compact",
        f"{topic.name}: {result.files_before} closed files, {result.records_before:,} records "
        f"-> {result.records_after:,} ({result.tombstones_removed:,} tombstones removed)",
    )


def _emit_compaction(args: argparse.Namespace, result: Any, verb: str, text: str) -> None:
    """A compaction's result (with its `ratio`), saying so when there was nothing to `verb`."""
    _emit(args, {**result.__dict__, "ratio": result.ratio},
          text + ("" if result.version is not None else f"; nothing to {verb}"))


def cmd_fold(args: argparse.Namespace) -> None:
    from lakelog.compacted import fold_table
    from lakelog.demo import shop_cdc

    tables = {t.path: t for t in shop_cdc.COMPACTED.values() if t.merge_on_read}
    table = tables.get(args.table)
    if table is None:
        raise ConfigError(f"{args.table!r} is not a merge-on-read table; those are: "
                          f"{', '.join(sorted(tables)) or 'none'}")
    result = fold_table(_lake(args), table, now=_now())
    _emit_compaction(
        args, result, "fold",
        f"{table.path}: {result.files_folded} of {result.files_before} files folded, "
        f"{result.versions_read:,} versions -> {result.rows_written:,} rows "
        f"({result.rows_dropped:,} expired tombstones dropped)",
    )


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
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
    add_spark_commands(sub, _emit, _Parser)

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

    compact = sub.add_parser("compact", parents=[common],
                             help="compact a topic's log (keep the latest record per key)")
    compact.add_argument("topic")
    compact.set_defaults(func=cmd_compact)

    fold = sub.add_parser("fold", parents=[common],
                          help="fold a merge-on-read table (one version per key)")
    fold.add_argument("table", help="its path, e.g. tables/customers")
    fold.set_defaults(func=cmd_fold)

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
    reset.set_defaults(func=cmd_offsets_reset)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
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

