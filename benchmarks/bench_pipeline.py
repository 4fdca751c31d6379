"""The demo pipeline's fixed costs: per-kind microbatches against Structured Streaming, empty
ticks, ingest against Spark's own JSON reader, and `lakelog demo` end to end (issue 12).

Parts (``--parts``, default all), each in classic ``local[2]`` and over a local Spark Connect
server (``--mode``, default both; each mode runs in a child process of its own, so one Spark JVM
lives at a time):

- ``kinds`` — for every consumer of the demo pipeline, the median warm wall time of one
  microbatch of ``--records`` (1,000) new log records, and next to it, in the same session, a
  Structured Streaming query doing the corresponding work over the same records (with Spark's
  own code generation, which lakelog's sessions turn off: the reference runs as Spark ships it);
- ``empty`` — a step with nothing new (consumer, ingest, SQL model): seconds and Spark jobs
  (classic) or Connect round trips (connect);
- ``ingest`` — `lakelog.log.ingest.ingest_topics` of a landing file set against
  ``spark.read.json`` → Parquet of the same files in the same session (code generation on, as
  for the references above);
- ``demo`` — ``lakelog demo --events N --batches 4`` as a whole process (``--demo-mode``,
  default the server, which is what `lakelog demo` uses), with its per-step breakdown read from
  the Dagster instance it records its runs on.

One JSON object on stdout, progress on stderr; see benchmarks/README.md.

    python benchmarks/bench_pipeline.py > pipeline.json
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
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

# The engine, through as few names as possible: the demo pipeline and its workload and shop
# database, the lake, and the step functions a pipeline run calls.
from bench_common import bytecode, jvm_cpu_account, spark_codegen
from lakelog import consumers
from lakelog.consumers.consumer import Role
from lakelog.log import ingest
from lakelog.sourcing import publish_outbox
from lakelog.cdc import capture
from lakelog.demo import shop_cdc, shop_search
from lakelog.demo.pipeline import pipeline as SHOP
from lakelog.demo.workload import Workload
from lakelog.lake import EmbeddedLake
from lakelog.spark.server import ServerConfig, ensure_running
from lakelog.spark.server import status as server_status
from lakelog.spark.server import stop as stop_server
from lakelog.spark.session import create_session
from lakelog.views import run_model

LAKELOG = [sys.executable, "-m", "lakelog.cli"]
MODELS = ("customer_lifetime_value", "product_funnel_hourly")  # the incremental ones
KINDS = {
    "tables.customers": "compacted + history (merge-on-read)",
    "tables.products": "compacted + history (copy-on-write)",
    "tables.inventory": "compacted + history (copy-on-write)",
    "product_stats": "keyed upsert",
    "aggregate.cart": "cart fold",
    "window.revenue_per_minute": "windowed, tumbling, update",
    "window.product_views_10m": "windowed, hopping, update",
    "window.order_value_rolling": "windowed, sliding, update",
    "window.user_sessions": "windowed, session, final",
    "join.search_clicks": "window join (full outer)",
    "join.orders_enriched": "enrichment (stream-table, append)",
    "join.orders_as_of": "as-of join (history table, append)",
    "join.customer_orders": "table join",
    "join.product_stock": "changelog join (table-table, any columns)",
    "percolate.price_alert_matches": "percolator (stored queries)",
    "pattern.abandoned_carts": "pattern (CEP: step+, trailing absence)",
    "pattern.search_refinements": "pattern (CEP: step, absence, step)",
    "relay.cart_orders": "orders relay (cart outbox -> topic)",
    "model.customer_lifetime_value": "incremental SQL model (keys)",
    "model.product_funnel_hourly": "incremental SQL model (hours)",
}


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def now() -> datetime:
    return datetime.now(timezone.utc)


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


class SparkWork:
    """Counts what a block of code asks of Spark: on a classic session jobs (the scheduler's job
    ids) and py4j commands (wrapped gateway client calls but the finalizer's deletions: all,
    the reflection look-ups among them, and the seconds the caller waited); on a Connect
    session round trips (wrapped client calls, by lakelog call site); and, given the Spark
    JVM's `pid`, the CPU seconds that JVM spent meanwhile, by kind of thread
    (`bench_common.jvm_cpu_account`, read outside the timed block)."""

    def __init__(self, spark: Any, mode: str, pid: int | None = None) -> None:
        self.spark, self.mode, self.pid = spark, mode, pid
        if mode == "connect":
            import trace_connect  # this folder's profiler: wraps the Connect client's calls

            for name, kind in trace_connect.CALLS.items():
                trace_connect.traced(name, kind)
            self._trips = trace_connect.trips
        else:
            self._py4j = {"calls": 0, "lookups": 0, "s": 0.0}
            client = spark.sparkContext._gateway._gateway_client
            send = client.send_command

            def counted(command: str, *args: Any, **kwargs: Any) -> Any:
                if command.startswith("m\nd\n"):  # a Java object let go, from py4j's own
                    return send(command, *args, **kwargs)  # finalizer thread, when it runs
                started = time.perf_counter()
                try:
                    return send(command, *args, **kwargs)
                finally:
                    self._py4j["calls"] += 1
                    self._py4j["lookups"] += command.startswith("r\n")  # py4j reflection
                    self._py4j["s"] += time.perf_counter() - started

            client.send_command = counted

    def _jobs(self) -> int:
        found = self.spark.sparkContext._jsc.sc().dagScheduler().nextJobId()
        return found if isinstance(found, int) else found.get()

    def _snapshot(self) -> dict:
        return {k: len(v) for k, v in self._trips.items()}, {k: sum(v) for k, v in self._trips.items()}

    @contextmanager
    def counted(self) -> Iterator[dict[str, Any]]:
        found: dict[str, Any] = {}
        before = self._jobs() if self.mode == "classic" else self._snapshot()
        py4j = dict(self._py4j) if self.mode == "classic" else None
        cpu = jvm_cpu_account(self.pid) if self.pid else None
        started = time.perf_counter()
        try:
            yield found
        finally:
            found["seconds"] = time.perf_counter() - started
            if py4j is not None:  # before the job count's own calls
                found["py4j_calls"] = self._py4j["calls"] - py4j["calls"]
                found["py4j_lookups"] = self._py4j["lookups"] - py4j["lookups"]
                found["py4j_s"] = round(self._py4j["s"] - py4j["s"], 3)
            if cpu is not None:
                found["jvm"] = {k: v - cpu[k] for k, v in jvm_cpu_account(self.pid).items()}
            if self.mode == "classic":
                found["spark_jobs"] = self._jobs() - before
            else:
                (n0, s0), (n1, s1) = before, self._snapshot()
                found["round_trips"] = sum(n1.values()) - sum(n0.values())
                found["round_trip_s"] = round(sum(s1.values()) - sum(s0.values()), 3)
                found["sites"] = {k: (n1[k] - n0.get(k, 0), s1[k] - s0.get(k, 0.0))
                                  for k in n1 if n1[k] > n0.get(k, 0)}


def top_sites(per_batch: list[dict], k: int = 5) -> list[dict]:
    """Connect round trips summed over `per_batch`, the most expensive call sites first."""
    total: dict[tuple, list[float]] = defaultdict(lambda: [0, 0.0])
    for found in per_batch:
        for key, (n, s) in found.get("sites", {}).items():
            total[key][0] += n
            total[key][1] += s
    best = sorted(total.items(), key=lambda kv: -kv[1][1])[:k]
    return [{"kind": kind, "site": site, "n": n, "s": round(s, 3)} for (kind, site), (n, s) in best]


# Setting up a lake with history, then new records for every consumer -----------------------


def capture_shop(lake: EmbeddedLake) -> int:
    """Capture the shop database's changes into its changelogs' landing zone; changes landed."""
    source, landed = shop_cdc.source(lake.root), 0
    while True:
        result = capture(source, lake.root, now=now(), max_changes=10_000)
        landed += result.changes + result.snapshot_rows
        if not result.files and result.position_after == result.position_before:
            return landed


def chosen_consumers(only: list[str]) -> list:
    """The pipeline's consumers in pipeline order; with `only`, just those named."""
    return [c for c in SHOP.all_consumers.values() if not only or c.name in only]


