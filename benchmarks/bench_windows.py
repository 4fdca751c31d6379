"""Windowed aggregation: lakelog's windowed consumer against Spark Structured Streaming.

Both compute the same 1-minute tumbling windows (count, sum, avg, min, max, approximate distinct
users) with a 2-minute watermark over the same NDJSON events, in microbatches of the same size,
on the same SparkSession. Prints one JSON object to stdout; progress goes to stderr. See
benchmarks/README.md for what each figure means. Example (quick):

    /work/venv/bin/python benchmarks/bench_windows.py --events 100000 --file-events 10000 \
        --batch-events 25000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pyspark
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from bench_log import (  # benchmarks/ is on sys.path when this script runs
    Breakdown, Clock, engine_version, install_breakdown, jvm_counters, jvm_heap_flags, jvm_pid,
    memory, progress, rate, sorted_sections, utcnow,
)
from lakelog import consumers
from lakelog.consumers import batch as batch_module
from lakelog.consumers.watermarks import Watermark
from lakelog.lake import EmbeddedLake
from lakelog.log import ingest
from lakelog.log.topics import EventTime, Topic
from lakelog.spark.session import create_session
from lakelog.windows import (
    ApproxDistinct, Avg, Count, Max, Min, Sum, Tumbling, WindowedAggregate,
)
from lakelog.windows import consumer as window_consumer
from lakelog.windows import pruning, updates

RATIO_TARGET = 1.0  # lakelog consumer events/s over the reference's
WINDOW = timedelta(minutes=1)
LATENESS = timedelta(minutes=2)
TOPIC = "bench_events"
AGGREGATE = "bench_minutes"
BASE_MS = int(datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc).timestamp() * 1000)
MINUTE_MS = 60_000
VALUES = ("events", "amount_sum", "amount_avg", "amount_min", "amount_max", "users")

#: The payload of tests/engine/engine_helpers.py: a device time, its send time and the server's
#: receive time, from which the ingest derives the corrected event time.
SCHEMA = T.StructType([
    T.StructField("event_id", T.StringType(), False),
    T.StructField("user_id", T.StringType(), False),
    T.StructField("product_id", T.StringType()),
    T.StructField("amount", T.DoubleType()),
    T.StructField("device_time", T.TimestampType(), False),
    T.StructField("sent_time", T.TimestampType(), False),
    T.StructField("received_time", T.TimestampType(), False),
])


# --- the events ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Events:
    """Synthetic events in arrival order; `event_ms` is the corrected event time the engines
    should compute, kept to check their windows against."""

    event_ms: np.ndarray
    device_ms: np.ndarray
    sent_ms: np.ndarray
    received_ms: np.ndarray
    user: np.ndarray
    product: np.ndarray
    cents: np.ndarray


def make_events(n: int, *, seed: int, rate_per_s: int, users: int, out_of_order: float) -> Events:
    """`n` events at `rate_per_s`, each user's device clock off by up to ±5 minutes; a share
    `out_of_order` was held on the device and arrives up to a minute after later events."""
    rng = np.random.default_rng(seed)
    step_ms = 1000 / rate_per_s
    arrival = BASE_MS + (np.arange(n) * step_ms).astype(np.int64)
    net = rng.integers(20, 800, n)  # transit, device send -> server receive
    held = rng.integers(0, 2_000, n)  # queued on the device before sending
    late = rng.random(n) < out_of_order
    held[late] += rng.integers(1, 60_000, int(late.sum()))
    true = arrival - net - held
    user = rng.integers(0, users, n)
    device = true + rng.integers(-300_000, 300_001, users)[user]
    sent = device + held
    received = true + held + net
    return Events(
        event_ms=device + (received - sent), device_ms=device, sent_ms=sent, received_ms=received,
        user=user, product=rng.integers(0, 1_000, n), cents=rng.integers(100, 50_000, n),
    )


def _iso(ms: np.ndarray) -> np.ndarray:
    return np.datetime_as_string(ms.astype("datetime64[ms]"), unit="ms")


def write_ndjson(events: Events, folder: str, file_events: int) -> dict[str, Any]:
    """NDJSON files of `file_events` lines, in arrival order; mtimes one second apart so that
    Spark's file source (oldest first) and the landing zone (by name) take them in one order."""
    start = time.perf_counter()
    os.makedirs(folder, exist_ok=True)
    n = len(events.event_ms)
    names = []
    stamp = time.time() - n // file_events - 10
    for k, lo in enumerate(range(0, n, file_events)):
        hi = min(lo + file_events, n)
        columns = zip(
            range(lo, hi), events.user[lo:hi].tolist(), events.product[lo:hi].tolist(),
            events.cents[lo:hi].tolist(), _iso(events.device_ms[lo:hi]),
            _iso(events.sent_ms[lo:hi]), _iso(events.received_ms[lo:hi]),
        )
        text = "".join(
            f'{{"event_id":"e{i:08d}","user_id":"u-{u:06d}","product_id":"p-{p:04d}",'
            f'"amount":{c // 100}.{c % 100:02d},"device_time":"{d}Z","sent_time":"{s}Z",'
            f'"received_time":"{r}Z"}}\n'
            for i, u, p, c, d, s, r in columns
        )
        name = f"part-{k:05d}.ndjson"
        path = os.path.join(folder, name)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
        os.utime(path, (stamp + k, stamp + k))
        names.append(name)
    return {
        "events": n, "files": len(names), "file_events": file_events,
        "bytes": sum(os.path.getsize(os.path.join(folder, f)) for f in names),
        "seconds": round(time.perf_counter() - start, 2),
    }


