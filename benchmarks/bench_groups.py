"""Consumer groups on a large log: what a microbatch costs a consumer alone and a group's
partition, and how fast members drain a backlog next to the consumer alone (the reference).

Builds a lake of the demo shop's topics holding ``--events`` events (untimed) and reads the
``page_views`` topic with a consumer that appends its records' ids to a table. Then, in one
Spark session, side by side:

- ``microbatch_s``: the median of ``--repeats`` microbatches of 1,000 records, of the consumer
  alone and of the same consumer declared as a group, run by one process (its partitions in one
  batch: a plan and an offset commit per partition, the output written once);
- ``drain``: ``--backlog`` records consumed from scratch by the consumer alone, and by 1 and 2
  members of the group (threads of this process on the one Spark session), in records/s.

One JSON object on stdout, progress on stderr.

    python benchmarks/bench_groups.py --events 1000000 > groups.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from datetime import datetime, timezone

from pyspark.sql import types as T

from bench_common import bench_lake

from lakelog import consumers
from lakelog.consumers import BatchInput, Consumer, Output
from lakelog.consumers import groups, units
from lakelog.consumers.backlog import positions
from lakelog.demo import shop
from lakelog.demo.workload import Workload
from lakelog.lake import EmbeddedLake
from lakelog.log import ingest

TOPIC = shop.TOPICS["page_views"]
IDS = T.StructType([T.StructField("event_id", T.StringType()),
                    T.StructField("partition", T.IntegerType()),
                    T.StructField("offset", T.LongType())])


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def now() -> datetime:
    return datetime.now(timezone.utc)


def copier(name: str, max_records: int, members: int = 0) -> Consumer:
    output = Output(f"streams/{name}", IDS)

    def transform(batch: BatchInput):
        return {output.path: batch.records[TOPIC.name].select("event_id", "partition", "offset")}

    return Consumer(name, (TOPIC.name,), (output,), transform, max_records_per_batch=max_records,
                    members=members)


def microbatches(lake: EmbeddedLake, consumer: Consumer, repeats: int) -> list[float]:
    topics = {TOPIC.name: TOPIC}
    every = units.units_of(consumer, topics)
    check = None
    if consumer.members:
        units.seed(lake, consumer, topics, now=now())
        check = groups.fence(consumer.name, groups.Owner(None, 0), solo=True)
    seconds = []
    for _ in range(repeats + 1):  # the first warms up
        started = time.perf_counter()
        result = consumers.run_batch(lake, consumer, topics, now=now(), units=every, fence=check)
        seconds.append(time.perf_counter() - started)
        assert result is not None and result.records == consumer.max_records_per_batch
    return seconds[1:]


def drain(lake: EmbeddedLake, consumer: Consumer, members: int) -> dict:
    topics = {TOPIC.name: TOPIC}
    started = time.perf_counter()
    counts: list[int] = []
    if members == 0:
        counts.append(sum(r.records for r in consumers.run_until_caught_up(
            lake, consumer, topics, now=now)))
    else:
        def member(name: str) -> None:
            done = groups.run_member(lake, consumer, topics, member=name, now=now)
            counts.append(sum(r.records for r in done))

        threads = [threading.Thread(target=member, args=(f"m{k}",)) for k in range(members)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    seconds = time.perf_counter() - started
    return {"members": members or "alone", "records": sum(counts), "seconds": round(seconds, 2),
            "records_per_s": round(sum(counts) / seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--backlog", type=int, default=200_000,
                        help="records per drain: the consumers start at a log cut to this size")
    args = parser.parse_args()
    with bench_lake("bench-groups") as lake:
        spark = lake.spark
        started = time.perf_counter()
        workload = Workload(args.events, seed=7, batches=args.batches)
        for k in range(args.batches):
            workload.write_batch(k, lake.root)
            ingest.ingest(lake, spark, TOPIC, now=now())
            say(f"batch {k} ingested")
        log_records = sum(f.num_records for f in lake.snapshot(TOPIC.path).files())
        result = {"events": args.events, "log_records": log_records,
                  "log_partitions": TOPIC.partitions,
                  "build_s": round(time.perf_counter() - started, 1)}
        alone = microbatches(lake, copier("alone_mb", 1000), args.repeats)
        say("microbatches alone done")
        grouped = microbatches(lake, copier("group_mb", 1000, members=2), args.repeats)
        say("microbatches of the group done")
        result["microbatch_s"] = {
            "records": 1000, "alone_median": round(statistics.median(alone), 3),
            "group_median": round(statistics.median(grouped), 3),
            "alone": [round(s, 3) for s in alone], "group": [round(s, 3) for s in grouped],
        }
        # a backlog of --backlog records: offsets reset to that far behind the heads
        per_partition = args.backlog // TOPIC.partitions
        start = {tp: max(head - per_partition, 0)
                 for tp, (_, head) in positions(lake, {TOPIC.name: TOPIC}).items()}
        runs = []
        for members in (0, 1, 2):
            consumer = copier(f"drain_{members}", 50_000, members=members)
            seed_offsets(lake, consumer, start)
            runs.append(drain(lake, consumer, members))
            say(f"drain with {members or 'no'} members: {runs[-1]}")
        result["drain"] = runs
        print(json.dumps(result, indent=1))


def seed_offsets(lake: EmbeddedLake, consumer: Consumer, offsets: dict) -> None:
    """Commit `offsets` for a new consumer (alone, or each partition of a group)."""
    topics = {TOPIC.name: TOPIC}
    if consumer.members:
        units.seed(lake, consumer, topics, now=now())
    units.save_offsets(lake, units.load_units(lake, consumer, topics), offsets, now=now())


if __name__ == "__main__":
    main()
