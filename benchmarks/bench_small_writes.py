"""Small writes by pyarrow against Spark write jobs, side by side in one process (issue 12).

One lake primed as `bench_pipeline.py` primes it, then per consumer `--batches` microbatches of
`--records` records, the write path alternated batch by batch: a Spark write job per output
(`SMALL_WRITE_ROWS` = -1, what every write was before `lakelog.lake.driver_write`) or the rows
collected and written by pyarrow (the default). Both paths do the same work on the same kind
of records in the same warm session; the first two batches are not counted. Prints JSON: per
consumer the median seconds of each path and their ratio.

    python benchmarks/bench_small_writes.py --consumers aggregate.cart join.search_clicks
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import bench_pipeline as bp
from lakelog.lake import EmbeddedLake, driver_write
from lakelog.spark.session import create_session

DEFAULT = ["product_stats", "aggregate.cart", "window.revenue_per_minute",
           "window.order_value_rolling", "window.user_sessions", "join.search_clicks",
           "join.orders_enriched", "join.customer_orders", "tables.products"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--consumers", nargs="+", default=DEFAULT)
    parser.add_argument("--events", type=int, default=1_200_000,
                        help="new events landed for the batches (orders are ~1.2%%)")
    parser.add_argument("--changes", type=int, default=40_000, help="shop database changes")
    parser.add_argument("--records", type=int, default=1000, help="records per microbatch")
    parser.add_argument("--batches", type=int, default=14, help="per consumer, both paths")
    args = parser.parse_args()
    spark = create_session(master="local[2]", app_name="bench-small-writes",
                           conf={"spark.driver.memory": "4g"})
    work = Path(tempfile.mkdtemp(prefix="lakelog-bench-small-writes-"))
    small = driver_write.SMALL_WRITE_ROWS
    out: dict = {"config": {**vars(args), "loadavg_at_start": os.getloadavg()}, "consumers": {}}
    try:
        lake = EmbeddedLake(spark, str(work / "lake"))
        bp.say("priming a lake with 20,000 events")
        prior = bp.prime_lake(lake, 20_000, args.consumers)
        bp.say(f"landing {args.events:,} events and {args.changes:,} shop changes")
        bp.land_new_records(lake, prior, args.events, args.changes)
        bp.ingest.ingest_topics(lake, spark, [bp.SHOP.topic("orders")], now=bp.now)
        for name in args.consumers:
            consumer = replace(bp.SHOP.all_consumers[name], max_records_per_batch=args.records)
            seconds: dict[str, list[float]] = {"spark": [], "pyarrow": []}
            for i in range(args.batches):
                path = "pyarrow" if i % 2 else "spark"
                driver_write.SMALL_WRITE_ROWS = small if path == "pyarrow" else -1
                started = time.perf_counter()
                result = bp.one_batch(lake, consumer)
                if result is None or result.records == 0:
                    break
                if i >= 2:
                    seconds[path].append(time.perf_counter() - started)
            driver_write.SMALL_WRITE_ROWS = small
            found = {p: round(statistics.median(s), 3) if s else None for p, s in seconds.items()}
            found["batches_each"] = min(len(s) for s in seconds.values())
            if found["spark"] and found["pyarrow"]:
                found["ratio"] = round(found["pyarrow"] / found["spark"], 2)
            out["consumers"][name] = found
            bp.say(f"{name}: {found}")
        out["config"]["loadavg_at_end"] = os.getloadavg()
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    json.dump(out, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
