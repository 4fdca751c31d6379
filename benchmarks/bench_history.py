"""Benchmark: one microbatch of a captured table's consumer (compacted + history) against the
size of its history table.

A history table (`lakelog.cdc.history`) keeps every version of every row with its validity
interval; a batch re-derives the intervals of the keys it touches and rewrites the files their
versions are in (files of `rows_per_file` rows clustered by key). Per size, the demo's
``customers`` are built as `bench_compacted.py` builds them (its merge-on-read compacted table,
as the demo declares it) with a history of one version per key in the layout the engine writes;
then per repetition and change mix (`bench_compacted`'s: ``uniform``, updates of keys drawn
from the whole table; ``recent``, inserts and changes among the newest keys) `--changes` changes
are produced (untimed) and one microbatch of ``tables.customers`` is timed. Repetition 0 is a
warm-up. ``ratio`` is, per mix, the large history's median over the small one's; the
target of `bench_compacted.py`, which measures the compacted table alone, is 2: the cost must
follow the changes, not the table.

Prints one JSON object; progress on stderr. Example:

    python benchmarks/bench_history.py --small 20000 --large 1000000 --changes 1000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

from bench_compacted import build, progress, timed, timed_batches
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakelog.demo import shop_cdc
from lakelog.lake import EmbeddedLake
from lakelog.lake.upsert import write_clustered
from lakelog.spark.session import create_session

LOAD = os.getloadavg()
COMPACTED = shop_cdc.COMPACTED["customers"]
HISTORY = shop_cdc.HISTORY["customers"]
CONSUMER = shop_cdc.CONSUMERS["tables.customers"]


def build_history(spark: SparkSession, lake: EmbeddedLake, keys: int) -> None:
    """The compacted table of `keys` customers, and their history: each row's one version,
    current since the row's commit."""
    build(spark, lake, COMPACTED, keys)
    schema = HISTORY.output.schema
    rows = lake.read(lake.snapshot(COMPACTED.path)).select(
        *[c for c in COMPACTED.output.schema.fieldNames() if c in schema.fieldNames()],
        F.col("_commit_time").alias("valid_from"),
        F.lit(None).cast("timestamp").alias("valid_to"),
        F.lit(True).alias("is_current"),
    ).select(*schema.fieldNames())
    lake.create_table(HISTORY.path, schema)
    write_clustered(lake, lake.snapshot(HISTORY.path), rows, keys=HISTORY.key,
                    rows_per_file=HISTORY.rows_per_file, rows=keys)


def run(spark: SparkSession, home: str, keys: int, args: argparse.Namespace) -> dict:
    lake = EmbeddedLake(spark, os.path.join(home, str(keys)))
    progress(f"building {keys:,} customers and their history")
    _, built = timed(lambda: build_history(spark, lake, keys))
    result = {"keys": keys, "history_files": len(lake.snapshot(HISTORY.path).files()),
              "build_s": round(built, 1), "mixes": {}}
    topics = {COMPACTED.topic.name: COMPACTED.topic}
    position = 10**12
    for mix in args.mix:
        seconds, rewritten, position = timed_batches(
            spark, lake, CONSUMER, topics, HISTORY.path, keys, mix, args, position,
            label=f"{keys:,} keys")
        result["mixes"][mix] = {"seconds": seconds,
                                "median_s": round(statistics.median(seconds), 3),
                                "history_files_rewritten": rewritten}
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", type=int, default=20_000)
    p.add_argument("--large", type=int, default=1_000_000)
    p.add_argument("--changes", type=int, default=1_000)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--mix", action="append", choices=["uniform", "recent"])
    p.add_argument("--driver-memory", default="4g")
    args = p.parse_args()
    args.mix = args.mix or ["uniform", "recent"]
    home = tempfile.mkdtemp(prefix="lakelog-bench-history-")
    spark = create_session(master="local[2]", app_name="lakelog-bench-history",
                           conf={"spark.driver.memory": args.driver_memory})
    try:
        small = run(spark, home, args.small, args)
        large = run(spark, home, args.large, args)
    finally:
        spark.stop()
        shutil.rmtree(home, ignore_errors=True)
    json.dump({"changes": args.changes, "rows_per_file": HISTORY.rows_per_file,
               "small": small, "large": large,
               "ratio": {m: round(large["mixes"][m]["median_s"] / small["mixes"][m]["median_s"], 2)
                         for m in args.mix},
               "target_ratio": 2.0,
               "cpus": os.cpu_count(), "loadavg_at_start": LOAD}, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