def runnable(lake: EmbeddedLake, model: str) -> bool:
    """Whether the model's inputs exist: with --only, a model whose inputs were left out
    cannot run."""
    return all(lake.exists(path) for path in SHOP.model_graph.inputs(model))


def run_everything(lake: EmbeddedLake, only: list[str]) -> None:
    """Catch the (chosen) consumers, the orders relay and the SQL models up, in pipeline order."""
    for consumer in chosen_consumers(only):
        consumers.run_until_caught_up(lake, consumer, SHOP.all_topics, now=now)
        for aggregate in SHOP.aggregates:
            if aggregate.consumer.name == consumer.name:
                publish_outbox(lake, aggregate, now=now())
    for name in SHOP.model_graph.models:  # in order: a model's inputs may be models
        if runnable(lake, name):
            run_model(lake, lake.spark, SHOP.model_graph, name)


def prime_lake(lake: EmbeddedLake, events: int, only: list[str]) -> Workload:
    """A lake holding `events` events and the shop database's snapshot, every node caught up:
    untimed, and the warm-up (JVM start, class loading, JIT) of every step measured later."""
    workload = Workload(events, seed=7, batches=1)
    workload.write_batch(0, lake.root)
    shop_search.land_alerts(lake.root, 7)  # the saved queries of the percolator
    conn, dialect = shop_cdc.connect(lake.root)
    shop_cdc.prepare(conn, dialect, seed=7)
    conn.close()
    capture_shop(lake)
    ingest.ingest_topics(lake, lake.spark, list(SHOP.landed_topics.values()), now=now)
    run_everything(lake, only)
    return workload


