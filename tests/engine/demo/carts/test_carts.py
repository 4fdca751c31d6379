"""The cart aggregate: validation, the fold, snapshots, replay, incremental batches, exactly-once
orders, and the demo workload's cart events end to end."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog import consumers
from lakelog.consumers import checkpoints
from lakelog.log import ingest
from lakelog.demo.carts import REASONS, CartAggregate, fold, verify
from lakelog.consumers import BatchInput, Consumer, Output
from lakelog.demo.carts.schemas import MONEY, STATE
from lakelog.demo.shop import CART_EVENTS
from lakelog.demo.workload import Workload
from lakelog.errors import ConcurrentWriteError, ConfigError
from lakelog.lake import AppTxn, EmbeddedLake, already_committed
from lakelog.lake.upsert import upsert
from lakelog.log.retention import enforce_retention
from lakelog.sourcing import Aggregate, consume_and_publish, publish_outbox, published_through

TOPICS = {CART_EVENTS.name: CART_EVENTS}
BASE = datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc)
CENT = Decimal("0.01")
PRICES = {"p0": 1.5, "p1": 10.0, "p2": 4.99, "p3": 0.25, "p4": 100.0}


def cmd(i, cart, action, product=None, quantity=None, price=None, *, user="u1"):
    """A cart_events record (the demo topic's fields) with event id `i`."""
    device = BASE + timedelta(seconds=i)
    stamp = device.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    return {
        "event_id": f"e{i}", "user_id": user, "session_id": f"s-{cart}", "cart_id": cart,
        "action": action, "product_id": product, "quantity": quantity, "unit_price": price,
        "device_time": stamp, "sent_time": stamp, "received_time": stamp,
    }


def money(value) -> Decimal:
    return Decimal(str(value)).quantize(CENT)


# A pure-Python model of the aggregate, written independently of the Spark fold.


def reference_reason(cart, r):
    if r["action"] not in ("add", "remove", "checkout"):
        return "unknown_action"
    if cart and cart["status"] == "checked_out":
        return "cart_checked_out"
    if cart and cart["user_id"] != r["user_id"]:
        return "foreign_cart"
    items = cart["items"] if cart else {}
    held = items.get(r["product_id"], (0, None))[0]
    if r["action"] in ("add", "remove"):
        if r["product_id"] is None:
            return "missing_product"
        if r["quantity"] is None or r["quantity"] < 1:
            return "invalid_quantity"
    if r["action"] == "add":
        if held + r["quantity"] > fold.MAX_LINE_QUANTITY:
            return "invalid_quantity"
        if r["unit_price"] is None or not 0 <= r["unit_price"] <= fold.MAX_UNIT_PRICE:
            return "invalid_price"
    if r["action"] == "remove":
        if held == 0:
            return "item_not_in_cart"
        if r["quantity"] > held:
            return "quantity_exceeds_cart"
    if r["action"] == "checkout" and not items:
        return "empty_cart"
    return None


def reference_apply(cart, r):
    cart = cart or {
        "user_id": r["user_id"], "status": "open", "items": {}, "version": 0,
        "partition": r["partition"], "opened_offset": r["offset"],
    }
    items = dict(cart["items"])
    product, quantity = r["product_id"], r["quantity"]
    if r["action"] == "add":
        items[product] = (items.get(product, (0, None))[0] + quantity, money(r["unit_price"]))
    elif r["action"] == "remove":
        left, price = items.pop(product)
        if left > quantity:
            items[product] = (left - quantity, price)
    status = "checked_out" if r["action"] == "checkout" else cart["status"]
    return {**cart, "items": items, "status": status, "version": cart["version"] + 1,
            "last_offset": r["offset"]}


def reference_fold(records, snapshot_every):
    """Sorted lists of states, snapshots, rejections and orders that `records` (dicts with
    partition and offset) make: lists, so that a duplicated output row would show."""
    carts, snapshots, rejections, orders = {}, [], [], []
    for r in sorted(records, key=lambda r: (r["partition"], r["offset"])):
        cart = carts.get(r["cart_id"])
        reason = reference_reason(cart, r)
        if reason:
            rejections.append((r["partition"], r["offset"], r["cart_id"], reason))
            continue
        cart = carts[r["cart_id"]] = reference_apply(cart, r)
        if cart["version"] % snapshot_every == 0:
            snapshots.append(summary(r["cart_id"], cart))
        if r["action"] == "checkout":
            order_id = f"o:{r['cart_id']}:{cart['version']}"
            orders.append((order_id, *summary(r["cart_id"], cart)[4:6], r["offset"]))
    states = [summary(cart_id, cart) for cart_id, cart in carts.items()]
    return sorted(states), sorted(snapshots), sorted(rejections), sorted(orders)


def summary(cart_id, cart):
    items = tuple(sorted((p, q, price) for p, (q, price) in cart["items"].items()))
    total = sum((q * price for _, q, price in items), Decimal("0.00"))
    return (cart_id, cart["user_id"], cart["status"], cart["version"], items, total,
            cart["partition"], cart["opened_offset"], cart["last_offset"])


def items_of(row):
    return tuple((i["product_id"], i["quantity"], i["unit_price"]) for i in row["items"])


def state_summary(row):
    return (row["cart_id"], row["user_id"], row["status"], row["version"], items_of(row),
            row["total"], row["partition"], row["opened_offset"], row["last_offset"])


def outputs(lake, aggregate):
    """The aggregate's tables in the shape of `reference_fold`."""
    def rows(output):
        return lake.read(lake.snapshot(output.path)).collect()

    return (
        sorted(state_summary(r) for r in rows(aggregate.state)),
        sorted(state_summary(r) for r in rows(aggregate.snapshots)),
        sorted((r["partition"], r["offset"], r["cart_id"], r["reason"])
               for r in rows(aggregate.rejections)),
        sorted((r["order_id"], items_of(r), r["total"], r["offset"])
               for r in rows(aggregate.outbox)),
    )


def log_records(lake):
    return [r.asDict() for r in lake.read(lake.snapshot(CART_EVENTS.path)).collect()]


# The fold on hand-built records: one cart per scenario, all folded in one Spark job.

SCENARIOS = {
    # cart: (commands as (action, product, quantity, price[, user]), rejected reasons in order)
    "lines": ([("add", "p0", 2, 1.5), ("add", "p1", 1, 10.0), ("add", "p0", 1, 1.6),
               ("remove", "p1", 1, None), ("add", "p2", 3, 4.99)], []),
    "item_not_in_cart": ([("add", "p0", 1, 1.5), ("remove", "p1", 1, None)],
                         ["item_not_in_cart"]),
    "quantity_exceeds_cart": ([("add", "p0", 2, 1.5), ("remove", "p0", 3, None)],
                              ["quantity_exceeds_cart"]),
    "empty_cart": ([("add", "p0", 1, 1.5), ("remove", "p0", 1, None), ("checkout",)],
                   ["empty_cart"]),
    "cart_checked_out": ([("add", "p0", 1, 1.5), ("checkout",), ("add", "p1", 1, 10.0),
                          ("remove", "p0", 1, None), ("checkout",)],
                         ["cart_checked_out"] * 3),
    "foreign_cart": ([("add", "p0", 1, 1.5), ("add", "p1", 1, 10.0, "u2")], ["foreign_cart"]),
    "missing_product": ([("add", "p0", 1, 1.5), ("add", None, 1, 2.0)], ["missing_product"]),
    "invalid_quantity": ([("add", "p0", 1, 1.5), ("add", "p1", 0, 10.0),
                          ("remove", "p0", -1, None), ("add", "p0", 10_000, 1.5),
                          ("add", "p0", 2**31 - 1, 1.5)], ["invalid_quantity"] * 4),
    "invalid_price": ([("add", "p0", 1, 1.5), ("add", "p1", 1, -1.0), ("add", "p1", 1, None),
                       ("add", "p1", 1, 1e20)], ["invalid_price"] * 3),
    "unknown_action": ([("add", "p0", 1, 1.5), ("clear",)], ["unknown_action"]),
    "never_opened": ([("checkout",), ("remove", "p0", 1, None)],
                     ["empty_cart", "item_not_in_cart"]),
}
SNAPSHOT_EVERY = 2


def scenario_rows():
    rows = []
    for cart, (commands, _) in SCENARIOS.items():
        for command in commands:
            action, product, quantity, price, user = (*command, None, None, None, None)[:5]
            offset = len(rows)
            rows.append({**cmd(offset, cart, action, product, quantity, price, user=user or "u1"),
                         "partition": 0, "offset": offset,
                         "event_time": BASE + timedelta(seconds=offset)})
    return rows


@pytest.fixture(scope="module")
def folded(spark):
    records = scenario_rows()
    # Rows in reverse: the fold must order each cart's commands by offset itself.
    df = spark.createDataFrame(
        list(reversed(records)),
        "partition int, offset long, event_id string, event_time timestamp, user_id string, "
        "session_id string, cart_id string, action string, product_id string, quantity int, "
        "unit_price double",
    )
    result = fold.fold(fold.commands(df), spark.createDataFrame([], STATE),
                       topic="cart_events", snapshot_every=SNAPSHOT_EVERY)
    return {
        "records": records,
        "states": {r["cart_id"]: r for r in fold.states(result).collect()},
        "snapshots": fold.snapshots(result).collect(),
        "rejections": fold.rejections(result).collect(),
        "orders": fold.orders(result).collect(),
    }


def test_every_rejection_reason_has_a_scenario_and_bad_declarations_are_refused():
    assert {r for _, reasons in SCENARIOS.values() for r in reasons} == set(REASONS)
    assert isinstance(CartAggregate(), Aggregate)  # the engine's interface, nothing more
    with pytest.raises(ConfigError, match="lowercase"):
        CartAggregate("Carts")
    with pytest.raises(ConfigError, match="snapshot_every"):
        CartAggregate(snapshot_every=0)


def test_fold_adds_removes_and_prices_lines(folded):
    state = folded["states"]["lines"]
    items = [(i["product_id"], i["quantity"], i["unit_price"]) for i in state["items"]]
    # p0's second add re-prices the line; removing p1's only unit removes the line.
    assert items == [("p0", 3, Decimal("1.60")), ("p2", 3, Decimal("4.99"))]
    assert state["total"] == Decimal("19.77")
    assert (state["status"], state["version"], state["user_id"]) == ("open", 5, "u1")
    offsets = [r["offset"] for r in folded["records"] if r["cart_id"] == "lines"]
    assert (state["opened_offset"], state["last_offset"]) == (offsets[0], offsets[-1])


@pytest.mark.parametrize("cart", [c for c, (_, reasons) in SCENARIOS.items() if reasons])
def test_rejected_commands_are_recorded_and_change_nothing(folded, cart):
    commands, reasons = SCENARIOS[cart]
    records = [r for r in folded["records"] if r["cart_id"] == cart]
    rejected = sorted((r for r in folded["rejections"] if r["cart_id"] == cart),
                      key=lambda r: r["offset"])
    assert [r["reason"] for r in rejected] == reasons
    assert all(r["detail"] and r["topic"] == "cart_events" for r in rejected)
    # Rejected commands are the trailing ones; the state is what the accepted prefix made.
    accepted = records[: len(records) - len(reasons)]
    assert {r["offset"] for r in rejected} == {r["offset"] for r in records[len(accepted):]}
    expected, _, _, _ = reference_fold(accepted, SNAPSHOT_EVERY)
    if accepted:
        assert [state_summary(folded["states"][cart])] == expected
    else:
        assert cart not in folded["states"]


def test_checkout_emits_one_order_with_an_id_from_cart_and_version(folded):
    (order,) = folded["orders"]
    assert order["order_id"] == "o:cart_checked_out:2" and order["cart_id"] == "cart_checked_out"
    assert [(i["product_id"], i["quantity"]) for i in order["items"]] == [("p0", 1)]
    assert order["total"] == Decimal("1.50")
    assert folded["states"]["cart_checked_out"]["status"] == "checked_out"


def test_snapshots_every_n_accepted_events(folded):
    taken = sorted((s["cart_id"], s["version"], s["last_offset"]) for s in folded["snapshots"])
    _, expected, _, _ = reference_fold(folded["records"], SNAPSHOT_EVERY)
    assert taken == sorted((s[0], s[3], s[8]) for s in expected)
    # "lines" has 5 accepted events: snapshots at versions 2 and 4, none at 5.
    assert [v for c, v, _ in taken if c == "lines"] == [2, 4]


# Through the log and the consumer.


def random_commands(seed, n):
    """A command stream with invalid commands mixed in; each cart has one user."""
    r = random.Random(seed)
    carts = [(f"c{i}", f"u{i}") for i in range(6)]
    lines = []
    for i in range(n):
        cart, user = r.choice(carts)
        product = r.choice(list(PRICES))
        x = r.random()
        if x < 0.55:
            lines.append(cmd(i, cart, "add", product, r.randint(1, 3), PRICES[product], user=user))
        elif x < 0.72:
            lines.append(cmd(i, cart, "remove", product, r.randint(1, 2), user=user))
        elif x < 0.8:
            lines.append(cmd(i, cart, "checkout", user=user))
        elif x < 0.87:
            lines.append(cmd(i, cart, "add", product, 0, PRICES[product], user=user))
        else:
            lines.append(cmd(i, cart, "clear", user=user))
    return [json.dumps(line) for line in lines]


def produce(lake, spark, now, lines):
    ingest.produce(lake, spark, CART_EVENTS, lines, source="test", now=now)


def test_incremental_batches_equal_one_batch_and_the_reference(lake, spark, now):
    produce(lake, spark, now, random_commands(seed=5, n=30))
    expected = reference_fold(log_records(lake), snapshot_every=3)
    results = {}
    for size in (100, 15, 10):
        aggregate = CartAggregate(f"b{size}", snapshot_every=3, max_records_per_batch=size,
                                  rows_per_file=2)
        batches = consumers.run_until_caught_up(lake, aggregate.consumer, TOPICS,
                                                now=lambda: now)
        assert len(batches) == -(-30 // size)
        results[size] = outputs(lake, aggregate)
    assert results[15] == results[100] and results[10] == results[100]
    assert results[100] == expected
    # The stream exercises what it should: most reasons, snapshots, orders.
    _, snapshots, rejections, orders = expected
    assert len({r[3] for r in rejections}) >= 5 and len(snapshots) >= 3 and len(orders) >= 2


def test_replay_from_snapshots_and_from_offset_zero_equal_the_live_state(lake, spark, now):
    aggregate = CartAggregate("r", snapshot_every=2, max_records_per_batch=18)
    produce(lake, spark, now, random_commands(seed=5, n=30))
    consumers.run_until_caught_up(lake, aggregate.consumer, TOPICS, now=lambda: now)
    check = verify(lake, aggregate, CART_EVENTS)
    assert check.passed and check.batch == 1 and sum(check.offsets.values()) == 30
    assert check.states == 6 and check.from_snapshots >= 4
    assert check.mismatches == {"full_replay": 0, "snapshot_replay": 0}

    # Corrupt one cart's live state and another cart's latest snapshot: both are caught.
    live = lake.read(lake.snapshot(aggregate.state.path))
    victim = live.orderBy("cart_id").first()["cart_id"]
    changed = live.where(F.col("cart_id") == victim).withColumn("version", F.col("version") + 1)
    upsert(lake, lake.snapshot(aggregate.state.path), changed, keys=("cart_id",))
    snaps = lake.read(lake.snapshot(aggregate.snapshots.path))
    other = snaps.where(F.col("cart_id") != victim).orderBy("cart_id", F.desc("version")).first()
    forged = snaps.where(
        (F.col("cart_id") == other["cart_id"]) & (F.col("version") == other["version"])
    ).withColumn("version", F.col("version") + 100)
    lake.write(lake.snapshot(aggregate.snapshots.path), forged)
    check = verify(lake, aggregate, CART_EVENTS)
    assert check.mismatches == {"full_replay": 1, "snapshot_replay": 2}
    found = {(d.rebuild, d.key) for d in check.differences}
    assert found == {("full_replay", victim), ("snapshot_replay", victim),
                     ("snapshot_replay", other["cart_id"])}


def test_after_retention_the_snapshot_replay_still_verifies_old_carts(lake, spark, now):
    aggregate = CartAggregate("t", snapshot_every=2)
    stream = random_commands(seed=5, n=30)
    produce(lake, spark, now - timedelta(days=8), stream[:18])  # older than the 7-day retention
    produce(lake, spark, now, stream[18:])
    consumers.run_until_caught_up(lake, aggregate.consumer, TOPICS, now=lambda: now)
    starts = enforce_retention(lake, CART_EVENTS, [aggregate.consumer], now=now,
                               vacuum_after=None).start_offsets
    assert any(starts.values())

    live = lake.read(lake.snapshot(aggregate.state.path)).collect()
    snaps = lake.read(lake.snapshot(aggregate.snapshots.path)).collect()
    latest = {}
    for snap in snaps:
        latest[snap["cart_id"]] = max(latest.get(snap["cart_id"], -1), snap["last_offset"])
    full_lost = {c["cart_id"] for c in live if c["opened_offset"] < starts[c["partition"]]}
    snap_lost = {c["cart_id"] for c in live
                 if latest.get(c["cart_id"], c["opened_offset"] - 1) + 1 < starts[c["partition"]]}
    check = verify(lake, aggregate, CART_EVENTS)
    assert check.passed
    assert check.unverifiable == {"full_replay": len(full_lost), "snapshot_replay": len(snap_lost)}
    # A cart whose first commands are gone is still checked from its latest snapshot.
    (victim, *_) = sorted(full_lost - snap_lost)
    changed = lake.read(lake.snapshot(aggregate.state.path)).where(F.col("cart_id") == victim)
    upsert(lake, lake.snapshot(aggregate.state.path),
           changed.withColumn("version", F.col("version") + 1), keys=("cart_id",))
    check = verify(lake, aggregate, CART_EVENTS)
    assert check.mismatches == {"full_replay": 0, "snapshot_replay": 1}
    assert [(d.rebuild, d.key) for d in check.differences] == [("snapshot_replay", victim)]


class CrashingLake(EmbeddedLake):
    """Fails once, before or after a commit to table `path` whose metadata satisfies `when`."""

    def __init__(self, spark, root, path, *, before=False, when=lambda metadata: True):
        super().__init__(spark, root)
        self.path, self.before, self.when, self.fired = path, before, when, False

    def _fire(self, snapshot, metadata):
        if snapshot.path == self.path and not self.fired and self.when(metadata or {}):
            self.fired = True
            raise RuntimeError(f"crash at {self.path}")

    def _commit(self, snapshot, adds, removed, txns, metadata):
        if self.before:
            self._fire(snapshot, metadata)
        version = super()._commit(snapshot, adds, removed, txns, metadata)
        if not self.before:
            self._fire(snapshot, metadata)
        return version


def commits_offsets_of(batch):
    def when(metadata):
        step = metadata.get("lakelog.checkpoint", {})
        return step.get("batch") == batch and step.get("planned", batch) is None

    return when


def test_crashes_after_emitting_orders_duplicate_nothing(spark, lake, now):
    aggregate = CartAggregate("x", snapshot_every=2, max_records_per_batch=15)
    produce(lake, spark, now, random_commands(seed=5, n=30))
    # Batch 0 crashes after committing its orders, before its state.
    with pytest.raises(RuntimeError, match="crash at"):
        consume_and_publish(CrashingLake(spark, lake.root, aggregate.outbox.path), aggregate,
                            TOPICS, now=lambda: now)
    batch0 = AppTxn(aggregate.consumer.app_id, 0)
    assert already_committed(lake.snapshot(aggregate.outbox.path), batch0)
    assert not already_committed(lake.snapshot(aggregate.state.path), batch0)
    # Its retry finishes it; batch 1 then crashes after all its outputs, before its offsets.
    offsets = checkpoints.checkpoint_path(aggregate.consumer.name)
    crashing = CrashingLake(spark, lake.root, offsets, before=True, when=commits_offsets_of(1))
    with pytest.raises(RuntimeError, match="crash at"):
        consume_and_publish(crashing, aggregate, TOPICS, now=lambda: now)
    assert checkpoints.load(lake, aggregate.consumer.name).plan.batch == 1
    assert published_through(lake, aggregate) == -1  # neither run got to publish
    results, published = consume_and_publish(lake, aggregate, TOPICS, now=lambda: now)
    assert [r.batch for r in results] == [1] and results[0].resumed
    assert results[0].outputs_written == ()  # all committed before the crash: nothing twice
    expected = reference_fold(log_records(lake), snapshot_every=2)
    assert outputs(lake, aggregate) == expected
    assert published.events == len(expected[3]) >= 2 and published.batches == (0, 1)

    # The relay crashes right after its commit: a rerun publishes nothing more.
    produce(lake, spark, now, [json.dumps(cmd(900, "z", "add", "p0", 1, 1.5, user="u9")),
                               json.dumps(cmd(901, "z", "checkout", user="u9"))])
    consumers.run_until_caught_up(lake, aggregate.consumer, TOPICS, now=lambda: now)
    topic = aggregate.outbox_topic
    with pytest.raises(RuntimeError, match="crash at"):
        publish_outbox(CrashingLake(spark, lake.root, topic.path), aggregate, now=now)
    assert publish_outbox(lake, aggregate, now=now).events == 0
    published = lake.read(lake.snapshot(topic.path))
    assert sorted(r["order_id"] for r in published.collect()) == sorted(
        [o[0] for o in expected[3]] + ["o:z:2"]
    )
    assert published_through(lake, aggregate) == 2
    # A run that finds its batch's state already committed by another run refuses to fold.
    stale = BatchInput(lake, 2, {}, {aggregate.state.path: lake.snapshot(aggregate.state.path)})
    with pytest.raises(ConcurrentWriteError, match="another run committed batch 2"):
        aggregate.transform(stale)


def shop_orders(workload):
    """The orders the workload's shop server created: cart id -> total."""
    orders = {}
    for line in workload.batch_records(0)["orders"]:
        try:
            order = json.loads(line)
        except json.JSONDecodeError:
            continue  # the workload's deliberately corrupted lines
        if "cart_id" in order and isinstance(order.get("total"), (int, float)):
            orders[order["cart_id"]] = money(order["total"])
    return orders


def test_demo_workload_cart_events_end_to_end(lake, spark, now):
    workload = Workload(3000, batches=1, users=60)
    workload.write_batch(0, lake.root)
    ingest.ingest(lake, spark, CART_EVENTS, now=now)
    aggregate = CartAggregate(snapshot_every=3)
    _, published = consume_and_publish(lake, aggregate, TOPICS, now=lambda: now)
    records = log_records(lake)
    expected = reference_fold(records, snapshot_every=3)
    assert outputs(lake, aggregate) == expected
    _, _, rejections, orders = expected

    # Every accepted checkout has exactly one order, published once.
    checkouts = {(r["partition"], r["offset"]) for r in records if r["action"] == "checkout"}
    accepted = checkouts - {(p, o) for p, o, _, _ in rejections}
    assert len(orders) == len(accepted) == published.events > 0
    # They are the orders the shop's server created when it took those checkouts.
    assert {o[0].split(":")[1]: o[2] for o in orders} == shop_orders(workload)
    # The workload's deliberately invalid commands are among the rejections.
    assert len(rejections) >= workload.summary(0).invalid_commands > 0
    assert verify(lake, aggregate, CART_EVENTS).passed

    # A downstream consumer reads the orders topic like any other.
    topic = aggregate.outbox_topic
    copy = Output("streams/order_copy", T.StructType(
        [T.StructField("order_id", T.StringType()), T.StructField("total", MONEY)]
    ))

    def copy_orders(batch):
        return {copy.path: batch.records[topic.name].select("order_id", "total")}

    downstream = Consumer("order_copy", (topic.name,), (copy,), copy_orders)
    (result,) = consumers.run_until_caught_up(lake, downstream, {topic.name: topic},
                                              now=lambda: now)
    copied = lake.read(lake.snapshot(copy.path)).collect()
    assert result.records == len(orders)
    assert sorted((r["order_id"], r["total"]) for r in copied) == [(o[0], o[2]) for o in orders]