def truth(events: Events, users: int) -> dict[int, dict[str, Any]]:
    """Exact windows of all events, by window start (epoch minute): what nothing late would give."""
    minute = events.event_ms // MINUTE_MS
    keys, index, counts = np.unique(minute, return_inverse=True, return_counts=True)
    cents = np.bincount(index, weights=events.cents, minlength=len(keys))
    low = np.full(len(keys), np.iinfo(np.int64).max)
    high = np.zeros(len(keys), dtype=np.int64)
    np.minimum.at(low, index, events.cents)
    np.maximum.at(high, index, events.cents)
    pairs = np.unique(index.astype(np.int64) * users + events.user)
    distinct = np.bincount(pairs // users, minlength=len(keys))
    return {
        int(k): {"events": int(c), "cents": int(s), "min_cents": int(lo), "max_cents": int(hi),
                 "users": int(d)}
        for k, c, s, lo, hi, d in zip(keys, counts, cents, low, high, distinct)
    }


# --- the reference: Spark Structured Streaming --------------------------------------------------


def reference_query(spark: SparkSession, source: str, *, files_per_trigger: int) -> DataFrame:
    events = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", files_per_trigger).json(
        source
    )
    corrected = F.timestamp_micros(
        F.unix_micros("device_time") + F.unix_micros("received_time") - F.unix_micros("sent_time")
    )
    return (
        events.select("user_id", "amount", corrected.alias("event_time"))
        .withWatermark("event_time", f"{int(LATENESS.total_seconds())} seconds")
        .groupBy(F.window("event_time", f"{int(WINDOW.total_seconds())} seconds"))
        .agg(
            F.count("*").alias("events"), F.sum("amount").alias("amount_sum"),
            F.avg("amount").alias("amount_avg"), F.min("amount").alias("amount_min"),
            F.max("amount").alias("amount_max"), F.approx_count_distinct("user_id").alias("users"),
        )
        .select(F.col("window.start").alias("window_start"),
                F.col("window.end").alias("window_end"), *VALUES)
    )


