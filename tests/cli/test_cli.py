"""The `lakelog` command line end to end, in subprocesses, on real Delta tables."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import dagster as dg
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from processes import subprocess_env

from lakelog.assets.location import build_location
from lakelog.cli.main import main
from lakelog.demo import shop, shop_cdc
from lakelog.demo.pipeline import pipeline as shop_pipeline

pytestmark = pytest.mark.slow

LAKELOG = [sys.executable, "-m", "lakelog.cli"]
# 30,000 events are 30 simulated minutes of sessions: enough for the abandoned-cart pattern (30
# minutes after a cart's first add, its watermark following the slower of carts and orders) to
# decide carts.
DEMO = ["demo", "--events", "30000", "--batches", "2", "--seed", "11"]


def env() -> dict[str, str]:
    """The test's environment, without a $DAGSTER_HOME: runs are recorded in <home>/dagster."""
    return {k: v for k, v in subprocess_env().items() if k != "DAGSTER_HOME"}


def lakelog(*args, home, check=True, timeout=1200):
    proc = subprocess.run(
        [*LAKELOG, *args, "--home", str(home)], capture_output=True, text=True, env=env(),
        timeout=timeout,
    )
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def table(home, path, drop=("ingest_time",)):
    """A Delta table's rows, read by delta-rs (not Spark), in a canonical order."""
    data = DeltaTable(str(Path(home) / path)).to_pyarrow_table()
    data = data.drop_columns([c for c in drop if c in data.column_names])
    keys = [(c, "ascending") for c in data.column_names if c not in ("headers", "results", "items")]
    return data.sort_by(keys).to_pylist()


def current(rows, key):
    """A merge-on-read table's rows as a reader outside lakelog must take them: per key, the
    version with the greatest `_position` (of a copy-on-write table: all rows)."""
    newest = {}
    for r in rows:
        k = tuple(r[c] for c in key)
        if k not in newest or r["_position"] > newest[k]["_position"]:
            newest[k] = r
    return list(newest.values())


@pytest.fixture(scope="module")
def demo_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("demo")
    proc = lakelog(*DEMO, "--json", home=home)
    return home, json.loads(proc.stdout)


