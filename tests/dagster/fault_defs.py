"""A code location for the fault tests under the daemon: the shop's topics and its product_stats
consumer, kept live by the pipeline sensor. The consumer's first attempt at a batch kills, with
SIGKILL as `kill -9` would, what `$LAKELOG_TEST_KILL` names: `worker` (its own run worker) or
`server` (the local Spark server under it). `$LAKELOG_TEST_KILL_MARKER` records the pid killed,
across processes and retries."""

import dataclasses
import os
import signal
from pathlib import Path

from lakelog.assets.location import build_definitions
from lakelog.consumers import BatchInput
from lakelog.demo.shop import CONSUMERS, TOPICS, product_stats_transform
from lakelog.pipeline import Pipeline
from lakelog.spark.server import ServerConfig, status


def victim() -> int:
    target = os.environ["LAKELOG_TEST_KILL"]
    if target == "worker":
        return os.getpid()
    if target == "server":
        return status(ServerConfig.from_environment(os.environ)).pid
    raise ValueError(f"LAKELOG_TEST_KILL must be worker or server, not {target!r}")


def transform(batch: BatchInput):
    marker = Path(os.environ["LAKELOG_TEST_KILL_MARKER"])
    if not marker.exists():  # the first attempt: the process dies in the planned batch
        pid = victim()
        marker.write_text(str(pid))
        os.kill(pid, signal.SIGKILL)
    return product_stats_transform(batch)


consumer = dataclasses.replace(CONSUMERS["product_stats"], transform=transform)
defs = build_definitions(Pipeline("faults", topics=TOPICS, consumers=[consumer]),
                         pipeline_interval_seconds=5)
