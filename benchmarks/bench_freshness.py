"""Freshness of every derived table under the deployment a user starts, at a steady landing rate.

Prints one JSON object to stdout; progress goes to stderr. On a fresh lake and DAGSTER_HOME
(deploy/dagster.yaml on SQLite) it starts what the README tells a user to start — `lakelog spark
start` (on a free port and a state folder of its own) and `dagster dev` in the repository root
— prepares the demo shop database, waits for the first capture to reach its tables, then lands
a workload file set every `--interval` seconds (`--rate` events/s for `--duration` s) together
with about rate × interval / 20 row changes in the shop database, as `lakelog demo` does.

Freshness is read afterwards from the tables' own Delta logs, never from poll times: when each
set's landing files were ingested (the ingest commit that lists them), when each consumer had
committed past the log heads of that commit (its checkpoint history, then the output commit
carrying that batch's application transaction), when each SQL model's recorded input versions
covered it. Every process started inherits a marker variable, so a sampler finds all of them
(also re-parented ones) each second: JVMs, run workers, summed memory.

    /work/main/.venv/bin/python benchmarks/bench_freshness.py --rate 100 --duration 60
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pyarrow.parquet as pq
import yaml
from deltalake import DeltaTable

from lakelog import checkpoints, landing
from lakelog.assets.views import default_models_dir, lakelog_tables
from lakelog.carts import decided_through, published_through
from lakelog.cdc import state as cdc_state
from lakelog.consumers import lag
from lakelog.demo import shop_cdc
from lakelog.demo.shop import CARTS, CONSUMERS, TOPICS
from lakelog.demo.shop_joins import JOINS
from lakelog.demo.shop_windows import WINDOWS
from lakelog.demo.workload import Workload
from lakelog.lake import EmbeddedLake
from lakelog.views import load_models, why_stale

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
EVERY_TOPIC = {**TOPICS, **shop_cdc.CHANGELOGS}
EVERY_CONSUMER = {
    **CONSUMERS, **shop_cdc.CONSUMERS,
    **{j.consumer.name: j.consumer for j in JOINS.values()},
    **{w.consumer.name: w.consumer for w in WINDOWS.values()},
}
GRAPH = load_models(default_models_dir(), lakelog_tables(EVERY_TOPIC, EVERY_CONSUMER))
#: Why a table may legitimately hold no rows after a run, by path suffix or path.
EMPTY_REASONS = {
    "_late": "only records arriving after their window or join closed land here",
    "_rejected": "only records that cannot be joined land here",
    "streams/cart_rejections": "only invalid cart commands land here",
    "streams/user_sessions": "final mode: a session is written once the watermark passes its "
    "end plus the 30-minute gap",
    "views/search_ctr": "counts only searches 70 minutes of event time older than the newest",
}


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def no_spark():
    raise AssertionError("the benchmark reads metadata only")


# --- what a user starts --------------------------------------------------------------------

def environment(work: Path, marker: str) -> dict[str, str]:
    """This environment for the services: our homes, a Spark server port and folder of our own
    (never the user's 15002 or a test run's), SQLite as the source, and the marker."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LAKELOG_", "DAGSTER_"))}
    return {**env, "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            "DAGSTER_HOME": str(work / "dagster_home"), "LAKELOG_HOME": str(work / "lake"),
            "LAKELOG_SPARK_SERVER_PORT": str(free_port()),
            "LAKELOG_SPARK_SERVER_DIR": str(work / "spark"), "LAKELOG_BENCH_MARKER": marker}


def dagster_home(path: Path) -> None:
    """deploy/dagster.yaml without its PostgreSQL storage: SQLite under DAGSTER_HOME."""
    path.mkdir(parents=True)
    config = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text())
    del config["storage"]
    (path / "dagster.yaml").write_text(yaml.safe_dump(config))