def run_reference(
    spark: SparkSession, source: str, work: str, *, files_per_trigger: int, events: int,
) -> tuple[dict[str, Any], DataFrame]:
    """Start to `awaitTermination()` of an availableNow query appending final windows to a
    parquet file sink (exactly-once through its checkpoint and `_spark_metadata` log)."""
    out, checkpoint = os.path.join(work, "windows"), os.path.join(work, "checkpoint")
    progress(f"reference: {events} events, {files_per_trigger} files per trigger")
    clock = Clock()
    with clock.measure():
        start = time.perf_counter()
        query = (
            reference_query(spark, source, files_per_trigger=files_per_trigger)
            .writeStream.format("parquet").outputMode("append")
            .option("path", out).option("checkpointLocation", checkpoint)
            .trigger(availableNow=True).start()
        )
        query.awaitTermination()
        seconds = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(f"reference query failed: {query.exception()}")
    batches = [json.loads(p.json) for p in query.recentProgress]
    operators = [op for b in batches for op in b.get("stateOperators", [])]
    dropped = sum(op.get("numRowsDroppedByWatermark", 0) for op in operators)
    progress(f"  {seconds:.1f}s ({rate(events, seconds)}/s), {len(batches)} batches")
    report = {
        "seconds": round(seconds, 2),
        "events": events,
        "events_per_s": rate(events, seconds),
        "batches": len(batches),
        "batch_rows": [b["numInputRows"] for b in batches],
        "batch_ms": [b["durationMs"].get("triggerExecution") for b in batches],
        "add_batch_ms": [b["durationMs"].get("addBatch") for b in batches],
        "state_rows_dropped_by_watermark": dropped,
        **clock.as_dict(),
    }
    return report, spark.read.parquet(out)


# --- lakelog ------------------------------------------------------------------------------------


def bench_topic(partitions: int) -> Topic:
    return Topic(TOPIC, SCHEMA, key="user_id", partitions=partitions,
                 time=EventTime("device_time", "sent_time", "received_time"))


def windowed(batch_events: int, emit: str) -> WindowedAggregate:
    return WindowedAggregate(
        AGGREGATE, (TOPIC,), window=Tumbling(WINDOW),
        aggregates=(
            Count("events"), Sum("amount_sum", "amount"), Avg("amount_avg", "amount"),
            Min("amount_min", "amount"), Max("amount_max", "amount"),
            ApproxDistinct("users", "user_id"),
        ),
        watermark=Watermark(lateness=LATENESS), emit=emit,  # type: ignore[arg-type]
        max_records_per_batch=batch_events,
    )


def link_landing(source: str, lake_root: str) -> None:
    folder = os.path.join(lake_root, "landing", TOPIC)
    os.makedirs(folder, exist_ok=True)
    for name in sorted(os.listdir(source)):
        os.link(os.path.join(source, name), os.path.join(folder, name))


def _section(breakdown: Breakdown | None, sink: dict, key: str) -> AbstractContextManager:
    return breakdown.section(sink, key) if breakdown else nullcontext()


@contextmanager
def per_batch(spark: SparkSession, batches: list[dict[str, Any]]) -> Iterator[None]:
    """Record each `consumers.run_batch` call's wall time and new codegen classes."""
    original = batch_module.run_batch

    def timed(*args: Any, **kwargs: Any) -> Any:
        start, codegen = time.perf_counter(), jvm_counters(spark)[2]
        result = original(*args, **kwargs)
        if result is not None:
            batches.append({"records": result.records,
                            "seconds": round(time.perf_counter() - start, 2),
                            "codegen_classes_compiled": jvm_counters(spark)[2] - codegen})
        return result

    batch_module.run_batch = timed  # run_until_caught_up calls it through its module
    try:
        yield
    finally:
        batch_module.run_batch = original


