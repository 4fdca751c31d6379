"""Sensors turn new landing files and new log offsets into run requests, each exactly once."""

from __future__ import annotations

import json

import dagster as dg
import pytest
from shop_records import SHOP_RECORDS, order, page_view

from lakelog.assets.definitions import build_definitions
from lakelog.assets.naming import CONSUMER_TAG, TOPIC_TAG
from lakelog.consumers import run_until_caught_up
from lakelog.demo.shop import CONSUMERS, TOPICS
from lakelog.ingest import ingest
from lakelog.log import heads
from lakelog.resources import LakeResource, SparkResource


class NoSpark(SparkResource):
    """Sensors run in the code server on every tick: they must not start a Spark driver there."""

    def session(self):
        raise AssertionError("a sensor asked for a Spark session")


@pytest.fixture
def tick(lake):
    """`tick(sensor_name, cursor)` evaluates the sensor once, as the daemon would."""
    resources = {"spark": NoSpark(), "lake": LakeResource(spark=NoSpark(), root=lake.root)}
    defs = build_definitions(TOPICS, CONSUMERS, resources=resources)
    instance = dg.DagsterInstance.ephemeral()

    def evaluate(name: str, cursor: str | None) -> dg.SensorResult:
        with dg.build_sensor_context(
            instance=instance, cursor=cursor, resources=resources
        ) as context:
            return defs.resolve_sensor_def(name)(context)

    return evaluate


def test_landing_sensor_requests_each_file_once(lake, land, tick, now):
    empty = tick("landing_zone", None)
    assert not empty.run_requests and empty.skip_reason is not None

    a = land("page_views", "a.ndjson", [page_view("e1", "u1", "p1")])
    first = tick("landing_zone", empty.cursor)
    [request] = first.run_requests
    assert request.asset_selection == [dg.AssetKey(["log", "page_views"])]
    assert request.tags[TOPIC_TAG] == "page_views"
    assert request.run_key.startswith("page_views:-1:")  # nothing ingested yet
    assert json.loads(first.cursor) == {
        "page_views": {"landing/page_views/a.ndjson": a.stat().st_size}
    }
    assert tick("landing_zone", None).run_requests[0].run_key == request.run_key  # stable

    repeat = tick("landing_zone", first.cursor)  # same files, run maybe still queued
    assert not repeat.run_requests
    assert repeat.cursor == first.cursor

    land("page_views", "b.ndjson", [page_view("e2", "u2", "p1")])
    orders = land("orders", "a.ndjson", [order("o1", "u1", [("p1", 1, 2.0)])])
    second = tick("landing_zone", repeat.cursor)
    keys = {r.asset_selection[0].path[1]: r.run_key for r in second.run_requests}
    assert set(keys) == {"page_views", "orders"}
    assert keys["page_views"] != request.run_key
    assert set(json.loads(second.cursor)["page_views"]) == {
        "landing/page_views/a.ndjson", "landing/page_views/b.ndjson",
    }

    grown = land("page_views", "b.ndjson", [page_view(e, "u2", "p1") for e in ("e2", "e3")])
    third = tick("landing_zone", second.cursor)  # a file that grew is taken again
    [again] = third.run_requests
    assert again.asset_selection == [dg.AssetKey(["log", "page_views"])]
    sizes = json.loads(third.cursor)["page_views"]
    assert sizes["landing/page_views/b.ndjson"] == grown.stat().st_size

    ingest(lake, lake.spark, TOPICS["page_views"], now=now)
    after = tick("landing_zone", third.cursor)
    assert not after.run_requests
    assert json.loads(after.cursor) == {
        "orders": {"landing/orders/a.ndjson": orders.stat().st_size}  # still pending
    }


def test_log_sensor_requests_new_offsets_once(shop_lake, land, tick, now):
    name = "offsets_product_stats"
    first = tick(name, None)
    [request] = first.run_requests
    assert request.tags[CONSUMER_TAG] == "product_stats"
    assert request.run_key.startswith("product_stats:")
    requested = json.loads(first.cursor)
    expected = {
        f"{t}/{p}": h
        for t in CONSUMERS["product_stats"].topics
        for p, h in heads(shop_lake.snapshot(f"log/{t}"), TOPICS[t].partitions).items()
    }
    assert requested == expected
    assert sum(requested.values()) == SHOP_RECORDS

    repeat = tick(name, first.cursor)  # the requested run has not consumed them yet
    assert not repeat.run_requests

    run_until_caught_up(shop_lake, CONSUMERS["product_stats"], TOPICS, now=lambda: now)
    caught_up = tick(name, None)
    assert not caught_up.run_requests
    assert "caught up" in caught_up.skip_reason.skip_message

    land("page_views", "c.ndjson", [page_view("v9", "u2", "p1")])
    ingest(shop_lake, shop_lake.spark, TOPICS["page_views"], now=now)
    new = tick(name, first.cursor)
    [next_request] = new.run_requests
    assert next_request.run_key != request.run_key
    assert sum(json.loads(new.cursor).values()) == SHOP_RECORDS + 1