def land_new_records(lake: EmbeddedLake, after: Workload, events: int, changes: int) -> dict:
    """New records for every consumer: `events` more events, later in event time than `after`,
    in landing files of 1,000 lines, and `changes` row changes in the shop database, captured.
    All are ingested except the orders (`ingest_orders_file` ingests them a file at a time)."""
    start = after.start + after.span + timedelta(hours=1)
    workload = Workload(events, seed=8, batches=1, start=start, users=after.user_count)
    # Landed beside the priming's files, not over them: `write_batch` keeps a file that is
    # there, and both workloads' first batch names its files ``batch-0000/part-0000...``.
    # Until 2026-12-05 each topic's first 1,000 new lines were so never landed: the orders
    # began 80 minutes after the page views, and a consumer of both (`window.user_sessions`)
    # found ~99 % of its batches' records late.
    staged = Path(tempfile.mkdtemp(prefix="bench-landing-"))
    for written in workload.write_batch(0, staged, lines_per_file=1000):
        target = Path(lake.root) / written.replace("/batch-0000/", "/batch-0001/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(staged / written, target)
    shutil.rmtree(staged, ignore_errors=True)
    conn, dialect = shop_cdc.connect(lake.root)
    shop_cdc.mutate_batch(conn, dialect, 1, changes=changes, seed=7, start=start)
    conn.close()
    landed = capture_shop(lake)
    rest = [t for t in SHOP.landed_topics.values() if t.name != "orders"]
    done = ingest.ingest_topics(lake, lake.spark, rest, now=now)
    return {"events": events, "shop_changes": landed,
            "appended": {t: sum(r.appended for r in done if r.topic == t)
                         for t in sorted({r.topic for r in done})}}


def one_batch(lake: EmbeddedLake, consumer) -> consumers.BatchResult | None:
    """One microbatch as a pipeline run makes it: a consumer alone, or a group's partitions in
    one batch (`run_until_caught_up` knows which)."""
    done = consumers.run_until_caught_up(lake, consumer, SHOP.all_topics, now=now, max_batches=1)
    return done[0] if done else None


def ingest_orders_file(lake: EmbeddedLake) -> int:
    return ingest.ingest(lake, lake.spark, SHOP.topic("orders"), now=now(), max_files=1).appended


# Part 1: one microbatch per consumer kind --------------------------------------------------


def time_model_microbatches(lake: EmbeddedLake, work: SparkWork, args) -> dict[str, dict]:
    """Each incremental SQL model after ~1,000 new orders (one landing file) were ingested."""
    graph = SHOP.model_graph
    models = [m for m in MODELS if runnable(lake, m)]
    timed: dict[str, list[dict]] = {m: [] for m in models}
    if not models:
        return {}
    for i in range(args.warmup + args.repeats):
        if not ingest_orders_file(lake):  # no orders left to land: no more batches to time
            break
        for name in models:
            with work.counted() as found:
                found["mode"] = run_model(lake, lake.spark, graph, name).mode
            if i >= args.warmup:
                timed[name].append(found)
    return {f"model.{name}": summarize(runs) for name, runs in timed.items() if runs}


def time_consumer_microbatches(lake: EmbeddedLake, work: SparkWork, consumer, args) -> dict:
    """`warmup` + `repeats` microbatches of the consumer, capped at `records` records each."""
    capped = replace(consumer, max_records_per_batch=args.records)
    runs, relays = [], []
    relay = [a for a in SHOP.aggregates if a.consumer.name == consumer.name]
    for i in range(args.warmup + args.repeats):
        late = late_rows(lake, consumer)
        with work.counted() as found:
            result = one_batch(lake, capped)
        if result is None:
            break
        found["records"] = result.records
        if late is not None:
            found["late"] = late_rows(lake, consumer) - late
        if relay:
            with work.counted() as relayed:
                relayed["records"] = publish_outbox(lake, relay[0], now=now()).events
        if i >= args.warmup:
            runs.append(found)
            if relay:
                relays.append(relayed)
    out = {consumer.name: summarize(runs)}
    if relay:
        out["relay.cart_orders"] = summarize(relays)
    return out


def late_rows(lake: EmbeddedLake, consumer) -> int | None:
    """Rows of the consumer's late outputs (`Role.LATE`), by the tables' file statistics (no
    Spark job); None for a consumer without one. A batch that routes many records there is
    cheap for what it leaves out: its figure must say so."""
    paths = [o.path for o in consumer.outputs if o.role is Role.LATE]
    if not paths:
        return None
    return sum(f.num_records for p in paths if lake.exists(p) for f in lake.snapshot(p).files())


def summarize(runs: list[dict]) -> dict:
    out: dict[str, Any] = {
        "median_s": median([r["seconds"] for r in runs]),
        "seconds": [round(r["seconds"], 3) for r in runs],
    }
    if runs and "records" in runs[0]:
        out["records"] = [r["records"] for r in runs]
    if runs and "late" in runs[0]:
        out["late_rows"] = [r["late"] for r in runs]
    if runs and "mode" in runs[0]:
        out["model_mode"] = sorted({r["mode"] for r in runs})
    if runs and "spark_jobs" in runs[0]:
        out["spark_jobs"] = median([r["spark_jobs"] for r in runs])
    for name in ("py4j_calls", "py4j_lookups", "py4j_s"):
        if runs and name in runs[0]:
            out[name] = median([r[name] for r in runs])
    if runs and "jvm" in runs[0]:  # the Spark JVM's CPU per batch, medians
        out["jvm"] = {k: median([r["jvm"][k] for r in runs]) for k in runs[0]["jvm"]}
    if runs and "round_trips" in runs[0]:
        out["round_trips"] = median([r["round_trips"] for r in runs])
        out["round_trip_s"] = median([r["round_trip_s"] for r in runs])
        out["top_sites"] = top_sites(runs)
    return out


# The Structured Streaming references ------------------------------------------------------


def export_topic(lake: EmbeddedLake, topic: str, folder: Path, rows_per_file: int, files: int,
                 skip: int = 0) -> None:
    """Log records of `topic` (the oldest in event time after `skip`) as Parquet files of
    `rows_per_file` rows: what a file source hands a query, one file per trigger."""
    from pyspark.sql import functions as F

    df = lake.read(lake.snapshot(f"log/{topic}")).orderBy("event_time", "partition", "offset")
    rows = df.limit(skip + rows_per_file * files).withColumn(
        "_n", F.monotonically_increasing_id())
    rows = rows.orderBy("_n").offset(skip).drop("_n") if skip else rows.drop("_n")
    rows.coalesce(1).write.option("maxRecordsPerFile", rows_per_file).parquet(str(folder))


def customer_id(user_id):
    from pyspark.sql import functions as F

    return F.expr(f"cast(substring({user_id}, 3) as bigint)")


def reference_queries() -> dict[str, tuple[tuple[str, ...], Callable, str, str]]:
    """Per consumer: (topics, build(streams, static) -> DataFrame, output mode, what it does)."""
    from pyspark.sql import functions as F

    def latest_per_key(s, _):
        return s["cdc"].groupBy("key").agg(
            F.max_by(F.struct("op", "after", "source"), "offset").alias("row"))

    def product_stats(s, _):
        views = s["page_views"].select("product_id", F.lit(1).alias("views"),
                                       F.lit(0).alias("adds"), F.lit(0).alias("ordered"))
        carts = s["cart_events"].select("product_id", F.lit(0).alias("views"),
                                        (F.col("action") == "add").cast("int").alias("adds"),
                                        F.lit(0).alias("ordered"))
        orders = s["orders"].select(F.explode("items").alias("i")).select(
            F.col("i.product_id").alias("product_id"), F.lit(0).alias("views"),
            F.lit(0).alias("adds"), F.lit(1).alias("ordered"))
        return views.unionByName(carts).unionByName(orders).where("product_id is not null") \
            .groupBy("product_id").agg(F.sum("views"), F.sum("adds"), F.sum("ordered"))

    def cart_fold(s, _):
        e = s["cart_events"]
        return e.groupBy("cart_id").agg(
            F.count("*").alias("events"), F.sum(F.col("quantity") * F.col("unit_price")).alias("value"),
            F.max_by("action", "event_time").alias("last_action"), F.max("event_time"))

    def revenue_per_minute(s, _):
        return s["orders"].withWatermark("event_time", "2 minutes").groupBy(
            F.window("event_time", "1 minute")).agg(
            F.count("*"), F.sum("total"), F.avg("total"), F.max("total"), F.min("total"),
            F.approx_count_distinct("user_id"))

    def product_views_10m(s, _):
        return s["page_views"].where("product_id is not null").withWatermark(
            "event_time", "2 minutes").groupBy(
            F.window("event_time", "10 minutes", "1 minute"), "product_id").agg(
            F.count("*"), F.approx_count_distinct("user_id"))

    def order_value_rolling(s, _):
        return s["orders"].withWatermark("event_time", "2 minutes").groupBy(
            F.window("event_time", "60 minutes", "1 minute")).agg(
            F.count("*"), F.sum("total"), F.avg("total"))

    def user_sessions(s, _):
        pages = s["page_views"].select("user_id", "event_time", F.lit(0).alias("is_order"))
        orders = s["orders"].select("user_id", "event_time", F.lit(1).alias("is_order"))
        return pages.unionByName(orders).withWatermark("event_time", "2 minutes").groupBy(
            F.session_window("event_time", "30 minutes"), "user_id").agg(
            F.count("*").alias("pages"), F.sum("is_order").alias("orders"))

    def search_clicks(s, _):
        q = s["searches"].select("session_id", "query_id", "query",
                                 F.col("event_time").alias("search_time")) \
            .withWatermark("search_time", "10 minutes")
        c = s["clicks"].select(F.col("session_id").alias("c_session"),
                               F.col("query_id").alias("c_query"), "product_id", "position",
                               F.col("event_time").alias("click_time")) \
            .withWatermark("click_time", "10 minutes")
        return q.join(c, F.expr("session_id = c_session AND query_id = c_query AND "
                                "click_time BETWEEN search_time AND search_time + "
                                "interval 1 hour"), "leftOuter")

    def orders_enriched(s, static):
        customers = static("tables/customers")
        return s["orders"].withColumn("customer_id", customer_id("user_id")).join(
            customers, "customer_id", "left")

    def orders_as_of(s, static):
        history = static("history/customers").withColumnRenamed("customer_id", "h_customer")
        o = s["orders"].withColumn("customer_id", customer_id("user_id"))
        return o.join(history, F.expr(
            "customer_id = h_customer AND event_time >= valid_from AND "
            "(valid_to IS NULL OR event_time < valid_to)"), "left")

    def customer_orders(s, _):
        o = s["orders"].select(customer_id("user_id").alias("customer_id"), "order_id", "total")
        c = s["cdc.customers"].select(F.col("after.customer_id").alias("c_customer"),
                                      F.col("after.name").alias("name"), "op")
        return o.join(c, F.expr("customer_id = c_customer"))

    def customer_lifetime_value(s, _):
        return s["orders"].groupBy(customer_id("user_id").alias("customer_id")).agg(
            F.count("*").alias("orders"), F.sum("total").alias("lifetime_value"))

    upsert = "update: stateful aggregation, each batch's changed rows appended by foreachBatch"
    windowed = "update: windowed aggregation with watermark, changed windows by foreachBatch"
    return {
        "tables.customers": (("cdc.customers",), latest_per_key, "update",
                             upsert + " (newest change per key; no history table)"),
        "tables.products": (("cdc.products",), latest_per_key, "update",
                            upsert + " (newest change per key; no history table)"),
        "tables.inventory": (("cdc.inventory",), latest_per_key, "update",
                             upsert + " (newest change per key; no history table)"),
        "product_stats": (("page_views", "cart_events", "orders"), product_stats, "update",
                          upsert + " (views, adds, orders per product)"),
        "aggregate.cart": (("cart_events",), cart_fold, "update",
                           upsert + " (events, value, last action per cart; no command "
                           "validation, snapshots or orders)"),
        "window.revenue_per_minute": (("orders",), revenue_per_minute, "update", windowed),
        "window.product_views_10m": (("page_views",), product_views_10m, "update", windowed),
        "window.order_value_rolling": (("orders",), order_value_rolling, "update",
                                       windowed + " (hopping 60 min / 1 min: Spark has no "
                                       "per-event sliding window)"),
        "window.user_sessions": (("page_views", "orders"), user_sessions, "append",
                                 "append: session windows, final rows to the Parquet sink"),
        "join.search_clicks": (("searches", "clicks"), search_clicks, "append",
                               "append: stream-stream left outer join within 1 h, watermarks"
                               " 10 min, to the Parquet sink"),
        "join.orders_enriched": (("orders",), orders_enriched, "append",
                                 "append: stream-static left join with tables/customers (as "
                                 "Parquet) to the Parquet sink"),
        "join.orders_as_of": (("orders",), orders_as_of, "append",
                              "append: stream-static left join with history/customers, "
                              "valid_from <= t < valid_to, to the Parquet sink"),
        "join.customer_orders": (("orders", "cdc.customers"), customer_orders, "append",
                                 "append: stream-stream inner join orders x cdc.customers "
                                 "(unbounded state) to the Parquet sink"),
        "model.customer_lifetime_value": (("orders",), customer_lifetime_value, "update",
                                          upsert + " (orders and value per customer)"),
    }


def time_reference(lake: EmbeddedLake, name: str, work_dir: Path, args) -> dict:
    """The consumer's Structured Streaming counterpart over the same log records, exported as
    Parquet files; `trigger(availableNow=True)`, one file per topic per trigger; the median of
    Spark's own `triggerExecution` over the batches after `warmup`."""
    topics, build, mode, what = reference_queries()[name]
    spark = lake.spark
    base = work_dir / name
    per_file = max(args.records // len(topics), 1)
    streams, schema_of = {}, {}
    for topic in topics:
        folder = base / "in" / topic
        export_topic(lake, topic, folder, per_file, args.warmup + args.repeats)
        schema = spark.read.parquet(str(folder)).schema
        streams["cdc" if topic.startswith("cdc.") and len(topics) == 1 else topic] = (
            spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(folder)))
        schema_of[topic] = schema

    def static(path: str):
        folder = base / "static" / path.replace("/", "_")
        if not folder.exists():
            lake.read(lake.snapshot(path)).write.parquet(str(folder))
        return spark.read.parquet(str(folder))

    df = build(streams, static)
    out = str(base / "out")
    writer = df.writeStream.option("checkpointLocation", str(base / "checkpoint"))
    if mode == "append":
        writer = writer.format("parquet").option("path", out).outputMode("append")
    else:
        writer = writer.outputMode("update").foreachBatch(
            lambda batch, _id: batch.write.mode("append").parquet(out))
    with spark_codegen(spark):  # Structured Streaming as Spark ships it
        started = time.perf_counter()
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        wall = time.perf_counter() - started
    progress = [p if isinstance(p, dict) else json.loads(p.json) for p in query.recentProgress]
    batches = [p for p in progress if _input_rows(p) > 0]
    timed = [p["durationMs"]["triggerExecution"] / 1000 for p in batches[args.warmup:]]
    return {
        "does": what,
        "median_s": median(timed),
        "seconds": [round(t, 3) for t in timed],
        "records": [_input_rows(p) for p in batches[args.warmup:]],
        "batches": len(progress),
        "wall_s": round(wall, 2),
    }


def measure_kinds(lake: EmbeddedLake, work: SparkWork, args, work_dir: Path) -> dict:
    """Each kind's microbatches, then (with `--reference`) its Structured Streaming reference,
    kind after kind: the two sides of a pair run one after the other in the same JVM, so
    neither has a JIT warmed by all the kinds measured before it and the other not (until
    2026-12-06 every reference ran after the last kind)."""
    results: dict[str, dict] = {}
    references = reference_queries() if args.reference else {}

    def with_references(timed: dict[str, dict]) -> None:
        for name, found in timed.items():
            results[name] = found
            if name not in references:
                continue
            say(f"kinds: Structured Streaming reference of {name}")
            try:
                ref = time_reference(lake, name, work_dir / "reference", args)
            except Exception as exc:  # report it and go on: one failing query is one figure
                ref = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            found["reference"] = ref
            ours, theirs = found["median_s"], ref.get("median_s")
            found["ratio"] = round(ours / theirs, 2) if ours and theirs else None

    say("kinds: incremental SQL models after each 1,000 new orders")
    models = time_model_microbatches(lake, work, args)
    ingest.ingest_topics(lake, lake.spark, [SHOP.topic("orders")], now=now)  # the rest of them
    with_references(models)
    for consumer in chosen_consumers(args.only):
        say(f"kinds: {consumer.name}")
        with_references(time_consumer_microbatches(lake, work, consumer, args))
    for name, found in results.items():
        found["kind"] = KINDS.get(name, "?")
    return results


# Part 2: the empty tick -------------------------------------------------------------------


def measure_empty_ticks(lake: EmbeddedLake, work: SparkWork, args) -> dict:
    """After catching everything up: each step again with nothing new, `repeats` times."""
    say("empty: catching everything up")
    ingest.ingest_topics(lake, lake.spark, list(SHOP.landed_topics.values()), now=now)
    run_everything(lake, args.only)
    steps: dict[str, Callable[[], Any]] = {}
    for consumer in chosen_consumers(args.only):
        steps[f"consumer {consumer.name}"] = (
            lambda c=consumer: one_batch(lake, c))
    for topic in SHOP.landed_topics.values():
        steps[f"ingest {topic.name}"] = (
            lambda t=topic: ingest.ingest(lake, lake.spark, t, now=now()))
    for aggregate in SHOP.aggregates:
        steps[f"relay {aggregate.outbox_topic.name}"] = (
            lambda a=aggregate: publish_outbox(lake, a, now=now()))
    for name in filter(partial(runnable, lake), SHOP.model_graph.models):
        steps[f"model {name}"] = (
            lambda n=name: run_model(lake, lake.spark, SHOP.model_graph, n))
    out = {}
    for label, step in steps.items():
        runs = []
        for _ in range(args.repeats + 1):
            with work.counted() as found:
                result = step()
            found["did"] = type(result).__name__ if result is not None else "None"
            runs.append(found)
        runs = runs[1:]  # the first may still do the last idle work
        out[label] = summarize(runs)
        out[label]["returned"] = runs[-1]["did"]
    worst = max(out.values(), key=lambda r: r["median_s"] or 0)
    return {"steps": out, "worst_median_s": worst["median_s"],
            "total_median_s": round(sum(r["median_s"] or 0 for r in out.values()), 3)}


# Part 3: ingest against spark.read.json -> Parquet ------------------------------------------


def measure_ingest(spark: Any, root: Path, args) -> dict:
    """The landing files of `--ingest-events` demo events, ingested as `lakelog demo` ingests
    them (all topics at once) into a fresh lake, and the same files read by ``spark.read.json``
    (schema inferred) and written as Parquet, topic by topic, in the same session: `--ingest-
    rounds` rounds of both, each on a fresh copy of the files, the two sides taking turns to go
    first. The first round is each side's warm-up (its own code's JIT, the JSON reader's);
    `ratio` is of the medians of the rounds after it, `first_round_ratio` of the first."""
    source = root / "source"
    workload = Workload(args.ingest_events, seed=3, batches=1)
    workload.write_batch(0, str(source))
    names = sorted(workload.batch_records(0))
    lines = sum(sum(1 for _ in open(f, encoding="utf-8"))
                for f in (source / "landing").rglob("*.ndjson"))
    topics = [SHOP.topic(t) for t in names]

    def fresh(side: str, i: int) -> Path:
        home = root / f"{side}-{i}"
        shutil.copytree(source / "landing", home / "landing")
        return home

    def reference(i: int) -> tuple[float, int]:
        home = fresh("reference", i)
        files = {t: sorted(str(p) for p in (home / "landing" / t).rglob("*.ndjson"))
                 for t in names}
        with spark_codegen(spark):  # Spark's reader as Spark ships it
            started = time.perf_counter()
            for topic, fs in files.items():
                spark.read.json(fs).write.parquet(str(home / "parquet" / topic))
            return time.perf_counter() - started, lines

    def lakelog(i: int) -> tuple[float, int]:
        lake = EmbeddedLake(spark, str(fresh("lakelog", i)))
        started = time.perf_counter()
        done = ingest.ingest_topics(lake, spark, topics, now=now)
        return time.perf_counter() - started, sum(r.read for r in done)

    say(f"ingest: {args.ingest_rounds} rounds of spark.read.json -> parquet and lakelog "
        f"ingest_topics, {lines:,} lines")
    seconds: dict[str, list[float]] = {"reference": [], "lakelog": []}
    for i in range(args.ingest_rounds):
        turn = [("reference", reference), ("lakelog", lakelog)]
        for side, run in turn if i % 2 == 0 else turn[::-1]:
            took, read = run(i)
            if read != lines:
                raise RuntimeError(f"{side} read {read:,} of {lines:,} lines")
            seconds[side].append(round(took, 2))
            say(f"ingest: round {i} {side} {took:.2f} s")
    warm = {side: median(v[1:]) or v[0] for side, v in seconds.items()}
    return {
        "lines": lines,
        "lakelog": {"seconds": warm["lakelog"], "rounds_s": seconds["lakelog"],
                    "records_per_s": round(lines / warm["lakelog"])},
        "reference": {"seconds": warm["reference"], "rounds_s": seconds["reference"],
                      "records_per_s": round(lines / warm["reference"]),
                      "does": "spark.read.json(files of a topic) (schema inferred) -> "
                              ".write.parquet, the five topics one after another"},
        "ratio": round(warm["reference"] / warm["lakelog"], 2),
        "first_round_ratio": round(seconds["reference"][0] / seconds["lakelog"][0], 2),
    }


# One mode's parts 1-3, in a process of its own ----------------------------------------------


def open_spark(mode: str, args, state_dir: Path) -> tuple[Any, ServerConfig | None]:
    if mode == "classic":
        return create_session(master=f"local[{args.cores}]", app_name="bench-pipeline",
                              conf={"spark.driver.memory": args.memory}), None
    config = ServerConfig(port=args.port, master=f"local[{args.cores}]", memory=args.memory,
                          state_dir=state_dir)
    started = time.perf_counter()
    ensure_running(config)
    say(f"connect: server on {config.url} in {time.perf_counter() - started:.1f} s")
    return create_session(remote=config.url, app_name="bench-pipeline"), config


def jvm_pid(spark: Any, server: ServerConfig | None) -> int:
    """The Spark JVM's process: the Connect server's, or the classic session's own (the
    process pyspark launched, which execs java)."""
    if server is not None:
        return server_status(server).pid
    return spark.sparkContext._gateway.proc.pid


def reported(part: Callable[..., dict], *args: Any) -> dict:
    """The part's figures, or its error: a failing part must not lose the others'."""
    try:
        return part(*args)
    except Exception as exc:
        say(f"{part.__name__} failed: {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}


def save_partial(out: dict, args) -> None:
    """What a mode has measured so far, to ``--partial`` (if given): kept if the run is cut."""
    if args.partial:
        Path(args.partial).write_text(json.dumps(out, indent=1, default=str))


def run_mode(mode: str, args) -> dict:
    work_dir = Path(tempfile.mkdtemp(prefix=f"lakelog-bench-pipeline-{mode}-",
                                     dir=args.home))
    out: dict[str, Any] = {"mode": mode, "loadavg_at_start": os.getloadavg()}
    spark, server = open_spark(mode, args, work_dir / "spark")
    try:
        work = SparkWork(spark, mode, jvm_pid(spark, server))
        if {"kinds", "empty"} & set(args.parts):
            lake = EmbeddedLake(spark, str(work_dir / "lake"))
            started = time.perf_counter()
            say(f"{mode}: priming a lake with {args.prime_events:,} events (untimed warm-up)")
            prior = prime_lake(lake, args.prime_events, args.only)
            say(f"{mode}: landing {args.kind_events:,} new events and "
                f"{args.shop_changes:,} shop changes")
            out["setup"] = land_new_records(lake, prior, args.kind_events, args.shop_changes)
            out["setup"]["seconds"] = round(time.perf_counter() - started, 1)
            if "kinds" in args.parts:
                out["kinds"] = reported(measure_kinds, lake, work, args, work_dir)
                out["loadavg_after_kinds"] = os.getloadavg()
                save_partial(out, args)
            if "empty" in args.parts:
                out["empty_tick"] = reported(measure_empty_ticks, lake, work, args)
                save_partial(out, args)
        if "ingest" in args.parts:
            out["ingest"] = reported(measure_ingest, spark, work_dir / "ingest", args)
        out["loadavg_at_end"] = os.getloadavg()
    finally:
        spark.stop()
        if server is not None:
            stop_server(server)
            say(f"connect: server on {server.url} stopped")
        if not args.home:
            shutil.rmtree(work_dir, ignore_errors=True)
    return out


# Part 4: lakelog demo as a whole process ----------------------------------------------------


def demo_step_breakdown(dagster_home: Path, run_ids: list[str]) -> dict:
    """Step durations of the demo's runs, from the Dagster instance it recorded them on."""
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(dagster_home)  # its dagster.yaml names the folder so
    instance = dg.DagsterInstance.from_config(str(dagster_home))
    steps: dict[str, list[float]] = defaultdict(list)
    runs = []
    for run_id in run_ids:
        stats = instance.get_run_stats(run_id)
        run_s = (stats.end_time or 0) - (stats.start_time or 0)
        step_s = 0.0
        for step in instance.get_run_step_stats(run_id):
            if step.start_time and step.end_time:
                steps[step.step_key].append(step.end_time - step.start_time)
                step_s += step.end_time - step.start_time
        runs.append({"run_id": run_id, "run_s": round(run_s, 2), "steps_s": round(step_s, 2),
                     "outside_steps_s": round(run_s - step_s, 2)})
    by_step = sorted(((k, sum(v), len(v)) for k, v in steps.items()), key=lambda x: -x[1])
    groups: dict[str, float] = defaultdict(float)
    for key, total, _ in by_step:
        groups[step_group(key)] += total
    return {
        "runs": runs,
        "steps": [{"step": k, "total_s": round(t, 2), "n": n} for k, t, n in by_step],
        "by_group_s": {k: round(v, 2) for k, v in sorted(groups.items(), key=lambda kv: -kv[1])},
    }


def step_group(step_key: str) -> str:
    for prefix, group in (("ingest", "ingest"), ("cdc__", "capture"),
                          ("consume_tables_", "compacted + history"),
                          ("consume_window_", "windows"), ("consume_join_", "joins"),
                          ("consume_aggregate_", "cart fold"),
                          ("consume_product_stats", "keyed upsert"), ("log__", "orders relay"),
                          ("views__", "SQL models")):
        if step_key.startswith(prefix):
            return group
    return "other"


def measure_demo(events: int, mode: str, args, state_dir: Path) -> dict:
    """``lakelog demo --events N --batches 4`` in a fresh home, as a user runs it."""
    home = Path(tempfile.mkdtemp(prefix=f"lakelog-bench-demo-{events}-", dir=args.home))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LAKELOG_SPARK", "DAGSTER_HOME"))}
    env.update({"LAKELOG_SPARK_SERVER_PORT": str(args.port),
                "LAKELOG_SPARK_SERVER_DIR": str(state_dir),
                "LAKELOG_SPARK_SERVER_CORES": str(args.cores),
                "LAKELOG_SPARK_SERVER_MEMORY": args.memory})
    spark = ["--master", f"local[{args.cores}]"] if mode == "classic" else []
    command = [*LAKELOG, "demo", "--events", str(events), "--batches", "4", "--home", str(home),
               "--json", *spark]
    say(f"demo: {' '.join(command[2:])} ({mode})")
    load = os.getloadavg()
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    config = ServerConfig(port=args.port, state_dir=state_dir)
    if mode == "connect":
        stop_server(config)
    if done.returncode != 0:
        return {"error": done.stderr[-2000:], "wall_s": round(wall, 1)}
    summary = json.loads(done.stdout)
    out = {
        "mode": mode,
        "command": " ".join(["lakelog", *command[3:]]),
        "events": events,
        "wall_s": round(wall, 1),
        "loadavg_at_start": load,
        "demo_seconds": round(summary["seconds"], 1),
        "start_s": round(wall - summary["seconds"], 1),
        "read": summary["read"],
        "records_per_s": round(summary["read"] / wall),
        "ingests": summary["ingests"],
        "microbatches": summary["microbatches"],
        "source_changes": summary["source_changes"],
        "models": summary["models"],
        "runs": len(summary["runs"]),
        "breakdown": demo_step_breakdown(home / "dagster", summary["runs"]),
    }
    if not args.home:
        shutil.rmtree(home, ignore_errors=True)
    return out


# ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("classic", "connect", "both"), default="both",
                   help="Spark for parts kinds, empty and ingest")
    p.add_argument("--parts", nargs="+", choices=("kinds", "empty", "ingest", "demo"),
                   default=["kinds", "empty", "ingest", "demo"])
    p.add_argument("--events", type=int, nargs="+", default=[100_000],
                   help="demo sizes (e.g. 100000 1000000)")
    p.add_argument("--demo-mode", choices=("classic", "connect", "both"), default="connect",
                   help="Spark of the demo: the local server (lakelog demo's default) or "
                        "--master local[cores]")
    p.add_argument("--records", type=int, default=1000, help="records per timed microbatch")
    p.add_argument("--warmup", type=int, default=2, help="untimed microbatches per kind")
    p.add_argument("--repeats", type=int, default=5, help="timed microbatches per kind")
    p.add_argument("--prime-events", type=int, default=20_000,
                   help="events of the untimed warm-up lake")
    p.add_argument("--kind-events", type=int, default=600_000,
                   help="new events for the per-kind microbatches (orders are ~1.2%%)")
    p.add_argument("--shop-changes", type=int, default=20_000,
                   help="shop database row changes for the changelog consumers")
    p.add_argument("--ingest-events", type=int, default=100_000)
    p.add_argument("--ingest-rounds", type=int, default=4,
                   help="rounds of both ingests; the first is the warm-up")
    p.add_argument("--only", nargs="*", default=[], help="consumers to prime and time (default: all; the models need tables.customers)")
    p.add_argument("--no-reference", dest="reference", action="store_false",
                   help="leave out the Structured Streaming references")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--memory", default="4g")
    p.add_argument("--port", type=int, default=15160, help="the benchmark's Connect server")
    p.add_argument("--partial", help="a file each mode writes its figures to after each part")
    p.add_argument("--home", help="keep the lakes under this folder (default: a temp folder)")
    return p.parse_args(argv)


def _input_rows(progress: Mapping[str, Any]) -> int:
    """Rows a trigger read. A progress over Spark Connect can leave the total out (pyspark
    sets it None when the server's JSON has none): its sources' counts then."""
    total = progress.get("numInputRows")
    if total is None:
        total = sum(source.get("numInputRows") or 0 for source in progress.get("sources") or [])
    return total


def engine_version() -> dict:
    root = Path(__file__).resolve().parents[1]

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(root), *a], capture_output=True,
                              text=True).stdout.strip()

    return {"commit": git("rev-parse", "HEAD"),
            "changed": git("status", "--porcelain", "platform").splitlines()}


