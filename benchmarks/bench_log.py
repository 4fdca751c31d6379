"""Benchmark of the log: ingest throughput, consumer throughput, and batch cost against history.

Prints one JSON object to stdout; progress goes to stderr. See benchmarks/README.md for what each
figure means and how to run it. Example (quick):

    /work/venv/bin/python benchmarks/bench_log.py --events 100000 --history-large 1000000
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import wraps
from typing import Any

import pyspark
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog import consumers
from lakelog.consumers import BatchInput, Consumer, Output
from lakelog.consumers import resets
from lakelog.demo import shop
from lakelog.demo.workload import Workload
from lakelog.lake import EmbeddedLake
from lakelog.log import ingest, offsets
from lakelog.log.topics import Topic
from lakelog.spark.session import create_session
from lakelog.procfs import stat_fields

INGEST_TARGET = 50_000  # records/s, landing -> log, on 2 cores
RATIO_TARGET = 1.3  # median batch time with the large history / with the small one


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


# --- memory -------------------------------------------------------------------------------------


def _status(pid: int | str) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except OSError:
        return {}


def _kib_to_mb(value: str | None) -> float | None:
    return round(int(value.split()[0]) / 1024, 1) if value else None


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children[ppid].append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def jvm_pid() -> int | None:
    """The Spark driver JVM: the java process among this process's descendants."""
    for pid in _descendants(os.getpid()):
        if _status(pid).get("Name") == "java":
            return pid
    return None


def memory(pid: int | None) -> dict[str, Any]:
    """Peak (VmHWM) and current (VmRSS) resident memory of this process and of the JVM, in MB."""
    me, jvm = _status("self"), _status(pid) if pid else {}
    return {
        "driver_peak_rss_mb": _kib_to_mb(me.get("VmHWM")),
        "driver_rss_mb": _kib_to_mb(me.get("VmRSS")),
        "jvm_peak_rss_mb": _kib_to_mb(jvm.get("VmHWM")),
        "jvm_rss_mb": _kib_to_mb(jvm.get("VmRSS")),
    }


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time consumed so far by this process and the JVM (if known)."""
    total = 0.0
    for who in ("self", pid):
        if who is None:
            continue
        fields = stat_fields(who)
        if fields is None:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def jvm_counters(spark: SparkSession) -> tuple[float, float, int]:
    """JVM seconds spent so far in garbage collection and in JIT compilation (JMX), and the
    number of classes Spark's whole-stage code generation has compiled (codegen cache misses)."""
    jvm = spark._jvm
    management = jvm.java.lang.management.ManagementFactory
    gc = sum(max(b.getCollectionTime(), 0) for b in management.getGarbageCollectorMXBeans())
    jit = management.getCompilationMXBean().getTotalCompilationTime()
    codegen = jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    return gc / 1000, jit / 1000, codegen.getCount()


class Clock:
    """Wall, CPU (driver + JVM) and JVM GC time of blocks, and the machine's load.

    CPU time shows contention: on an idle 2-core machine a well-parallelised step uses close to
    2 CPU-seconds per wall-second; much less means waiting (for other processes, I/O or a
    single-threaded step).
    """

    spark: SparkSession | None = None  # set once the session exists
    pid: int | None = None

    def __init__(self) -> None:
        self.wall = self.cpu = self.gc = self.jit = 0.0
        self.codegen = 0

    @contextmanager
    def measure(self) -> Iterator[None]:
        wall, cpu = time.perf_counter(), cpu_seconds(self.pid)
        gc, jit, codegen = jvm_counters(self.spark) if self.spark else (0.0, 0.0, 0)
        try:
            yield
        finally:
            self.wall += time.perf_counter() - wall
            self.cpu += cpu_seconds(self.pid) - cpu
            gc2, jit2, codegen2 = jvm_counters(self.spark) if self.spark else (0.0, 0.0, 0)
            self.gc += gc2 - gc
            self.jit += jit2 - jit
            self.codegen += codegen2 - codegen

    def as_dict(self) -> dict[str, Any]:
        return {
            "cpu_seconds": round(self.cpu, 2),
            "cpu_per_wall": round(self.cpu / self.wall, 2) if self.wall else None,
            "jvm_gc_seconds": round(self.gc, 2),
            "jvm_jit_seconds": round(self.jit, 2),
            "codegen_classes_compiled": self.codegen,
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }


