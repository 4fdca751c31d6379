"""The local Spark server against a Spark of each command's own, measured as a user meets them.

Runs the same `lakelog` commands as whole processes, side by side in one run, in two modes:

- ``classic`` (the reference): ``--master local[N]``, a Spark JVM started by each command;
- ``server``: the local Spark Connect server (`lakelog spark`), which this script starts
  first (its start-up is reported apart, as `server_start_s`: a user pays it once per machine).

Per mode: `lakelog demo --events E --no-source` into a fresh home (whole process, Spark start
included), then `lakelog tail page_views -n 10` and `lakelog produce` of one record — the
short commands whose cost is mostly Spark's start. Prints one JSON object on stdout.

    python benchmarks/bench_spark_modes.py --events 5000 > modes.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAKELOG = [sys.executable, "-m", "lakelog.cli"]
RECORD = {"event_id": "bench-1", "user_id": "u1", "session_id": "s1", "page": "home",
          "product_id": None, "device_time": "2026-01-05T08:00:00Z",
          "sent_time": "2026-01-05T08:00:01Z", "received_time": "2026-01-05T08:00:01Z"}


def timed(args: list[str], env: dict[str, str], stdin: str | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(args, env=env, input=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(args)}\n{done.stderr[-2000:]}")
    return round(time.perf_counter() - started, 2)


def run_mode(mode: str, work: Path, env: dict[str, str], args: argparse.Namespace) -> dict:
    home = str(work / mode)
    spark = ["--master", f"local[{args.cores}]"] if mode == "classic" else []
    demo = timed([*LAKELOG, "demo", "--events", str(args.events), "--no-source", "--home", home,
                  *spark], env)
    tail = timed([*LAKELOG, "tail", "page_views", "-n", "10", "--home", home, *spark], env)
    produce = timed([*LAKELOG, "produce", "page_views", "-", "--home", home, *spark], env,
                    stdin=json.dumps(RECORD) + "\n")
    return {"demo_s": demo, "tail_s": tail, "produce_s": produce}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=5000)
    p.add_argument("--cores", type=int, default=2, help="local threads in both modes")
    p.add_argument("--memory", default="4g", help="the server's driver memory")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="lakelog-bench-modes-") as tmp:
        work = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKELOG_SPARK")}
        env.update({"LAKELOG_SPARK_SERVER_PORT": "15402", "LAKELOG_SPARK_SERVER_DIR": tmp,
                    "LAKELOG_SPARK_SERVER_CORES": str(args.cores),
                    "LAKELOG_SPARK_SERVER_MEMORY": args.memory})
        load = os.getloadavg()
        started = time.perf_counter()
        results = {"classic": run_mode("classic", work, env, args)}
        server_start = timed([*LAKELOG, "spark", "start"], env)
        try:
            results["server"] = run_mode("server", work, env, args)
        finally:
            subprocess.run([*LAKELOG, "spark", "stop"], env=env, capture_output=True)
    print(json.dumps({
        "config": {"events": args.events, "cores": args.cores, "server_memory": args.memory,
                   "cpus": os.cpu_count(), "loadavg_at_start": [round(x, 2) for x in load]},
        "server_start_s": server_start,
        **results,
        "server_vs_classic": {k: round(results["server"][k] / results["classic"][k], 2)
                              for k in results["classic"]},
        "total_s": round(time.perf_counter() - started, 1),
    }, indent=2))


if __name__ == "__main__":
    main()