def stop_group(process: subprocess.Popen, timeout: float = 60) -> None:
    """SIGTERM to the process group, SIGKILL after `timeout` s (as tests/processes.py does)."""
    os.killpg(process.pid, 15)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait()


class Sampler(threading.Thread):
    """Every second: the processes carrying the marker, their kinds, RSS and PSS; the peaks."""

    def __init__(self, marker: str) -> None:
        super().__init__(daemon=True)
        self.needle = f"LAKELOG_BENCH_MARKER={marker}".encode()
        self.peak: Counter[str] = Counter()
        self.at_peak: dict[str, float] = {}
        self.seen: set[str] = set()
        self.done = threading.Event()

    @staticmethod
    def kind(cmdline: str, comm: str) -> str:
        if comm == "java":
            return "jvm"
        if "spawn_main" in cmdline and "resource_tracker" not in cmdline:
            return "run_worker"  # the code server's multiprocessing child executing a run
        return "other"

    def sample(self) -> None:
        count, mem = Counter(), Counter()
        for proc in Path("/proc").iterdir():
            try:
                if not proc.name.isdigit() or self.needle not in (proc / "environ").read_bytes():
                    continue
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                kind = self.kind(cmdline, (proc / "comm").read_text().strip())
                for line in (proc / "smaps_rollup").read_text().splitlines():
                    if line.startswith(("Rss:", "Pss:")):
                        key = line.split(":")[0].lower()
                        mem[key] += int(line.split()[1]) * 1024
                        mem[f"{key}_{kind}"] += int(line.split()[1]) * 1024
            except (OSError, ValueError):
                continue  # ended meanwhile
            count[kind] += 1
            self.seen.add(f"{kind}: {cmdline[:160]}")
        count["all"] = sum(count.values())
        for key, value in {**count, **mem}.items():
            self.peak[key] = max(self.peak[key], value)
        if mem["rss"] >= self.peak["rss"]:
            self.at_peak = {k: round(v / 2**30, 2) for k, v in mem.items() if k.startswith("rss_")}

    def run(self) -> None:
        while not self.done.wait(1.0):
            self.sample()


# --- the workload ---------------------------------------------------------------------------

def stage(args: argparse.Namespace, staging: Path) -> Workload:
    """Generate every file set before the clock starts (it costs seconds of CPU per set), with
    event time centred on an hour boundary, so the hourly models have a complete hour."""
    sets = args.duration // args.interval
    events = args.rate * args.duration
    span = timedelta(minutes=events / 1000)  # the workload: 1,000 events per simulated minute
    hour = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    start = (hour + timedelta(hours=1) - span / 2).replace(second=0, microsecond=0)
    workload = Workload(events=events, batches=sets, seed=args.seed, start=start)
    for k in range(sets):
        workload.write_batch(k, staging)
    return workload


def land(k: int, staging: Path, lake: Path) -> None:
    """Make set `k` visible at once: one directory rename per topic it has records of."""
    for topic in TOPICS:
        batch = Path("landing", topic, f"batch-{k:04d}")
        if (staging / batch).is_dir():
            (lake / batch).parent.mkdir(parents=True, exist_ok=True)
            os.rename(staging / batch, lake / batch)


def last_sequence(conn) -> int:
    """The change table's highest sequence ever assigned (pruning does not lower it); 0 before
    the first capture installs the change table."""
    try:
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = '_lakelog_changes'")
    except sqlite3.OperationalError:
        return 0
    return (row.fetchone() or (0,))[0]


def behind(root: Path, source_seq: int) -> list[str]:
    """What has not caught up yet, upstream first, from metadata (as the pipeline sensor sees)."""
    lake = EmbeddedLake(no_spark, str(root))
    saved = cdc_state.load(str(root), shop_cdc.SERVER, "sqlite")
    todo = [] if saved and saved.position >= source_seq and not saved.pending else ["capture"]
    for name in EVERY_TOPIC:
        manifest = landing.load_manifest(lake, name)
        if manifest.plan or landing.pending_files(lake, manifest):
            todo.append(f"log/{name}")
    todo += [n for n, c in EVERY_CONSUMER.items() if any(x.lag for x in lag(lake, c, EVERY_TOPIC))]
    if published_through(lake, CARTS) < decided_through(lake, CARTS):
        todo.append("relay")
    return todo + [f"views/{m}" for m in GRAPH.models if why_stale(lake, GRAPH, m)]


