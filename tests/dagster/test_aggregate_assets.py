"""An event-sourced aggregate in Dagster (the demo's carts): its consumer asset, the outbox relay
and the replay check."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import dagster as dg
from ledger import PAYMENTS, Ledger, payment
from shop_records import cart_event

from lakelog.assets.aggregates import outbox_relay_asset, replay_check
from lakelog.assets.consumers import consumer_asset
from lakelog.assets.location import build_definitions
from lakelog.demo.shop import CARTS, TOPICS
from lakelog.log.ingest import produce
from lakelog.pipeline import Pipeline

ORDERS_TOPIC = dg.AssetKey(["log", "cart_orders"])


def test_carts_orders_relay_and_replay_check(shop_lake, resources, spark):
    # u1 checks out the cart the shop's records filled; u3 removes what is not in its cart.
    checkout = {**cart_event("c4", "u1", "checkout", None, second=9),
                "quantity": None, "unit_price": None}
    refused = cart_event("c5", "u3", "remove", "p9", second=10)
    produce(shop_lake, spark, TOPICS["cart_events"], [json.dumps(checkout), json.dumps(refused)],
            source="test", now=datetime.now(timezone.utc))
    assets = [consumer_asset(CARTS.consumer, TOPICS), outbox_relay_asset(CARTS)]
    first = dg.materialize([*assets, replay_check(CARTS, TOPICS)], resources=resources)
    assert first.success
    decided = shop_lake.read(shop_lake.snapshot(CARTS.outbox.path)).count()
    published = shop_lake.read(shop_lake.snapshot(CARTS.outbox_topic.path))
    assert decided == 1 and published.count() == decided
    rejected = shop_lake.read(shop_lake.snapshot(CARTS.rejections.path)).collect()
    assert [(r["event_id"], r["reason"]) for r in rejected] == [("c5", "item_not_in_cart")]
    assert published.select("order_id").distinct().count() == decided
    [relay] = [e.materialization for e in first.get_asset_materialization_events()
               if e.asset_key == ORDERS_TOPIC]
    assert relay.metadata["events_published"].value == decided
    [check] = first.get_asset_check_evaluations()
    assert check.passed and check.metadata["states"].value > 0

    # Nothing new: the relay publishes nothing twice.
    again = dg.materialize(assets, resources=resources)
    assert shop_lake.read(shop_lake.snapshot(CARTS.outbox_topic.path)).count() == decided
    [relay] = [e.materialization for e in again.get_asset_materialization_events()
               if e.asset_key == ORDERS_TOPIC]
    assert relay.metadata["events_published"].value == 0


def test_an_aggregate_of_the_users_own_runs_in_its_pipeline_job(lake, land, resources):
    # tests/ledger.py: not the demo's carts; the location knows it only as an Aggregate.
    ledger = Ledger(large=12.0)
    pipeline = Pipeline("mine", topics=[PAYMENTS], aggregates=[ledger])
    land("payments", "a.ndjson", [payment(i) for i in range(20)])
    defs = build_definitions(pipeline, resources=resources)
    relay_key = dg.AssetKey(["log", "ledger_large"])
    check_key = dg.AssetCheckKey(dg.AssetKey(["streams", "ledger_balances"]), "replay_matches")
    assert defs.resolve_assets_def(relay_key) is not None
    assert check_key in defs.resolve_asset_graph().asset_check_keys

    instance = dg.DagsterInstance.ephemeral()
    result = defs.resolve_job_def("pipeline").execute_in_process(instance=instance)
    assert result.success
    [relay] = [e.materialization for e in result.get_asset_materialization_events()
               if e.asset_key == relay_key]
    assert relay.metadata["events_published"].value == 8  # amounts 12..19
    published = lake.read(lake.snapshot(ledger.outbox_topic.path))
    assert sorted(r.event_id for r in published.collect()) == [f"e{i}" for i in range(12, 20)]
    audit = defs.resolve_job_def("audit").execute_in_process(instance=instance)
    [check] = [c for c in audit.get_asset_check_evaluations() if c.asset_check_key == check_key]
    assert check.passed and check.metadata["states"].value == 7
