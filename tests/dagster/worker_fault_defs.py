"""A code location for the run-worker fault test: the shop's topics and its product_stats
consumer, kept live by the pipeline sensor, whose first attempt at a batch kills its own run
worker with SIGKILL, as `kill -9` would (`$LAKELOG_TEST_KILL_MARKER` records the pid)."""

import dataclasses
import os
import signal
from pathlib import Path

from lakelog.assets.definitions import build_definitions
from lakelog.consumers import BatchInput
from lakelog.demo.shop import CONSUMERS, TOPICS, product_stats_transform


def transform(batch: BatchInput):
    marker = Path(os.environ["LAKELOG_TEST_KILL_MARKER"])
    if not marker.exists():  # the first attempt: the run worker dies in the planned batch
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return product_stats_transform(batch)


consumer = dataclasses.replace(CONSUMERS["product_stats"], transform=transform)
defs = build_definitions(TOPICS, {consumer.name: consumer}, pipeline_interval_seconds=5)
