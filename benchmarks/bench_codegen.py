"""Spark's code generation on and off, measured as a user meets it: `lakelog demo` over the
local Spark server.

lakelog's sessions run without generated code (`spark.sql.codegen.wholeStage=false`,
`spark.sql.codegen.factoryMode=NO_CODEGEN`, in `lakelog.spark.session.LOCAL_DEFAULTS`): a
microbatch's plans carry its own literals, so much of its generated code was new every batch,
compiled, loaded and JIT-compiled again. This runs, side by side in one run, per setting:

- a fresh local Spark Connect server (`lakelog.spark.server`, local[N]) with the setting;
- `lakelog demo --events E --batches 4` against it, as a whole process into a fresh home;
- the demo's wall time and the server's CPU seconds (user + system, from /proc; its JIT
  compiler threads' and collector threads' apart), the demo process's own (its rusage), and
  the share of the machine's cores busy meanwhile (/proc/stat), then the server is stopped;
  with ``--jfr``, also where the server's Java code spent its samples (`jfr_account`).

The settings alternate (off, on, off, on, ... for `--rounds`), so a drift of the machine's load
touches both. More settings compare other per-query costs against lakelog's defaults:
``codegen_off_aqe_off`` (adaptive execution off), ``g1_gc`` (the JVM's default garbage
collector, G1, instead of the parallel one lakelog's server runs with), the JIT's tiers,
thresholds and inlining (``hotspot_inlining``: HotSpot's own, lakelog's before 2026-12-05),
Spark's single-pass analyzer, constraint propagation, the plan description posted at each
execution, and the optimizer's folding of projections into local relations (`SETTINGS`).

With ``--ingest N`` it also times, in one classic local[N] session of this process,
`ingest_topics` of N workload events into a fresh lake per attempt, the two code generation
settings alternated three times each (the first of each is the warm-up): one large batch,
where the rows' own cost dominates. Prints one JSON object on stdout.

    python benchmarks/bench_codegen.py --events 100000 --rounds 1 > codegen.json
    python benchmarks/bench_codegen.py --rounds 0 --ingest 100000 > codegen-ingest.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import jfr_account
from bench_common import SPARK_CODEGEN, spark_codegen
from bench_common import busy_share, jvm_cpu_account, machine_jiffies

from lakelog.spark.server import (
    DEFAULT_JAVA_OPTIONS, PARALLEL_GC, ServerConfig, ensure_running, status, stop,
)
from lakelog.spark.session import SHALLOW_INLINING

LAKELOG = [sys.executable, "-m", "lakelog.cli"]
#: Spark's own defaults: whole-stage code generation, generated code wherever it compiles.
SETTINGS = {
    "codegen_off": {},  # lakelog's defaults
    "codegen_on": SPARK_CODEGEN,
    # Another per-query cost, for comparison: adaptive execution re-plans at every stage.
    "codegen_off_aqe_off": {"spark.sql.adaptive.enabled": "false"},
    # lakelog's defaults but the JVM's own garbage collector (G1) instead of the parallel one.
    "g1_gc": {},
    # lakelog's defaults, the JIT's top tier (C2) compiling fewer methods, later: a fresh
    # server's compiler threads take a large share of a first demo's CPU on two cores.
    "c2_later": {},
    "c2_no_escape": {},
    # lakelog's defaults, the JIT changed more deeply: only its first tier (C1, no profiling),
    # only its top tier (C2 after the interpreter's profile), or tier 3's profiled C1 code
    # later (five times HotSpot's thresholds), so lukewarm methods are compiled once, not twice.
    "c1_only": {},
    "c2_only": {},
    "c1_profiled_later": {},
    # lakelog's defaults but the serial collector: one GC thread, no parallel phases.
    "serial_gc": {},
    # lakelog's defaults but the JIT inlining as HotSpot does (`SHALLOW_INLINING` left out: the
    # server's flags before 2026-12-05), as deep as JDK 11 (C2 only), or shallower still.
    "hotspot_inlining": {},
    "c2_less_inlining": {},
    "jit_minimal_inlining": {},
    # lakelog's defaults, every tier's compile thresholds halved or doubled.
    "compile_sooner": {},
    "compile_later": {},
    # lakelog's defaults, plans Spark's single-pass analyzer supports resolved by it (Spark 4.1
    # and later; still under development there) instead of the fixed-point analyzer.
    "single_pass_analyzer": {"spark.sql.analyzer.singlePassResolver.enabledTentatively": "true"},
    # lakelog's defaults but the short description of each query's plan that Spark posts for
    # the UI's SQL tab at every execution (its default, ``formatted``, is every operator's
    # verbose string).
    "explain_simple": {"spark.sql.ui.explainMode": "simple"},
    # lakelog's defaults but no constraint propagation: the optimizer neither infers filters
    # from each operator's constraints nor prunes filters they imply.
    "no_constraint_propagation": {"spark.sql.constraintPropagation.enabled": "false"},
    # lakelog's defaults but a projection or filter of a local relation (a held batch's rows)
    # left to the query's tasks, not evaluated row by row by the optimizer of every query.
    "no_local_relation_folding": {
        "spark.sql.optimizer.excludedRules":
            "org.apache.spark.sql.catalyst.optimizer.ConvertToLocalRelation"},
}
#: The server JVM's flags per setting (lakelog's `DEFAULT_JAVA_OPTIONS` unless named here).
JAVA_OPTIONS = {
    "g1_gc": f"-XX:+UseG1GC {SHALLOW_INLINING}",
    # Tier 4 (C2) thresholds three times HotSpot's defaults (5000 / 600 / 15000).
    "c2_later": f"{DEFAULT_JAVA_OPTIONS} -XX:Tier4InvocationThreshold=15000 "
                "-XX:Tier4MinInvocationThreshold=1800 -XX:Tier4CompileThreshold=45000",
    # C2 without escape analysis, one of its costliest phases.
    "c2_no_escape": f"{DEFAULT_JAVA_OPTIONS} -XX:-DoEscapeAnalysis",
    "c1_only": f"{DEFAULT_JAVA_OPTIONS} -XX:TieredStopAtLevel=1",
    "c2_only": f"{DEFAULT_JAVA_OPTIONS} -XX:-TieredCompilation",
    # Tier 3 thresholds five times HotSpot's defaults (200 / 100 / 2000 / 60000).
    "c1_profiled_later": f"{DEFAULT_JAVA_OPTIONS} -XX:Tier3InvocationThreshold=1000 "
                         "-XX:Tier3MinInvocationThreshold=500 -XX:Tier3CompileThreshold=10000 "
                         "-XX:Tier3BackEdgeThreshold=300000",
    "serial_gc": f"-XX:+UseSerialGC {SHALLOW_INLINING}",
    "hotspot_inlining": PARALLEL_GC,
    "c2_less_inlining": f"{PARALLEL_GC} -XX:MaxInlineLevel=9 -XX:FreqInlineSize=100 "
                        "-XX:InlineSmallCode=1000",
    "jit_minimal_inlining": f"{PARALLEL_GC} -XX:MaxInlineLevel=3 -XX:FreqInlineSize=35 "
                            "-XX:InlineSmallCode=300 -XX:MaxInlineSize=15 -XX:C1MaxInlineLevel=3 "
                            "-XX:C1MaxInlineSize=15",
    "compile_sooner": f"{DEFAULT_JAVA_OPTIONS} -XX:CompileThresholdScaling=0.5",
    "compile_later": f"{DEFAULT_JAVA_OPTIONS} -XX:CompileThresholdScaling=2",
}


def one_demo(setting: str, args) -> dict:
    state = Path(tempfile.mkdtemp(prefix=f"lakelog-bench-codegen-{setting}-"))
    config = ServerConfig(port=args.port, master=f"local[{args.cores}]", memory=args.memory,
                          state_dir=state, conf=SETTINGS[setting],
                          java_options=JAVA_OPTIONS.get(setting, DEFAULT_JAVA_OPTIONS))
    started = time.perf_counter()
    ensure_running(config)
    server_start = time.perf_counter() - started
    pid = status(config).pid
    home = state / "home"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LAKELOG_SPARK", "DAGSTER_HOME"))}
    command = [*LAKELOG, "demo", "--events", str(args.events), "--batches", "4",
               "--home", str(home), "--json", "--remote", config.url]
    recording = state / "server.jfr"
    try:
        with jfr_account.record(pid, recording) if args.jfr else nullcontext():
            children, jiffies = resource.getrusage(resource.RUSAGE_CHILDREN), machine_jiffies()
            started = time.perf_counter()
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - started
            busy = busy_share(jiffies, machine_jiffies())
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            server = jvm_cpu_account(pid)
        java = jfr_account.shares(recording) if args.jfr else None
    finally:
        stop(config)
        shutil.rmtree(state, ignore_errors=True)
    if done.returncode != 0:
        return {"setting": setting, "error": done.stderr[-2000:]}
    summary = json.loads(done.stdout)
    client_cpu = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    return {"setting": setting, "wall_s": round(wall, 1),
            "server_cpu_s": round(server["cpu_s"], 1), "jit_cpu_s": round(server["jit_cpu_s"], 1),
            "gc_cpu_s": round(server["gc_cpu_s"], 1),
            "demo_process_cpu_s": round(client_cpu, 1), "machine_busy": round(busy, 3),
            "server_start_s": round(server_start, 1),
            "read": summary["read"], "microbatches": summary["microbatches"], "ingests": summary["ingests"],
            "loadavg_after": os.getloadavg(), **({"server_java": java} if java else {})}


#: The settings the large ingest alternates, in this order (lakelog's defaults first).
INGEST_SETTINGS = ["codegen_off", "codegen_on"]


def ingest_side_by_side(events: int, cores: int, memory: str) -> list[dict]:
    """One large ingest per attempt into a fresh lake, code generation off and on alternated."""
    from datetime import datetime, timezone

    from lakelog.demo.pipeline import pipeline as shop
    from lakelog.demo.workload import Workload
    from lakelog.lake import EmbeddedLake
    from lakelog.log import ingest
    from lakelog.spark.session import create_session

    spark = create_session(master=f"local[{cores}]", app_name="bench-codegen",
                           conf={"spark.driver.memory": memory})
    attempts = []
    try:
        for attempt, setting in enumerate(INGEST_SETTINGS * 3):
            root = tempfile.mkdtemp(prefix="lakelog-bench-codegen-ingest-")
            lake = EmbeddedLake(spark, root)
            workload = Workload(events, seed=3 + attempt, batches=1)
            workload.write_batch(0, lake.root)
            topics = [shop.topic(t) for t in workload.batch_records(0)]
            with spark_codegen(spark) if setting == "codegen_on" else nullcontext():
                started = time.perf_counter()
                done = ingest.ingest_topics(lake, spark, topics,
                                            now=lambda: datetime.now(timezone.utc))
                seconds = time.perf_counter() - started
            attempts.append({"setting": setting, "warm_up": attempt < 2,
                             "read": sum(r.read for r in done), "seconds": round(seconds, 2)})
            print(json.dumps(attempts[-1]), file=sys.stderr, flush=True)
            shutil.rmtree(root, ignore_errors=True)
    finally:
        spark.stop()
    return attempts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=1, help="demos per setting, alternated")
    p.add_argument("--ingest", type=int, default=0,
                   help="also time one large ingest of this many events per attempt (classic)")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--memory", default="4g")
    p.add_argument("--port", type=int, default=15190)
    p.add_argument("--jfr", action="store_true",
                   help="also record each server with Java Flight Recorder and report where its "
                        "Java code's samples went (jfr_account.py)")
    p.add_argument("--settings", nargs="+", choices=sorted(SETTINGS),
                   default=["codegen_off", "codegen_on"])
    args = p.parse_args(argv)
    load = os.getloadavg()
    runs = []
    for _ in range(args.rounds):
        for setting in args.settings:
            runs.append(one_demo(setting, args))
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    summary = {}
    for setting in args.settings:
        done = [r for r in runs if r["setting"] == setting and "error" not in r]
        if done:
            summary[setting] = {key: statistics.median(r[key] for r in done)
                                for key in ("wall_s", "server_cpu_s", "jit_cpu_s", "gc_cpu_s",
                                            "demo_process_cpu_s", "machine_busy")}
    ingests = ingest_side_by_side(args.ingest, args.cores, args.memory) if args.ingest else []
    for setting in INGEST_SETTINGS if ingests else ():
        timed = [a["seconds"] for a in ingests if a["setting"] == setting and not a["warm_up"]]
        if timed:
            summary.setdefault(setting, {})["ingest_s"] = round(statistics.median(timed), 2)
    print(json.dumps({"events": args.events, "cores": args.cores, "cpus": os.cpu_count(),
                      "loadavg_at_start": load, "runs": runs, "ingest_events": args.ingest,
                      "ingests": ingests, "median": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
