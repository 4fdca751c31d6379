"""How soon a file landed in a new project shows in its view under `dagster dev`, by instance.

What a user of `lakelog init` meets, nothing stubbed: per side, a project made by `lakelog init`
in a fresh folder, `dagster dev` started in it with ``DAGSTER_HOME=.lakelog/dagster`` (the next
steps `lakelog init` prints), and files of the template's `events` topic landed in
``.lakelog/landing/events/`` one at a time; the latency of a file is from its landing to the
first version of ``views/actions_per_hour`` (the template's SQL model, over the windowed
aggregate) that counts every event landed so far, polled every 0.1 s with delta-rs.

The sides differ only in the project's ``.lakelog/dagster/dagster.yaml``:

- ``lakelog``: the one `lakelog init` writes (`lakelog.assets.instance_file`: the prefork run
  launcher, whose server the daemon starts as it starts, a run queue looked at every second, one
  pipeline run at a time with the next queued);
- ``third-party-preload``: the same, but its prefork server preloads the third-party packages
  only, as before lakelog's own modules joined them (each run imported lakelog itself);
- ``dagster-queue``: lakelog's, but with Dagster's own queued run coordinator (``run_queue``,
  looked at every second) instead of lakelog's (`lakelog.assets.run_queue`), as lakelog wrote it
  before: the prefork server starts at the first launch instead of as the daemon starts;
- ``storage-only``: lakelog's SQLite storage alone, as lakelog wrote it before (Dagster's
  default launcher, which spawns each run, its run queue looked at every 5 s, no run limits).

Besides the latencies, each side reports how long its runs took from the daemon's launch
(Dagster's ``RUN_STARTING`` event) to their first step's start: what the launcher and the run's
imports cost.

Every side uses one Spark server (`lakelog spark start` on a free port and a folder of its own,
never the user's 15002), started before the first. A warm-up file first (its latency reported
apart: the first run, and the prefork server's start), landed as `dagster dev` starts or, with
`--first-after-ui`, that many seconds after its UI answers (a user who opens the UI first), then `--files` files, each landed
`--pause` to `--pause` + 5 s (drawn at random, the same draws on every side: the pipeline
sensor ticks every 5 s, and a fixed pause would land every file at one phase of its ticks)
after the view showed the one before. Sides alternate for `--rounds` rounds. One
JSON object on stdout, progress on stderr.

    .venv/bin/python benchmarks/bench_dev_latency.py --files 8 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml
from deltalake import DeltaTable

import bench_freshness
from bench_freshness import BIN, free_port, git, progress

from lakelog.assets.instance_storage import FROM_DAGSTER_HOME, storage_config
from lakelog.assets.prefork import PRELOAD

SIDES = ("lakelog", "third-party-preload", "dagster-queue", "storage-only")
VIEW = Path(".lakelog", "views", "actions_per_hour")
LANDING = Path(".lakelog", "landing", "events")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=8, help="files measured per side and round")
    parser.add_argument("--events", type=int, default=2000, help="events per file")
    parser.add_argument("--pause", type=float, default=2.0,
                        help="the least seconds between a file showing in the view and the "
                        "next landing (5 s more at most, at random)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=180.0,
                        help="seconds a file may take to show before the side is given up")
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--work", type=Path, help="keep the projects and logs here")
    parser.add_argument("--first-after-ui", type=float, default=None, metavar="SECONDS",
                        help="land the warm-up file this long after the UI answers, as a user "
                        "who opens it first (default: as `dagster dev` starts)")
    return parser.parse_args()


def wait_for_ui(port: int, dev: subprocess.Popen, timeout: float) -> None:
    """Until the webserver of `dagster dev` answers on `port`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2):
                return
        except OSError:
            if dev.poll() is not None:
                raise RuntimeError(f"dagster dev ended ({dev.returncode})") from None
            time.sleep(0.2)
    raise TimeoutError(f"the UI did not answer within {timeout} s")


