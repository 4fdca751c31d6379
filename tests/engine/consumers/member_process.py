"""A consumer group member in a process of its own, for the kill test (`test_group_kill`):

    python member_process.py LAKE_ROOT MEMBER

Its Spark is the test Spark server (the environment `processes.subprocess_env` gives). Its
batches dawdle while ``LAKE_ROOT/dawdle`` exists, so a test can kill it in the middle of one.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from engine_helpers import make_topic
from pyspark.sql import types as T

from lakelog.consumers import BatchInput, Consumer, Output

TOPIC = make_topic()
COPY = Output("streams/copy", T.StructType([
    T.StructField("event_id", T.StringType()), T.StructField("partition", T.IntegerType()),
    T.StructField("offset", T.LongType())]))


def copy(batch: BatchInput):
    while (Path(batch.lake.root) / "dawdle").exists():
        time.sleep(0.2)
    return {COPY.path: batch.records[TOPIC.name].select("event_id", "partition", "offset")}


CONSUMER = Consumer("copier", (TOPIC.name,), (COPY,), copy, max_records_per_batch=10, members=2)


def main(root: str, member: str) -> None:
    import os

    from lakelog.consumers.groups import run_member
    from lakelog.lake import EmbeddedLake
    from lakelog.spark.server import ServerConfig
    from lakelog.spark.session import open_session

    spark = open_session(server=ServerConfig.from_environment(os.environ), app_name=member)
    run_member(EmbeddedLake(spark, root), CONSUMER, {TOPIC.name: TOPIC}, member=member,
               now=lambda: datetime.now(timezone.utc))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
