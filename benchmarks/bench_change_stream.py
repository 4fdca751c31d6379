"""A keyed table's change stream on a large table: what publishing a microbatch of changes costs,
next to appending the same number of records to a topic with lakelog's plain append (the
reference: the log write without the change computation).

Builds (untimed) a keyed table of ``--rows`` rows (``tables/accounts``, key ``id``) and publishes
its first snapshot (timed once: ``snapshot_s``, ``--rows`` ``r`` events). Then ``--repeats``
times: ``--changes`` keys are upserted into the table (untimed: a consumer's batch), and the
change stream's relay publishes them (``publish_s``: the table's change feed read, envelopes
built, one append to ``changes.tables.accounts``); the reference appends as many plain records
to a topic of the same partitions (``append_s``). Medians after one warm-up, one classic
``local[2]`` session. One JSON object on stdout, progress on stderr.

    python benchmarks/bench_change_stream.py --rows 1000000 > change_stream.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from bench_common import bench_lake

from lakelog.cdc.change_streams import ChangeStream, publish_changes
from lakelog.consumers import Output
from lakelog.lake.upsert import upsert
from lakelog.log.offsets import append
from lakelog.log.topics import EventTime, Topic

SCHEMA = T.StructType([T.StructField("id", T.LongType()), T.StructField("name", T.StringType()),
                       T.StructField("balance", T.DoubleType()),
                       T.StructField("updated_at", T.TimestampType())])
TABLE = Output("tables/accounts", SCHEMA, keys=("id",), rows_per_file=100_000)
STREAM = ChangeStream(TABLE)
PLAIN = Topic("plain", SCHEMA, key="id", event_id="name", partitions=STREAM.partitions,
              time=EventTime("updated_at"))


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def now() -> datetime:
    return datetime.now(timezone.utc)


def rows(spark: SparkSession, ids: DataFrame, round_: int) -> DataFrame:
    return ids.select(
        F.col("id").cast("long").alias("id"),
        F.concat(F.lit("account-"), F.col("id").cast("string")).alias("name"),
        (F.col("id") % 1000 + F.lit(round_)).cast("double").alias("balance"),
        F.current_timestamp().alias("updated_at"),
    )


def envelopes(df: DataFrame, round_: int) -> DataFrame:
    """`df` as the records of topic `PLAIN` before offsets: key, id, time, payload, headers."""
    return df.select(
        F.col("id").cast("string").alias("key"),
        F.concat(F.lit(f"r{round_}-"), F.col("id").cast("string")).alias("event_id"),
        F.col("updated_at").alias("event_time"),
        *SCHEMA.fieldNames(),
        F.create_map().cast("map<string,string>").alias("headers"),
        F.current_timestamp().alias("ingest_time"),
    )


def timed(work) -> tuple[float, object]:
    started = time.perf_counter()
    result = work()
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with bench_lake("bench-change-stream") as lake:
        spark = lake.spark
        lake.create_table(TABLE.path, SCHEMA)
        lake.write(lake.snapshot(TABLE.path), rows(spark, spark.range(args.rows), 0),
                   max_records_per_file=TABLE.rows_per_file)
        say(f"table of {args.rows:,} rows written")
        snapshot_s, first = timed(lambda: publish_changes(lake, STREAM, now=now()))
        say(f"snapshot published: {first.changes:,} events in {snapshot_s:.1f} s")
        publish, plain = [], []
        for k in range(args.repeats + 1):
            ids = spark.range(args.changes).select(
                (F.col("id") * (args.rows // args.changes) + k).alias("id"))
            upsert(lake, lake.snapshot(TABLE.path), rows(spark, ids, k + 1), keys=TABLE.keys,
                   rows_per_file=TABLE.rows_per_file, rows_hint=args.changes)
            seconds, done = timed(lambda: publish_changes(lake, STREAM, now=now()))
            assert done.changes == args.changes, done
            publish.append(seconds)
            records = envelopes(rows(spark, ids, k + 1), k)
            seconds, _ = timed(lambda: append(lake, PLAIN, lambda _log: (records, {}),
                                              order_by=("id",)))
            plain.append(seconds)
            say(f"round {k}: publish {publish[-1]:.2f} s, plain append {plain[-1]:.2f} s")
        print(json.dumps({
            "table_rows": args.rows, "changes_per_microbatch": args.changes,
            "snapshot_s": round(snapshot_s, 2), "snapshot_events": first.changes,
            "publish_s_median": round(statistics.median(publish[1:]), 3),
            "append_s_median": round(statistics.median(plain[1:]), 3),
            "publish_s": [round(s, 3) for s in publish[1:]],
            "append_s": [round(s, 3) for s in plain[1:]],
        }, indent=1))


if __name__ == "__main__":
    main()
