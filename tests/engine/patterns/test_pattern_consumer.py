"""Patterns as consumers on real topics: the demo's abandoned carts and search refinements,
across microbatches, late events, a crash, and random splits against one batch computation."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from engine_helpers import CrashAfterCommit

from lakelog import consumers
from lakelog.consumers import checkpoints
from lakelog.consumers.watermarks import Watermark, to_us, watermark_of
from lakelog.demo.shop import CART_EVENTS, CLICKS, ORDERS, SEARCHES
from lakelog.demo.shop_patterns import ABANDONED_CARTS, SEARCH_REFINEMENTS
from lakelog.errors import DefinitionChangedError
from lakelog.lake import one_partition
from lakelog.log import ingest
from lakelog.patterns.consumer import late, output, pending
from lakelog.patterns.matcher import find

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc)
TOPICS = {t.name: t for t in (CART_EVENTS, ORDERS, SEARCHES, CLICKS)}


def line(event_id: str, minute: float, **fields) -> str:
    t = (T0 + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return json.dumps({"event_id": event_id, "user_id": "u-000001", "session_id": "s1",
                       "device_time": t, "sent_time": t, "received_time": t, **fields})


def add(event_id, minute, cart="c1", product="p-1"):
    return line(event_id, minute, cart_id=cart, action="add", product_id=product, quantity=1,
                unit_price=2.0)


def order(event_id, minute, cart="c1"):
    return line(event_id, minute, cart_id=cart, order_id=f"o-{event_id}", items=[], total=2.0)


def search(event_id, minute, session="s1", query="q"):
    return line(event_id, minute, session_id=session, query_id=event_id, query=query,
                results=["p-1"])


def click(event_id, minute, session="s1"):
    return line(event_id, minute, session_id=session, query_id="x", product_id="p-1", position=1)


def deliver(lake, spark, pattern, lines: dict, *, now, crash=False):
    for topic, records in lines.items():
        if records:
            ingest.produce(lake, spark, TOPICS[topic], records, source="test", now=now)
    if crash:
        crashing = CrashAfterCommit(spark, lake.root, output(pattern).path)
        crashing.armed = True
        with pytest.raises(RuntimeError, match="crash after committing"):
            consumers.run_until_caught_up(crashing, pattern.consumer, TOPICS, now=lambda: now)
    consumers.run_until_caught_up(lake, pattern.consumer, TOPICS, now=lambda: now)


def rows(lake, path):
    return lake.read(lake.snapshot(path)).collect()


def test_abandoned_carts_across_batches_with_a_late_order_and_a_crash(lake, spark, now):
    # Adds with no order within 30 minutes; lateness 10 minutes.
    p = replace(ABANDONED_CARTS, within=timedelta(minutes=30), watermark=Watermark(
        lateness=timedelta(minutes=10), idle_timeout=timedelta(minutes=5)))
    deliver(lake, spark, p, now=now, lines={"cart_events": [
        add("a1", 0), add("a2", 5, product="p-2"),  # c1: abandoned
        add("b1", 2, cart="c2"), line("b2", 3, cart_id="c2", action="remove", product_id="p-1",
                                      quantity=1, unit_price=2.0),
    ], "orders": [order("o2", 20, cart="c2")]})  # c2 ordered within its 30 minutes
    # Nothing decided: the watermark follows the slower topic, the carts (minute 5, less 10).
    assert rows(lake, output(p).path) == []
    state = checkpoints.load(lake, p.consumer.name).state
    assert watermark_of(state) == T0 - timedelta(minutes=5)
    assert len(rows(lake, pending(p).path)) == 5

    # Six minutes later the orders have been quiet for their idle timeout and hold nothing back:
    # minute 50 moves the watermark to 40, past c1's and c2's windows (to 30 and 32); c3's add
    # at 45 stays pending. The run dies after writing the matches; the retry writes nothing twice.
    deliver(lake, spark, p, now=now + timedelta(minutes=6), crash=True, lines={"cart_events": [
        add("c1", 45, cart="c3"), add("z1", 50, cart="c9")]})
    found = rows(lake, output(p).path)
    assert [(r["cart_id"], r["items_added"], r["first_product"], r["events"]) for r in found] == [
        ("c1", 2, "p-1", 2)]
    r = found[0]
    assert r["match_id"].startswith("cart_events:") and (r["user_id"], r["batch"]) == (
        "u-000001", 1)
    local = T0.astimezone().replace(tzinfo=None)  # how PySpark returns a timestamp
    assert (r["match_start"], r["last_added"]) == (local, local + timedelta(minutes=5))
    assert sorted(x["_id"].split(":")[0] for x in rows(lake, pending(p).path)) == [
        "cart_events", "cart_events"]

    # An order for c3 at minute 20 is late (watermark 40): it goes to the late table; c3's own
    # window (to 75) closes after an idle tick, with no order inside it: abandoned.
    deliver(lake, spark, p, now=now + timedelta(minutes=7),
            lines={"orders": [order("o3", 20, cart="c3")]})
    assert [(x["event_id"], x["topic"]) for x in rows(lake, late(p).path)] == [("o3", "orders")]
    consumers.run_until_caught_up(lake, p.consumer, TOPICS, now=lambda: now + timedelta(hours=2))
    assert sorted(r["cart_id"] for r in rows(lake, output(p).path)) == ["c1", "c3", "c9"]
    assert rows(lake, pending(p).path) == []
    # Every window is closed: no more idle ticks for this quiet stream.
    state = checkpoints.load(lake, p.consumer.name).state
    assert not p.consumer.idle_tick(state, now + timedelta(hours=3))
    assert p.watermark.idle(state, now + timedelta(hours=3))  # without the pattern's horizon


def _batch_matches(pattern, lines):
    """The pattern over every on-time event at once (the matcher with no watermark), per key:
    (key, the event ids of each match)."""
    compiled = pattern.compiled()
    by_key: dict = {}
    for topic_index, (topic, records) in enumerate(lines):
        for text in records:
            r = json.loads(text)
            t = to_us(datetime.fromisoformat(r["device_time"].replace("Z", "+00:00")))
            flags = [e.topic == topic for e in pattern.conditions]
            by_key.setdefault(r["session_id"], []).append((t, (topic_index,), flags, r["event_id"]))
    found = set()
    for key, events in by_key.items():
        events.sort(key=lambda e: (e[0], e[1]))
        for m in find([e[:3] for e in events], compiled, watermark_us=None).matches:
            found.add((key, tuple(events[i][3] for i, _ in m)))
    return found


@pytest.mark.parametrize("seed,spread", [(3, False), (4, True)])
def test_search_refinements_in_random_batches_equal_one_batch_computation(lake, spark, now,
                                                                           seed, spread,
                                                                           monkeypatch):
    """Searches and clicks of three sessions, delivered in random batches and orders: every
    match found incrementally is the batch computation's over the events that were not late,
    and nothing else; worked on in one partition, as lakelog works on few rows, or (`spread`)
    over partitions, as on many (`lakelog.lake.one_partition`)."""
    if spread:
        monkeypatch.setattr(one_partition, "FEW_RECORDS", -1)
    rng = random.Random(seed)
    p = replace(SEARCH_REFINEMENTS, watermark=Watermark(lateness=timedelta(minutes=10),
                                                        idle_timeout=timedelta(minutes=5)))
    events = []
    for n in range(30):
        kind = rng.choice(["searches", "searches", "clicks"])
        minute = round(rng.uniform(0, 30), 2)
        session = rng.choice(["s1", "s2", "s3"])
        make = search if kind == "searches" else click
        events.append((kind, make(f"e{n}", minute, session=session)))
    rng.shuffle(events)
    cuts = sorted(rng.sample(range(1, len(events)), 3))
    for part in (events[:cuts[0]], events[cuts[0]:cuts[1]], events[cuts[1]:cuts[2]],
                 events[cuts[2]:]):
        deliver(lake, spark, p, now=now, lines={
            "searches": [text for kind, text in part if kind == "searches"],
            "clicks": [text for kind, text in part if kind == "clicks"]})
    consumers.run_until_caught_up(lake, p.consumer, TOPICS, now=lambda: now + timedelta(days=1))

    late_ids = {r["event_id"] for r in rows(lake, late(p).path)}
    on_time = [(topic, [text for kind, text in events if kind == topic
                        and json.loads(text)["event_id"] not in late_ids])
               for topic in ("searches", "clicks")]
    expected = _batch_matches(p, on_time)
    assert expected and late_ids  # the data has refinements, and late events left out
    found = rows(lake, output(p).path)
    assert len({r["match_id"] for r in found}) == len(found)
    got = set()
    offsets = {}
    for topic in ("searches", "clicks"):
        for r in lake.read(lake.snapshot(f"log/{topic}")).collect():
            offsets[f"{topic}:{r['partition']}:{r['offset']}"] = r["event_id"]
    for r in found:
        assert r["events"] == 2 and r["match_end"] - r["match_start"] <= timedelta(minutes=2)
        got.add((r["session_id"], offsets[r["match_id"]]))
    assert got == {(key, ids[0]) for key, ids in expected}
    assert rows(lake, pending(p).path) == []


def test_the_python_workers_import_the_matcher_not_the_engine():
    """What Spark's Python workers import to run a pattern's matcher: pyarrow and the matcher,
    not pyspark's DataFrame layer, Delta or the engine (0.19 s against 0.67 s measured with
    the worker's own imports, each new worker)."""
    import subprocess
    import sys

    heavy = ["pyspark", "deltalake", "dagster", "lakelog.lake", "lakelog.consumers",
             "lakelog.patterns.pattern"]
    shown = subprocess.run(
        [sys.executable, "-c", "import sys, lakelog.patterns.worker; "
         f"print([m for m in {heavy!r} if m in sys.modules])"],
        capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "[]"


def test_a_key_split_across_arrow_batches_matches_as_one_run():
    """The worker's Arrow batches end anywhere, a key's events included: cut into every batch
    size, the events give what each key's events give alone (nulls are a key like any other)."""
    import pyarrow as pa

    from lakelog.patterns.worker import match_batches

    compiled = ABANDONED_CARTS.compiled()  # add, then no order within the window
    minute = 60_000_000
    keys = ["c1", "c1", "c1", None, None, "c2", "c3", "c3", "c3", "c3"]
    times = [0, 1, 90, 0, 100, 5, 0, 2, 3, 200]
    added = [True, True, True, True, True, True, True, False, True, True]
    table = pa.table({
        "_id": [f"e{n}" for n in range(len(keys))],
        "cart_id": pa.array(keys, pa.string()),
        "_t": [t * minute for t in times],
        "_f0": added,
        "_f1": [not a for a in added],
    })
    watermark = 150 * minute

    def found(batches):
        out = pa.Table.from_batches(list(match_batches(compiled, watermark, ("cart_id",),
                                                       batches)))
        return sorted(out.to_pylist(), key=lambda r: r["_id"])

    per_key = []
    for key in dict.fromkeys(keys):
        alone = table.filter(pa.compute.is_null(table["cart_id"]) if key is None
                             else pa.compute.equal(table["cart_id"], key))
        per_key += found(alone.to_batches())
    expected = sorted(per_key, key=lambda r: r["_id"])
    assert {r["_step"] for r in expected} >= {-1, 0}  # matches and pending events both
    for size in range(1, len(keys) + 1):
        assert found(table.to_batches(max_chunksize=size)) == expected, size


def test_a_pattern_declared_otherwise_is_refused(lake, spark, now):
    deliver(lake, spark, ABANDONED_CARTS, now=now, lines={"cart_events": [add("a1", 0)]})
    ingest.produce(lake, spark, CART_EVENTS, [add("a2", 1)], source="test", now=now)
    # The pending events were kept for a 30-minute bound: an hour would decide them otherwise.
    longer = replace(ABANDONED_CARTS, within=timedelta(hours=1))
    with pytest.raises(DefinitionChangedError, match=r"within '0:30:00' -> '1:00:00'.*--rebuild"):
        consumers.run_batch(lake, longer.consumer, TOPICS, now=now)
    assert checkpoints.load(lake, longer.consumer.name).plan is None
    later = replace(ABANDONED_CARTS, watermark=Watermark(lateness=timedelta(minutes=20)))
    assert consumers.run_batch(lake, later.consumer, TOPICS, now=now).records == 1
