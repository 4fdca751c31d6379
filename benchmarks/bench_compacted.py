"""Benchmark: one microbatch of changes applied to a compacted table of 1M vs 10M keys.

The table is built directly in the layout the engine's upserts write (files of
`CompactedTable.rows_per_file` rows clustered by key range). Then, per repetition, a batch of
changelog records is produced into the table's changelog topic (untimed) and one microbatch of
the table's consumer is timed: plan, read the changes, newest-per-key, conditional upsert of the
files the keys fall in, checkpoint. Two change mixes:

- ``recent``: 40% inserts of new keys, 50% updates and 10% deletes of keys among the newest
  100,000 — active customers are mostly recent ones;
- ``uniform``: updates of keys drawn uniformly from the whole table.

Both layouts of the table are measured: ``copy-on-write`` (a batch rewrites the files its keys
fall in) and ``merge-on-read`` (a batch appends its rows as new versions; reads resolve the
newest, and a squash compacts). What merge-on-read defers is measured too: a lookup of 10,000
random keys (what a stream–table join reads) and a count of the live rows of the whole table
(what a view or a check reads), before and after the squash, and the squash itself.

Prints one JSON object; progress on stderr. Example:

    /work/venv/bin/python benchmarks/bench_compacted.py --small 1000000 --large 10000000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakelog import consumers
from lakelog.cdc.compacted import CompactedTable
from lakelog.consumers import Consumer
from lakelog.demo import shop_cdc
from lakelog.lake import EmbeddedLake
from lakelog.lake.squash import squash
from lakelog.lake.upsert import read_keys, write_clustered
from lakelog.log import ingest
from lakelog.log.topics import Topic
from lakelog.spark.session import create_session

HOT = 100_000
LAYOUTS = ["copy-on-write", "merge-on-read"]
LOAD = os.getloadavg()
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def timed(work):
    start = time.perf_counter()
    result = work()
    return result, round(time.perf_counter() - start, 3)


def lookup(spark: SparkSession, lake: EmbeddedLake, table: CompactedTable, keys: int) -> float:
    """Seconds to read the current rows of 10,000 distinct random keys (`upsert.read_keys`)."""
    sample = random.Random(7).sample(range(1, keys + 1), min(10_000, keys))
    wanted = spark.createDataFrame([(k,) for k in sample], "customer_id long")
    found, took = timed(lambda: read_keys(lake, lake.snapshot(table.path), wanted,
                                          table.key).count())
    assert found == len(sample), found  # every key has a row (a deleted one, a tombstone)
    return took


def scan(lake: EmbeddedLake, table: CompactedTable) -> float:
    """Seconds to count the live rows of the whole table (what a view or a check reads)."""
    _, took = timed(lambda: lake.read(lake.snapshot(table.path)).where("NOT _deleted").count())
    return took


def build(spark: SparkSession, lake: EmbeddedLake, table: CompactedTable, keys: int) -> float:
    """`keys` customers 1..keys, as the table's own upserts would have laid them out."""
    start = time.perf_counter()
    rows = spark.range(1, keys + 1).select(
        F.col("id").alias("customer_id"),
        F.concat(F.lit("name "), F.col("id")).alias("name"),
        F.concat(F.lit("c"), F.col("id"), F.lit("@example.com")).alias("email"),
        F.element_at(F.array(*[F.lit(c) for c in ("NL", "DE", "FR", "US")]),
                     (F.col("id") % 4 + 1).cast("int")).alias("country"),
        F.lit(NOW).cast("timestamp").alias("updated_at"),
        F.lpad(F.hex(F.col("id")), 32, "0").alias("_position"),
        F.lit("r").alias("_op"),
        F.lit(False).alias("_deleted"),
        F.lit(NOW).cast("timestamp").alias("_commit_time"),
    )
    merge = table.output.merge_keys
    lake.create_table(table.path, table.output.schema,
                      properties=None if merge is None else merge.properties())
    snapshot = lake.snapshot(table.path)
    write_clustered(lake, snapshot, rows, keys=table.key, rows_per_file=table.rows_per_file,
                    rows=keys)
    return time.perf_counter() - start


def changes(keys: int, count: int, mix: str, first_position: int, seed: int) -> list[str]:
    """`count` Debezium change events for the table of `keys` keys."""
    r = random.Random(seed)
    lines, next_key = [], keys + 1 + seed * count
    for n in range(count):
        position = first_position + n
        roll = r.random()
        if mix == "uniform":
            op, key = "u", r.randint(1, keys)
        elif roll < 0.4:
            op, key, next_key = "c", next_key, next_key + 1
        else:
            op, key = ("u" if roll < 0.9 else "d"), r.randint(max(1, keys - HOT), keys)
        row = {"customer_id": key, "name": f"name {key} v{position}", "email": f"c{key}@x",
               "country": "NL", "updated_at": "2026-03-01T12:00:00.000000Z"}
        lines.append(json.dumps({
            "before": {**row, "name": None} if op in ("u", "d") else None,
            "after": None if op == "d" else row, "op": op, "ts_ms": 1772366400000,
            "source": {"connector": "postgresql", "name": "bench", "ts_ms": 1772366400000,
                       "snapshot": "false", "table": "customers", "lsn": position,
                       "commit_lsn": position},
        }))
    return lines


