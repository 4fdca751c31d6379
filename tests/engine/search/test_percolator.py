"""Stored queries matched against a topic (`lakelog.search.Percolator`): the demo's price alerts
over the products' changelog, on real topics and tables."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from engine_helpers import CrashAfterCommit

from lakelog import consumers
from lakelog.demo.shop_cdc import CHANGELOGS
from lakelog.demo.shop_search import ALERTS, PRICE_ALERTS, alert_lines
from lakelog.errors import ConfigError
from lakelog.log import ingest
from lakelog.search import Condition

PRODUCTS = CHANGELOGS["cdc.products"]
TOPICS = {PRODUCTS.name: PRODUCTS, ALERTS.name: ALERTS}
SEQ = iter(range(1, 1_000_000))


def alert(alert_id, *, category=None, max_price=100.0, keyword=None, deleted=False, n=0):
    return json.dumps({"event_id": f"{alert_id}-{n}", "alert_id": alert_id, "user_id": "u-1",
                       "category": category, "max_price": max_price, "keyword": keyword,
                       "deleted": deleted})


def product(product_id, *, name, category, price, op="u"):
    """A change of the products table (a fresh source position each)."""
    seq = next(SEQ)
    row = {"product_id": product_id, "name": name, "category": category, "price": price,
           "updated_at": "2026-03-01T12:00:00Z"}
    return json.dumps({"before": {"product_id": product_id} if op == "u" else None,
                       "after": row, "op": op, "ts_ms": 1_772_366_400_000 + seq,
                       "source": {"connector": "sqlite", "name": "shop", "table": "products",
                                  "seq": seq}})


def batch(lake, spark, now, *, alerts=(), products=(), percolator=PRICE_ALERTS, crash=False):
    """Land alert and product records, then run the percolator until caught up (with `crash`,
    a first run dies right after committing the matches)."""
    if alerts:
        ingest.produce(lake, spark, ALERTS, list(alerts), source="test", now=now)
    if products:
        ingest.produce(lake, spark, PRODUCTS, list(products), source="test", now=now)
    if crash:
        crashing = CrashAfterCommit(spark, lake.root, percolator.output.path)
        crashing.armed = True
        with pytest.raises(RuntimeError, match="crash after committing"):
            consumers.run_until_caught_up(crashing, percolator.consumer, TOPICS, now=lambda: now)
    consumers.run_until_caught_up(lake, percolator.consumer, TOPICS, now=lambda: now)


def matched(lake):
    rows = lake.read(lake.snapshot(PRICE_ALERTS.output.path)).collect()
    return sorted((r["alert_id"], r["product_id"], str(r["price"])) for r in rows)


def test_alerts_apply_from_the_next_batch_on_until_removed(lake, spark, now):
    # a1: any lamp up to 20; a2: "red" anything up to 50; a3: chairs up to 10.
    batch(lake, spark, now, alerts=[
        alert("a1", category="lamp", max_price=20.0), alert("a2", keyword="RED", max_price=50.0),
        alert("a3", category="chair", max_price=10.0),
    ], products=[product("p1", name="red lamp", category="lamp", price=15.0)])
    assert matched(lake) == []  # the alerts were saved in the same batch: from the next one on

    batch(lake, spark, now, products=[
        product("p1", name="red lamp", category="lamp", price=14.0),  # a1 and a2
        product("p2", name="Red chair", category="chair", price=30.0),  # a2 only (a3: too dear)
        product("p3", name="blue lamp", category="lamp", price=25.0),  # none
        product("p4", name="red sofa", category="sofa", price=None, op="c"),  # no price: none
    ], alerts=[alert("a3", category="chair", max_price=40.0, n=1)], crash=True)
    assert matched(lake) == [("a1", "p1", "14.00"), ("a2", "p1", "14.00"),
                             ("a2", "p2", "30.00")]

    # a3's new price limit applies now; a1 is removed in this batch, so it still matches here.
    batch(lake, spark, now, products=[
        product("p2", name="Red chair", category="chair", price=35.0),
        product("p1", name="red lamp", category="lamp", price=13.0),
    ], alerts=[alert("a1", deleted=True, n=2)])
    batch(lake, spark, now, products=[product("p1", name="red lamp", category="lamp",
                                              price=12.0)])
    assert matched(lake) == [
        ("a1", "p1", "13.00"), ("a1", "p1", "14.00"), ("a2", "p1", "12.00"),
        ("a2", "p1", "13.00"), ("a2", "p1", "14.00"), ("a2", "p2", "30.00"),
        ("a2", "p2", "35.00"), ("a3", "p2", "35.00"),
    ]
    state = lake.read(lake.snapshot(PRICE_ALERTS.state.path)).collect()
    assert sorted(r["alert_id"] for r in state) == ["a2", "a3"]
    row = lake.read(lake.snapshot(PRICE_ALERTS.output.path)).where("alert_id = 'a3'").first()
    assert (row["user_id"], row["product"], row["batch"]) == ("u-1", "Red chair", 2)
    assert row["event_partition"] is not None and row["event_offset"] is not None


def test_matches_equal_every_event_against_the_alerts_saved_in_earlier_batches(lake, spark, now):
    """Random alerts (saved, changed, removed) and product changes in random batches: each
    event matches exactly the alerts live after the batches before its own."""
    rng = random.Random(5)
    nouns, words = ["lamp", "chair", "mug"], ["red", "blue", None]
    live: dict[str, dict] = {}
    expected = set()
    for b in range(4):
        alerts, saved = [], {}
        for n in range(rng.randint(0, 4)):
            alert_id = f"a{rng.randint(1, 5)}"
            fields = {"category": rng.choice([*nouns, None]), "keyword": rng.choice(words),
                      "max_price": float(rng.randint(1, 30)), "deleted": rng.random() < 0.2}
            alerts.append(alert(alert_id, n=b * 10 + n, **fields))
            saved[alert_id] = fields  # the newest record of an id wins
        products, events = [], []
        for n in range(rng.randint(1, 6)):
            name = f"{rng.choice(['red', 'blue', 'green'])} {rng.choice(nouns)}"
            price = float(rng.randint(1, 30))
            products.append(product(f"p{n}", name=name, category=name.split()[1], price=price))
            events.append((f"p{n}", name, name.split()[1], price))
        for alert_id, a in live.items():
            for pid, name, category, price in events:
                if ((a["category"] in (None, category)) and price <= a["max_price"]
                        and (a["keyword"] is None or a["keyword"] in name)):
                    expected.add((alert_id, pid, f"{price:.2f}"))
        batch(lake, spark, now, alerts=alerts, products=products)
        for alert_id, a in saved.items():
            if a["deleted"]:
                live.pop(alert_id, None)
            else:
                live[alert_id] = a
    found = matched(lake)
    assert len(found) == len(set(found)) and set(found) == expected


def test_the_demo_alerts_parse_and_bad_declarations_are_named(lake, spark, now):
    assert alert_lines(7) == alert_lines(7)
    landed = ingest.produce(lake, spark, ALERTS, alert_lines(7), source="test", now=now)
    assert (landed.appended, landed.dead_letters) == (60, 0)
    broken = ingest.produce(lake, spark, ALERTS, [json.dumps({"event_id": "x", "user_id": "u",
                                                              "max_price": 1})],
                            source="test", now=now)
    assert (broken.appended, broken.dead_letters) == (0, 1)  # no alert id
    with pytest.raises(ConfigError, match="has no field 'after.nope'"):
        replace(PRICE_ALERTS, conditions=(Condition("after.nope", "=", "category"),))
    with pytest.raises(ConfigError, match="price_alerts has no column 'nope'"):
        replace(PRICE_ALERTS, conditions=(Condition("after.name", "=", "nope"),))
    with pytest.raises(ConfigError, match="op must be one of =, <=, >=, contains"):
        replace(PRICE_ALERTS, conditions=(Condition("after.name", "~", "keyword"),))
    with pytest.raises(ConfigError, match="'contains' needs a text column"):
        replace(PRICE_ALERTS, conditions=(Condition("after.name", "contains", "max_price"),))
    with pytest.raises(ConfigError, match="must be a required field"):
        replace(PRICE_ALERTS, id="category")
    with pytest.raises(ConfigError, match="two different topics"):
        replace(PRICE_ALERTS, events=ALERTS)
    with pytest.raises(ConfigError, match="at least one condition"):
        replace(PRICE_ALERTS, conditions=())
