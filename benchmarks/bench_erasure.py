"""The right to erasure on a large log: `erase_subject` against rewriting every topic without the
subject (the reference: what a plain ``DELETE`` by full rewrite costs), and the recomputation
of the rebuilt consumer afterwards.

Builds a lake of the demo shop's topics holding ``--events`` events (ingested in ``--batches``
landing batches) and the product totals consumer (`shop.PRODUCT_STATS_CONSUMER`, which holds
no user column and so is rebuilt by an erasure) caught up: untimed. Erases one user untimed
(warm-up), then, timed, the busiest user; then the reference in the same session: every topic
read, filtered and written again in full; then catches the rebuilt consumer up again (the
recomputation the erasure asked for). One JSON object on stdout, progress on stderr.

    python benchmarks/bench_erasure.py --events 1000000 > erasure.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql import functions as F

from lakelog import consumers
from lakelog.demo import shop
from lakelog.demo.workload import Workload
from lakelog.erasure import erase_subject, find_subject
from lakelog.lake import EmbeddedLake
from lakelog.log import ingest
from lakelog.pipeline import Pipeline
from lakelog.spark.session import create_session

PIPELINE = Pipeline("erasure_bench", topics=shop.TOPICS,
                    consumers=[shop.PRODUCT_STATS_CONSUMER], subject_columns=("user_id",))


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def now() -> datetime:
    return datetime.now(timezone.utc)


def build(lake: EmbeddedLake, events: int, batches: int) -> dict:
    started = time.perf_counter()
    workload = Workload(events, seed=7, batches=batches)
    for k in range(batches):
        workload.write_batch(k, lake.root)
        ingest.ingest_topics(lake, lake.spark, list(shop.TOPICS.values()), now=now)
        say(f"batch {k} ingested")
    consumers.run_until_caught_up(lake, shop.PRODUCT_STATS_CONSUMER, shop.TOPICS, now=now)
    return {"build_s": round(time.perf_counter() - started, 1)}


def users_by_records(lake: EmbeddedLake) -> list[tuple[str, int]]:
    frames = [lake.read(lake.snapshot(t.path)).select("user_id") for t in shop.TOPICS.values()]
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    rows = union.groupBy("user_id").count().orderBy(F.desc("count")).collect()
    return [(r["user_id"], r["count"]) for r in rows]


def full_rewrite(lake: EmbeddedLake, subject: str, target: Path) -> float:
    """The reference: every topic read, filtered and written again whole (Parquet)."""
    started = time.perf_counter()
    for topic in shop.TOPICS.values():
        rows = lake.read(lake.snapshot(topic.path))
        (rows.where(F.col("user_id") != subject).write.mode("overwrite")
         .partitionBy("partition").parquet(str(target / topic.name)))
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--home", help="keep the lake here (default: a temporary folder, removed)")
    args = p.parse_args(argv)
    work = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="bench-erasure-"))
    spark = create_session(master=args.master, app_name="bench-erasure",
                           conf={"spark.driver.memory": "6g"})
    try:
        lake = EmbeddedLake(spark, str(work / "lake"))
        out: dict = {"events": args.events, "batches": args.batches, "master": args.master}
        out.update(build(lake, args.events, args.batches))
        ranked = users_by_records(lake)
        warm, (subject, records) = ranked[-1][0], ranked[0]
        erase_subject(lake, PIPELINE, warm, now=now())  # untimed: JIT, class loading
        consumers.run_until_caught_up(lake, shop.PRODUCT_STATS_CONSUMER, shop.TOPICS, now=now)
        say(f"warm-up erasure done; erasing {subject} ({records} records)")

        started = time.perf_counter()
        done = erase_subject(lake, PIPELINE, subject, now=now())
        erase_s = time.perf_counter() - started
        reference_s = full_rewrite(lake, subject, work / "reference")
        started = time.perf_counter()
        batches = consumers.run_until_caught_up(lake, shop.PRODUCT_STATS_CONSUMER, shop.TOPICS,
                                                now=now)
        rebuild_s = time.perf_counter() - started
        assert find_subject(lake, PIPELINE.subject_columns, subject) == {}
        log_records = sum(lake.read(lake.snapshot(t.path)).count() for t in shop.TOPICS.values())
        out.update({
            "log_records_after": log_records,
            "subject_records": records,
            "erase_s": round(erase_s, 2),
            "rows_erased": done.rows,
            "tables": len(done.tables),
            "files_rewritten": sum(t.files for t in done.tables),
            "files_purged": done.purged,
            "rebuilt": list(done.rebuilt),
            "reference_full_rewrite_s": round(reference_s, 2),
            "erase_vs_full_rewrite": round(erase_s / reference_s, 3),
            "recompute_s": round(rebuild_s, 2),
            "recompute_records": sum(b.records for b in batches),
            "recompute_batches": len(batches),
        })
        return out
    finally:
        spark.stop()
        if not args.home:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