def test_demo_then_lag_and_topics(demo_home):
    home, summary = demo_home
    assert summary["appended"] == 30000  # the workload has exactly 30,000 distinct events
    assert summary["read"] == summary["appended"] + summary["duplicates"] + summary["dead_letters"]
    assert summary["duplicates"] > 0 and summary["dead_letters"] > 0

    lag = json.loads(lakelog("lag", "--json", home=home).stdout)
    assert lag and all(row["lag"] == 0 for row in lag)
    assert {row["topic"] for row in lag} == {*shop.TOPICS, *shop_cdc.CHANGELOGS, "price_alerts"}
    # the orders enrichment is a consumer group: each of its partitions says which live member
    # owns it (none: the demo ran it as one process, and no member is live now)
    enriched = [row for row in lag if row["consumer"] == "join.orders_enriched"]
    assert len(enriched) == shop.TOPICS["orders"].partitions
    assert all(row["member"] is None for row in enriched)

    topics = json.loads(lakelog("topics", "--json", home=home).stdout)
    assert {t["topic"] for t in topics} == {*shop.TOPICS, "cart_orders", *shop_cdc.CHANGELOGS,
                                            "changes.tables.customers", "price_alerts"}
    for entry in [t for t in topics if t["topic"] in shop.TOPICS]:
        data = DeltaTable(str(home / "log" / entry["topic"])).to_pyarrow_table()
        assert entry["records"] == data.num_rows
        for o in entry["offsets"]:
            offsets = data.filter(pc.equal(data["partition"], o["partition"]))["offset"]
            assert o["records"] == len(offsets) == o["head"] - o["start"]
            if len(offsets):
                assert o["head"] == pc.max(offsets).as_py() + 1 and o["start"] == 0
    assert sum(t["records"] for t in topics if t["topic"] in shop.TOPICS) == 30000

    # Checkouts of the cart aggregate became orders, each published once.
    assert len(table(home, "streams/cart_orders")) == len(table(home, "log/cart_orders")) > 0

    # Windows and joins: every order is in a revenue window or, dropped as late, in the late table.
    orders = {r["event_id"] for r in table(home, "log/orders")}
    windows = table(home, "streams/revenue_per_minute")
    dropped = {r["event_id"] for r in table(home, "streams/revenue_per_minute_late")}
    assert sum(w["orders"] for w in windows) + len(dropped) == len(orders)
    assert dropped <= orders
    # Saved price alerts matched the products' changes: each match fits its alert.
    alerts = {r["alert_id"]: r for r in table(home, "log/price_alerts")}
    matches = table(home, "streams/price_alert_matches")
    assert len(alerts) == 60 and matches
    for m in matches:
        a = alerts[m["alert_id"]]
        assert m["price"] <= a["max_price"] and m["user_id"] == a["user_id"]
        assert a["category"] is None or m["product"].endswith(a["category"])
        assert a["keyword"] is None or a["keyword"] in m["product"].lower()
    # Patterns: an abandoned cart had no order (that came on time) within 30 minutes of its
    # first add; a refinement is two searches of a session within two minutes.
    late = {r["event_id"] for r in table(home, "streams/abandoned_carts_late")}
    ordered = {}
    for o in table(home, "log/orders"):
        if o["event_id"] not in late:
            ordered.setdefault(o["cart_id"], []).append(o["event_time"])
    abandoned = table(home, "streams/abandoned_carts")
    assert abandoned
    for cart in abandoned:
        assert cart["items_added"] >= 1 and cart["events"] == cart["items_added"]
        assert not [t for t in ordered.get(cart["cart_id"], [])
                    if cart["match_start"] < t <= cart["match_start"] + timedelta(minutes=30)]
    refinements = table(home, "streams/search_refinements")
    assert refinements and all(r["events"] == 2 and r["match_end"] - r["match_start"]
                               <= timedelta(minutes=2) for r in refinements)
    clicks = table(home, "streams/search_clicks")
    assert any(r["clicked"] for r in clicks)  # unmatched rows need an hour to close: none here
    assert sum(r["orders"] for r in table(home, "streams/customer_orders")) == len(orders)
    assert len(table(home, "streams/orders_as_of")) == len(orders)

    # The shop database changed during the demo; its tables in the lake mirror it. The
    # merge-on-read customers table holds versions of its keys until squashed: then a plain
    # Delta reader (delta-rs here) sees one row per key.
    assert summary["source"] == "sqlite" and summary["source_changes"] > 5000  # snapshot + more
    squashed = json.loads(lakelog("squash", "tables/customers", "--json", home=home).stdout)
    assert squashed["files_squashed"] > 1 and squashed["versions_read"] > squashed["rows_written"]
    conn = sqlite3.connect(home / "sources" / "shop.db")
    for name, compacted in shop_cdc.COMPACTED.items():
        live = [r for r in table(home, compacted.path) if not r["_deleted"]]
        assert len(live) == conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0], name
    history = table(home, shop_cdc.HISTORY["customers"].path)
    assert sum(r["is_current"] for r in history) == conn.execute(
        "SELECT count(*) FROM customers").fetchone()[0]
    # The changelog join of products and inventory is their join at the source.
    stock = sorted([(r["product_id"], r["name"], r["warehouse"], r["quantity"])
                    for r in table(home, "streams/product_stock")], key=str)
    assert stock == sorted(conn.execute(
        "SELECT p.product_id, p.name, i.warehouse, i.quantity FROM products p"
        " LEFT JOIN inventory i ON i.product_id = p.product_id").fetchall(), key=str)
    conn.close()


def test_demo_materializes_every_node_in_dagster_and_the_models(demo_home, monkeypatch):
    """The main job runs through Dagster: the SQL models are built, and the instance beside
    the lake (what `DAGSTER_HOME=<home>/dagster dagster dev` shows) holds a materialization of
    every live asset, from runs of the `pipeline` job."""
    home, summary = demo_home
    funnel = table(home, "views/product_funnel_hourly")
    views = [r for r in table(home, "log/page_views") if r["product_id"] is not None]
    units = [i["quantity"] for r in table(home, "log/orders") for i in r["items"]]
    assert sum(r["views"] for r in funnel) == len(views) > 0
    assert sum(r["units_sold"] for r in funnel) == sum(units) > 0
    assert 0 < len(table(home, "views/top_products_last_hour")) <= 10
    assert {r["query"] for r in table(home, "views/search_ctr")} <= {
        r["query"] for r in table(home, "log/searches")}
    assert len(table(home, "views/customer_lifetime_value")) > 0
    assert summary["models"] == 5 and summary["dagster_instance"] == str(home / "dagster")

    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))  # its dagster.yaml names it
    instance = dg.DagsterInstance.from_config(str(home / "dagster"))
    runs = [instance.get_run_by_id(r) for r in summary["runs"]]
    assert [r.job_name for r in runs] == ["pipeline"] * 2  # one per batch
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
    live = build_location(shop_pipeline).live.keys
    missing = [k.to_user_string() for k in live
               if instance.get_latest_materialization_event(k) is None]
    assert not missing
    stats = instance.get_latest_materialization_event(dg.AssetKey(["streams", "product_stats"]))
    assert stats.asset_materialization.metadata["lag_total"].value == 0


