"""Reading an offset range of a log file by the size of its Parquet pages (issue 12).

A microbatch cut by `max_records_per_batch` reads a range of offsets out of larger log files.
Spark pushes the offset bounds down to the Parquet reader, which skips the pages outside them
(the files carry column indexes), so a range read decodes about one page: parquet-mr's pages
hold up to 20,000 rows unless `parquet.page.row.count.limit` says fewer. This writes one log
partition's worth of records (`--rows`, offsets in order, columns like a page view) with the
default and with smaller page limits, then side by side in one session reads a `--range`-row
slice from the middle of each file and aggregates each whole file. Prints JSON: per limit the
file size and the median seconds of both reads.

A write of up to 50,000 rows (`lakelog.lake.driver_write.SMALL_WRITE_ROWS`, which a log file of
a demo batch is) goes through pyarrow instead of Spark. The same rows are written that way too:
as pyarrow writes by default (no page index, so Spark cannot skip a page), and as lakelog
writes a topic table's files (`lakelog.lake.pages`: a page index, 2,000-row pages).

    python benchmarks/bench_log_pages.py --rows 60000 --range 250 --limits 5000 2000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import functions as F

from lakelog.lake import pages
from lakelog.spark.session import create_session


def records(spark, rows: int):
    """`rows` log records of one partition: offsets in order, a page view's columns."""
    n = F.col("id")
    return spark.range(rows).select(
        n.alias("offset"),
        F.concat(F.lit("u-"), F.lpad((n * 7919 % 5000).cast("string"), 6, "0")).alias("key"),
        F.expr("uuid()").alias("event_id"),
        F.timestamp_micros(F.lit(1_767_000_000_000_000) + n * 40_000).alias("event_time"),
        F.concat(F.lit("u-"), F.lpad((n * 7919 % 5000).cast("string"), 6, "0")).alias("user_id"),
        F.concat(F.lit("s-"), (n / 12).cast("long").cast("string")).alias("session_id"),
        F.element_at(F.array(*[F.lit(p) for p in ("home", "search", "product", "cart")]),
                     (n % 4 + 1).cast("int")).alias("page"),
        F.when(n % 4 == 2, F.concat(F.lit("p-"), (n % 800).cast("string"))).alias("product_id"),
    )


def median_seconds(action, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return round(statistics.median(times), 4)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=60_000, help="records in the log file")
    p.add_argument("--range", type=int, default=250, help="records the range read takes")
    p.add_argument("--limits", type=int, nargs="+", default=[5000, 2000],
                   help="page row limits besides parquet-mr's default")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--rounds", type=int, default=2, help="rounds over all files (first untimed)")
    args = p.parse_args()
    spark = create_session(master="local[2]", app_name="bench-log-pages")
    source = records(spark, args.rows).localCheckpoint(eager=True)
    base = Path(tempfile.mkdtemp(prefix="lakelog-bench-pages-"))
    files: dict[str, Path] = {}
    for limit in [None, *args.limits]:
        name = "default" if limit is None else f"rows_{limit}"
        writer = source.coalesce(1).write
        if limit is not None:
            writer = writer.option("parquet.page.row.count.limit", str(limit))
        writer.parquet(str(base / name))
        files[name] = base / name
    rows = source.toArrow()
    log_layout = pages.arrow_options(pages.LOG_PAGE_ROWS)
    for name, options in (("pyarrow_default", {}), ("pyarrow_log_layout", log_layout)):
        (base / name).mkdir()
        pq.write_table(rows, str(base / name / "part-0.parquet"), compression="snappy", **options)
        files[name] = base / name
    start = args.rows // 2
    out: dict[str, dict] = {}
    for round_ in range(args.rounds):
        for name, folder in files.items():
            df = spark.read.parquet(str(folder))
            ranged = df.where((F.col("offset") >= start) & (F.col("offset") < start + args.range))
            whole = df.agg(F.max("event_time"), F.count(F.lit(1)))
            if len(ranged.collect()) != args.range:  # a page index misread loses rows
                raise SystemExit(f"{name}: the range read gave {len(ranged.collect())} rows")
            figures = {
                "file_bytes": sum(f.stat().st_size for f in folder.glob("*.parquet")),
                "range_read_s": median_seconds(ranged.collect, args.repeats),
                "whole_file_agg_s": median_seconds(whole.first, args.repeats),
            }
            if round_ == args.rounds - 1:
                out[name] = figures
    for name in out:
        for what in ("range_read_s", "whole_file_agg_s"):
            out[name][f"{what[:-2]}_vs_default"] = round(
                out[name][what] / out["default"][what], 2)
    json.dump({"config": {**vars(args), "cpus": os.cpu_count(),
                          "loadavg_at_end": os.getloadavg()}, "files": out},
              sys.stdout, indent=1)
    print()
    spark.stop()


if __name__ == "__main__":
    main()
