"""Snapshots of a local lake's tables: loads shared by version against a delta-rs load each time.

A lake of `--tables` tables is built by delta-rs and pyarrow alone (no Spark). Each round
commits one small write to every table, then takes `--snapshots` snapshots of each, as a
microbatch's steps do (the plan, the read, the checks, the next step's plan). Rounds alternate
between the two ways, in one process: `shared` (lakelog's default, `lakelog.lake.loaded_tables`)
and `each` (every snapshot a delta-rs load, `loaded_tables.VERSIONS` = 0, as before). Prints
JSON: per way the median milliseconds a snapshot over the rounds after the first two, and the
delta-rs loads it made.

    python benchmarks/bench_snapshot_loads.py --tables 20 --rounds 12
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from deltalake import DeltaTable
from pyspark.sql import types as T

from lakelog.lake import EmbeddedLake, loaded_tables

SCHEMA = T.StructType([T.StructField("id", T.LongType()), T.StructField("name", T.StringType())])
WAYS = {"shared": loaded_tables.VERSIONS, "each": 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--snapshots", type=int, default=5, help="snapshots of a table a round")
    parser.add_argument("--rounds", type=int, default=12, help="rounds of each way")
    args = parser.parse_args()

    def no_spark():
        raise RuntimeError("this benchmark never starts Spark")

    loads = 0
    load = DeltaTable.__init__

    def counted(self, *a, **k):
        nonlocal loads
        loads += 1
        load(self, *a, **k)

    DeltaTable.__init__ = counted
    with tempfile.TemporaryDirectory(prefix="lakelog-bench-snapshots-") as root:
        lake = EmbeddedLake(no_spark, root)
        paths = [f"t{i}" for i in range(args.tables)]
        for path in paths:
            lake.create_table(path, SCHEMA)
        seconds: dict[str, list[float]] = {way: [] for way in WAYS}
        made = dict.fromkeys(WAYS, 0)
        for r in range(args.rounds):
            for way, versions in WAYS.items():
                loaded_tables.VERSIONS = versions
                for path in paths:  # the round's commits, not timed
                    lake.write_rows(lake.snapshot(path), [{"id": r, "name": way}])
                before, started = loads, time.perf_counter()
                for _ in range(args.snapshots):
                    for path in paths:
                        lake.snapshot(path).files()
                took = time.perf_counter() - started
                if r >= 2:
                    seconds[way].append(took / (args.snapshots * len(paths)))
                    made[way] += loads - before
    out = {
        "config": vars(args),
        **{way: {"ms_per_snapshot": round(statistics.median(s) * 1000, 3),
                 "delta_rs_loads": made[way],
                 "snapshots": len(s) * args.snapshots * args.tables}
           for way, s in seconds.items()},
    }
    out["ratio"] = round(out["shared"]["ms_per_snapshot"] / out["each"]["ms_per_snapshot"], 3)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