def engine_version() -> dict[str, Any]:
    """Which engine code ran: git commit, engine files changed since it, a hash of their text."""
    package = os.path.dirname(os.path.abspath(ingest.__file__))
    digest = hashlib.sha256()
    for folder, _, names in sorted(os.walk(package)):
        for name in sorted(n for n in names if n.endswith(".py")):
            with open(os.path.join(folder, name), "rb") as f:
                digest.update(name.encode() + b"\0" + f.read())

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=package, capture_output=True, text=True,
                                 timeout=10, check=True)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.rstrip()

    changed = git("status", "--porcelain", "--", ".")
    return {
        "commit": (git("rev-parse", "--short", "HEAD") or "").strip() or None,
        "changed_files": [line[3:] for line in changed.splitlines()] if changed else [],
        "source_sha256": digest.hexdigest()[:16],
    }


def jvm_heap_flags(pid: int | None) -> list[str]:
    if not pid:
        return []
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except OSError:
        return []
    return [a for a in args if a.startswith(("-Xmx", "-Xms"))]


# --- where the time goes ------------------------------------------------------------------------


class Breakdown:
    """Inclusive wall time and call counts of selected engine and Spark functions.

    The functions are wrapped at runtime (no engine file changes). Nested entries overlap: the
    time of `offsets.append` includes the `EmbeddedLake.write` it calls.
    """

    def __init__(self) -> None:
        self.totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        self.depth = 0

    def wrap(self, label: str, fn: Callable) -> Callable:
        @wraps(fn)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                entry = self.totals[label]
                entry[0] += time.perf_counter() - start
                entry[1] += 1

        timed.__wrapped_by_bench__ = True  # type: ignore[attr-defined]
        return timed

    def patch_function(self, module: Any, name: str) -> None:
        """Replace `module.name` everywhere a lakelog module imported it by name."""
        original = getattr(module, name)
        label = f"{module.__name__.removeprefix('lakelog.')}.{name}"
        timed = self.wrap(label, original)
        for mod_name, mod in list(sys.modules.items()):
            if mod_name.startswith("lakelog") and getattr(mod, name, None) is original:
                setattr(mod, name, timed)

    def patch_method(self, cls: type, name: str, label: str | None = None) -> None:
        setattr(cls, name, self.wrap(label or f"{cls.__name__}.{name}", getattr(cls, name)))

    @contextmanager
    def section(
        self, sink: dict[str, dict[str, Any]], key: str, *, divide: int = 1
    ) -> Iterator[None]:
        """Record the time spent inside the block into `sink[key]` (accumulating, / `divide`)."""
        before = {k: tuple(v) for k, v in self.totals.items()}
        yield
        out = sink.setdefault(key, {})
        for label, (seconds, calls) in self.totals.items():
            s0, c0 = before.get(label, (0.0, 0))
            if calls > c0:
                entry = out.setdefault(label, {"seconds": 0.0, "calls": 0})
                entry["seconds"] = round(entry["seconds"] + (seconds - s0) / divide, 3)
                entry["calls"] += (calls - c0) / divide if divide > 1 else calls - c0