def run_lakelog(
    spark: SparkSession, source: str, root: str, *, partitions: int, batch_events: int,
    emit: str, breakdown: Breakdown | None, sink: dict,
) -> tuple[dict[str, Any], DataFrame]:
    link_landing(source, root)
    lake = EmbeddedLake(spark, root)
    topic, agg = bench_topic(partitions), windowed(batch_events, emit)
    progress("lakelog: ingest")
    ingest_clock, consume_clock = Clock(), Clock()
    with _section(breakdown, sink, "ingest"), ingest_clock.measure():
        start = time.perf_counter()
        result = ingest.ingest(lake, spark, topic, now=utcnow())
        ingest_s = time.perf_counter() - start
    progress(f"  {result.read} lines in {ingest_s:.1f}s ({rate(result.read, ingest_s)}/s)")
    progress(f"lakelog: consumer {agg.consumer.name}")
    batches: list[dict[str, Any]] = []
    with _section(breakdown, sink, "consumer"), per_batch(spark, batches), consume_clock.measure():
        start = time.perf_counter()
        results = consumers.run_until_caught_up(lake, agg.consumer, {TOPIC: topic}, now=utcnow)
        consume_s = time.perf_counter() - start
    records = sum(r.records for r in results)
    progress(f"  {records} records in {consume_s:.1f}s ({rate(records, consume_s)}/s), "
             f"{len(results)} batches")
    late = lake.read(lake.snapshot(agg.late_records.path)).count()
    head: dict[int, int] = {}
    for r in results:
        for (_, p), (_, end) in r.ranges.items():
            head[p] = max(head.get(p, 0), end)
    report = {
        "ingest": {
            "seconds": round(ingest_s, 2),
            **{k: getattr(result, k) for k in ("read", "appended", "duplicates", "dead_letters")},
            "records_per_s": rate(result.read, ingest_s),
            "partition_heads": dict(sorted(head.items())),
            **ingest_clock.as_dict(),
        },
        "consumer": {
            "seconds": round(consume_s, 2),
            "records": records,
            "events_per_s": rate(records, consume_s),
            "batches": len(results),
            "seconds_per_batch": round(consume_s / len(results), 2) if results else None,
            "late_records": late,
            "per_batch": batches,
            **consume_clock.as_dict(),
        },
        "end_to_end": {
            "seconds": round(ingest_s + consume_s, 2),
            "events_per_s": rate(result.read, ingest_s + consume_s),
        },
    }
    return report, lake.read(lake.snapshot(agg.windows.path))


# --- checking the answers -----------------------------------------------------------------------


def _rows(windows: DataFrame) -> dict[int, dict[str, Any]]:
    minute = (F.unix_micros("window_start") / 60_000_000).cast("long").alias("minute")
    return {r["minute"]: r.asDict() for r in windows.select(minute, *VALUES).collect()}


def _agrees(row: dict[str, Any], exact: dict[str, Any] | None) -> bool:
    return exact is not None and (
        row["events"] == exact["events"]
        and round(row["amount_sum"] * 100) == exact["cents"]
        and round(row["amount_min"] * 100) == exact["min_cents"]
        and round(row["amount_max"] * 100) == exact["max_cents"]
        and abs(row["amount_avg"] * 100 * exact["events"] - exact["cents"]) < 1e-6 * exact["cents"]
    )


def verify(
    reference: DataFrame, lakelog: DataFrame, exact: dict[int, dict[str, Any]],
) -> dict[str, Any]:
    """Compare the final windows of both with each other and with the exact windows."""
    ref, mine = _rows(reference), _rows(lakelog.where(F.col("is_final")))
    open_ = lakelog.where(~F.col("is_final")).count()
    both = sorted(ref.keys() & mine.keys())
    differ = [
        m for m in both
        if any(ref[m][k] != mine[m][k] for k in ("events", "amount_min", "amount_max"))
        or abs(ref[m]["amount_sum"] - mine[m]["amount_sum"]) > 1e-9 * abs(ref[m]["amount_sum"])
    ]

    def against_exact(rows: dict[int, dict[str, Any]]) -> dict[str, Any]:
        wrong = [m for m, r in rows.items() if not _agrees(r, exact.get(m))]
        errors = [abs(r["users"] - exact[m]["users"]) / exact[m]["users"]
                  for m, r in rows.items() if m in exact]
        return {
            "final_windows": len(rows),
            "events_in_final_windows": sum(r["events"] for r in rows.values()),
            "windows_not_exact": len(wrong),
            "events_missing": sum(exact.get(m, {"events": 0})["events"] - rows[m]["events"]
                                  for m in wrong),
            "users_max_rel_error": round(max(errors), 4) if errors else None,
            "users_mean_rel_error": round(sum(errors) / len(errors), 4) if errors else None,
        }

    return {
        "same_final_windows": not differ and ref.keys() == mine.keys(),
        "windows_compared": len(both),
        "windows_differing": len(differ),
        "examples": [{"window_minute": m, "reference": ref[m], "lakelog": mine[m]}
                     for m in differ[:3]],
        "final_only_in_reference": sorted(ref.keys() - mine.keys())[:10],
        "final_only_in_lakelog": sorted(mine.keys() - ref.keys())[:10],
        "lakelog_open_windows": open_,
        "exact_windows": len(exact),
        "reference": against_exact(ref),
        "lakelog": against_exact(mine),
    }


