"""A long-lived Spark Connect server's memory after demo after demo: what each process's session
leaves behind, lakelog as it is against lakelog before 2026-12-08.

    python benchmarks/bench_server_memory.py --demos 3 > server-memory.json

Under `dagster dev` the local server outlives every process that uses it: each `lakelog`
command and each Dagster run opens a Spark Connect session of its own. Per setting, alternated
for `--rounds` rounds, one server at a time, this starts a fresh local server (`local[N]`, on
`--port`, without a class archive), then runs `--demos` times `lakelog demo --remote <it>
--events E --batches B --no-source`, each a whole process into a fresh home. After each demo it
asks the server's JVM for two full collections three seconds apart (`jcmd GC.run`; the second
lets Spark's context cleaner drop the blocks of frames the first found unreachable) and reads:
the live old generation (the parallel collector's ``ParOldGen`` used, from `jcmd GC.heap_info`),
the server's resident memory (/proc), and, from a class histogram, the Connect sessions the
server holds (`SessionHolder`) and the blocks in its memory store (`*MemoryEntry`). Settings:

- ``lakelog``: as it is: a process releases its sessions as it exits
  (`lakelog.spark.session.release_at_exit`), and local rows travel inside the plan
  (``spark.sql.session.localRelationCacheThreshold`` 64 MB in `REQUIRED_CONF`);
- ``before``: the demo process with both undone: no release at exit (the server keeps a
  session for an idle hour), and Spark 4.2's threshold of 1 MB, over which local rows are
  uploaded as artifacts into the server's block manager;
- ``uploads``: only the threshold undone (sessions released, local rows over 1 MB uploaded).

With ``--one-server`` the settings share one server instead: an untimed demo warms it, then
`--demos` demos per setting run alternated (A B B A ...), for the demos' times side by side on
a warm server. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_log import memory  # benchmarks/ is on sys.path when this script runs

from lakelog.spark.server import ServerConfig, ensure_running, server_pid, stop

SETTINGS = ("before", "lakelog", "uploads")

#: The demo's process with lakelog's local-rows threshold (and, for ``before``, its session
#: release at exit) undone.
UNDONE = """
import atexit, sys
import lakelog.spark.session as session
if {release_undone}:
    register = atexit.register
    atexit.register = lambda f, *a: None if f is session.release_at_exit else register(f, *a)
session.REQUIRED_CONF = {{**session.REQUIRED_CONF,
                         "spark.sql.session.localRelationCacheThreshold": str(2**20)}}
from lakelog.cli.main import main
sys.exit(main(sys.argv[1:]))
"""

HISTOGRAM_CLASSES = {
    "sessions": "org.apache.spark.sql.connect.service.SessionHolder",
    "serialized_blocks": "org.apache.spark.storage.memory.SerializedMemoryEntry",
    "deserialized_blocks": "org.apache.spark.storage.memory.DeserializedMemoryEntry",
}


def jcmd(pid: int, *command: str) -> str:
    return subprocess.run(["jcmd", str(pid), *command], capture_output=True, text=True,
                          check=True).stdout


def server_memory(pid: int) -> dict:
    jcmd(pid, "GC.run")
    time.sleep(3)
    jcmd(pid, "GC.run")
    heap = jcmd(pid, "GC.heap_info")
    old = re.search(r"ParOldGen\s+total \d+K, used (\d+)K", heap)
    counts = dict.fromkeys(HISTOGRAM_CLASSES, 0)
    for line in jcmd(pid, "GC.class_histogram").splitlines():
        parts = line.split()
        for name, cls in HISTOGRAM_CLASSES.items():
            if len(parts) >= 4 and parts[3] == cls:
                counts[name] = int(parts[1])
    return {"live_old_gen_mb": round(int(old.group(1)) / 1024, 1) if old else None,
            "rss_mb": memory(pid)["jvm_rss_mb"], **counts}


def demo_command(setting: str) -> list[str]:
    if setting == "lakelog":
        return [sys.executable, "-m", "lakelog.cli"]
    return [sys.executable, "-c", UNDONE.format(release_undone=setting == "before")]


def run_demo(setting: str, config: ServerConfig, args) -> float:
    home = tempfile.mkdtemp(prefix="bench-memory-home-")
    try:
        started = time.monotonic()
        subprocess.run([*demo_command(setting), "demo", "--remote", config.url, "--home", home,
                        "--events", str(args.events), "--batches", str(args.batches),
                        "--no-source"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
        return round(time.monotonic() - started, 2)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def one_server(settings: list[str], args, *, warm_up: bool = False) -> list[dict]:
    """Demos of `settings`, one after the other, on one fresh server."""
    state = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    config = ServerConfig(port=args.port, master=f"local[{args.cores}]", memory=args.memory,
                          state_dir=state, class_archives=None)
    runs = []
    try:
        ensure_running(config)
        pid = server_pid(config)
        if warm_up:
            run_demo("lakelog", config, args)
        for setting in settings:
            runs.append({"setting": setting, "demo_seconds": run_demo(setting, config, args),
                         **server_memory(pid)})
            print(runs[-1], file=sys.stderr, flush=True)
    finally:
        stop(config)
        shutil.rmtree(state, ignore_errors=True)
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--demos", type=int, default=3, help="demos on each server, one by one")
    p.add_argument("--rounds", type=int, default=1, help="servers per setting, alternated")
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--memory", default="4g")
    p.add_argument("--port", type=int, default=15330)
    p.add_argument("--settings", nargs="+", choices=SETTINGS, default=["before", "lakelog"])
    p.add_argument("--one-server", action="store_true",
                   help="all settings on one warmed server, their demos alternated")
    args = p.parse_args(argv)
    if args.one_server:
        pair = args.settings + args.settings[::-1]
        order = [pair[i % len(pair)] for i in range(args.demos * len(args.settings))]
        servers = [one_server(order, args, warm_up=True)]
    else:
        servers = [one_server([setting] * args.demos, args)
                   for _ in range(args.rounds) for setting in args.settings]
    print(json.dumps({"events": args.events, "batches": args.batches, "demos": args.demos,
                      "cores": args.cores, "servers": servers}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