def environment(work: Path, marker: str) -> dict[str, str]:
    """bench_freshness's: a Spark server port and folder of our own, and the marker; no homes
    (each side's project keeps its lake in ./.lakelog, and its DAGSTER_HOME is set per side)."""
    env = bench_freshness.environment(work, marker)
    return {k: v for k, v in env.items() if k not in ("DAGSTER_HOME", "LAKELOG_HOME")}


def project(work: Path, name: str, side: str, env: dict[str, str]) -> Path:
    """A `lakelog init` project; on the storage-only side, its instance file as lakelog wrote
    it before; on the third-party-preload side, lakelog's with the prefork server's preloads
    as they were before lakelog's own modules joined them."""
    subprocess.run([str(BIN / "lakelog"), "init", name], cwd=work, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    folder = work / name
    instance_yaml = folder / ".lakelog" / "dagster" / "dagster.yaml"
    if side == "storage-only":
        instance_yaml.write_text(yaml.safe_dump({"storage": storage_config(FROM_DAGSTER_HOME)}))
    elif side == "third-party-preload":
        config = yaml.safe_load(instance_yaml.read_text())
        config["run_launcher"]["config"] = {
            "preload_modules": [m for m in PRELOAD if not m.startswith("lakelog")]}
        instance_yaml.write_text(yaml.safe_dump(config))
    elif side == "dagster-queue":
        config = yaml.safe_load(instance_yaml.read_text())
        config["run_queue"] = config.pop("run_coordinator")["config"]
        instance_yaml.write_text(yaml.safe_dump(config))
    return folder


def launch_to_first_step(home: Path) -> list[float]:
    """Per run of the instance at `home`, seconds from its launch to its first step's start."""
    import dagster as dg

    kinds = (dg.DagsterEventType.RUN_STARTING, dg.DagsterEventType.STEP_START)
    os.environ["DAGSTER_HOME"] = str(home)  # its storage's folder is read from there
    with dg.DagsterInstance.from_config(str(home)) as instance:
        seconds = []
        for run in reversed(instance.get_runs()):  # oldest first
            stamps: dict[dg.DagsterEventType, list[float]] = {}
            for entry in instance.all_logs(run.run_id, of_type=set(kinds)):
                stamps.setdefault(entry.dagster_event.event_type, []).append(entry.timestamp)
            launched, steps = (stamps.get(kind) for kind in kinds)
            if launched and steps:
                seconds.append(round(min(steps) - min(launched), 3))
    return seconds


def land(folder: Path, k: int, events: int, start: datetime) -> int:
    """File `k`: `events` events ten minutes of event time after file k-1's (never late)."""
    base = start + timedelta(minutes=10 * k)
    lines = [json.dumps({"event_id": f"f{k}-{i}", "user_id": f"u{i % 97}",
                         "action": ("view", "click", "buy")[i % 3],
                         "time": (base + timedelta(milliseconds=100 * i)).isoformat()})
             for i in range(events)]
    landing = folder / LANDING
    landing.mkdir(parents=True, exist_ok=True)
    staged = landing.parent / f".f{k}.ndjson"
    staged.write_text("\n".join(lines) + "\n")
    staged.rename(landing / f"f{k}.ndjson")  # appears whole, as a collector's rename does
    return events


def counted(folder: Path) -> int:
    path = folder / VIEW
    if not (path / "_delta_log").is_dir():
        return 0
    try:
        table = DeltaTable(str(path)).to_pyarrow_table(columns=["events"])
    except Exception:  # a version being replaced as it is read: look again
        return -1
    return int(sum(v for v in table.column("events").to_pylist() if v is not None))


def wait_shown(folder: Path, total: int, landed: float, timeout: float,
               dev: subprocess.Popen) -> float:
    while time.time() - landed < timeout:
        if counted(folder) == total:
            return time.time() - landed
        if dev.poll() is not None:
            raise RuntimeError(f"dagster dev ended ({dev.returncode})")
        time.sleep(0.1)
    raise TimeoutError(f"the view did not count {total} events within {timeout} s")


def stop(dev: subprocess.Popen, marker: str) -> None:
    """Interrupt `dagster dev` (as Ctrl-C does), then kill what carries our marker but the
    Spark server: the prefork server and workers leave the process group."""
    os.killpg(dev.pid, signal.SIGINT)
    try:
        dev.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(dev.pid, signal.SIGKILL)
        dev.wait()
    for pid, kind, _, _ in bench_freshness.Sampler(marker).scan():
        if kind != "jvm" and pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass  # ended meanwhile


def measure(side: str, folder: Path, env: dict[str, str], args: argparse.Namespace,
            marker: str) -> dict:
    env = {**env, "DAGSTER_HOME": str(folder / ".lakelog" / "dagster")}
    log = (folder / "dagster.log").open("w")
    port = free_port()
    dev = subprocess.Popen([str(BIN / "dagster"), "dev", "-h", "127.0.0.1", "-p", str(port)],
                           cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                           start_new_session=True)
    start = datetime.now(timezone.utc).replace(microsecond=0)
    try:
        if args.first_after_ui is not None:
            wait_for_ui(port, dev, args.timeout)
            time.sleep(args.first_after_ui)
        total = land(folder, 0, args.events, start)
        first = wait_shown(folder, total, time.time(), args.timeout, dev)
        progress(f"{side}: warm-up file shown after {first:.1f} s")
        latencies, pauses = [], random.Random(7)
        for k in range(1, args.files + 1):
            time.sleep(args.pause + pauses.uniform(0, 5))
            total += land(folder, k, args.events, start)
            latencies.append(round(wait_shown(folder, total, time.time(), args.timeout, dev), 2))
            progress(f"{side}: file {k} shown after {latencies[-1]:.1f} s")
    finally:
        stop(dev, marker)
        log.close()
    starts = launch_to_first_step(folder / ".lakelog" / "dagster")
    return {"warm_up_s": round(first, 2), "latencies_s": latencies,
            "median_s": round(statistics.median(latencies), 2), "max_s": max(latencies),
            "launch_to_first_step_s": starts}


def summarized(runs: list[dict]) -> dict:
    """A side's rounds together; its launch-to-first-step median without each round's first run
    (the prefork server's start), or None if no other run was timed, and each round's first."""
    latencies = [x for run in runs for x in run["latencies_s"]]
    starts = [x for run in runs for x in run["launch_to_first_step_s"][1:]]
    return {"median_s": round(statistics.median(latencies), 2), "max_s": max(latencies),
            "warm_up_s": [run["warm_up_s"] for run in runs],
            "launch_to_first_step_median_s": round(statistics.median(starts), 3)
            if starts else None,
            "first_run_launch_to_first_step_s": [run["launch_to_first_step_s"][0]
                                                 for run in runs if run["launch_to_first_step_s"]]}


def main() -> None:
    args = parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="lakelog-dev-latency-"))
    work.mkdir(parents=True, exist_ok=True)
    env = environment(work, marker := uuid.uuid4().hex)
    config = {"files": args.files, "events": args.events, "pause_s": args.pause,
              "first_after_ui_s": args.first_after_ui,
              "rounds": args.rounds, "sides": args.sides, "cpus": os.cpu_count(),
              "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
              "commit": git("rev-parse", "--short", "HEAD"),
              "changed_files": git("diff", "--name-only", "HEAD").split(), "work": str(work)}
    subprocess.run([str(BIN / "lakelog"), "spark", "start"], env=env, check=True,
                   stdout=sys.stderr)
    results: dict[str, list[dict]] = {side: [] for side in args.sides}
    try:
        for r in range(args.rounds):
            for side in args.sides:
                folder = project(work, f"shop_{side.replace('-', '_')}_{r}", side, env)
                results[side].append(measure(side, folder, env, args, marker))
    finally:
        subprocess.run([str(BIN / "lakelog"), "spark", "stop"], env=env, stdout=sys.stderr)
    summary = {side: summarized(runs) for side, runs in results.items()}
    print(json.dumps({"config": config, "summary": summary, "rounds": results}, indent=2))


if __name__ == "__main__":
    main()
