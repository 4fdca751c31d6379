"""An event-sourced aggregate of the user's own (`tests/ledger.py`, not the demo's carts) in the
engine: the Pipeline takes it, its outbox reaches its topic exactly once, its replay check can
fail."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from ledger import PAYMENTS, Ledger, payment
from pyspark.sql import functions as F

from lakelog.errors import ConfigError
from lakelog.lake import EmbeddedLake
from lakelog.log import ingest
from lakelog.log.offsets import topic_snapshot
from lakelog.pipeline import Pipeline
from lakelog.sourcing import (
    Aggregate,
    consume_and_publish,
    decided_through,
    publish_outbox,
    published_through,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def _produce(spark, lake, first, count):
    lines = [json.dumps(payment(i)) for i in range(first, first + count)]
    ingest.produce(lake, spark, PAYMENTS, lines, source="test", now=NOW)


def test_pipeline_takes_any_aggregate_and_names_its_parts():
    ledger = Ledger()
    assert isinstance(ledger, Aggregate)
    pipeline = Pipeline("mine", topics=[PAYMENTS], aggregates=[ledger])
    assert pipeline.all_topics["ledger_large"] == ledger.outbox_topic
    assert pipeline.all_consumers["aggregate.ledger"] == ledger.consumer
    assert pipeline.rebuild_hazards("aggregate.ledger")  # its events left for a topic


def test_pipeline_refuses_what_is_not_an_aggregate():
    with pytest.raises(ConfigError, match="aggregates must each be a lakelog.sourcing.Aggregate"):
        Pipeline("mine", topics=[PAYMENTS], aggregates=[PAYMENTS])
    with pytest.raises(ConfigError, match="consumer aggregate.ledger reads undeclared topic"):
        Pipeline("mine", aggregates=[Ledger()])  # its command topic is not declared


def test_outbox_reaches_its_topic_once_in_decision_order(spark, lake: EmbeddedLake):
    ledger = Ledger(large=12.0)
    _produce(spark, lake, 0, 20)
    results, first = consume_and_publish(lake, ledger, {PAYMENTS.name: PAYMENTS}, now=lambda: NOW)
    assert len(results) == 1 and first.batches == (0, 0) and first.events == 8  # 12..19
    _produce(spark, lake, 20, 5)
    _, second = consume_and_publish(lake, ledger, {PAYMENTS.name: PAYMENTS}, now=lambda: NOW)
    assert second.batches == (1, 1) and second.events == 5
    assert publish_outbox(lake, ledger, now=NOW).events == 0  # nothing left to publish
    assert decided_through(lake, ledger) == published_through(lake, ledger) == 1

    topic = lake.read(topic_snapshot(lake, ledger.outbox_topic))
    published = sorted(r.event_id for r in topic.select("event_id").collect())
    assert published == sorted(f"e{i}" for i in range(12, 25))
    by_partition = {}
    for r in topic.orderBy("partition", "offset").collect():
        by_partition.setdefault(r.partition, []).append(r.offset)
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values())
    assert {r.headers["source"] for r in topic.collect()} == {"aggregate.ledger"}


def test_replay_check_finds_a_tampered_state(spark, lake: EmbeddedLake):
    ledger = Ledger()
    _produce(spark, lake, 0, 10)
    consume_and_publish(lake, ledger, {PAYMENTS.name: PAYMENTS}, now=lambda: NOW)
    check = ledger.verify(lake, PAYMENTS)
    assert check.passed and check.states == 7 and check.batch == 0

    state = lake.snapshot(ledger.state.path)
    tampered = lake.read(state).withColumn(
        "balance",
        F.when(F.col("user_id") == "u3", F.col("balance") + 1).otherwise(F.col("balance")),
    )
    lake.write(state, tampered, mode="overwrite")
    check = ledger.verify(lake, PAYMENTS)
    assert not check.passed and [d.key for d in check.differences] == ["u3"]