# --- main ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """How a run's events are cut into files and microbatches."""

    events: int
    file_events: int
    batch_events: int

    @property
    def files_per_trigger(self) -> int:
        return self.batch_events // self.file_events


def prepare(args: argparse.Namespace, shape: Shape, folder: str, seed: int) -> tuple[dict, dict]:
    events = make_events(shape.events, seed=seed, rate_per_s=args.rate,
                         users=args.users, out_of_order=args.out_of_order)
    written = write_ndjson(events, folder, shape.file_events)
    return written, truth(events, args.users)


def run_both(
    spark: SparkSession, args: argparse.Namespace, shape: Shape, home: str, label: str,
    breakdown: Breakdown | None, sink: dict,
) -> tuple[dict, dict, DataFrame, DataFrame]:
    source = os.path.join(home, label, "ndjson")
    ref, ref_windows = run_reference(spark, source, os.path.join(home, label, "reference"),
                                     files_per_trigger=shape.files_per_trigger,
                                     events=shape.events)
    mine, my_windows = run_lakelog(
        spark, source, os.path.join(home, label, "lake"), partitions=args.partitions,
        batch_events=shape.batch_events, emit=args.emit, breakdown=breakdown, sink=sink,
    )
    return ref, mine, ref_windows, my_windows


def warm_up(spark: SparkSession, args: argparse.Namespace, home: str) -> float:
    """Untimed runs of both on small workloads: JVM start-up, class loading, code generation and
    most JIT compilation are not counted. Same files-per-batch shape as the measured run."""
    start = time.perf_counter()
    for r in range(args.warmup_rounds):
        file_events = max(args.warmup_events // 10, 1)
        shape = Shape(file_events * 10, file_events, file_events * 5)
        prepare(args, shape, os.path.join(home, f"warmup-{r}", "ndjson"), args.seed + 1 + r)
        run_both(spark, args, shape, home, f"warmup-{r}", None, {})
        progress(f"warm-up round {r + 1}/{args.warmup_rounds}: {time.perf_counter() - start:.1f}s")
    return round(time.perf_counter() - start, 2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--events", type=int, default=1_000_000, help="events of the one topic")
    p.add_argument("--file-events", type=int, default=50_000, help="lines per NDJSON file")
    p.add_argument("--batch-events", type=int, default=250_000,
                   help="events per microbatch, both sides (a multiple of --file-events)")
    p.add_argument("--rate", type=int, default=100, help="events per second of event time")
    p.add_argument("--users", type=int, default=100_000, help="distinct users (the topic key)")
    p.add_argument("--out-of-order", type=float, default=0.03,
                   help="share of events arriving up to a minute after later ones")
    p.add_argument("--partitions", type=int, default=4, help="log partitions of the topic")
    p.add_argument("--emit", choices=["update", "final"], default="update",
                   help="lakelog's emit mode")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--rounds", type=int, default=3,
                   help="measured rounds, each on new events; ratios are their median")
    p.add_argument("--warmup-rounds", type=int, default=2)
    p.add_argument("--warmup-events", type=int, default=50_000)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="6g")
    p.add_argument("--shuffle-partitions", default="4",
                   help="spark.sql.shuffle.partitions, both sides (and the reference's state)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark setting (repeatable)")
    p.add_argument("--no-breakdown", action="store_true",
                   help="do not wrap engine functions with timers")
    p.add_argument("--home", default=None,
                   help="working directory (kept afterwards); default: a temp dir, removed")
    args = p.parse_args(argv)
    if args.batch_events % args.file_events:
        p.error("--batch-events must be a multiple of --file-events (whole files per trigger)")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    home = os.path.abspath(args.home) if args.home else tempfile.mkdtemp(prefix="lakelog-bench-")
    os.makedirs(home, exist_ok=True)
    if os.listdir(home):
        sys.exit(f"--home {home} is not empty; give a new or empty directory")
    conf = {"spark.driver.memory": args.driver_memory,
            "spark.sql.shuffle.partitions": args.shuffle_partitions}
    for item in args.conf:
        key, _, value = item.partition("=")
        conf[key] = value
    shape = Shape(args.events, args.file_events, args.batch_events)
    report: dict[str, Any] = {}
    phases_memory: dict[str, Any] = {}
    sink: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    progress(f"home {home}")
    spark = create_session(master=args.master, app_name="lakelog-bench-windows", conf=conf)
    try:
        pid = jvm_pid()
        Clock.spark, Clock.pid = spark, pid
        breakdown = None
        if not args.no_breakdown:
            breakdown = install_breakdown()
            for module, name in [(window_consumer, "advance"), (window_consumer, "transform"),
                                 (pruning, "files_to_read"), (updates, "apply_batch")]:
                breakdown.patch_function(module, name)
        report["config"] = {
            "events": args.events, "file_events": args.file_events,
            "batch_events": args.batch_events, "files_per_trigger": shape.files_per_trigger,
            "rate_per_s": args.rate, "users": args.users, "out_of_order": args.out_of_order,
            "seed": args.seed, "window": str(WINDOW), "lateness": str(LATENESS),
            "topic_partitions": args.partitions, "emit": args.emit,
            "reference_sink": "parquet file sink, output mode append, trigger availableNow",
            "master": args.master, "driver_memory": args.driver_memory,
            "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
            "extra_conf": {k: v for k, v in conf.items()
                           if k not in ("spark.driver.memory", "spark.sql.shuffle.partitions")},
            "cpus": os.cpu_count(), "pyspark": pyspark.__version__,
            "python": platform.python_version(), "jvm_heap": jvm_heap_flags(pid),
            "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
            "engine": engine_version(),
        }
        progress("warm-up")
        report["warmup_seconds"] = warm_up(spark, args, home)
        phases_memory["warmup"] = memory(pid)
        rounds = []
        for r in range(args.rounds):
            label = "run" if r == 0 else f"run-{r + 1}"
            seed = args.seed + 100 * r  # new events each round: no plan or codegen is reused
            progress(f"round {r + 1}/{args.rounds}: generating {args.events} events")
            report["generate"], exact = prepare(args, shape, os.path.join(home, label, "ndjson"),
                                                seed)
            ref, mine, ref_windows, my_windows = run_both(spark, args, shape, home, label,
                                                          breakdown, sink)
            progress("verifying")
            report["verify"] = verify(ref_windows, my_windows, exact)
            rounds.append({
                "seed": seed,
                "reference_seconds": ref["seconds"],
                "consumer_seconds": mine["consumer"]["seconds"],
                "consumer": round(mine["consumer"]["events_per_s"] / ref["events_per_s"], 3),
                "end_to_end": round(mine["end_to_end"]["events_per_s"] / ref["events_per_s"], 3),
                "same_final_windows": report["verify"]["same_final_windows"],
            })
            progress(f"  ratio {rounds[-1]['consumer']}")
        phases_memory["measured"] = memory(pid)
        report["reference"], report["lakelog"] = ref, mine  # the last round's details
        median = statistics.median(r["consumer"] for r in rounds)
        report["ratio"] = {
            "consumer": median,
            "end_to_end": statistics.median(r["end_to_end"] for r in rounds),
            "consumer_cpu": round(ref["cpu_seconds"] / mine["consumer"]["cpu_seconds"], 3)
            if mine["consumer"]["cpu_seconds"] else None,
            "target": RATIO_TARGET,
            "meets_target": median >= RATIO_TARGET,
            "rounds": rounds,
            "all_rounds_same_final_windows": all(r["same_final_windows"] for r in rounds),
        }
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
