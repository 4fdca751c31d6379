"""A topic's blocking check (`log_integrity`): offsets unique and contiguous in one query,
against GX's compound-unique expectation beside the contiguity query (the suite before b518ece).

The demo's `page_views` topic is written as a Delta table of ``--rows`` records (four log
partitions, contiguous offsets) on one session; each repetition validates the whole table, read
as the check reads it, with both suites, alternating which goes first (the whole-table query: a
check of the rows added since the last one that passed joins its query with the heads checked).
Both pass. A frame over `lakelog.quality.scope.SMALL_BYTES` is cached for the validation, as the
check caches it. Per size and suite: the median (the first repetition left out) and every wall
time.

    python benchmarks/bench_topic_check.py --mode connect --rows 2000 50000 > topic_check.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql import functions as F

from bench_common import bytecode
from bench_pipeline import open_spark
from lakelog.demo.shop import TOPICS
from lakelog.lake import EmbeddedLake
from lakelog.quality.rows import ExpectNoUnexpectedRows
from lakelog.quality.scope import SMALL_BYTES
from lakelog.quality.suites import Suite, _unique, topic_suite
from lakelog.quality.validate import validate
from lakelog.spark.server import stop

TOPIC = TOPICS["page_views"]
#: The contiguity query as it was before, gaps only: uniqueness was GX's expectation.
GAPS_ONLY = """
SELECT `partition`, previous_offset, `offset` FROM (
    SELECT `partition`, `offset`,
           lag(`offset`) OVER (PARTITION BY `partition` ORDER BY `offset`) AS previous_offset
    FROM {batch}
) WHERE `offset` > previous_offset + 1
"""


def suites() -> dict[str, Suite]:
    one = topic_suite(TOPIC)
    kept = tuple(e for e in one.expectations if not isinstance(e, ExpectNoUnexpectedRows))
    before = Suite(one.name, (*kept, _unique(["partition", "offset"]),
                              ExpectNoUnexpectedRows(unexpected_rows_query=GAPS_ONLY)),
                   blocking=True, index_columns=one.index_columns)
    return {"one query": one, "GX unique + gaps query": before}


def written(lake: EmbeddedLake, rows: int) -> None:
    """`rows` records of the topic: four log partitions, offsets 0.. in each."""
    path = f"{TOPIC.path}-{rows}"
    lake.create_table(path, TOPIC.table_schema, partition_by=["partition"])
    ids = lake.spark.range(rows)
    frame = ids.select(*[
        (F.col("id") % 4).cast("int").alias(f.name) if f.name == "partition" else
        (F.col("id") / 4).cast("long").alias(f.name) if f.name == "offset" else
        F.concat(F.lit("u-"), (F.col("id") % 997).cast("string")).alias(f.name)
        if f.name in ("key", "user_id") else
        F.concat(F.lit("e-"), F.col("id").cast("string")).alias(f.name)
        if f.name == "event_id" else
        F.lit(None).cast(f.dataType).alias(f.name)
        for f in TOPIC.table_schema.fields])
    lake.write(lake.snapshot(path), frame)


def timed(lake: EmbeddedLake, rows: int, repeats: int) -> dict:
    snapshot = lake.snapshot(f"{TOPIC.path}-{rows}")
    cache = sum(f.size for f in snapshot.files()) > SMALL_BYTES
    frame = lake.read(snapshot)
    chosen = suites()
    times: dict[str, list[float]] = {name: [] for name in chosen}
    for rep in range(repeats):
        order = list(chosen.items())
        for name, suite in (order if rep % 2 == 0 else reversed(order)):
            started = time.perf_counter()
            [outcome] = validate(frame, [suite], cache=cache)
            times[name].append(round(time.perf_counter() - started, 3))
            if not outcome.success:
                raise SystemExit(f"{name} failed on {rows} rows: {outcome.failures}")
    return {"cached": cache, **{name: {"median_s": round(statistics.median(t[1:]), 3), "seconds": t}
                                for name, t in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("classic", "connect"), default="connect")
    parser.add_argument("--rows", type=int, nargs="+", default=[2000, 50000])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--memory", default="4g")
    parser.add_argument("--port", type=int, default=15191, help="the benchmark's Connect server")
    args = parser.parse_args()
    if args.repeats < 2:
        parser.error("--repeats must be at least 2: the first repetition is left out")
    root = Path(tempfile.mkdtemp(prefix="bench-topic-check-"))
    spark, server = open_spark(args.mode, args, root / "server")
    try:
        lake = EmbeddedLake(spark, str(root / "lake"))
        out = {"mode": args.mode, "bytecode": bytecode(), "sizes": {}}
        for rows in args.rows:
            written(lake, rows)
            out["sizes"][rows] = timed(lake, rows, args.repeats)
            print(f"{rows} rows: {out['sizes'][rows]}", file=sys.stderr)
    finally:
        spark.stop()
        if server is not None:
            stop(server)
        shutil.rmtree(root, ignore_errors=True)
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
