"""The percolator's match query (every event against every stored query) at a chosen size, this
tree's code against an earlier commit's, alternated in one Spark session.

The demo's `PRICE_ALERTS` declaration, its events `--events` product changes and its queries
`--queries` saved alerts without a category or a price limit, so every pair reaches the
keyword's case-insensitive `contains` (the costly condition). The earlier commit's
`lakelog/search/percolator.py` is loaded from git as a module of its own; the declaration is
rebuilt with its classes. Timed: `matches(...).count()`, `--rounds` times per side.

    python benchmarks/bench_percolator.py --before 999668d --events 2000 --queries 1000
    python benchmarks/bench_percolator.py --before 999668d --remote sc://127.0.0.1:15161
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql import types as T

from lakelog.demo.shop_search import PRICE_ALERTS
from lakelog.search import percolator as current
from lakelog.spark.session import create_session

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["Lamp", "Chair", "Desk", "Sofa", "Table", "Shelf", "Rug", "Mirror", "Clock", "Vase"]
AFTER = T.StructType([T.StructField("product_id", T.StringType()),
                      T.StructField("name", T.StringType()),
                      T.StructField("category", T.StringType()),
                      T.StructField("price", T.DoubleType())])
EVENTS = T.StructType([T.StructField("after", AFTER), T.StructField("event_id", T.StringType()),
                       T.StructField("partition", T.IntegerType()),
                       T.StructField("offset", T.LongType()),
                       T.StructField("event_time", T.TimestampType())])


def module_at(commit: str):
    """`lakelog/search/percolator.py` as it was at `commit`, imported under a name of its own."""
    source = subprocess.run(["git", "-C", str(ROOT), "show",
                             f"{commit}:platform/lakelog/search/percolator.py"],
                            check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "percolator_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("percolator_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def declared_with(module):
    """`PRICE_ALERTS` built from `module`'s classes."""
    fields = {f.name: getattr(PRICE_ALERTS, f.name) for f in dataclasses.fields(PRICE_ALERTS)}
    fields["conditions"] = tuple(module.Condition(c.event, c.op, c.query)
                                 for c in PRICE_ALERTS.conditions)
    return module.Percolator(**fields)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="the commit to compare this tree with")
    p.add_argument("--events", type=int, default=2000)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=6, help="per side; the first is not counted")
    p.add_argument("--remote", help="a Spark Connect URL; default a classic local[2] session")
    args = p.parse_args()
    spark = (create_session(remote=args.remote, app_name="bench-percolator") if args.remote
             else create_session(master="local[2]", app_name="bench-percolator",
                                 conf={"spark.sql.shuffle.partitions": "2"}))
    rnd = random.Random(7)
    events = spark.createDataFrame(
        [((f"p{i}", f"{rnd.choice(WORDS)} {rnd.choice(WORDS)} Édition {i}", "home",
           float(rnd.randint(1, 500))), f"e{i}", i % 4, i, None) for i in range(args.events)],
        EVENTS).localCheckpoint(eager=True)
    schema = PRICE_ALERTS.state.schema
    alerts = [{"alert_id": f"a{j}", "user_id": f"u{j}",
               "keyword": rnd.choice(WORDS).lower() + ("" if j % 3 else "x")}
              for j in range(args.queries)]
    queries = spark.createDataFrame([tuple(a.get(f.name) for f in schema.fields) for a in alerts],
                                    schema).localCheckpoint(eager=True)
    before = module_at(args.before)
    sides = {"before": (before, declared_with(before)), "after": (current, PRICE_ALERTS)}
    seconds: dict[str, list[float]] = {"before": [], "after": []}
    found: dict[str, int] = {}
    for _ in range(args.rounds):
        for side, (module, declared) in sides.items():
            started = time.perf_counter()
            found[side] = module.matches(declared, events, queries, batch=1).count()
            seconds[side].append(round(time.perf_counter() - started, 3))
    print(json.dumps({
        "config": {**vars(args), "mode": "connect" if args.remote else "classic",
                   "pairs": args.events * args.queries},
        "matches": found,
        "seconds": seconds,
        "median_s": {side: round(statistics.median(s[1:]), 3) for side, s in seconds.items()},
    }, indent=1))


if __name__ == "__main__":
    main()