def wait_for(root: Path, source_seq: int, timeout: float, service: subprocess.Popen) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := behind(root, source_seq)) and time.monotonic() < deadline:
        if service.poll() is not None:
            raise RuntimeError("dagster dev exited; see dagster.log in the work folder")
        time.sleep(5)
    return left


# --- freshness, from the Delta logs -----------------------------------------------------------

def commits(table: Path) -> list[dict]:
    """Each commit of a Delta table: version, commit time (s), app transactions, adds, info."""
    found = []
    for f in sorted((table / "_delta_log").glob("*.json")):
        if not f.stem.isdigit():
            continue
        actions = [json.loads(line) for line in f.read_text().splitlines() if line]
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        found.append({"version": int(f.stem), "at": info["timestamp"] / 1000, "info": info,
                      "txns": {a["txn"]["appId"]: a["txn"]["version"] for a in actions if "txn" in a},
                      "adds": [a["add"] for a in actions if "add" in a]})
    return found


def ingested(log: list[dict]) -> dict[str, dict]:
    """Landing file -> the ingest commit that appended it."""
    files = {}
    for c in log:
        meta = c["info"].get("lakelog.ingest")
        meta = json.loads(meta) if isinstance(meta, str) else meta or {}
        files.update(dict.fromkeys(meta.get("files", ()), c))
    return files


def heads(log: list[dict], version: int) -> dict[int, int]:
    """Per log partition, the next offset after `version` (file statistics of the adds)."""
    found: dict[int, int] = {}
    for c in log[: version + 1]:
        for add in c["adds"]:
            top = json.loads(add.get("stats") or "{}").get("maxValues", {}).get("offset")
            if top is not None:
                p = int(add["partitionValues"]["partition"])
                found[p] = max(found.get(p, 0), top + 1)
    return found


def first(log: list[dict], ok) -> dict | None:
    return next((c for c in log if ok(c)), None)


