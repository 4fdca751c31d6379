"""Per-kind microbatches of two versions of lakelog, alternated: a change's effect on each kind.

    python benchmarks/bench_kinds_ab.py --before babecb4 --rounds 2 > kinds-ab.json
    python benchmarks/bench_kinds_ab.py --before babecb4 --mode classic > kinds-ab-classic.json

Each side is a run of `bench_pipeline.py`'s per-kind set-up and batches in a process of its own,
with the code of its version on ``PYTHONPATH``: `--before` (a commit, checked out into a
temporary worktree) and the working tree ("after"). A run primes a lake with 5,000 events,
lands `--events` more and the shop database's changes (all ingested), then times `--batches`
microbatches of 1,000 records per consumer (`--only` some); each kind's figure is the median of
its batches after the first five. The sides alternate `--rounds` times (before, after, before,
...).

Over Spark Connect (the default) every run shares one server, started for the benchmark with
the after side's settings on `--port`, and warmed by an untimed run of the after side first, so
neither side meets a colder JIT than the other (runs that each start a server, or that share
one without a warm-up, mostly measure which ran first). Each run sets its own version's SQL
session defaults (`LOCAL_DEFAULTS`' ``spark.sql.*`` that a session may set) on its session;
JVM flags and static settings are the server's. With ``--mode classic`` each run is a
``local[2]`` session of its own, with its own version's settings.

Prints one JSON object: per kind both sides' medians, the change of their means in per cent,
and for a kind with a late table the rows each run's timed batches sent there (a side that drops
records is cheaper for it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The top-level packages that an installed lakelog serves as `lakelog.<name>`.
EXTRA_PACKAGES = ("assets", "resources", "sensors")


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def before_tree(commit: str, work: Path) -> Path:
    """A ``PYTHONPATH`` folder holding `commit`'s lakelog as the installed package lays it out."""
    checkout = work / "checkout"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(checkout),
                    commit], check=True)
    tree = work / "path"
    shutil.copytree(checkout / "platform" / "lakelog", tree / "lakelog")
    for name in EXTRA_PACKAGES:
        shutil.copytree(checkout / name, tree / "lakelog" / name)
    (work / "dbt_like_views").symlink_to(checkout / "dbt_like_views")
    return tree


def child(args: argparse.Namespace) -> dict:
    """One run, in this process: the set-up, then `--batches` batches per kind."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_pipeline as bp
    from lakelog.lake import EmbeddedLake
    from lakelog.log import ingest
    from lakelog.spark.session import LOCAL_DEFAULTS, create_session

    if args.mode == "classic":
        spark = create_session(master="local[2]", app_name="bench-kinds-ab")
    else:
        spark = create_session(remote=f"sc://127.0.0.1:{args.port}", app_name="bench-kinds-ab")
        for key, value in LOCAL_DEFAULTS.items():
            if key.startswith("spark.sql.") and spark.conf.isModifiable(key):
                spark.conf.set(key, value)
    root = Path(tempfile.mkdtemp(prefix="bench-kinds-ab-"))
    try:
        lake = EmbeddedLake(spark, str(root / "lake"))
        prior = bp.prime_lake(lake, 5000, args.only)
        bp.land_new_records(lake, prior, args.events, args.shop_changes)
        ingest.ingest_topics(lake, spark, [bp.SHOP.topic("orders")], now=bp.now)
        medians, late = {}, {}
        for consumer in bp.chosen_consumers(args.only):
            capped = replace(consumer, max_records_per_batch=1000)
            seconds, dropped = [], []
            for _ in range(args.batches):
                before = bp.late_rows(lake, consumer)
                started = time.perf_counter()
                if bp.one_batch(lake, capped) is None:
                    break
                seconds.append(time.perf_counter() - started)
                if before is not None:
                    dropped.append(bp.late_rows(lake, consumer) - before)
            timed = seconds[5:]
            medians[consumer.name] = round(statistics.median(timed), 3) if timed else None
            if dropped:
                late[consumer.name] = sum(dropped[5:])
        return {"medians": medians, "late_rows": late}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(side: str, path: str, args: argparse.Namespace) -> dict:
    say(f"{side} run")
    argv = [sys.executable, __file__, "--child", "--mode", args.mode, "--port", str(args.port),
            "--batches", str(args.batches), "--events", str(args.events),
            "--shop-changes", str(args.shop_changes), "--only", *args.only]
    done = subprocess.run(argv, env={**os.environ, "PYTHONPATH": path}, stdout=subprocess.PIPE,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", help="the commit to compare the working tree with")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--mode", choices=("connect", "classic"), default="connect")
    p.add_argument("--batches", type=int, default=14, help="batches per kind; 5 untimed")
    p.add_argument("--events", type=int, default=1_000_000,
                   help="new events for the batches (orders are ~1.2 %%)")
    p.add_argument("--shop-changes", type=int, default=40_000)
    p.add_argument("--port", type=int, default=15163)
    p.add_argument("--only", nargs="*", default=[])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args)), flush=True)
        os._exit(0)  # no lingering Spark threads
    if not args.before:
        p.error("--before is required")

    from lakelog.spark.server import ServerConfig, ensure_running, stop

    work = Path(tempfile.mkdtemp(prefix="bench-kinds-ab-trees-"))
    server = None
    try:
        sides = {"before": str(before_tree(args.before, work)), "after": "/nonexistent"}
        if args.mode == "connect":
            server = ServerConfig(port=args.port, master="local[2]",
                                  state_dir=work / "spark")
            ensure_running(server)
            run("after (warm-up, untimed)", sides["after"], args)
        runs: dict[str, list[dict]] = {"before": [], "after": []}
        for _ in range(args.rounds):
            for side in ("before", "after"):
                runs[side].append(run(side, sides[side], args))
    finally:
        if server is not None:
            stop(server)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                        str(work / "checkout")], check=False)
        shutil.rmtree(work, ignore_errors=True)
    kinds = {}
    for name in runs["after"][0]["medians"]:
        got = {side: [r["medians"][name] for r in runs[side]
                      if r["medians"].get(name) is not None] for side in runs}
        if all(got.values()):
            b, a = statistics.mean(got["before"]), statistics.mean(got["after"])
            kinds[name] = {"before": got["before"], "after": got["after"],
                           "change_pct": round(100 * (a / b - 1), 1)}
            if name in runs["after"][0]["late_rows"]:  # a side that drops records is cheaper
                kinds[name]["late_rows"] = {side: [r["late_rows"].get(name) for r in runs[side]]
                                            for side in runs}
    print(json.dumps({"config": vars(args), "kinds": kinds}, indent=1))


if __name__ == "__main__":
    main()