def test_demo_rerun_is_idempotent(demo_home, tmp_path):
    home, _ = demo_home
    before = {t: table(home, f"log/{t}") for t in shop.TOPICS}
    again = json.loads(lakelog(*DEMO, "--json", home=home).stdout)
    assert again["appended"] == 0 and again["files_written"] == 0 and again["microbatches"] == 0
    assert {t: table(home, f"log/{t}") for t in shop.TOPICS} == before


def every_table(home):
    """Every Delta table under `home`, by path, as rows read by delta-rs."""
    return {str(d.parent.relative_to(home)): DeltaTable(str(d.parent)).to_pyarrow_table()
            for d in Path(home).rglob("_delta_log")}


def holding(tables, names, value):
    """The tables with a row whose column (or struct field) named one of `names` is `value`."""
    found = set()
    for path, data in tables.items():
        for field in data.schema:
            columns = [data[field.name]] if field.name in names else [
                pc.struct_field(data[field.name], f.name) for f in field.type
                if f.name in names] if pa.types.is_struct(field.type) else []
            if any(pc.any(pc.equal(pc.cast(c, pa.string()), value)).as_py() for c in columns):
                found.add(path)
    return found


def test_erase_removes_a_user_and_their_customer_row_everywhere(demo_home, tmp_path):
    """`lakelog erase` on a copy of the demo lake: the subject is in no table and no landing
    file, other records keep their offsets, the views are recomputed without the subject, and
    the record proves the erasure by a salted hash."""
    home = tmp_path / "lake"
    shutil.copytree(demo_home[0], home)
    names = shop_pipeline.subject_columns
    views = table(home, "log/page_views")
    user = max({r["user_id"] for r in views}, key=lambda u: sum(r["user_id"] == u for r in views))
    customer = str(int(user.split("-")[1]))  # demo user u-000123 is the shop's customer 123
    assert {"log/page_views", "streams/search_clicks"} <= holding(every_table(home), names, user)
    assert "tables/customers" in holding(every_table(home), names, customer)
    before = {t: table(home, f"log/{t}") for t in shop.TOPICS}

    erased = json.loads(lakelog("erase", "--subject", user, "--json", home=home).stdout)
    customer_erased = json.loads(lakelog("erase", "--subject", customer, "--no-run", "--json",
                                         home=home).stdout)  # recomputation: as above

    assert erased["remaining"] == {} and "remaining" not in customer_erased
    assert erased["rows"] > 0 and "product_stats" in erased["rebuilt"]
    assert {t["path"] for t in customer_erased["tables"]} >= {
        "tables/customers", "history/customers", "log/cdc.customers",
        "log/changes.tables.customers"}
    tables = every_table(home)
    assert not holding(tables, names, user) and not holding(tables, names, customer)
    landed = [p.read_text() for p in (home / "landing").rglob("*.ndjson")]
    assert not any(f'"{user}"' in text for text in landed)
    for t in shop.TOPICS:  # every other record where it was, at its offset
        assert table(home, f"log/{t}") == [r for r in before[t] if r["user_id"] != user], t
    funnel = table(home, "views/product_funnel_hourly")
    viewed = [r for r in table(home, "log/page_views") if r["product_id"] is not None]
    assert sum(r["views"] for r in funnel) == len(viewed) > 0  # recomputed without the user
    record = table(home, "_erasures", drop=())
    done = {r["erasure_id"]: r for r in record if r["kind"] == "done"}
    assert set(done) == {erased["erasure_id"], customer_erased["erasure_id"]}
    first = done[erased["erasure_id"]]
    assert hashlib.sha256(f"{first['salt']}{user}".encode()).hexdigest() == first["subject_hash"]
    assert not any(user in json.dumps(r, default=str) for r in record)