class Freshness:
    """Per table and file set: when the table first reflected the set (commit time, and the
    Delta version that does), whether the set brought it new input at all, and the landings
    (workload files, shop changes) it derives from."""

    def __init__(self, lake: Path, landed: dict[str, list[float]], seqs: list[int]) -> None:
        self.lake, self.landed, self.seqs = lake, landed, seqs
        self.sets = range(len(seqs))
        self.found: dict[str, list[tuple[float, int] | None]] = {}
        self.new: dict[str, list[bool]] = {}
        self.sources: dict[str, set[str]] = {}
        #: Per topic and set, the log heads at the version reflecting the set.
        self.heads: dict[str, list[dict[int, int] | None]] = {}

    def topics(self) -> None:
        """A workload topic reflects set k at the ingest commit listing the set's last file; a
        changelog at the one listing the last stream file holding a change up to the sequence
        set k reached (files are named and ingested in position order)."""
        for name, topic in EVERY_TOPIC.items():
            log = commits(self.lake / topic.path)
            files = ingested(log)
            cdc = name in shop_cdc.CHANGELOGS
            source = "cdc" if cdc else "files"
            if cdc:
                seqs = {f: [json.loads(x)["source"]["seq"] for x in
                            (self.lake / f).read_text().splitlines() if x]
                        for f in sorted(files) if Path(f).name.startswith("stream-")}
            found, new, previous = [], [], (0.0, -1)
            for k in self.sets:
                if cdc:
                    low = self.seqs[k - 1] if k else 0
                    wanted = [f for f, s in seqs.items() if min(s) <= self.seqs[k]][-1:]
                    new.append(any(low < x <= self.seqs[k] for s in seqs.values() for x in s))
                else:
                    folder = f"landing/{name}/batch-{k:04d}/"
                    wanted = [f for f in files if f.startswith(folder)]
                    new.append((self.lake / folder).is_dir())
                    if new[-1] and len(wanted) < len(list((self.lake / folder).iterdir())):
                        wanted = []  # a file of the set never ingested
                if not new[-1]:  # nothing landed for it: it reflects the set as it did before
                    found.append(previous := (max(previous[0], self.landed[source][k]), previous[1]))
                elif wanted:
                    c = max((files[f] for f in wanted), key=lambda c: c["version"])
                    found.append(previous := (c["at"], c["version"]))
                else:
                    found.append(None)
            self.found[topic.path], self.new[topic.path] = found, new
            self.sources[topic.path] = {source}
            self.heads[name] = [heads(log, x[1]) if x else None for x in found]

    def consumers(self) -> dict[str, list[int | None]]:
        """A consumer reflects set k at its first checkpoint commit past the heads of every topic
        it reads at their set-k versions; each output at its commit carrying that batch's
        application transaction (the checkpoint commits after the outputs)."""
        batches = {}
        for name, consumer in EVERY_CONSUMER.items():
            history = []  # (batch, committed offsets, time) of each checkpoint commit
            path = self.lake / checkpoints.checkpoint_path(name)
            for c in commits(path):
                rows = [r for a in c["adds"] for r in pq.read_table(path / unquote(a["path"])).to_pylist()]
                if rows and rows[0]["planned_batch"] is None:
                    history.append((rows[0]["batch"], {(r["topic"], r["partition"]): r["committed"]
                                                       for r in rows}, c["at"]))
            needed, new = [], []
            for k in self.sets:
                want = [(t, self.heads[t][k]) for t in consumer.topics]
                new.append(any(self.new[EVERY_TOPIC[t].path][k] for t in consumer.topics))
                needed.append(None if any(h is None for _, h in want) else next(
                    (h for h in history if all(h[1].get((t, p), 0) >= n
                                               for t, hs in want for p, n in hs.items())), None))
            batches[name] = [h[0] if h else None for h in needed]
            sources = set().union(*(self.sources[EVERY_TOPIC[t].path] for t in consumer.topics))
            for output in consumer.outputs:
                if output.path.startswith("_state/"):
                    continue  # the consumer's own state, not a derived table
                log = commits(self.lake / output.path)
                self.sources[output.path], self.new[output.path] = sources, new
                self.found[output.path] = []
                for h in needed:
                    c = h and first(log, lambda c: c["txns"].get(consumer.app_id, -1) >= h[0])
                    self.found[output.path].append((c["at"], c["version"]) if c else None)
        return batches

    def relay(self, cart_batches: list[int | None]) -> None:
        """log/cart_orders reflects set k once the relay published the last cart batch, up to the
        one reflecting set k, that decided any orders."""
        path, outbox = CARTS.orders_topic.path, CARTS.orders.path
        decided = set(DeltaTable(str(self.lake / outbox)).to_pyarrow_table(
            columns=["batch"]).column("batch").to_pylist())
        log, app = commits(self.lake / path), f"lakelog.outbox:{CARTS.consumer.name}"
        self.sources[path], self.new[path] = self.sources[outbox], self.new[outbox]
        self.found[path] = []
        for k, b in enumerate(cart_batches):
            need = max((x for x in decided if b is not None and x <= b), default=None)
            c = need is not None and first(log, lambda c: c["txns"].get(app, -1) >= need)
            self.found[path].append((c["at"], c["version"]) if c else
                                    self.found[outbox][k] if need is None else None)

    def models(self) -> None:
        """A stored model reflects set k at its first commit recording, for every input, a version
        at or past the input's set-k version; a view (computed on read) when its inputs do."""
        for name, model in GRAPH.models.items():
            inputs = GRAPH.inputs(name)
            log = commits(self.lake / model.path) if model.stored else []
            self.sources[model.path] = set().union(*(self.sources[p] for p in inputs))
            self.new[model.path] = [any(self.new[p][k] for p in inputs) for k in self.sets]
            self.found[model.path] = []
            for k in self.sets:
                want = {p: self.found[p][k] for p in inputs}
                if None in want.values():
                    self.found[model.path].append(None)
                elif not model.stored:
                    self.found[model.path].append((max(w[0] for w in want.values()), -1))
                else:
                    c = first(log, lambda c: all(c["txns"].get(f"lakelog.view:{name}@{p}", -1)
                                                 >= w[1] for p, w in want.items()))
                    self.found[model.path].append((c["at"], c["version"]) if c else None)

    def figures(self, path: str) -> dict:
        """Lag p50/p99/max over the sets that brought the table new input; sets it never
        reflected are `missing`, sets with nothing new for it `no_new_input`."""
        lags, missing = [], 0
        for k in self.sets:
            if not self.new[path][k]:
                continue
            if self.found[path][k] is None:
                missing += 1
                continue
            landed = max(self.landed[s][k] for s in self.sources[path])
            lags.append(max(self.found[path][k][0] - landed, 0.0))
        out = {"n": len(lags), "missing": missing,
               "no_new_input": sum(not x for x in self.new[path])}
        if lags:
            p50, p99 = np.percentile(lags, [50, 99])
            out.update(p50_s=round(p50, 1), p99_s=round(p99, 1), max_s=round(max(lags), 1))
        return out


