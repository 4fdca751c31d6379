"""Pipeline runs one step at a time against two at a time (`lakelog.assets.executor`), side by
side on one warm local Spark Connect server.

Starts a server of its own (``--port``, a state folder of its own, the default settings), runs
one untimed `lakelog demo` to warm it (its JIT compilers busy the cores for the first minute),
then alternates `lakelog demo --events N --batches B` with ``LAKELOG_STEPS_AT_ONCE=1`` and with
the default (2), each in a fresh lake, ``--pairs`` times. Every demo is the whole CLI process
(imports, workload, runs); its wall time, the server's CPU seconds during it (from
``/proc/<pid>/stat``) and the pipeline runs' own seconds (from ``--json``) are reported, and the
medians per setting. One JSON object on stdout, progress on stderr.

    python benchmarks/bench_executor.py > executor.json
    python benchmarks/bench_executor.py --events 100000 --batches 4 --pairs 2
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

from bench_common import cpu_seconds

from lakelog.assets.executor import STEPS_VARIABLE
from lakelog.spark.server import ServerConfig, ensure_running, stop

ONE_AT_A_TIME = "1"


def demo(home: Path, events: int, batches: int, env: dict[str, str], pid: int) -> dict:
    cpu, started = cpu_seconds(pid), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "lakelog.cli", "demo", "--events", str(events), "--batches",
         str(batches), "--home", str(home), "--json"],
        env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"lakelog demo failed: {done.stderr[-2000:]}")
    summary = json.loads(done.stdout)
    return {"wall_s": round(wall, 2), "server_cpu_s": round(cpu_seconds(pid) - cpu, 2),
            "demo_s": round(summary["seconds"], 2), "microbatches": summary["microbatches"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--port", type=int, default=15165)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lakelog-bench-executor-"))
    config = ServerConfig(port=args.port, state_dir=work / "server")
    env = {**os.environ, "LAKELOG_SPARK_SERVER_PORT": str(args.port),
           "LAKELOG_SPARK_SERVER_DIR": str(config.state_dir)}
    env.pop(STEPS_VARIABLE, None)
    settings = {"one_at_a_time": {**env, STEPS_VARIABLE: ONE_AT_A_TIME},
                "threaded_default": env}
    results: dict[str, list[dict]] = {name: [] for name in settings}
    try:
        pid = ensure_running(config).pid
        print(f"server pid {pid}; warming it with one demo", file=sys.stderr)
        warm = demo(work / "warm", args.events, args.batches, env, pid)
        for pair in range(args.pairs):
            for name, setting in settings.items():
                figures = demo(work / f"{name}-{pair}", args.events, args.batches, setting, pid)
                print(f"pair {pair} {name}: {figures}", file=sys.stderr)
                results[name].append(figures)
    finally:
        stop(config)
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({
        "config": {**vars(args), "cpus": os.cpu_count(), "loadavg_at_end": os.getloadavg()},
        "warm_up": warm,
        "runs": results,
        "median_wall_s": {n: statistics.median(r["wall_s"] for r in rs)
                          for n, rs in results.items()},
        "median_server_cpu_s": {n: statistics.median(r["server_cpu_s"] for r in rs)
                                for n, rs in results.items()},
    }, indent=2))


if __name__ == "__main__":
    main()