def test_killed_demo_finishes_with_the_same_tables(demo_home, tmp_path):
    reference, _ = demo_home
    home = tmp_path / "killed"
    # The event pipeline only: the captured database's crash safety is the engine tests' part.
    for delay in (12, 25):  # kill it twice, at different stages, with SIGKILL
        proc = subprocess.Popen(
            [*LAKELOG, *DEMO, "--no-source", "--no-streams", "--home", str(home)], env=env(),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    lakelog(*DEMO, "--no-source", "--no-streams", home=home)
    for t in shop.TOPICS:
        assert table(home, f"log/{t}") == table(reference, f"log/{t}"), t
    assert table(home, "log/_dead_letters") == table(reference, "log/_dead_letters")
    stats = shop.PRODUCT_STATS.path
    assert table(home, stats, drop=()) == table(reference, stats, drop=())
    lag = json.loads(lakelog("lag", "--json", home=home).stdout)
    ran = {shop.PRODUCT_STATS_CONSUMER.name, shop.CARTS.consumer.name}  # --no-streams
    assert all(row["lag"] == 0 for row in lag if row["consumer"] in ran)


def test_demo_captures_a_postgresql_shop_database(tmp_path, pg_database):
    """LAKELOG_SOURCE_DSN points the demo at PostgreSQL: logical decoding instead of SQLite."""
    home = tmp_path / "lake"
    proc = subprocess.run(
        [*LAKELOG, "demo", "--events", "2000", "--batches", "1", "--no-streams", "--json",
         "--home", str(home)],
        capture_output=True, text=True, env={**env(), "LAKELOG_SOURCE_DSN": pg_database},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["source"] == "postgresql" and all(v == 0 for v in summary["lag"].values())
    with psycopg.connect(pg_database) as conn:
        for name, compacted in shop_cdc.COMPACTED.items():
            live = [r for r in current(table(home, compacted.path), compacted.key)
                    if not r["_deleted"]]
            count = conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
            assert len(live) == count > 0, name
    compacted = json.loads(lakelog("compact", "cdc.customers", "--json", home=home).stdout)
    assert compacted["topic"] == "cdc.customers" and compacted["version"] is None  # too recent


def test_produce_and_tail(tmp_path):
    home = tmp_path / "lake"
    good = {
        "event_id": "x1", "user_id": "alice", "session_id": "s1", "page": "product",
        "product_id": "P0001", "device_time": "2026-01-05T08:00:00.000Z",
        "sent_time": "2026-01-05T08:00:01.000Z", "received_time": "2026-01-05T08:00:01.200Z",
    }
    lines = [json.dumps(good), "{oops", json.dumps({**good, "event_id": "x2"})]
    source = tmp_path / "in.ndjson"
    source.write_text("\n".join(lines) + "\n")
    produced = json.loads(lakelog("produce", "page_views", str(source), "--json", home=home).stdout)
    assert (produced["read"], produced["appended"], produced["dead_letters"]) == (3, 2, 1)
    records = json.loads(lakelog("tail", "page_views", "--json", home=home).stdout)
    assert [r["event_id"] for r in records] == ["x1", "x2"]
    assert records[0]["offset"] == 0 and records[1]["offset"] == 1
    assert records[0]["headers"]["line"] == "1"
    later = json.loads(
        lakelog("tail", "page_views", "--from-offset", "1", "--json", home=home).stdout
    )
    assert [r["event_id"] for r in later] == ["x2"]
    stdin = subprocess.run(
        [*LAKELOG, "produce", "page_views", "-", "--home", str(home)],
        input=json.dumps({**good, "event_id": "x3"}) + "\n", capture_output=True, text=True,
        env=env(),
    )
    assert stdin.returncode == 0 and "1 appended" in stdin.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["tail", "nope"], 1, "unknown topic 'nope'"),
        (["lag", "nope"], 1, "unknown consumer 'nope'"),
        (["produce", "page_views", "/no/such/file.ndjson"], 1, "cannot read /no/such/file.ndjson"),
        (["offsets", "reset", "product_stats", "--to", "yesterday"], 1, "not an ISO timestamp"),
        (["tail", "page_views", "-n", "0"], 2, "-n must be at least 1"),
        (["tail", "page_views", "--from-offset", "x"], 2, "invalid int value"),
        (["frobnicate"], 2, "invalid choice"),
        (["squash", "tables/products"], 1, "'tables/products' is not a merge-on-read table of "
                                           "pipeline shop; those are: tables/customers"),
    ],
)
def test_errors_are_one_line(tmp_path, args, code, message):
    proc = lakelog(*args, home=tmp_path, check=False) if args != ["frobnicate"] else subprocess.run(
        [*LAKELOG, *args], capture_output=True, text=True, env=env()
    )
    assert proc.returncode == code
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len([ln for ln in proc.stderr.splitlines() if ln.startswith("lakelog")]) == 1


@pytest.mark.parametrize("command", ["squash", "fold"])
def test_fold_is_a_deprecated_name_of_squash(command, capsys):
    """`lakelog fold` (the old name) runs `lakelog squash`, with a one-line note on stderr."""
    assert main([command, "tables/products"]) == 1
    err = capsys.readouterr().err.splitlines()
    note = ["lakelog: note: 'fold' is deprecated, use 'lakelog squash'"] if command == "fold" else []
    assert err == [*note, "lakelog: error: 'tables/products' is not a merge-on-read table of "
                   "pipeline shop; those are: tables/customers"]