def rows(table: Path) -> int | None:
    if not (table / "_delta_log").is_dir():
        return None
    return int(sum(DeltaTable(str(table)).get_add_actions(flatten=True).column("num_records").to_pylist()))


def runs(home: Path) -> dict:
    """Runs launched, by status and job, and how long pipeline runs queued and ran."""
    import dagster as dg

    instance = dg.DagsterInstance.from_config(str(home))
    try:
        records = instance.get_run_records()
    finally:
        instance.dispose()
    pipeline = [r for r in records if r.dagster_run.job_name == "pipeline" and r.end_time]
    queued = [r.start_time - r.create_timestamp.timestamp() for r in pipeline if r.start_time]
    ran = [r.end_time - r.start_time for r in pipeline if r.start_time]
    spread = lambda xs: {"p50_s": round(float(np.median(xs)), 1), "max_s": round(max(xs), 1)} if xs else {}
    return {"launched": len(records),
            "by_status": dict(Counter(r.dagster_run.status.value for r in records)),
            "by_job": dict(Counter(r.dagster_run.job_name for r in records)),
            "pipeline_queued": spread(queued), "pipeline_ran": spread(ran)}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=500, help="events per second landed")
    parser.add_argument("--duration", type=int, default=300, help="seconds of landing")
    parser.add_argument("--interval", type=int, default=10, help="seconds between file sets")
    parser.add_argument("--drain", type=int, default=300,
                        help="most seconds to wait after the last set for everything to catch up")
    parser.add_argument("--warmup", type=int, default=600,
                        help="most seconds to wait for the first capture to reach its tables")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--home", type=Path, help="work folder to keep (new or empty)")
    return parser.parse_args()


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()


