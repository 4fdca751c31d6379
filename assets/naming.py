"""Names shared by assets, sensors and deploy/dagster.yaml: asset keys, tags and pools."""

from __future__ import annotations

import re

import dagster as dg

from lakelog.consumers import Consumer, Output
from lakelog.log.topics import Topic

#: Run and op tag naming the consumer a run advances; deploy/dagster.yaml allows one run per value.
CONSUMER_TAG = "lakelog/consumer"
#: The concurrency pool of the ingest step (limit 1 in deploy/dagster.yaml): one run ingests at
#: a time, whichever topics it selected.
INGEST_POOL = "lakelog/ingest"
#: Run tag of the runs that keep the graph up to date (the pipeline sensor's, `lakelog run` and
#: `lakelog demo`): their hour partition labels the run, it asks for no recompute of that hour.
CATCH_UP_TAG = "lakelog/catch_up"


def capture_key(server_name: str) -> dg.AssetKey:
    return dg.AssetKey(["cdc", server_name])


def capture_pool(server_name: str) -> str:
    """One capture of a source at a time (its state file is locked too)."""
    return f"lakelog/capture/{server_name}"


def topic_key(topic: Topic | str) -> dg.AssetKey:
    return dg.AssetKey(["log", topic.name if isinstance(topic, Topic) else topic])


def output_key(output: Output) -> dg.AssetKey:
    return dg.AssetKey(output.path.split("/"))


def consumer_pool(consumer: Consumer) -> str:
    """The concurrency pool of a consumer's microbatches (limit 1 in deploy/dagster.yaml)."""
    return f"lakelog/consumer/{consumer.name}"


def op_name(prefix: str, name: str) -> str:
    """A valid Dagster op or job name for a topic or consumer name (which may hold '.' or '-')."""
    return f"{prefix}_{re.sub(r'[^A-Za-z0-9_]', '_', name)}"
