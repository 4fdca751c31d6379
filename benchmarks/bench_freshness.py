"""Freshness of every derived table under the deployment a user starts, at a steady landing rate.

Prints one JSON object to stdout; progress goes to stderr. On a fresh lake and DAGSTER_HOME
(deploy/dagster.yaml on SQLite) it starts what the README tells a user to start — `lakelog spark
start` (on a free port and a state folder of its own) and `dagster dev` in the repository root —
with the demo shop database prepared, waits for the first capture to reach its tables, then every
`--interval` s lands a workload file set (`--rate` events/s) and changes the shop database (rate
× interval / 20 rows, as `lakelog demo` does per batch).

Freshness is read afterwards from the tables' own Delta logs, not from poll times: the ingest
commit listing a set's files, the first checkpoint commit of each consumer past those log
heads (then its output commit carrying that batch's application transaction), each SQL model's
first commit recording input versions at or past them. Every process started inherits a marker
variable, so a sampler finds them all each second (also re-parented ones): JVMs, run workers,
memory.

    /work/main/.venv/bin/python benchmarks/bench_freshness.py --rate 100 --duration 60
"""

from __future__ import annotations

import argparse
import json
import os
import re
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

import dagster as dg
import numpy as np
import pyarrow.parquet as pq
import yaml
from deltalake import DeltaTable

from bench_common import free_port
from lakelog.assets import prefork
from lakelog.assets.executor import STEPS_VARIABLE
from lakelog.assets.instance_storage import FROM_DAGSTER_HOME, storage_config
from lakelog.cdc import checkpoint as capture_checkpoint
from lakelog.consumers import checkpoints
from lakelog.consumers import lag
from lakelog.consumers.units import Unit, units_of
from lakelog.demo import shop_cdc
from lakelog.sourcing import decided_through, published_through
from lakelog.demo.pipeline import pipeline as shop_pipeline
from lakelog.demo.shop import CARTS, TOPICS
from lakelog.demo.workload import Workload
from lakelog.lake import EmbeddedLake
from lakelog.log import landing
from lakelog.sensors.pipeline import ACTIVE
from lakelog.views import why_stale

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
EVERY_TOPIC = shop_pipeline.landed_topics
EVERY_CONSUMER = shop_pipeline.all_consumers
GRAPH = shop_pipeline.model_graph
#: Why a table may legitimately hold no rows, by the end of its path.
EMPTY_REASONS = {
    "_late": "only records arriving after their window closed land here",
    "_rejected": "only orders of users who are not customers land here",
    "cart_rejections": "only invalid cart commands land here",
    "user_sessions": "final mode: a session is written once the watermark passes its end + 30 min",
    "search_ctr": "counts only searches 70 minutes of event time older than the newest",
}
#: Temporary paths and JSON arguments, left out of the process list.
NOISE = re.compile(r"/tmp/\S+|\{.*")
Hit = tuple[float, int]  # when a table first reflected a set, and its Delta version doing so


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- what a user starts, and watching it ---------------------------------------------------