def sorted_sections(sink: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The `Breakdown.section` sink for the report: each section's entries, slowest first."""
    return {
        key: dict(sorted(entries.items(), key=lambda kv: -kv[1]["seconds"]))
        for key, entries in sink.items()
    }


def install_breakdown() -> Breakdown:
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame
    from pyspark.sql.readwriter import DataFrameWriter

    from lakelog.consumers import backlog, batch, checkpoints, writes
    from lakelog.lake import upsert
    from lakelog.lake.delta_snapshot import DeltaSnapshot
    from lakelog.log import landing, records

    b = Breakdown()
    for module, name in [
        (landing, "load_manifest"),
        (landing, "pending_files"),
        (landing, "save_plan"),
        (landing, "save_done"),
        (ingest, "read_landing_lines"),
        (ingest, "_duplicates"),
        (ingest, "_append_lines"),
        (records, "parse_lines"),
        (offsets, "append"),
        (offsets, "assign_offsets"),
        (offsets, "partition_states"),
        (offsets, "read_offsets"),
        (checkpoints, "load"),
        (checkpoints, "save_plan"),
        (checkpoints, "save_commit"),
        (batch, "make_plan"),
        (backlog, "positions"),
        (writes, "collected"),
        (writes, "write_output"),
        (upsert, "upsert"),
        (upsert, "candidate_files"),
    ]:
        b.patch_function(module, name)
    for name in ("snapshot", "read", "write", "write_table", "_write_files", "_commit",
                 "write_rows", "read_arrow", "create_table", "exists", "list_files", "history"):
        b.patch_method(EmbeddedLake, name)
    b.patch_method(DeltaSnapshot, "files")
    b.patch_method(ClassicDataFrame, "collect", "spark.DataFrame.collect (actions)")
    b.patch_method(ClassicDataFrame, "persist", "spark.DataFrame.persist")
    b.patch_method(DataFrameWriter, "parquet", "spark.DataFrameWriter.parquet (writes)")
    return b


# --- the workload -------------------------------------------------------------------------------


def generate(workload: Workload, root: str) -> dict[str, Any]:
    start = time.perf_counter()
    files = []
    for k in range(workload.batches):
        files += workload.write_batch(k, root)
        progress(f"generated batch {k + 1}/{workload.batches} ({len(files)} files)")
    lines = sum(workload.summary(k).lines for k in range(workload.batches))
    return {
        "events": workload.events,
        "batches": workload.batches,
        "files": len(files),
        "lines": lines,
        "bytes": sum(os.path.getsize(os.path.join(root, f)) for f in files),
        "seconds": round(time.perf_counter() - start, 2),
    }


def rate(records: int, seconds: float) -> float:
    return round(records / seconds, 1) if seconds > 0 else 0.0


def run_ingest(lake: EmbeddedLake, spark: SparkSession,
               breakdown: Breakdown | None, sink: dict) -> dict[str, Any]:
    per_topic, totals = {}, defaultdict(int)
    seconds = 0.0
    clock = Clock()
    for topic in shop.TOPICS.values():
        progress(f"ingest {topic.name}")
        with (breakdown.section(sink, "ingest") if breakdown else _nothing()), clock.measure():
            start = time.perf_counter()
            result = ingest.ingest(lake, spark, topic, now=utcnow())
            took = time.perf_counter() - start
        seconds += took
        counts = {k: getattr(result, k) for k in ("read", "appended", "duplicates", "dead_letters")}
        per_topic[topic.name] = {
            **counts, "files": len(result.files), "seconds": round(took, 2),
            "records_per_s": rate(result.read, took),
        }
        for k, v in counts.items():
            totals[k] += v
        progress(f"  {result.read} lines in {took:.1f}s ({rate(result.read, took)}/s)")
    return {
        **totals,
        "seconds": round(seconds, 2),
        "records_per_s": rate(totals["read"], seconds),
        "target_records_per_s": INGEST_TARGET,
        "meets_target": rate(totals["read"], seconds) >= INGEST_TARGET,
        **clock.as_dict(),
        "topics": per_topic,
    }


def run_ingest_concurrent(lake: EmbeddedLake, spark: SparkSession) -> dict[str, Any]:
    """The landing zone as `lakelog demo` ingests it: all topics at once (`ingest_topics`)."""
    progress("ingest all topics concurrently")
    clock = Clock()
    with clock.measure():
        start = time.perf_counter()
        results = ingest.ingest_topics(lake, spark, list(shop.TOPICS.values()), now=utcnow)
        seconds = time.perf_counter() - start
    totals = {k: sum(getattr(r, k) for r in results)
              for k in ("read", "appended", "duplicates", "dead_letters")}
    progress(f"  {totals['read']} lines in {seconds:.1f}s ({rate(totals['read'], seconds)}/s)")
    return {
        **totals,
        "ingests": len(results),
        "seconds": round(seconds, 2),
        "records_per_s": rate(totals["read"], seconds),
        "target_records_per_s": INGEST_TARGET,
        "meets_target": rate(totals["read"], seconds) >= INGEST_TARGET,
        **clock.as_dict(),
    }


def run_microbatches(lake: EmbeddedLake, breakdown: Breakdown | None, sink: dict) -> dict[str, Any]:
    consumer = shop.PRODUCT_STATS_CONSUMER
    progress(f"consumer {consumer.name} until caught up")
    clock = Clock()
    with (breakdown.section(sink, "microbatch") if breakdown else _nothing()), clock.measure():
        start = time.perf_counter()
        results = consumers.run_until_caught_up(lake, consumer, shop.TOPICS, now=utcnow)
        seconds = time.perf_counter() - start
    records = sum(r.records for r in results)
    return {
        "consumer": consumer.name,
        "max_records_per_batch": consumer.max_records_per_batch,
        "records": records,
        "batches": len(results),
        "seconds": round(seconds, 2),
        "records_per_s": rate(records, seconds),
        "seconds_per_batch": round(seconds / len(results), 2) if results else None,
        **clock.as_dict(),
    }


@contextmanager
def _nothing() -> Iterator[None]:
    yield


# --- history: a fixed batch against a small and a large log -------------------------------------

HISTORY_USERS = 50_000
STEP_MS = 100  # event-time spacing of synthetic events


def synthetic_events(
    spark: SparkSession, first: int, count: int, *, base_ms: int, ingest_time: datetime,
) -> DataFrame:
    """`count` page views with ids ``first..first+count-1``, envelope-shaped (no partition/offset).

    Event time grows with the id; `_seq` (the id) orders them totally for offset assignment.
    """
    i = F.col("id")
    t = F.lit(base_ms) + i * STEP_MS
    user = F.concat(F.lit("u-"), F.lpad(((i * 7919) % HISTORY_USERS).cast("string"), 6, "0"))
    page = F.element_at(F.array(*[F.lit(p) for p in ("home", "product", "search", "cart")]),
                        (i % 4 + 1).cast("int"))
    product = F.when(page == "product",
                     F.concat(F.lit("p-"), F.lpad((i % 2000).cast("string"), 5, "0")))
    device = F.timestamp_millis(t)
    sent = F.timestamp_millis(t + 1_000)
    received = F.timestamp_millis(t + 1_100)
    return spark.range(first, first + count).select(
        user.alias("key"),
        F.concat(F.lit("h-"), i.cast("string")).alias("event_id"),
        F.timestamp_millis(t + 100).alias("event_time"),  # device + (received - sent)
        user.alias("user_id"),
        F.concat(F.lit("s-"), (i / 20).cast("long").cast("string")).alias("session_id"),
        page.alias("page"),
        product.alias("product_id"),
        device.alias("device_time"),
        sent.alias("sent_time"),
        received.alias("received_time"),
        F.create_map(F.lit("source"), F.lit("bench"), F.lit("line"), i.cast("string"))
        .alias("headers"),
        F.lit(ingest_time).cast("timestamp").alias("ingest_time"),
        i.alias("_seq"),
    )


@dataclasses.dataclass
class HistoryLog:
    label: str
    topic: Topic
    size: int
    base_ms: int
    next_id: int = 0

    def append(self, spark: SparkSession, lake: EmbeddedLake, count: int) -> None:
        df = synthetic_events(spark, self.next_id, count, base_ms=self.base_ms,
                              ingest_time=utcnow())
        done = offsets.append(lake, self.topic, lambda _snapshot: (df, {}), order_by=["_seq"])
        assert done is not None and done[0].records == count, done
        self.next_id += count


def append_consumer(topic: Topic) -> Consumer:
    """Copies the batch's product views to an append-only table: cost should follow the batch."""
    output = Output(
        path=f"streams/{topic.name}_product_views",
        schema=T.StructType([
            T.StructField("partition", T.IntegerType()),
            T.StructField("offset", T.LongType()),
            T.StructField("user_id", T.StringType()),
            T.StructField("product_id", T.StringType()),
            T.StructField("event_time", T.TimestampType()),
        ]),
    )

    def transform(batch: BatchInput) -> dict[str, DataFrame]:
        views = batch.records[topic.name].where(F.col("page") == "product")
        return {output.path: views.select(*output.schema.fieldNames())}

    return Consumer(f"{topic.name}.copy", (topic.name,), (output,), transform)


def count_consumer(topic: Topic) -> Consumer:
    """A keyed running count of views per page (upsert of a 4-row table)."""
    output = Output(
        path=f"streams/{topic.name}_page_counts",
        schema=T.StructType([
            T.StructField("page", T.StringType()),
            T.StructField("views", T.LongType()),
        ]),
        keys=("page",),
    )

    def transform(batch: BatchInput) -> dict[str, DataFrame]:
        new = batch.records[topic.name].groupBy("page").agg(F.count("*").alias("_new"))
        old = batch.current(output)
        totals = new.join(old, "page", "left").select(
            "page", (F.col("_new") + F.coalesce(F.col("views"), F.lit(0))).alias("views")
        )
        return {output.path: totals}

    return Consumer(f"{topic.name}.count", (topic.name,), (output,), transform)


CONSUMER_KINDS: dict[str, Callable[[Topic], Consumer]] = {
    "append": append_consumer, "count": count_consumer,
}


def run_history(
    lake: EmbeddedLake, spark: SparkSession, args: argparse.Namespace,
    breakdown: Breakdown | None, sink: dict,
) -> dict[str, Any]:
    sizes = {"small": args.history_small, "large": args.history_large}
    kinds = [k for k in CONSUMER_KINDS if args.history_consumer in (k, "both")]
    end_ms = int(datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
    logs: dict[str, HistoryLog] = {}
    build: dict[str, Any] = {}
    for label, size in sizes.items():
        topic = dataclasses.replace(shop.PAGE_VIEWS, name=f"bench_history_{label}")
        h = logs[label] = HistoryLog(label, topic, size, base_ms=end_ms - size * STEP_MS)
        start = time.perf_counter()
        chunks = 0
        while h.next_id < size:
            count = min(args.history_chunk, size - h.next_id)
            progress(f"history {label}: append {count} rows ({h.next_id}/{size})")
            h.append(spark, lake, count)
            chunks += 1
        snapshot = lake.snapshot(topic.path)
        build[label] = {
            "events": size, "chunks": chunks, "files": len(snapshot.files()),
            "version": snapshot.version,
            "bytes": sum(f.size for f in snapshot.files()),
            "seconds": round(time.perf_counter() - start, 2),
        }
        progress(f"history {label}: {build[label]}")

    runs: dict[str, dict[str, Consumer]] = {
        label: {kind: CONSUMER_KINDS[kind](h.topic) for kind in kinds} for label, h in logs.items()
    }
    for label, h in logs.items():
        for consumer in runs[label].values():
            resets.reset_offsets(lake, consumer, {h.topic.name: h.topic}, to="latest",
                                    now=utcnow())

    times: dict[str, dict[str, list[float]]] = {k: {label: [] for label in logs} for k in kinds}
    clocks = {(k, label): Clock() for k in kinds for label in logs}
    order = list(logs.items())
    for rep in range(args.repeats + 1):  # repetition 0 is an untimed warm-up
        for label, h in order if rep % 2 else order[::-1]:  # alternate: drift hits both
            h.append(spark, lake, args.batch_events)
            for kind, consumer in runs[label].items():
                key = f"history.{kind}.{label}"
                timed = rep > 0
                section = (breakdown.section(sink, key, divide=args.repeats)
                           if breakdown and timed else _nothing())
                with section, (clocks[kind, label].measure() if timed else _nothing()):
                    start = time.perf_counter()
                    result = consumers.run_batch(lake, consumer, {h.topic.name: h.topic},
                                                 now=utcnow())
                    took = time.perf_counter() - start
                assert result is not None and result.records == args.batch_events, result
                if timed:
                    times[kind][label].append(took)
                progress(f"history rep {rep}{'' if timed else ' (warm-up)'} {kind} {label}: "
                         f"{took:.2f}s")

    out: dict[str, Any] = {
        "batch_events": args.batch_events, "repeats": args.repeats, "build": build,
        "consumers": {}, "target_ratio": RATIO_TARGET,
    }
    for kind in kinds:
        entry: dict[str, Any] = {}
        for label in logs:
            entry[label] = {
                "history_events": sizes[label],
                "seconds": [round(s, 3) for s in times[kind][label]],
                "median_s": round(statistics.median(times[kind][label]), 3),
                "min_s": round(min(times[kind][label]), 3),
                **clocks[kind, label].as_dict(),
            }
        entry["ratio"] = round(entry["large"]["median_s"] / entry["small"]["median_s"], 3)
        entry["cpu_ratio"] = round(
            entry["large"]["cpu_seconds"] / entry["small"]["cpu_seconds"], 3
        ) if entry["small"]["cpu_seconds"] else None
        out["consumers"][kind] = entry
    out["ratio"] = max(e["ratio"] for e in out["consumers"].values())
    out["meets_target"] = out["ratio"] <= RATIO_TARGET
    return out


# --- main ---------------------------------------------------------------------------------------


def warm_up(spark: SparkSession, home: str, seed: int, rounds: int, events: int) -> float:
    """Untimed ingests of every topic and consumer runs on small workloads, each in its own lake.

    The first round is mostly class loading and code generation; the JIT's optimising compiler
    only takes on the hot loops once they have run long enough, hence a second, larger round.
    """
    start = time.perf_counter()
    for r in range(rounds):
        root = os.path.join(home, f"warmup-{r}")
        lake = EmbeddedLake(spark, root)
        workload = Workload(5_000 if r == 0 else events, seed=seed + 1 + r, batches=2)
        for k in range(workload.batches):
            workload.write_batch(k, root)
        for topic in shop.TOPICS.values():
            ingest.ingest(lake, spark, topic, now=utcnow())
        consumers.run_until_caught_up(lake, shop.PRODUCT_STATS_CONSUMER, shop.TOPICS, now=utcnow)
        progress(f"warm-up round {r + 1}/{rounds}: {time.perf_counter() - start:.1f}s")
    return round(time.perf_counter() - start, 2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--events", type=int, default=1_000_000, help="web-shop events to ingest")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--workload-batches", type=int, default=4,
                   help="landing batches the workload is sliced into (all ingested at once)")
    p.add_argument("--history-small", type=int, default=100_000)
    p.add_argument("--history-large", type=int, default=10_000_000)
    p.add_argument("--history-chunk", type=int, default=2_500_000,
                   help="rows per append when building a history (one Delta commit each)")
    p.add_argument("--batch-events", type=int, default=10_000,
                   help="new events per timed history microbatch")
    p.add_argument("--repeats", type=int, default=5, help="timed history microbatches per size")
    p.add_argument("--history-consumer", choices=["append", "count", "both"], default="both")
    p.add_argument("--skip", action="append", default=[],
                   choices=["ingest", "microbatch", "history"],
                   help="leave out a part (microbatch needs ingest)")
    p.add_argument("--warmup-rounds", type=int, default=2,
                   help="untimed warm-up rounds (ingest + consumer, fresh lake each)")
    p.add_argument("--warmup-events", type=int, default=50_000,
                   help="events per warm-up round after the first (which has 5,000)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="6g")
    p.add_argument("--shuffle-partitions", default=None,
                   help="spark.sql.shuffle.partitions (default: lakelog's local default)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark setting (repeatable)")
    p.add_argument("--no-breakdown", action="store_true",
                   help="do not wrap engine functions with timers")
    p.add_argument("--home", default=None,
                   help="directory for the lakes (kept afterwards); default: a temp dir, removed")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if "microbatch" not in args.skip and "ingest" in args.skip:
        sys.exit("--skip ingest needs --skip microbatch too: the consumer reads what was ingested")
    home = os.path.abspath(args.home) if args.home else tempfile.mkdtemp(prefix="lakelog-bench-")
    os.makedirs(home, exist_ok=True)
    if os.listdir(home):
        sys.exit(f"--home {home} is not empty; give a new or empty directory")
    conf = {"spark.driver.memory": args.driver_memory}
    if args.shuffle_partitions:
        conf["spark.sql.shuffle.partitions"] = args.shuffle_partitions
    for item in args.conf:
        key, _, value = item.partition("=")
        conf[key] = value
    report: dict[str, Any] = {}
    phases_memory: dict[str, Any] = {}
    sink: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    progress(f"lake home {home}")
    spark = create_session(master=args.master, app_name="lakelog-bench", conf=conf)
    try:
        pid = jvm_pid()
        Clock.spark, Clock.pid = spark, pid
        breakdown = None if args.no_breakdown else install_breakdown()
        report["config"] = {
            "events": args.events, "seed": args.seed, "master": args.master,
            "driver_memory": args.driver_memory,
            "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
            "extra_conf": {k: v for k, v in conf.items() if k != "spark.driver.memory"},
            "history_small": args.history_small, "history_large": args.history_large,
            "history_chunk": args.history_chunk, "batch_events": args.batch_events,
            "repeats": args.repeats, "cpus": os.cpu_count(), "pyspark": pyspark.__version__,
            "python": platform.python_version(), "jvm_pid": pid, "jvm_heap": jvm_heap_flags(pid),
            "home": home if args.home else None,
            "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
            "engine": engine_version(),
        }
        progress("warm-up")
        report["warmup_seconds"] = warm_up(
            spark, home, args.seed, args.warmup_rounds, args.warmup_events
        )
        phases_memory["warmup"] = memory(pid)
        lake_root = os.path.join(home, "lake")
        lake = EmbeddedLake(spark, lake_root)
        if "ingest" not in args.skip:
            workload = Workload(args.events, seed=args.seed, batches=args.workload_batches)
            progress(f"generating {args.events} events")
            report["generate"] = generate(workload, lake_root)
            phases_memory["generate"] = memory(pid)
            report["ingest"] = run_ingest(lake, spark, breakdown, sink)
            phases_memory["ingest"] = memory(pid)
        if "microbatch" not in args.skip:
            report["microbatch"] = run_microbatches(lake, breakdown, sink)
            phases_memory["microbatch"] = memory(pid)
        if "ingest" not in args.skip:
            concurrent_root = os.path.join(home, "lake-concurrent")
            generate(workload, concurrent_root)
            report["ingest_concurrent"] = run_ingest_concurrent(
                EmbeddedLake(spark, concurrent_root), spark
            )
            phases_memory["ingest_concurrent"] = memory(pid)
        if "history" not in args.skip:
            report["history"] = run_history(lake, spark, args, breakdown, sink)
            phases_memory["history"] = memory(pid)
        report["memory"] = {**memory(pid), "after_phase": phases_memory}
        if breakdown:
            report["breakdown"] = sorted_sections(sink)
        report["wall_seconds"] = round(time.perf_counter() - started, 1)
    finally:
        spark.stop()
        if not args.home:
            shutil.rmtree(home, ignore_errors=True)
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
