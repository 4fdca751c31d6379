"""The cart aggregate in Dagster: its consumer asset, the orders relay and the replay check."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import dagster as dg
from shop_records import cart_event

from lakelog.assets.carts import orders_relay_asset, replay_check
from lakelog.assets.consumers import consumer_asset
from lakelog.demo.shop import CARTS, TOPICS
from lakelog.log.ingest import produce

ORDERS_TOPIC = dg.AssetKey(["log", "cart_orders"])


def test_carts_orders_relay_and_replay_check(shop_lake, resources, spark):
    # u1 checks out the cart the shop's records filled; u3 removes what is not in its cart.
    checkout = {**cart_event("c4", "u1", "checkout", None, second=9),
                "quantity": None, "unit_price": None}
    refused = cart_event("c5", "u3", "remove", "p9", second=10)
    produce(shop_lake, spark, TOPICS["cart_events"], [json.dumps(checkout), json.dumps(refused)],
            source="test", now=datetime.now(timezone.utc))
    assets = [consumer_asset(CARTS.consumer, TOPICS), orders_relay_asset(CARTS)]
    first = dg.materialize([*assets, replay_check(CARTS, TOPICS)], resources=resources)
    assert first.success
    decided = shop_lake.read(shop_lake.snapshot(CARTS.orders.path)).count()
    published = shop_lake.read(shop_lake.snapshot(CARTS.orders_topic.path))
    assert decided == 1 and published.count() == decided
    rejected = shop_lake.read(shop_lake.snapshot(CARTS.rejections.path)).collect()
    assert [(r["event_id"], r["reason"]) for r in rejected] == [("c5", "item_not_in_cart")]
    assert published.select("order_id").distinct().count() == decided
    [relay] = [e.materialization for e in first.get_asset_materialization_events()
               if e.asset_key == ORDERS_TOPIC]
    assert relay.metadata["orders_published"].value == decided
    [check] = first.get_asset_check_evaluations()
    assert check.passed and check.metadata["carts"].value > 0

    # Nothing new: the relay publishes nothing twice.
    again = dg.materialize(assets, resources=resources)
    assert shop_lake.read(shop_lake.snapshot(CARTS.orders_topic.path)).count() == decided
    [relay] = [e.materialization for e in again.get_asset_materialization_events()
               if e.asset_key == ORDERS_TOPIC]
    assert relay.metadata["orders_published"].value == 0
