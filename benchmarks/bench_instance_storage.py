"""`lakelog demo` run again with nothing to do: Dagster's SQLite instance storage against lakelog's.

The demo run again over its own lake (same seed, same home) is one run of the shop pipeline's
job with no new input and no checks: it does no Spark work worth the name, and what it costs is
Dagster's: ~45 steps, each storing its events. Dagster's SQLite storage builds a SQLAlchemy
engine per event (so it compiles every statement again); lakelog's
(`lakelog.assets.instance_storage`) keeps one per file. This script lands a small demo lake
once (`lakelog demo --events 2000 --batches 1`), then runs that demo again as a whole process,
alternating two Dagster homes that differ only in their `storage:` entry —
Dagster's `sqlite:` and lakelog's `SqliteStorage` — and prints one JSON object: per storage the
median and each whole-process wall time and the demo's own seconds (its run, without the
process's start).

    python benchmarks/bench_instance_storage.py                # 5 runs each
    python benchmarks/bench_instance_storage.py --repeats 3 --home /tmp/bench-storage

The Spark server is the local one lakelog starts (`lakelog spark`), on port 15171 unless
LAKELOG_SPARK_SERVER_PORT says otherwise; stop it afterwards with `lakelog spark stop` and that
port.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from lakelog.assets.instance_storage import storage_config

LAKELOG = [sys.executable, "-m", "lakelog.cli"]


def lakelog(*args: str, env: dict[str, str]) -> tuple[float, dict]:
    started = time.perf_counter()
    done = subprocess.run([*LAKELOG, *args, "--json"], env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"lakelog {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per storage (default 5)")
    parser.add_argument("--home", help="work folder (default: a new temporary one, kept)")
    args = parser.parse_args()
    work = Path(args.home or tempfile.mkdtemp(prefix="bench-storage-"))
    lake = work / "lake"
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env.setdefault("LAKELOG_SPARK_SERVER_PORT", "15171")
    print(f"landing the demo lake in {lake}", file=sys.stderr)
    demo = ["demo", "--events", "2000", "--batches", "1", "--home", str(lake)]
    seconds, _ = lakelog(*demo, env=env)
    print(f"  {seconds:.1f} s", file=sys.stderr)

    storages = {"dagster_sqlite": lambda home: {"sqlite": {"base_dir": str(home)}},
                "lakelog_sqlite": lambda home: storage_config(str(home))}
    homes = {}
    for name, storage in storages.items():
        home = work / name
        home.mkdir(exist_ok=True)
        (home / "dagster.yaml").write_text(yaml.safe_dump({"storage": storage(home)}))
        homes[name] = home
    figures: dict[str, dict[str, list[float]]] = {n: {"wall": [], "run": []} for n in storages}
    for k in range(args.repeats + 1):  # the first round warms the server and the disk cache
        for name, home in homes.items():
            wall, report = lakelog(*demo, env={**env, "DAGSTER_HOME": str(home)})
            assert report["microbatches"] == 0 and len(report["runs"]) == 1, report
            print(f"  {'warm-up' if k == 0 else f'round {k}'} {name}: {wall:.1f} s "
                  f"(run {report['seconds']:.1f} s)", file=sys.stderr)
            if k:
                figures[name]["wall"].append(round(wall, 2))
                figures[name]["run"].append(round(report["seconds"], 2))
    print(json.dumps({
        "work": str(work), "repeats": args.repeats,
        "storages": {name: {"wall_median_s": statistics.median(f["wall"]),
                            "run_median_s": statistics.median(f["run"]), **f}
                     for name, f in figures.items()},
    }, indent=2))


if __name__ == "__main__":
    main()
