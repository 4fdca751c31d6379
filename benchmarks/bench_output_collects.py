"""A microbatch's outputs collected by one query against one by one, interleaved (issue 12).

`lakelog.consumers.writes.collected` collects the rows of a batch's outputs written in this
process by one query (`driver_write.collect_together`); before, each write collected its own
(one job each and, over Spark Connect, a round trip each). On one session and one primed lake
(`bench_pipeline.py`'s: ``--prime-events`` untimed, then ``--kind-events`` new events), each
chosen consumer runs microbatches of ``--records`` records, alternating the two ways batch by
batch (``together`` first in even pairs, ``one by one`` first in odd ones), so both meet the same
server, lake size and load. Per way: the median and each batch's wall time, and its round trips
(Connect) or Spark jobs (classic).

    python benchmarks/bench_output_collects.py --mode connect \
        --only aggregate.cart window.user_sessions > output_collects.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from bench_pipeline import (
    SHOP, SparkWork, chosen_consumers, land_new_records, now, one_batch, open_spark, prime_lake,
    say,
)
from lakelog.consumers import writes
from lakelog.log import ingest
from lakelog.lake import EmbeddedLake
from lakelog.spark.server import stop as stop_server

WAYS = ("together", "one by one")


def one_by_one(*_args, **_kwargs) -> dict:
    """`writes.collected` finding nothing to collect: each write collects its own rows."""
    return {}


def measure(lake: EmbeddedLake, work: SparkWork, consumer, args) -> dict:
    capped = replace(consumer, max_records_per_batch=args.records)
    together = writes.collected
    runs: dict[str, list[dict]] = {way: [] for way in WAYS}
    for _ in range(args.warmup):
        one_batch(lake, capped)
    for pair in range(args.pairs):
        order = WAYS if pair % 2 == 0 else WAYS[::-1]
        for way in order:
            writes.collected = together if way == "together" else one_by_one
            try:
                with work.counted() as found:
                    result = one_batch(lake, capped)
            finally:
                writes.collected = together
            if result is None:
                return summarize(runs)
            found["records"] = result.records
            if "sites" in found:  # round trips (count, seconds) by lakelog call site
                found["sites"] = {" ".join(map(str, k)) if isinstance(k, tuple) else str(k): v
                                  for k, v in found["sites"].items()}
            runs[way].append(found)
    return summarize(runs)


def summarize(runs: dict[str, list[dict]]) -> dict:
    out = {}
    for way, found in runs.items():
        seconds = [f["seconds"] for f in found]
        out[way] = {
            "median_s": round(statistics.median(seconds), 3) if seconds else None,
            "seconds": [round(s, 3) for s in seconds],
            **{key: [f[key] for f in found]
               for key in ("round_trips", "spark_jobs", "records", "sites")
               if found and key in found[0]},
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("classic", "connect"), default="connect")
    p.add_argument("--only", nargs="+", default=["aggregate.cart", "window.user_sessions"])
    p.add_argument("--records", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--prime-events", type=int, default=5000)
    p.add_argument("--kind-events", type=int, default=350_000)
    p.add_argument("--shop-changes", type=int, default=2000)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--memory", default="4g")
    p.add_argument("--port", type=int, default=15161)
    args = p.parse_args()
    work_dir = Path(tempfile.mkdtemp(prefix="lakelog-bench-collects-"))
    out: dict = {"config": vars(args), "loadavg_at_start": os.getloadavg()}
    spark, server = open_spark(args.mode, args, work_dir / "spark")
    try:
        lake = EmbeddedLake(spark, str(work_dir / "lake"))
        say(f"{args.mode}: priming a lake with {args.prime_events:,} events (untimed)")
        prior = prime_lake(lake, args.prime_events, args.only)
        land_new_records(lake, prior, args.kind_events, args.shop_changes)
        ingest.ingest_topics(lake, lake.spark, [SHOP.topic("orders")], now=now)
        work = SparkWork(spark, args.mode)
        for consumer in chosen_consumers(args.only):
            say(f"{args.mode}: {consumer.name}")
            out[consumer.name] = measure(lake, work, consumer, args)
        out["loadavg_at_end"] = os.getloadavg()
    finally:
        spark.stop()
        if server is not None:
            stop_server(server)
        shutil.rmtree(work_dir, ignore_errors=True)
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