def timed_batches(
    spark: SparkSession, lake: EmbeddedLake, consumer: Consumer, topics: dict[str, Topic],
    path: str, keys: int, mix: str, args: argparse.Namespace, position: int, *, label: str,
) -> tuple[list[float], list[int], int]:
    """Per repetition, `args.changes` changes of `mix` produced into the consumer's changelog
    (untimed) and one batch of `consumer` timed, with the files of table `path` it rewrote.
    Repetition 0 warms up and is left out. Returns the seconds, the files rewritten and the
    next source position."""
    (topic,) = topics.values()
    seconds, rewritten = [], []
    for rep in range(args.repeats + 1):
        lines = changes(keys, args.changes, mix, position, seed=rep + 1)
        position += args.changes
        ingest.produce(lake, spark, topic, lines, source="bench", now=NOW)
        before = {f.path for f in lake.snapshot(path).files()}
        done, took = timed(lambda: consumers.run_batch(lake, consumer, topics, now=NOW))
        assert done is not None and done.records == args.changes
        gone = len(before - {f.path for f in lake.snapshot(path).files()})
        progress(f"  {label}, {mix}, rep {rep}: {took:.2f}s, {gone} of {len(before)} files of "
                 f"{path} rewritten")
        if rep:  # repetition 0 warms up
            seconds.append(took)
            rewritten.append(gone)
    return seconds, rewritten, position


def run(spark: SparkSession, home: str, keys: int, layout: str, args: argparse.Namespace) -> dict:
    lake = EmbeddedLake(spark, os.path.join(home, f"{layout}-{keys}"))
    table = replace(shop_cdc.COMPACTED["customers"], merge_on_read=layout == "merge-on-read")
    topics = {table.topic.name: table.topic}
    progress(f"building a {layout} table of {keys:,} keys")
    built = build(spark, lake, table, keys)
    files = len(lake.snapshot(table.path).files())
    result = {"keys": keys, "files": files, "build_s": round(built, 1), "mixes": {}}
    position = 10**12
    for mix in args.mix:
        seconds, rewritten, position = timed_batches(
            spark, lake, table.consumer, topics, table.path, keys, mix, args, position,
            label=f"{keys:,} keys, {layout}")
        result["mixes"][mix] = {
            "seconds": [round(s, 3) for s in seconds], "median_s": round(statistics.median(seconds), 3),
            "files_rewritten_last": rewritten[-1],
        }
    lookup(spark, lake, table, keys)  # warm-up
    result["lookup_s"] = lookup(spark, lake, table, keys)
    result["scan_s"] = scan(lake, table)
    if table.merge_on_read:
        squashed, result["squash_s"] = timed(lambda: squash(lake, table.path,
                                                      rows_per_file=table.rows_per_file))
        result["squash"] = {"files_before": squashed.files_before,
                            "files_squashed": squashed.files_squashed,
                            "versions_read": squashed.versions_read,
                            "rows_written": squashed.rows_written}
        result["lookup_after_squash_s"] = lookup(spark, lake, table, keys)
        result["scan_after_squash_s"] = scan(lake, table)
    progress(f"  {keys:,} keys, {layout}: {json.dumps({k: v for k, v in result.items() if k != 'mixes'})}")
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", type=int, default=1_000_000)
    p.add_argument("--large", type=int, default=10_000_000)
    p.add_argument("--changes", type=int, default=10_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--mix", action="append", choices=["recent", "uniform"])
    p.add_argument("--layout", action="append", choices=LAYOUTS)
    p.add_argument("--driver-memory", default="6g")
    args = p.parse_args()
    args.mix = args.mix or ["recent", "uniform"]
    args.layout = args.layout or LAYOUTS
    home = tempfile.mkdtemp(prefix="lakelog-bench-compacted-")
    spark = create_session(master="local[2]", app_name="lakelog-bench-compacted",
                           conf={"spark.driver.memory": args.driver_memory})
    layouts = {}
    try:
        for layout in args.layout:
            small = run(spark, home, args.small, layout, args)
            large = run(spark, home, args.large, layout, args)
            ratios = {m: round(large["mixes"][m]["median_s"] / small["mixes"][m]["median_s"], 2)
                      for m in args.mix}
            layouts[layout] = {"small": small, "large": large, "ratio": ratios}
            shutil.rmtree(home, ignore_errors=True)
    finally:
        spark.stop()
        shutil.rmtree(home, ignore_errors=True)
    json.dump({"changes": args.changes, "rows_per_file": shop_cdc.COMPACTED["customers"].rows_per_file,
               "layouts": layouts, "target_ratio": 2.0, "cpus": os.cpu_count(),
               "loadavg_at_start": LOAD}, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