def environment(work: Path, marker: str) -> dict[str, str]:
    """Our homes, a Spark server port and folder of our own (never the user's 15002 or a test
    run's), the default SQLite source, and the marker."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKELOG_", "DAGSTER_"))}
    return {**env, "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            "DAGSTER_HOME": str(work / "dagster_home"), "LAKELOG_HOME": str(work / "lake"),
            "LAKELOG_SPARK_SERVER_PORT": str(free_port()),
            "LAKELOG_SPARK_SERVER_DIR": str(work / "spark"), "LAKELOG_BENCH_MARKER": marker}


def dagster_home(path: Path, launcher: str) -> None:
    """deploy/dagster.yaml with lakelog's SQLite storage under DAGSTER_HOME instead of its
    PostgreSQL storage, as deploy/README.md tells a user running it locally; `launcher`
    "default" removes its run launcher (Dagster's default: the code server spawns each run)."""
    path.mkdir(parents=True)
    config = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text())
    config["storage"] = storage_config(FROM_DAGSTER_HOME)
    if launcher == "default":
        config.pop("run_launcher", None)
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
    """Each second, the processes carrying the marker by kind, and their summed RSS and PSS
    (PSS splits the pages processes share instead of counting them in each)."""

    def __init__(self, marker: str) -> None:
        super().__init__(daemon=True)
        self.needle = f"LAKELOG_BENCH_MARKER={marker}".encode()
        self.peak: Counter[str] = Counter()
        self.rss_at_peak: dict[str, float] = {}
        self.seen: set[str] = set()
        self.done = threading.Event()

    @staticmethod
    def kind(cmdline: str, name: str) -> str:
        if Path(cmdline.split(" ")[0]).name == "java":  # not spark-submit's launcher helper
            return "other" if "org.apache.spark.launcher.Main" in cmdline else "jvm"
        if "spawn_main" in cmdline:  # the code server's multiprocessing child running a run
            return "run_worker"
        if name == prefork.WORKER_NAME:  # a run forked by the prefork launcher
            return "run_worker"
        return "other"

    def scan(self):
        """(pid, kind, cmdline, smaps_rollup text) of each marked process."""
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and self.needle in (proc / "environ").read_bytes():
                    cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                    name = (proc / "comm").read_text().strip()
                    smaps = (proc / "smaps_rollup").read_text()
                    if name.startswith("lakelog-"):  # a prefork process: say which
                        cmdline = f"[{name}] {cmdline}"
                    yield int(proc.name), self.kind(cmdline, name), cmdline, smaps
            except OSError:
                continue  # ended meanwhile

    def sample(self) -> None:
        now: Counter[str] = Counter()
        for _, kind, cmdline, smaps in self.scan():
            now[kind] += 1
            now["processes"] += 1
            self.seen.add(f"{kind}: " + NOISE.sub("…", cmdline)[:90])
            for line in smaps.splitlines():
                if line.startswith(("Rss:", "Pss:")):
                    now[line[:3].lower()] += int(line.split()[1]) * 1024
                    now[f"{line[:3].lower()}_{kind}"] += int(line.split()[1]) * 1024
        if now["rss"] > self.peak["rss"]:
            self.rss_at_peak = {k[4:]: round(v / 2**30, 2) for k, v in now.items()
                                if k.startswith("rss_")}
        for key, value in now.items():
            self.peak[key] = max(self.peak[key], value)

    def run(self) -> None:
        while not self.done.wait(1.0):
            self.sample()


def behind(root: Path, seq: int) -> list[str]:
    """What has not caught up with sequence `seq` of the shop database and with the landing
    zone yet, upstream first, from metadata as the pipeline sensor sees it."""
    lake = EmbeddedLake(lambda: None, str(root))
    saved = capture_checkpoint.load(str(root), shop_cdc.SERVER, "sqlite")
    todo = [] if saved and saved.position >= seq and saved.pending is None else ["capture"]
    for name in EVERY_TOPIC:
        manifest = landing.load_manifest(lake, name)
        if manifest.plan or landing.pending_files(lake, manifest):
            todo.append(f"log/{name}")
    todo += [n for n, c in EVERY_CONSUMER.items() if any(x.lag for x in lag(lake, c, EVERY_TOPIC))]
    if published_through(lake, CARTS) < decided_through(lake, CARTS):
        todo.append("relay")
    return todo + [f"views/{m}" for m in GRAPH.models if why_stale(lake, GRAPH, m)]


def wait_for(root: Path, seq: int, timeout: float, dev: subprocess.Popen,
             instance: dg.DagsterInstance) -> list[str]:
    """Until nothing is behind and no run is queued or under way (so stopping Dagster interrupts
    none), at most `timeout` s; what is left."""
    deadline = time.monotonic() + timeout
    while True:
        if dev.poll() is not None:
            raise RuntimeError("dagster dev exited; see dagster.log in the work folder")
        left = behind(root, seq) or [f"run {r.dagster_run.run_id}" for r in
                                     instance.get_run_records(dg.RunsFilter(statuses=ACTIVE))]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(5)


# --- the workload ----------------------------------------------------------------------------

