"""Spark Connect's reattachable execution against plain execution, on a server of this machine.

    python benchmarks/bench_reattach.py > reattach.json

With reattachable execution (Spark Connect's default) the server keeps a query's results until
the client releases them, in a ReleaseExecute RPC the client sends on a thread of its own
after each query, so that a stream of results broken by the network can be picked up again.
lakelog turns it off for a server on a loopback address (`lakelog.spark.session.on_loopback`).
This benchmark starts a local server (`local[2]`, on `--port`) and alternates the two modes on
one session, in blocks of `--block` queries, for `--rounds` rounds, on the round trips a
microbatch makes: a batch's held records (1,000 rows of Arrow data) aggregated and collected
(`driver_write.collect`), the same rows kept by a local checkpoint and let go again
(`BatchInput.cached`), and a small collect. Per mode and kind: the median and 90th percentile
of a round trip, and the CPU a round trip cost this process (all its threads, the client's
release threads included) and the server's JVM (from /proc). Prints one JSON object.
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

import pyarrow as pa
from pyspark.sql import functions as F

from bench_common import cpu_seconds
from lakelog.lake.driver_write import collect
from lakelog.spark import local_checkpoints
from lakelog.spark.server import ServerConfig, ensure_running, stop
from lakelog.spark.session import create_session

MODES = ("reattachable", "plain")


def rows(n: int) -> pa.Table:
    return pa.table({
        "partition": pa.array([i % 4 for i in range(n)], pa.int32()),
        "offset": pa.array(range(n), pa.int64()),
        "key": pa.array([f"user-{i % 97}" for i in range(n)]),
        "value": pa.array([float(i) for i in range(n)]),
    })


def kinds(spark, table: pa.Table) -> dict:
    def aggregated() -> None:
        df = spark.createDataFrame(table).groupBy("key").agg(
            F.count("*").alias("n"), F.sum("value").alias("total"))
        collect(df)

    def checkpointed() -> None:
        kept = spark.createDataFrame(table).where(F.col("value") >= 0).localCheckpoint(eager=True)
        local_checkpoints.free(kept)

    def small() -> None:
        collect(spark.createDataFrame(table.slice(0, 10)).select("key", "offset"))

    return {"aggregate and collect": aggregated, "local checkpoint": checkpointed,
            "small collect": small}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=15172)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--block", type=int, default=20, help="queries per mode and kind in a row")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=60, help="untimed queries per kind first")
    args = parser.parse_args()

    state = Path(tempfile.mkdtemp(prefix="bench-reattach-"))
    config = ServerConfig(port=args.port, master="local[2]", state_dir=state)
    try:
        server = ensure_running(config)
        spark = create_session(remote=config.url, app_name="bench-reattach")
        work = kinds(spark, rows(args.rows))
        for run in work.values():
            for _ in range(args.warmup):
                run()
        seconds = {m: {k: [] for k in work} for m in MODES}
        client = {m: {k: 0.0 for k in work} for m in MODES}
        served = {m: {k: 0.0 for k in work} for m in MODES}
        for _ in range(args.rounds):
            for mode in MODES:
                if mode == "plain":
                    spark.client.disable_reattachable_execute()
                else:
                    spark.client.enable_reattachable_execute()
                for kind, run in work.items():
                    process, jvm = time.process_time(), cpu_seconds(server.pid)
                    for _ in range(args.block):
                        start = time.perf_counter()
                        run()
                        seconds[mode][kind].append(time.perf_counter() - start)
                    time.sleep(0.05)  # releases sent after the block's last query land in it
                    client[mode][kind] += time.process_time() - process
                    served[mode][kind] += cpu_seconds(server.pid) - jvm
        queries = args.rounds * args.block
        out = {
            "config": vars(args),
            "kinds": {
                kind: {
                    mode: {
                        "median_ms": round(statistics.median(seconds[mode][kind]) * 1e3, 2),
                        "p90_ms": round(statistics.quantiles(seconds[mode][kind], n=10)[-1]
                                        * 1e3, 2),
                        "client_cpu_ms": round(client[mode][kind] / queries * 1e3, 2),
                        "server_cpu_ms": round(served[mode][kind] / queries * 1e3, 2),
                    }
                    for mode in MODES
                }
                for kind in work
            },
        }
        spark.stop()
    finally:
        stop(config)
        shutil.rmtree(state, ignore_errors=True)
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