def main() -> None:
    args = parse_args()
    if args.home:
        Path(args.home).mkdir(parents=True, exist_ok=True)
    if os.environ.get("BENCH_PIPELINE_CHILD"):  # one mode's parts 1-3
        print(json.dumps(run_mode(args.mode, args), default=str))
        return
    started = time.perf_counter()
    result: dict[str, Any] = {"config": {
        **{k: v for k, v in vars(args).items()}, "cpus": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(), "engine": engine_version(),
        "bytecode": bytecode()}}
    modes = ("classic", "connect") if args.mode == "both" else (args.mode,)
    if {"kinds", "empty", "ingest"} & set(args.parts):
        for mode in modes:
            say(f"mode {mode}: parts {', '.join(p for p in args.parts if p != 'demo')}")
            child = subprocess.run(
                [sys.executable, __file__, *sys.argv[1:], "--mode", mode],
                env={**os.environ, "BENCH_PIPELINE_CHILD": "1"}, stdout=subprocess.PIPE,
                text=True)
            result[mode] = (json.loads(child.stdout) if child.returncode == 0
                            else {"error": f"exit {child.returncode}"})
    if "demo" in args.parts:
        state_dir = Path(tempfile.mkdtemp(prefix="lakelog-bench-spark-"))
        demo_modes = ("classic", "connect") if args.demo_mode == "both" else (args.demo_mode,)
        result["demo"] = [measure_demo(n, m, args, state_dir)
                          for n in args.events for m in demo_modes]
        shutil.rmtree(state_dir, ignore_errors=True)
    result["loadavg_at_end"] = os.getloadavg()
    result["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
