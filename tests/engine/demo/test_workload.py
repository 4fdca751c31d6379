"""The demo workload: deterministic, true to the schemas, consistent, and imperfect as promised."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from datetime import datetime, timedelta, timezone

import pytest
from pyspark.sql import types as T

from lakelog.demo import shop
from lakelog.demo.workload import CHUNK_MS, MAX_LAG_MS, TOPICS, Workload
from lakelog.errors import ConfigError

WORKLOAD = Workload(20_000, batches=4)
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def ms(delta: timedelta) -> float:
    return delta / timedelta(milliseconds=1)


def schema_error(value, data_type: T.DataType) -> str | None:
    """Why `value` (parsed JSON) is not a valid `data_type`, or None."""
    if isinstance(data_type, T.StringType):
        ok = isinstance(value, str)
    elif isinstance(data_type, T.IntegerType):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(data_type, T.DoubleType):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif isinstance(data_type, T.TimestampType):
        ok = isinstance(value, str) and bool(ISO.match(value))
    elif isinstance(data_type, T.ArrayType):
        if not isinstance(value, list):
            return f"not an array: {value!r}"
        return next(filter(None, (schema_error(v, data_type.elementType) for v in value)), None)
    elif isinstance(data_type, T.StructType):
        return record_error(value, data_type)
    else:
        raise AssertionError(f"unexpected type {data_type}")
    return None if ok else f"not a {data_type.simpleString()}: {value!r}"


def record_error(record, schema: T.StructType) -> str | None:
    if not isinstance(record, dict):
        return "not an object"
    if missing := set(schema.fieldNames()) - set(record):
        return f"missing {sorted(missing)}"
    if extra := set(record) - set(schema.fieldNames()):
        return f"unknown {sorted(extra)}"
    for field in schema.fields:
        value = record[field.name]
        if value is None:
            if not field.nullable:
                return f"{field.name} is null"
            continue
        if error := schema_error(value, field.dataType):
            return f"{field.name}: {error}"
    return None


def line_error(line: str, topic: str) -> str | None:
    """Why `line` is not a valid record of `topic` (shop.py's schema), or None."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return "malformed JSON"
    return record_error(record, shop.TOPICS[topic].schema)


@pytest.fixture(scope="module")
def batches() -> list[dict[str, list[str]]]:
    return [WORKLOAD.batch_records(k) for k in range(WORKLOAD.batches)]


@pytest.fixture(scope="module")
def deliveries(batches) -> dict[str, list[tuple[int, dict]]]:
    """Every valid line per topic as ``(batch, record)``, in delivery order."""
    out: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    for k, batch in enumerate(batches):
        for topic, lines in batch.items():
            out[topic] += [(k, json.loads(ln)) for ln in lines if line_error(ln, topic) is None]
    return out


@pytest.fixture(scope="module")
def events(deliveries) -> dict[str, dict[str, dict]]:
    """The first delivery of each event per topic, by event id."""
    out: dict[str, dict[str, dict]] = {}
    for topic, items in deliveries.items():
        out[topic] = {}
        for _, record in items:
            out[topic].setdefault(record["event_id"], record)
    return out


def test_topics_are_the_shop_topics():
    assert TOPICS == tuple(shop.TOPICS)


def test_same_workload_same_lines_in_any_order():
    alone = Workload(5_000, batches=3).batch_records(2)
    again = Workload(5_000, batches=3)
    again.batch_records(0)
    again.batch_records(1)
    assert again.batch_records(2) == alone
    assert sum(map(len, alone.values())) > 1_000
    assert Workload(5_000, batches=3, seed=8).batch_records(2) != alone


def test_lines_do_not_depend_on_the_process():
    code = (
        "import hashlib; from lakelog.demo.workload import Workload; "
        "b = Workload(5_000, batches=3).batch_records(1); "
        "print(hashlib.sha256(repr(sorted(b.items())).encode()).hexdigest())"
    )
    mine = Workload(5_000, batches=3).batch_records(1)
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
        assert run.stdout.strip() == hashlib.sha256(repr(sorted(mine.items())).encode()).hexdigest()


def test_the_number_of_batches_only_slices_the_same_events():
    def valid_lines(workload: Workload) -> Counter:
        return Counter(
            line
            for k in range(workload.batches)
            for topic, lines in workload.batch_records(k).items()
            for line in lines
            if line_error(line, topic) is None
        )

    # 10 simulated minutes in 7 slices: late records cross several batch boundaries.
    one, seven = Workload(10_000, batches=1), Workload(10_000, batches=7)
    assert valid_lines(one) == valid_lines(seven)


def test_valid_lines_have_exactly_the_topic_schema(deliveries):
    for topic in TOPICS:
        assert len(deliveries[topic]) > 100, topic
        for _, record in deliveries[topic][:2_000]:
            assert list(record) == shop.TOPICS[topic].schema.fieldNames()
            for name in ("device_time", "sent_time", "received_time"):
                when(record[name])


def test_malformed_lines_are_counted_and_of_every_kind(batches):
    reasons = Counter()
    for k, batch in enumerate(batches):
        summary = WORKLOAD.summary(k)
        for topic, lines in batch.items():
            bad = [err for ln in lines if (err := line_error(ln, topic))]
            assert len(bad) == summary.topics[topic].malformed, (k, topic)
            if len(lines) >= 1_000:
                assert bad, (k, topic)
            reasons.update(
                "json" if e == "malformed JSON" else "user" if "user_id" in e else "type"
                for e in bad
            )
    assert set(reasons) == {"json", "user", "type"}


def test_summary_counts_match_the_lines(batches, events):
    invalid = replay_carts(events)[1]
    seen: set[tuple[str, str]] = set()
    for k, batch in enumerate(batches):
        summary = WORKLOAD.summary(k)
        # made with the lines (the batch fixture) or alone, by a workload that made none
        assert summary == Workload(WORKLOAD.events, batches=WORKLOAD.batches).summary(k)
        assert summary.batch == k
        assert summary.lines == sum(map(len, batch.values()))
        first_invalid = 0
        for topic, lines in batch.items():
            counts = summary.topics[topic]
            duplicates = new = 0
            for line in lines:
                if line_error(line, topic) is None:
                    key = (topic, json.loads(line)["event_id"])
                    duplicates += key in seen
                    new += key not in seen
                    first_invalid += key[1] in invalid and key not in seen
                    seen.add(key)
            assert (counts.lines, counts.duplicates, counts.events) == (len(lines), duplicates, new)
            assert counts.lines == counts.malformed + counts.duplicates + counts.events
        assert summary.invalid_commands == first_invalid
    assert len(seen) == WORKLOAD.events


def test_duplicates_are_later_deliveries_of_the_same_event(deliveries, events):
    copies = 0
    for topic, items in deliveries.items():
        for _, record in items:
            first = events[topic][record["event_id"]]
            if record is first:
                continue
            copies += 1
            resent = ("sent_time", "received_time")
            same = {k: v for k, v in record.items() if k not in resent}
            assert same == {k: v for k, v in first.items() if k not in resent}
            assert when(record["sent_time"]) > when(first["sent_time"])
            assert when(record["received_time"]) > when(first["received_time"])
    assert 0.005 < copies / WORKLOAD.events < 0.02


def replay_carts(events) -> tuple[dict[str, dict[str, tuple[int, float]]], set[str]]:
    """Each cart's contents at its checkout, and the event ids of the commands it rejects."""
    carts: dict[str, dict[str, list]] = defaultdict(dict)
    checked_out: dict[str, dict[str, tuple[int, float]]] = {}
    invalid: set[str] = set()
    commands = sorted(events["cart_events"].values(), key=lambda e: when(e["device_time"]))
    for e in commands:
        cart, product = carts[e["cart_id"]], e["product_id"]
        assert e["cart_id"] not in checked_out, "a command after the checkout"
        if e["action"] == "add":
            cart.setdefault(product, [0, e["unit_price"]])[0] += e["quantity"]
        elif e["action"] == "remove":
            if product not in cart or cart[product][0] < e["quantity"]:
                invalid.add(e["event_id"])
                continue
            cart[product][0] -= e["quantity"]
            if not cart[product][0]:
                del cart[product]
        else:
            assert e["action"] == "checkout"
            assert (product, e["quantity"], e["unit_price"]) == (None, None, None)
            if not cart:
                invalid.add(e["event_id"])
                continue
            checked_out[e["cart_id"]] = {p: (q, price) for p, (q, price) in cart.items()}
    return checked_out, invalid


def test_orders_hold_the_cart_at_checkout(events):
    checked_out, invalid = replay_carts(events)
    orders = events["orders"]
    assert len(orders) == len(checked_out) > 20
    for order in orders.values():
        items = {i["product_id"]: (i["quantity"], i["unit_price"]) for i in order["items"]}
        assert items == checked_out[order["cart_id"]]
        total = sum(q * price for q, price in items.values())
        assert abs(order["total"] - total) < 0.005
        assert order["total"] == round(order["total"], 2)
    rate = len(invalid) / len(events["cart_events"])
    assert 0 < rate < 0.015


def test_a_product_has_one_price(events):
    prices = defaultdict(set)
    for e in events["cart_events"].values():
        if e["product_id"] is not None:
            prices[e["product_id"]].add(e["unit_price"])
    for order in events["orders"].values():
        for item in order["items"]:
            prices[item["product_id"]].add(item["unit_price"])
    assert len(prices) > 100
    assert all(len(p) == 1 and round(min(p), 2) == min(p) for p in prices.values())


def test_clicks_follow_their_search(events):
    searches = {s["query_id"]: s for s in events["searches"].values()}
    assert len(searches) == len(events["searches"])
    assert any(not s["results"] for s in searches.values())
    assert len(events["clicks"]) > 100
    for click in events["clicks"].values():
        search = searches[click["query_id"]]
        assert (search["session_id"], search["user_id"]) == (click["session_id"], click["user_id"])
        assert search["results"][click["position"] - 1] == click["product_id"]
        assert when(click["device_time"]) > when(search["device_time"])


def test_page_views_name_a_product_only_on_product_pages(events):
    pages = Counter()
    for view in events["page_views"].values():
        pages[view["page"]] += 1
        assert (view["product_id"] is not None) == (view["page"] == "product")
    assert set(pages) == {"home", "product", "search", "cart"}


def test_clocks_skew_and_sends_are_late(events):
    offsets = defaultdict(list)  # per user: received - sent = latency - clock skew
    waits = []  # sent - device_time on the device clock, first deliveries
    for topic in ("page_views", "searches", "clicks", "cart_events"):
        for e in events[topic].values():
            sent, received = when(e["sent_time"]), when(e["received_time"])
            offsets[e["user_id"]].append(ms(received - sent))
            waits.append(ms(sent - when(e["device_time"])))
            corrected = when(e["device_time"]) + (received - sent)
            assert WORKLOAD.start <= corrected <= WORKLOAD.start + WORKLOAD.span + timedelta(
                minutes=32
            )
    for values in offsets.values():
        assert max(values) - min(values) <= 481
        assert -10 * 60_000 <= min(values) and max(values) <= 10 * 60_000 + 500
    skewed = sum(abs(min(v)) > 1_000 for v in offsets.values()) / len(offsets)
    assert 0.01 < skewed < 0.12
    assert min(waits) >= 0 and max(waits) <= (60 * 60 + 30) * 1_000
    assert 0.95 < sum(w <= 30_000 for w in waits) / len(waits)
    assert 0.003 < sum(w > 120_000 for w in waits) / len(waits) < 0.03
    for order in events["orders"].values():
        assert order["device_time"] == order["sent_time"]
        assert 1 <= ms(when(order["received_time"]) - when(order["sent_time"])) <= 5


def test_records_arrive_within_the_lag_a_batch_looks_back(deliveries):
    """A batch regenerates the sessions begun in the last `MAX_LAG_MS`: none may arrive later."""
    begun, arrived = {}, {}
    for items in deliveries.values():
        for _, e in items:
            received = when(e["received_time"])
            corrected = when(e["device_time"]) + (received - when(e["sent_time"]))
            session = e["session_id"]
            begun[session] = min(begun.get(session, corrected), corrected)
            arrived[session] = max(arrived.get(session, received), received)
    lags = [ms(arrived[s] - begun[s]) for s in begun]
    assert 30 * 60_000 < max(lags) < MAX_LAG_MS - CHUNK_MS


def test_files_are_in_receive_order_and_device_time_is_not(batches):
    previous_end = None
    for batch in batches:
        received = []
        for topic, lines in batch.items():
            records = [json.loads(ln) for ln in lines if line_error(ln, topic) is None]
            times = [when(r["received_time"]) for r in records]
            assert times == sorted(times), topic
            received += times
            if topic == "page_views":
                device = [when(r["device_time"]) for r in records]
                inversions = sum(a > b for a, b in zip(device, device[1:]))
                assert inversions > len(device) // 10
        if previous_end is not None:
            assert min(received) >= previous_end
        previous_end = max(received)


def test_write_batch_writes_atomically_and_skips_complete_files(tmp_path):
    workload = Workload(5_000, batches=2)
    lines = workload.batch_records(0)
    written = workload.write_batch(0, str(tmp_path), lines_per_file=500)
    expected = [
        f"landing/{topic}/batch-0000/part-{n:04d}.ndjson"
        for topic in TOPICS
        for n in range(-(-len(lines[topic]) // 500))
    ]
    assert written == expected
    assert len([p for p in written if "page_views" in p]) > 1
    for topic in TOPICS:
        folder = tmp_path / "landing" / topic / "batch-0000"
        names = sorted(p.rsplit("/", 1)[1] for p in written if f"/{topic}/" in p)
        assert sorted(os.listdir(folder)) == names
        text = "".join(f.read_text() for f in sorted(folder.iterdir()))
        assert text == "".join(ln + "\n" for ln in lines[topic])

    kept = tmp_path / written[0]
    kept.write_text("kept\n")
    assert workload.write_batch(0, str(tmp_path), lines_per_file=500) == []
    assert kept.read_text() == "kept\n"

    missing = tmp_path / written[1]
    missing.unlink()
    stale = missing.with_name(f".{missing.name}.tmp")
    stale.write_text('{"half a line')
    assert workload.write_batch(0, tmp_path, lines_per_file=500) == [written[1]]
    assert missing.read_text() == "".join(ln + "\n" for ln in lines["page_views"][500:1_000])
    assert not stale.exists()
    assert kept.read_text() == "kept\n"


@pytest.mark.parametrize(
    "make",
    [
        lambda: Workload(0),
        lambda: Workload(100, batches=0),
        lambda: Workload(100, users=0),
        lambda: Workload(100, start=datetime(2026, 1, 5)),
        lambda: Workload(100, batches=2).batch_records(2),
        lambda: Workload(100, batches=2).summary(-1),
    ],
)
def test_bad_options_are_config_errors(make):
    with pytest.raises(ConfigError):
        make()


def test_start_and_span(events):
    start = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)
    assert WORKLOAD.start == start and WORKLOAD.span == timedelta(minutes=20)
    first = min(when(e["received_time"]) for e in events["page_views"].values())
    assert start <= first < start + timedelta(minutes=1)