def main() -> None:
    args = parse_args()
    work = args.home or Path(tempfile.mkdtemp(prefix="lakelog-freshness-"))
    work.mkdir(parents=True, exist_ok=True)
    lake, marker = work / "lake", uuid.uuid4().hex
    env = environment(work, marker)
    config = {"rate": args.rate, "duration_s": args.duration, "interval_s": args.interval,
              "commit": git("rev-parse", "--short", "HEAD"), "dirty": bool(git("status", "--porcelain")),
              "cpus": os.cpu_count(), "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
              "work": str(work), "spark_server_port": int(env["LAKELOG_SPARK_SERVER_PORT"])}
    progress(f"staging {args.duration // args.interval} file sets in {work}")
    workload = stage(args, work / "staging")
    config.update(workload_start=workload.start.isoformat(), events=workload.events,
                  event_minutes=workload.span.total_seconds() / 60)
    dagster_home(work / "dagster_home")
    conn, dialect = shop_cdc.connect(str(lake))
    shop_cdc.prepare(conn, dialect, seed=args.seed)
    sampler = Sampler(marker)
    sampler.start()
    started = time.monotonic()
    subprocess.run([str(BIN / "lakelog"), "spark", "start"], env=env, check=True,
                   stdout=sys.stderr)
    config["spark_start_s"] = round(time.monotonic() - started, 1)
    log = (work / "dagster.log").open("w")
    dev = subprocess.Popen(
        [str(BIN / "dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1",
         "-p", str(free_port())], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)
    landed = {"files": [], "cdc": []}
    seqs: list[int] = []
    try:
        started = time.monotonic()
        progress("dagster dev started; waiting for the first capture to reach its tables")
        left = wait_for(lake, last_sequence(conn), args.warmup, dev)
        config["warmup_s"] = round(time.monotonic() - started, 1)
        if left:
            raise RuntimeError(f"warm-up did not finish: {left}")
        t0 = time.time()
        changes = max(args.rate * args.interval // 20, 10)  # as `lakelog demo` changes per batch
        sets = args.duration // args.interval
        for k in range(sets):
            time.sleep(max(t0 + k * args.interval - time.time(), 0))
            shop_cdc.mutate_batch(conn, dialect, k, changes=changes, seed=args.seed,
                                  start=workload.start)
            landed["cdc"].append(time.time())
            seqs.append(last_sequence(conn))
            land(k, work / "staging", lake)
            landed["files"].append(time.time())
            progress(f"set {k + 1}/{sets} landed at +{landed['files'][-1] - t0:.0f} s")
        started = time.monotonic()
        left = wait_for(lake, seqs[-1], args.drain, dev)
        config["drain_s"] = round(time.monotonic() - started, 1)
        progress(f"drained in {config['drain_s']} s" + (f"; still behind: {left}" if left else ""))
    finally:
        stop_group(dev)
        log.close()
        subprocess.run([str(BIN / "lakelog"), "spark", "stop"], env=env, stdout=sys.stderr)
        sampler.done.set()
        sampler.join()
        conn.close()
    config["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    fresh = Freshness(lake, landed, seqs)
    fresh.topics()
    batches = fresh.consumers()
    fresh.relay(batches[CARTS.consumer.name])
    fresh.models()
    tables, empty = {}, {}
    for path in sorted(fresh.found):
        figures = {**fresh.figures(path), "rows": rows(lake / path)}
        if figures["rows"]:
            tables[path] = figures
        else:
            reason = next((r for key, r in EMPTY_REASONS.items() if path.endswith(key)), "no rows")
            empty[path] = {**figures, "reason": reason}
    worst = max((t.get("p99_s", float("inf")) for t in tables.values()), default=None)
    peak = sampler.peak
    print(json.dumps({
        "config": config,
        "targets": {"p99_max_s": worst, "p99_ok": worst is not None and worst <= 60,
                    "jvms_ok": peak["jvm"] <= 1, "memory_ok": peak["rss"] < 8 * 2**30},
        "tables": tables, "empty_tables": empty, "still_behind": left,
        "runs": runs(work / "dagster_home"),
        "processes": {"jvms_max": peak["jvm"], "run_workers_max": peak["run_worker"],
                      "processes_max": peak["all"],
                      "rss_peak_gb": round(peak["rss"] / 2**30, 2),
                      "pss_peak_gb": round(peak["pss"] / 2**30, 2), "rss_at_peak_gb": sampler.at_peak,
                      "seen": sorted(sampler.seen)},
    }, indent=2))


if __name__ == "__main__":
    main()
