"""Benchmark: one microbatch of a captured table's consumer (compacted + history) against the
size of its history table: its keys, and the versions it keeps of each.

A history table (`lakelog.cdc.history`) keeps every version of every row with its validity
interval; a batch of changes that come after the stored versions rewrites only the files of
open versions of the keys it touches (files of `rows_per_file` rows clustered by key, open and
closed versions apart), and adds the versions it closes. Per size, the demo's ``customers`` are
built as `bench_compacted.py` builds them (its merge-on-read compacted table, as the demo
declares it) with a history of ``versions`` versions per key (the last one current) in the
layout the engine writes; then per repetition and change mix (`bench_compacted`'s:
``uniform``, updates of keys drawn from the whole table; ``recent``, inserts and changes among
the newest keys) `--changes` changes are produced (untimed) and one microbatch of
``tables.customers`` is timed. Repetition 0 is a warm-up.

Three sizes: ``small`` (`--small` keys, one version each), ``deep`` (as many keys, `--versions`
versions each) and ``large`` (`--large` keys, one version each; 0 leaves it out). ``ratio``
is, per mix, the deep or large table's median over the small one's. The cost must follow the
versions a batch changes: ``deep`` against ``small`` should be about 1 (the target here is 2,
as `bench_compacted.py`'s for its compacted table alone); ``large`` against ``small`` follows
the keys, which a copy-on-write history rewrites (its open versions).

Prints one JSON object; progress on stderr. Example:

    python benchmarks/bench_history.py --small 20000 --versions 50 --large 1000000 --changes 1000
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


def build_history(spark: SparkSession, lake: EmbeddedLake, keys: int, versions: int) -> None:
    """The compacted table of `keys` customers, and their history: `versions` versions of each
    row a minute apart, the last current since the row's commit."""
    build(spark, lake, COMPACTED, keys)
    schema = HISTORY.output.schema
    current = lake.read(lake.snapshot(COMPACTED.path))
    step = F.make_dt_interval(F.lit(0), F.lit(0), versions - 1 - F.col("version"))
    rows = current.crossJoin(spark.range(versions).withColumnRenamed("id", "version")).select(
        *[c for c in COMPACTED.output.schema.fieldNames()
          if c in schema.fieldNames() and c not in ("_position", "_commit_time")],
        # Older versions of a key sort before its later ones, all before the changes timed.
        F.lpad(F.hex(F.col("version") * 2**24 + F.col("customer_id")), 32, "0").alias("_position"),
        (F.col("_commit_time") - step).alias("_commit_time"),
        (F.col("_commit_time") - step).alias("valid_from"),
        F.when(F.col("version") < versions - 1,
               F.col("_commit_time") - step + F.expr("INTERVAL 1 MINUTE")).alias("valid_to"),
        (F.col("version") == versions - 1).alias("is_current"),
    ).select(*schema.fieldNames())
    lake.create_table(HISTORY.path, schema, properties=HISTORY.output.layout or None)
    write_clustered(lake, lake.snapshot(HISTORY.path), rows, keys=HISTORY.key,
                    rows_per_file=HISTORY.rows_per_file, rows=keys * versions)


def run(spark: SparkSession, home: str, name: str, keys: int, versions: int,
        args: argparse.Namespace) -> dict:
    lake = EmbeddedLake(spark, os.path.join(home, name))
    progress(f"building {keys:,} customers and their history, {versions} versions each")
    _, built = timed(lambda: build_history(spark, lake, keys, versions))
    result = {"keys": keys, "versions": versions,
              "history_files": len(lake.snapshot(HISTORY.path).files()),
              "build_s": round(built, 1), "mixes": {}}
    topics = {COMPACTED.topic.name: COMPACTED.topic}
    position = 10**12
    for mix in args.mix:
        seconds, rewritten, position = timed_batches(
            spark, lake, CONSUMER, topics, HISTORY.path, keys, mix, args, position,
            label=f"{keys:,} keys x {versions}")
        result["mixes"][mix] = {"seconds": seconds,
                                "median_s": round(statistics.median(seconds), 3),
                                "history_files_rewritten": rewritten}
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", type=int, default=20_000)
    p.add_argument("--versions", type=int, default=50)
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
    sizes = {"small": (args.small, 1), "deep": (args.small, args.versions),
             **({"large": (args.large, 1)} if args.large else {})}
    try:
        found = {name: run(spark, home, name, keys, versions, args)
                 for name, (keys, versions) in sizes.items()}
    finally:
        spark.stop()
        shutil.rmtree(home, ignore_errors=True)
    small = found["small"]["mixes"]
    json.dump({"changes": args.changes, "rows_per_file": HISTORY.rows_per_file, **found,
               "ratio": {name: {m: round(found[name]["mixes"][m]["median_s"]
                                    / small[m]["median_s"], 2) for m in args.mix}
                         for name in found if name != "small"},
               "target_ratio": {"deep": 2.0},
               "cpus": os.cpu_count(), "loadavg_at_start": LOAD}, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
