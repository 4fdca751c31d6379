"""A code location for the Spark fault test: the shop's product_stats consumer, whose first
attempt at a batch kills the local Spark server under it (`$LAKELOG_TEST_KILL_MARKER` records
that it did, across the step's processes)."""

import dataclasses
import os
import signal
from pathlib import Path

import dagster as dg

from lakelog.assets.consumers import consumer_asset
from lakelog.consumers import BatchInput
from lakelog.demo.shop import CONSUMERS, TOPICS, product_stats_transform
from lakelog.resources import build_resources
from lakelog.spark.server import ServerConfig, status


def transform(batch: BatchInput):
    marker = Path(os.environ["LAKELOG_TEST_KILL_MARKER"])
    if not marker.exists():  # the first attempt: the server dies under the batch
        pid = status(ServerConfig.from_environment(os.environ)).pid
        marker.write_text(str(pid))
        os.kill(pid, signal.SIGKILL)
    return product_stats_transform(batch)


consumer = dataclasses.replace(CONSUMERS["product_stats"], transform=transform)
defs = dg.Definitions(assets=[consumer_asset(consumer, TOPICS)], resources=build_resources())