def stage(args: argparse.Namespace, staging: Path) -> Workload:
    """Every file set, generated before the clock starts (seconds of CPU per set). The workload
    runs 1,000 events per simulated minute, so event time runs rate/16.7 times faster than the
    wall clock; it is centred on an hour boundary, so the hourly models have a complete hour."""
    events = args.rate * args.duration
    hour = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    start = hour + timedelta(hours=1) - timedelta(minutes=events // 2000)
    workload = Workload(events=events, batches=args.duration // args.interval, seed=args.seed,
                        start=start)
    for k in range(workload.batches):
        workload.write_batch(k, staging)
    return workload


def land(k: int, staging: Path, lake: Path) -> None:
    """Set `k` appears at once: one directory rename per topic it has records of."""
    for topic in TOPICS:
        batch = Path("landing", topic, f"batch-{k:04d}")
        if (staging / batch).is_dir():
            (lake / batch).parent.mkdir(parents=True, exist_ok=True)
            os.rename(staging / batch, lake / batch)


def last_sequence(conn: sqlite3.Connection) -> int:
    """The change table's highest sequence ever assigned (its pruning does not lower it); 0
    until the first capture creates it."""
    try:
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = '_lakelog_changes'")
    except sqlite3.OperationalError:
        return 0
    return (row.fetchone() or (0,))[0]


# --- freshness, from the Delta logs ----------------------------------------------------------

def commits(table: Path) -> list[dict]:
    """Each commit of a Delta table: version, commit time (s), app transactions, adds, info."""
    found = []
    for f in sorted((table / "_delta_log").glob("*.json")):
        if f.stem.isdigit():
            actions = [json.loads(line) for line in f.read_text().splitlines() if line]
            info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
            found.append({"version": int(f.stem), "at": info["timestamp"] / 1000, "info": info,
                          "adds": [a["add"] for a in actions if "add" in a],
                          "txns": {a["txn"]["appId"]: a["txn"]["version"]
                                   for a in actions if "txn" in a}})
    return found


def heads(log: list[dict], version: int) -> dict[int, int]:
    """Per log partition, the next offset at `version` (from the adds' file statistics)."""
    found: dict[int, int] = {}
    for c in log[: version + 1]:
        for add in c["adds"]:
            top = json.loads(add["stats"])["maxValues"]["offset"]
            p = int(add["partitionValues"]["partition"])
            found[p] = max(found.get(p, 0), top + 1)
    return found


def first(log: list[dict], ok) -> Hit | None:
    c = next((c for c in log if ok(c)), None)
    return (c["at"], c["version"]) if c else None


class Freshness:
    """Per table and set: the first `Hit` reflecting the set (None: never), whether the set
    brought the table new input at all, and which landings ("files", "cdc") it derives from."""

    def __init__(self, lake: Path, landed: dict[str, list[float]], seqs: list[int]) -> None:
        self.lake, self.landed, self.seqs, self.sets = lake, landed, seqs, range(len(seqs))
        self.hits: dict[str, list[Hit | None]] = {}
        self.new: dict[str, list[bool]] = {}
        self.sources: dict[str, set[str]] = {}

    def topics(self) -> dict[str, list[dict[int, int] | None]]:
        """A workload topic reflects set k at the ingest commit listing the set's files; a
        changelog at the one listing the last stream file with a change up to the sequence set k
        reached (stream files are named and ingested in position order). Returns the log heads
        at those commits."""
        found_heads = {}
        for name, topic in EVERY_TOPIC.items():
            log, cdc = commits(self.lake / topic.path), name in shop_cdc.CHANGELOGS
            files = {f: (c["at"], c["version"]) for c in log
                     for f in c["info"].get("lakelog.ingest", {}).get("files", ())}
            folder = self.lake / "landing" / name
            seqs = {f"landing/{name}/{f.name}": [json.loads(x)["source"]["seq"] for x in
                                                 f.read_text().splitlines() if x]
                    for f in sorted(folder.glob("stream-*"))}
            hits, new, previous = [], [], (0.0, -1)
            for k in self.sets:
                if cdc:
                    wanted = [f for f, s in seqs.items() if min(s) <= self.seqs[k]][-1:]
                    low = self.seqs[k - 1] if k else 0
                    new.append(any(low < x <= self.seqs[k] for s in seqs.values() for x in s))
                else:
                    batch = folder / f"batch-{k:04d}"
                    wanted = [str(f.relative_to(self.lake)) for f in batch.glob("*.ndjson")]
                    new.append(bool(wanted))
                if not new[-1]:  # nothing for this table in the set: as fresh as before
                    hit = (max(previous[0], self.landed["cdc" if cdc else "files"][k]), previous[1])
                elif all(f in files for f in wanted):
                    hit = max((files[f] for f in wanted), key=lambda h: h[1])
                else:
                    hit = None
                hits.append(hit)
                previous = hit or previous
            self.hits[topic.path], self.new[topic.path] = hits, new
            self.sources[topic.path] = {"cdc" if cdc else "files"}
            found_heads[name] = [heads(log, h[1]) if h else None for h in hits]
        return found_heads

    def consumers(self, found_heads: dict[str, list[dict[int, int] | None]]) -> dict[str, list]:
        """A consumer reflects set k at its first checkpoint commit with offsets at or past the
        heads of its topics' set-k versions (a group: each partition's checkpoint, for its own
        partitions); each output at its first commit carrying every unit's transaction of those
        batches. Returns the batch per consumer and set ({unit app id: batch}, or None)."""
        batches = {}
        for name, consumer in EVERY_CONSUMER.items():
            per_unit = {u: self._committed(u) for u in units_of(consumer, EVERY_TOPIC)}
            batches[name] = []
            for k in self.sets:
                want = [(t, found_heads[t][k]) for t in consumer.topics]
                if any(h is None for _, h in want):
                    batches[name].append(None)
                    continue
                found = {}
                for unit, committed in per_unit.items():
                    found[unit.app_id] = next(
                        (b for b, offsets in committed
                         if all(offsets.get((t, p), 0) >= n for t, h in want
                                for p, n in h.items() if unit.owns((t, p)))), None)
                batches[name].append(None if None in found.values() else found)
            paths = [EVERY_TOPIC[t].path for t in consumer.topics]
            for output in consumer.outputs:
                if not output.path.startswith("_state/"):  # the consumer's own state
                    log = commits(self.lake / output.path)
                    self.hits[output.path] = [b is not None and first(
                        log, lambda c, b=b: all(c["txns"].get(app, -1) >= n
                                                for app, n in b.items())) or None
                        for b in batches[name]]
                    self.derive(output.path, paths)
        return batches

    def _committed(self, unit: Unit) -> list[tuple[int, dict]]:
        """(batch, offsets) of each commit of a unit's checkpoint (not of plans)."""
        committed = []
        path = self.lake / checkpoints.checkpoint_path(unit.checkpoint)
        for c in commits(path):
            rows = [r for a in c["adds"]
                    for r in pq.read_table(path / unquote(a["path"])).to_pylist()]
            rows = [r for r in rows if r["topic"] is not None]  # not a state-only row
            if rows and rows[0]["planned_batch"] is None:
                committed.append((rows[0]["batch"], {(r["topic"], r["partition"]): r["committed"]
                                                     for r in rows}))
        return committed

    def relay(self, cart_batches: list[int | None]) -> None:
        """log/cart_orders reflects set k once the relay published the last cart batch that
        decided orders, up to the batch reflecting set k."""
        path, outbox = CARTS.outbox_topic.path, CARTS.outbox.path
        decided = set(DeltaTable(str(self.lake / outbox)).to_pyarrow_table(columns=["batch"])
                      .column("batch").to_pylist())
        log, app = commits(self.lake / path), f"lakelog.outbox:{CARTS.consumer.name}"
        self.hits[path] = []
        for k, b in enumerate(cart_batches):
            b = None if b is None else max(b.values())  # the carts' consumer runs alone
            need = max((x for x in decided if b is not None and x <= b), default=None)
            self.hits[path].append(self.hits[outbox][k] if need is None else
                                   first(log, lambda c: c["txns"].get(app, -1) >= need))
        self.derive(path, [outbox])

    def models(self) -> None:
        """A stored model reflects set k at its first commit recording, for each input, a version
        at or past the input's set-k version; a view (computed on read) when its inputs do."""
        for name, model in GRAPH.models.items():
            inputs = GRAPH.inputs(name)
            log = commits(self.lake / model.path) if model.stored else []
            self.hits[model.path] = []
            for k in self.sets:
                want = {p: self.hits[p][k] for p in inputs}
                self.hits[model.path].append(
                    None if None in want.values() else
                    (max(h[0] for h in want.values()), -1) if not model.stored else
                    first(log, lambda c: all(c["txns"].get(f"lakelog.view:{name}@{p}", -1) >= h[1]
                                             for p, h in want.items())))
            self.derive(model.path, inputs)

    def derive(self, path: str, inputs: list[str]) -> None:
        """`path` has new input in a set when one of `inputs` has, and their landings."""
        self.new[path] = [any(self.new[p][k] for p in inputs) for k in self.sets]
        self.sources[path] = set().union(*(self.sources[p] for p in inputs))

    def figures(self, path: str) -> dict:
        """Lag from landing to reflecting, over the sets with new input for the table; sets never
        reflected are `missing`."""
        lags, missing = [], 0
        for k in self.sets:
            if self.new[path][k] and self.hits[path][k] is None:
                missing += 1
            elif self.new[path][k]:
                landed = max(self.landed[s][k] for s in self.sources[path])
                lags.append(max(self.hits[path][k][0] - landed, 0.0))
        out = {"n": len(lags), "missing": missing,
               "no_new_input": len(self.sets) - len(lags) - missing}
        if lags:
            p50, p99 = np.percentile(lags, [50, 99])
            out.update(p50_s=round(float(p50), 1), p99_s=round(float(p99), 1),
                       max_s=round(max(lags), 1))
        return out


def tables(fresh: Freshness, lake: Path) -> tuple[dict, dict]:
    """Figures per table; tables without rows apart, with why they may stay so."""
    filled, empty = {}, {}
    for path in sorted(fresh.hits):
        figures = fresh.figures(path)
        model = GRAPH.models.get(path.removeprefix("views/"))
        if model and not model.stored:
            filled[path] = {**figures, "note": "a view, computed on read: fresh as its inputs"}
            continue
        if (lake / path / "_delta_log").is_dir():
            adds = DeltaTable(str(lake / path)).get_add_actions(flatten=True)
            figures["rows"] = sum(adds.column("num_records").to_pylist())
        if figures["rows"]:
            filled[path] = figures
        else:
            empty[path] = {**figures, "reason": next(
                (r for key, r in EMPTY_REASONS.items() if path.endswith(key)), "unknown")}
    return filled, empty


def runs(instance: dg.DagsterInstance, t0: float) -> dict:
    """Runs launched (all, and from the first set on) by status and job; pipeline runs' queue
    and run times."""
    records = instance.get_run_records()
    done = [r for r in records
            if r.dagster_run.job_name == "pipeline" and r.start_time and r.end_time]

    def spread(xs: list[float]) -> dict:
        return {"p50_s": round(float(np.median(xs)), 1), "max_s": round(max(xs), 1)} if xs else {}

    return {"launched": len(records),
            "launched_from_first_set": sum(r.create_timestamp.timestamp() >= t0 for r in records),
            "by_status": dict(Counter(r.dagster_run.status.value for r in records)),
            "by_job": dict(Counter(r.dagster_run.job_name for r in records)),
            "pipeline_queued": spread([r.start_time - r.create_timestamp.timestamp()
                                       for r in done]),
            "pipeline_ran": spread([r.end_time - r.start_time for r in done])}


# --- the run ---------------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=500, help="events landed per second")
    parser.add_argument("--duration", type=int, default=300, help="seconds of landing")
    parser.add_argument("--interval", type=int, default=10, help="seconds between file sets")
    parser.add_argument("--drain", type=int, default=300,
                        help="most seconds to wait after the last set for everything to catch up")
    parser.add_argument("--warmup", type=int, default=600,
                        help="most seconds to wait for the first capture to reach its tables")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--home", type=Path, help="work folder to keep (new or empty)")
    parser.add_argument("--launcher", choices=("prefork", "default"), default="prefork",
                        help="deploy/dagster.yaml's prefork run launcher, or Dagster's default")
    parser.add_argument("--steps-at-once", type=int,
                        help="LAKELOG_STEPS_AT_ONCE for the pipeline runs (default: unset, 2)")
    return parser.parse_args()


def measure(args, work: Path, env: dict[str, str], instance: dg.DagsterInstance,
            config: dict) -> tuple[dict[str, list[float]], list[int], list[str]]:
    """Start the services, warm up, land the sets, drain, stop: landing times, sequences, and
    what was still behind at the end."""
    lake, landed, seqs = work / "lake", {"files": [], "cdc": []}, []
    conn, dialect = shop_cdc.connect(str(lake))
    shop_cdc.prepare(conn, dialect, seed=args.seed)
    started = time.monotonic()
    subprocess.run([str(BIN / "lakelog"), "spark", "start"], env=env, check=True, stdout=sys.stderr)
    config["spark_start_s"] = round(time.monotonic() - started, 1)
    log = (work / "dagster.log").open("w")
    dev = subprocess.Popen([str(BIN / "dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1",
                            "-p", str(free_port())], cwd=REPO, env=env, stdout=log,
                           stderr=subprocess.STDOUT, start_new_session=True)
    try:
        progress("dagster dev started; waiting for the first capture to reach its tables")
        started = time.monotonic()
        if left := wait_for(lake, last_sequence(conn), args.warmup, dev, instance):
            raise RuntimeError(f"warm-up did not finish: {left}")
        config["warmup_s"] = round(time.monotonic() - started, 1)
        changes = max(args.rate * args.interval // 20, 10)  # as `lakelog demo` per batch
        start = datetime.fromisoformat(config["workload_start"])
        config["t0"] = t0 = time.time()
        for k in range(args.duration // args.interval):
            time.sleep(max(t0 + k * args.interval - time.time(), 0))
            shop_cdc.mutate_batch(conn, dialect, k, changes=changes, seed=args.seed, start=start)
            landed["cdc"].append(time.time())
            seqs.append(last_sequence(conn))
            land(k, work / "staging", lake)
            landed["files"].append(time.time())
            progress(f"set {k} landed at +{landed['files'][-1] - t0:.1f} s")
        started = time.monotonic()
        left = wait_for(lake, seqs[-1], args.drain, dev, instance)
        config["drain_s"] = round(time.monotonic() - started, 1)
        progress(f"drained in {config['drain_s']} s" + (f"; still behind: {left}" if left else ""))
    finally:
        stop_group(dev)
        log.close()
        subprocess.run([str(BIN / "lakelog"), "spark", "stop"], env=env, stdout=sys.stderr)
        conn.close()
    return landed, seqs, left


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()


def main() -> None:
    args = parse_args()
    work = args.home or Path(tempfile.mkdtemp(prefix="lakelog-freshness-"))
    work.mkdir(parents=True, exist_ok=True)
    env = environment(work, marker := uuid.uuid4().hex)
    if args.steps_at_once is not None:
        env[STEPS_VARIABLE] = str(args.steps_at_once)
    config = {"rate": args.rate, "duration_s": args.duration, "interval_s": args.interval,
              "steps_at_once": args.steps_at_once, "launcher": args.launcher,
              "cpus": os.cpu_count(), "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
              "commit": git("rev-parse", "--short", "HEAD"),
              "changed_files": git("diff", "--name-only", "HEAD").split(),
              "work": str(work), "spark_server_port": int(env["LAKELOG_SPARK_SERVER_PORT"])}
    progress(f"staging {args.duration // args.interval} file sets in {work}")
    workload = stage(args, work / "staging")
    config.update(workload_start=workload.start.isoformat(), events=workload.events,
                  event_time_minutes=workload.span.total_seconds() / 60)
    dagster_home(work / "dagster_home", args.launcher)
    os.environ["DAGSTER_HOME"] = str(work / "dagster_home")  # its dagster.yaml names the folder so
    instance = dg.DagsterInstance.from_config(str(work / "dagster_home"))
    sampler = Sampler(marker)
    sampler.start()
    try:
        landed, seqs, left = measure(args, work, env, instance, config)
    finally:
        sampler.done.set()
        sampler.join()
        for pid, kind, cmdline, _ in sampler.scan():  # ours, outliving their parents
            progress(f"still running, killing {pid} ({kind}): {cmdline[:100]}")
            os.kill(pid, 9)
    config["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    (work / "landed.json").write_text(json.dumps({"landed": landed, "seqs": seqs}))
    fresh = Freshness(work / "lake", landed, seqs)
    batches = fresh.consumers(fresh.topics())
    fresh.relay(batches[CARTS.consumer.name])
    fresh.models()
    filled, empty = tables(fresh, work / "lake")
    worst = max((t.get("p99_s", float("inf")) for t in filled.values()), default=None)
    peak = sampler.peak
    print(json.dumps({
        "config": config,
        "targets": {"p99_worst_s": worst, "p99_ok": worst is not None and worst <= 60,
                    "one_jvm": peak["jvm"] == 1, "under_8gb": peak["rss"] < 8 * 2**30},
        "tables": filled, "empty_tables": empty, "still_behind": left,
        "runs": runs(instance, config["t0"]),
        "processes": {"jvms_max": peak["jvm"], "run_workers_max": peak["run_worker"],
                      "processes_max": peak["processes"],
                      "rss_peak_gb": round(peak["rss"] / 2**30, 2),
                      "pss_peak_gb": round(peak["pss"] / 2**30, 2),
                      "rss_at_peak_gb": sampler.rss_at_peak, "seen": sorted(sampler.seen)},
    }, indent=2))
    instance.dispose()


if __name__ == "__main__":
    main()
