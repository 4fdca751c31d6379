"""A consumer group's members as Dagster runs: the members_<consumer> job, one partition per
member, whose runs at once consume every record of the topic exactly once between them."""

from __future__ import annotations

import threading

import dagster as dg
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.assets.location import build_definitions
from lakelog.assets.naming import CONSUMER_TAG
from lakelog.consumers import BatchInput, Consumer, Output, lag
from lakelog.demo.shop import TOPICS
from lakelog.pipeline import Pipeline

VIEWS = Output("streams/views_copy", T.StructType([
    T.StructField("event_id", T.StringType()), T.StructField("partition", T.IntegerType()),
    T.StructField("offset", T.LongType())]))


def copy(batch: BatchInput):
    return {VIEWS.path: batch.records["page_views"].select("event_id", "partition", "offset")}


PIPELINE = Pipeline("grouped", topics=TOPICS,
                    consumers=[Consumer("views_copy", ("page_views",), (VIEWS,), copy,
                                        max_records_per_batch=5)],
                    groups={"views_copy": 2})


def test_member_runs_share_the_partitions_and_consume_each_record_once(shop_lake, resources):
    defs = build_definitions(PIPELINE, resources=resources)
    job = defs.resolve_job_def("members_views_copy")
    assert job.partitions_def.get_partition_keys() == ["member-0", "member-1"]
    assert CONSUMER_TAG not in job.tags  # members run at once: no one-run-per-consumer limit
    results: dict[str, dg.ExecuteInProcessResult] = {}

    def member(key: str) -> None:  # two runs at once (each its own instance: sqlite in memory)
        with dg.DagsterInstance.ephemeral() as instance:
            results[key] = job.execute_in_process(partition_key=key, instance=instance)

    threads = [threading.Thread(target=member, args=(k,)) for k in ("member-0", "member-1")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert all(r.success for r in results.values())
    metadata = {k: r.asset_materializations_for_node("member_views_copy")[0].metadata
                for k, r in results.items()}
    assert {m["member"].value for m in metadata.values()} == {"member-0", "member-1"}
    assert sum(m["batches"].value for m in metadata.values()) > 0
    log = shop_lake.read(shop_lake.snapshot(TOPICS["page_views"].path))
    copied = shop_lake.read(shop_lake.snapshot(VIEWS.path))
    assert copied.count() == log.count()
    assert copied.select("partition", "offset").distinct().count() == log.count()
    assert copied.join(log, ["event_id", "partition", "offset"], "left_anti").isEmpty()
    consumer = PIPELINE.consumer("views_copy")
    assert sum(p.lag for p in lag(shop_lake, consumer, TOPICS)) == 0
    assert copied.where(F.col("event_id").isNull()).isEmpty()
