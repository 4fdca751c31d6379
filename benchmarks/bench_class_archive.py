"""A Spark server's life without a class-data sharing archive against one with the archive the
first left (`lakelog.spark.class_archive`): what every test server paid in a CI run's new
virtual environment before the test run wrote the archive first (tests/processes.py).

Each round starts a server on a new port with an empty archive folder (it loads its classes from
the jars and writes an archive as it stops), then one that maps that archive. A life is
`ensure_running`, one aggregation from a new Python process (as a CLI or `dagster` subprocess
does), and `stop`. Per life: the wall time, the machine's CPU seconds over it (``/proc/stat``:
the server, its query's process and its archive dump, with the machine otherwise idle), and
the time to start, to answer the query and to stop. Run it on an idle machine.

    python benchmarks/bench_class_archive.py --rounds 3 > class_archive.json
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
from pathlib import Path

from bench_common import free_port, machine_jiffies
from lakelog.spark.server import ServerConfig, ensure_running, stop

QUERY = ("import os; from lakelog.spark.server import ServerConfig; "
         "from lakelog.spark.session import open_session; "
         "spark = open_session(server=ServerConfig.from_environment(os.environ)); "
         "spark.range(100000).selectExpr('id % 7 AS k').groupBy('k').count().collect()")


def machine_busy_seconds() -> float:
    """CPU seconds the machine has spent busy since boot (all cores; idle and iowait left out)."""
    total, idle = machine_jiffies()
    return (total - idle) / os.sysconf("SC_CLK_TCK")


def life(folder: Path, memory: str) -> dict[str, float]:
    """Start a server on a new port with `folder`'s archives, query it once, stop it."""
    env = {"LAKELOG_SPARK_SERVER_PORT": str(free_port()),
           "LAKELOG_SPARK_SERVER_DIR": str(folder / "state"),
           "LAKELOG_SPARK_SERVER_MEMORY": memory,
           "LAKELOG_SPARK_SERVER_CLASS_ARCHIVES": str(folder / "archives")}
    config = ServerConfig.from_environment(env)
    busy, began = machine_busy_seconds(), time.monotonic()
    try:
        ensure_running(config)
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", QUERY], env={**os.environ, **env}, check=True,
                       capture_output=True, timeout=600)
        answered = time.monotonic()
    finally:
        stop(config)
    ended = time.monotonic()
    return {"wall_s": round(ended - began, 2), "cpu_s": round(machine_busy_seconds() - busy, 2),
            "start_s": round(started - began, 2), "query_s": round(answered - started, 2),
            "stop_s": round(ended - answered, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory", default="3g", help="the server's memory (the test server's)")
    args = parser.parse_args()
    sides: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
    for _ in range(args.rounds):
        folder = Path(tempfile.mkdtemp(prefix="bench-class-archive-"))
        try:
            sides["without"].append(life(folder, args.memory))  # writes the archive as it stops
            if not any((folder / "archives").glob("*.jsa")):
                raise SystemExit("the first server kept no archive")
            sides["with"].append(life(folder, args.memory))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print(json.dumps({side: lives[-1] for side, lives in sides.items()}), file=sys.stderr)
    print(json.dumps({
        "rounds": args.rounds, "memory": args.memory,
        "median": {side: {k: statistics.median(x[k] for x in lives) for k in lives[0]}
                   for side, lives in sides.items()},
        "lives": sides,
    }, indent=2))


if __name__ == "__main__":
    main()
