"""Running models: views, tables, and incremental runs that equal a full refresh."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta

import pytest
from pyspark.testing import assertDataFrameEqual
from view_helpers import (
    START,
    append,
    cart_add,
    customer,
    demo_graph,
    order,
    recomputed,
    stored,
    view,
    write_customers,
)

from lakelog.demo.shop_joins import SEARCH_CLICKS
from lakelog.lake import EmbeddedLake, held_read
from lakelog.views import held_keys
from lakelog.views import (
    MissingInputError,
    ModelRunError,
    evaluate,
    load_models,
    model_rows,
    run_model,
)

FUNNEL = "product_funnel_hourly"
CLV = "customer_lifetime_value"


@pytest.mark.parametrize("where", ["held", "spark"])
def test_incremental_demo_models_equal_a_full_refresh_after_many_microbatches(
    lake, spark, monkeypatch, where
):
    """The hourly funnel recomputes the hours, customer lifetime value the customers, that each
    microbatch touched; afterwards both tables equal what a full refresh computes. Either with
    the small tables held in this process (the customers read by pyarrow, the customer table's
    rows replaced here) or all of it in Spark."""
    if where == "spark":
        monkeypatch.setattr(held_read, "holds", lambda snapshot: False)
        monkeypatch.setattr(held_keys, "holds", lambda output, keys: False)
        monkeypatch.setattr(EmbeddedLake, "changes_arrow", lambda *a, **k: None)  # hours by Spark
    replaced = []
    replace = held_keys.replace
    monkeypatch.setattr(held_keys, "replace", lambda *a, **k: replaced.append(a[0]) or replace(
        *a, **k))
    graph = demo_graph()

    def run(name, **options):
        return run_model(lake, spark, graph, name, **options)

    write_customers(lake, spark, [customer(1, "ann", position=1), customer(2, "bob", position=2)])
    append(lake, spark, "page_views", [view("u-000001", "p1", 0), view("u-000002", "p2", 0),
                                       view("u-000003", None, 0)])
    append(lake, spark, "cart_events", [cart_add("u-000001", "p1", 0, quantity=3)])
    append(lake, spark, "orders", [order("o1", "u-000001", [("p1", 2), ("p2", 1)], 0),
                                   order("o2", "u-000009", [("p2", 1)], 0),
                                   order("o3", "guest", [("p2", 1)], 0)])
    assert [run(FUNNEL).reason, run(CLV).reason] == ["first run", "first run"]

    # Hour 1 begins, and late events arrive for hour 0.
    append(lake, spark, "page_views", [view("u-000004", "p1", 1),
                                       view("u-000005", "p1", 0, minute=59)])
    append(lake, spark, "orders", [order("o4", "u-000002", [("p1", 1)], 1),
                                   order("o5", "u-000002", [("p2", 4)], 0)])
    funnel, clv = run(FUNNEL), run(CLV)
    assert (funnel.mode, funnel.touched) == ("incremental", 2)  # hours 0 and 1
    assert (clv.mode, clv.touched) == ("incremental", 1)  # customer 2

    # Customer 1 is renamed, 2 deleted, and 9, who ordered before, created; a cart event starts
    # hour 3, and hour 1 is backfilled.
    write_customers(lake, spark, [customer(1, "anne", position=3),
                                  customer(2, "bob", position=4, deleted=True),
                                  customer(9, "zoe", position=5)])
    append(lake, spark, "cart_events", [cart_add("u-000006", "p3", 3)])
    funnel, clv = run(FUNNEL, hours=[START + timedelta(hours=1)]), run(CLV)
    assert (funnel.mode, funnel.touched) == ("incremental", 2)  # hours 1 and 3
    assert (clv.mode, clv.touched) == ("incremental", 3)  # customers 1, 2 and 9

    assert run(FUNNEL).mode == run(CLV).mode == "unchanged"

    for name in (FUNNEL, CLV):
        assertDataFrameEqual(stored(lake, name), recomputed(lake, spark, graph, name))
    assert bool(replaced) == (where == "held")
    rows = {(r.product_id, int((r.hour.astimezone(START.tzinfo) - START) / timedelta(hours=1))): r
            for r in stored(lake, FUNNEL).collect()}
    assert set(rows) == {("p1", 0), ("p2", 0), ("p1", 1), ("p3", 3)}
    p1 = rows[("p1", 0)]
    assert (p1.views, p1.cart_adds, p1.orders, p1.units_sold) == (2, 1, 1, 2)
    assert (p1.view_to_cart_rate, p1.cart_to_order_rate) == (0.5, 1.0)
    assert (rows[("p2", 0)].orders, rows[("p2", 0)].units_sold) == (4, 7)
    customers = {r.customer_id: (r.name, r.orders, float(r.lifetime_value))
                 for r in stored(lake, CLV).collect()}
    assert customers == {1: ("anne", 1, 7.5), 9: ("zoe", 1, 2.5)}

    # Six more microbatches of random events over hours 0-4 (so most hours get late events)
    # and customer changes; after each, both models are updated incrementally.
    rng = random.Random(11)
    position = 10
    for batch in range(6):
        users = [f"u-{rng.randrange(1, 8):06d}" for _ in range(6)]
        products = [f"p{rng.randrange(1, 5)}" for _ in range(6)]
        append(lake, spark, "page_views", [
            view(u, rng.choice([p, None]), rng.randrange(5), rng.randrange(60))
            for u, p in zip(users, products)])
        append(lake, spark, "cart_events", [
            cart_add(u, p, rng.randrange(5), rng.randrange(1, 3)) for u, p in zip(users, products)
            if rng.random() < 0.5])
        append(lake, spark, "orders", [
            order(f"b{batch}-{i}", u, [(p, rng.randrange(1, 4))], rng.randrange(5))
            for i, (u, p) in enumerate(zip(users, products)) if rng.random() < 0.4])
        position += 1
        who = rng.randrange(1, 8)
        write_customers(lake, spark, [
            customer(c, f"name{c}-{batch}", position=position, deleted=(c == who))
            for c in range(1, 8)])
        assert run(FUNNEL).mode == run(CLV).mode == "incremental"
    for name in (FUNNEL, CLV):
        assertDataFrameEqual(stored(lake, name), recomputed(lake, spark, graph, name))


class CrashingLake(EmbeddedLake):
    """A lake whose next write fails before (or right after) its commit, or that lets `rival`
    run first."""

    crash: str | None = None
    rival: Callable[[], object] | None = None

    def write(self, snapshot, df, **options):
        return self._crashing(super().write, snapshot, df, **options)

    def write_table(self, snapshot, table, **options):  # a small model's replaced rows
        return self._crashing(super().write_table, snapshot, table, **options)

    def _crashing(self, write, snapshot, rows, **options):
        when, self.crash = self.crash, None
        if when == "before":
            raise RuntimeError("crash before the commit")
        if when == "race":
            self.rival()
        version = write(snapshot, rows, **options)
        if when == "after":
            raise RuntimeError("crash after the commit")
        return version


@pytest.mark.parametrize("where", ["held", "spark"])
def test_a_crash_neither_skips_nor_repeats_changes(lake, spark, tmp_path, monkeypatch, where):
    if where == "spark":  # the table's rows replaced by Spark rather than in this process
        monkeypatch.setattr(held_keys, "holds", lambda output, keys: False)
    (tmp_path / "views_per_product.sql").write_text(
        "{{ config(materialized='incremental', unique_key='product_id') }}\n"
        "SELECT product_id, count(*) AS views FROM {{ ref('log/page_views') }} GROUP BY product_id"
    )
    graph = load_models(tmp_path, {"log/page_views"})
    name = "views_per_product"
    crashing = CrashingLake(spark, lake.root)
    append(lake, spark, "page_views", [view("u1", "p1", 0), view("u2", "p2", 0)])
    run_model(lake, spark, graph, name)
    before = lake.snapshot(f"views/{name}").version

    append(lake, spark, "page_views", [view("u3", "p1", 1)])
    crashing.crash = "before"
    with pytest.raises(RuntimeError, match="before"):
        run_model(crashing, spark, graph, name)
    assert lake.snapshot(f"views/{name}").version == before  # nothing committed
    retry = run_model(lake, spark, graph, name)
    assert (retry.mode, retry.touched) == ("incremental", 1)

    append(lake, spark, "page_views", [view("u4", "p2", 1), view("u5", "p3", 1)])
    crashing.crash = "after"
    with pytest.raises(RuntimeError, match="after"):
        run_model(crashing, spark, graph, name)
    again = run_model(lake, spark, graph, name)
    assert again.mode == "unchanged"  # the commit recorded its input versions with its rows
    assert {r.product_id: r.views for r in stored(lake, name).collect()} == {
        "p1": 2, "p2": 2, "p3": 1,
    }

    # Two runs planned on the same version: the one that commits second fails, writing nothing.
    append(lake, spark, "page_views", [view("u6", "p3", 2)])
    crashing.crash, crashing.rival = "race", lambda: run_model(lake, spark, graph, name)
    with pytest.raises(ModelRunError, match="another writer committed to views/views_per_product"):
        run_model(crashing, spark, graph, name)
    assert {r.product_id: r.views for r in stored(lake, name).collect()}["p3"] == 2

    # An edited model is rebuilt rather than mixing its old and new SQL.
    model = tmp_path / f"{name}.sql"
    model.write_text(model.read_text().replace("count(*)", "count(*) * 10"))
    rebuilt = run_model(lake, spark, load_models(tmp_path, {"log/page_views"}), name)
    assert (rebuilt.mode, rebuilt.reason) == ("full", "the model's SQL or key changed")
    assert {r.product_id: r.views for r in stored(lake, name).collect()} == {
        "p1": 20, "p2": 20, "p3": 20,
    }

    # Retention removed a file of the log and vacuum deleted it before the model ran again:
    # the change feed since the last run cannot be read, so the model is rebuilt, not stuck.
    topic = lake.snapshot("log/page_views")
    lake.write(topic, None, remove=topic.files()[:1])
    assert lake.vacuum("log/page_views", retention=timedelta(0))
    append(lake, spark, "page_views", [view("u7", "p1", 3)])
    edited = load_models(tmp_path, {"log/page_views"})
    rebuilt = run_model(lake, spark, edited, name)
    assert rebuilt.mode == "full" and rebuilt.reason.startswith("rebuilt: the change feed")
    assertDataFrameEqual(stored(lake, name), recomputed(lake, spark, edited, name))


def test_views_tables_and_their_errors(lake, spark, tmp_path):
    (tmp_path / "named.sql").write_text(
        "SELECT product_id, upper(product_id) AS label FROM {{ ref('log/page_views') }}\n"
        "WHERE product_id IS NOT NULL"
    )
    (tmp_path / "labels.sql").write_text(
        "{{ config(materialized='table') }}\n"
        "SELECT label, count(*) AS n FROM {{ ref('named') }} GROUP BY label"
    )
    (tmp_path / "broken.sql").write_text(
        "{{ config(materialized='table') }}\n\nSELECT nope FROM {{ ref('log/page_views') }}"
    )
    (tmp_path / "shifted.sql").write_text(
        "{{ config(materialized='incremental', unique_key=['hour'], partition_by='hour') }}\n"
        "SELECT date_trunc('HOUR', event_time) + INTERVAL 1 HOUR AS hour, count(*) AS n\n"
        "FROM {{ ref('log/page_views') }} GROUP BY 1"
    )
    (tmp_path / "early.sql").write_text("SELECT * FROM {{ ref('log/orders') }}")
    graph = load_models(tmp_path, {"log/page_views", "log/orders"})
    append(lake, spark, "page_views",
           [view("u1", "p1", 0), view("u2", "p1", 0), view("u3", None, 0)])

    named = run_model(lake, spark, graph, "named")
    assert named.mode == "view" and named.version is None
    assert not lake.exists("views/named")
    assert {r.label for r in spark.table("named").collect()} == {"P1"}  # a temporary view
    spark.catalog.dropTempView("named")  # gone from the session: registered again
    run_model(lake, spark, graph, "named")
    assert {r.label for r in spark.table("named").collect()} == {"P1"}
    labels = run_model(lake, spark, graph, "labels")
    assert labels.mode == "full" and labels.inputs == {"log/page_views": 1}
    written = model_rows(lake, spark, graph.models["labels"], labels)
    assert [tuple(r) for r in written.collect()] == [("P1", 2)]

    with pytest.raises(ModelRunError) as broken:
        run_model(lake, spark, graph, "broken")
    file = tmp_path / "broken.sql"
    assert str(broken.value).startswith(f"{file}: Spark could not run the model: ")
    assert "UNRESOLVED_COLUMN" in str(broken.value) and "line 3" in str(broken.value)

    with pytest.raises(ModelRunError, match="input log/orders does not exist yet") as missing:
        run_model(lake, spark, graph, "early")
    assert isinstance(missing.value, MissingInputError) and missing.value.paths == ("log/orders",)

    run_model(lake, spark, graph, "shifted")
    append(lake, spark, "page_views", [view("u4", "p2", 2)])
    run_model(lake, spark, graph, "named")  # a new input version: the view reads it
    assert {r.label for r in spark.table("named").collect()} == {"P1", "P2"}
    with pytest.raises(ModelRunError, match="partition_by='hour' but the recomputed hours"):
        run_model(lake, spark, graph, "shifted")


def test_search_click_through_and_top_products_answer_their_questions(spark):
    """The table models evaluated on small frames in their inputs' schemas (the search-click
    join's output as `lakelog.demo.shop_joins` declares it)."""
    graph = demo_graph()
    # q1: s1 clicked twice, s2 not at all; q2: s3 clicked once. s4 and s5 are too recent for
    # their hour to have closed (within 70 minutes of the newest search): the join has emitted
    # s4's click but could not yet emit s5's miss, so neither counts.
    late = START + timedelta(minutes=80)
    searches = [
        ("s1", "q1", "shoes", "c1", "p1", 1, True, START),
        ("s1", "q1", "shoes", "c2", "p2", 3, True, START),
        ("s2", "q1", "shoes", None, None, None, False, START),
        ("s3", "q2", "hats", "c3", "p9", 2, True, START + timedelta(minutes=10)),
        ("s4", "q1", "shoes", "c4", "p1", 1, True, START + timedelta(minutes=11)),
        ("s5", "q3", "socks", "c5", "p4", 1, True, late),
    ]
    clicks = spark.createDataFrame(
        [{"search_event_id": s, "query_id": q, "user_id": "u", "session_id": "x", "query": text,
          "search_time": at, "click_event_id": c, "product_id": p, "position": pos,
          "click_time": at if c else None, "clicked": clicked, "batch": 0, "hour": START}
         for s, q, text, c, p, pos, clicked, at in searches],
        SEARCH_CLICKS.output.schema,
    )
    ctr = evaluate(spark, graph, "search_ctr", lambda path: {"streams/search_clicks": clicks}[path])
    assert {r.query: (r.searches, r.searches_with_click, r.clicks, r.click_through_rate,
                      r.mean_click_position) for r in ctr.collect()} == {
        "shoes": (2, 1, 2, 0.5, 2.0), "hats": (1, 1, 1, 1.0, 2.0),
    }

    hours = [START, START + timedelta(hours=1)]
    funnel = spark.createDataFrame(
        [(f"p{i}", hours[i % 2], i, 0, 0, 0, None, None) for i in range(24)],
        "product_id string, hour timestamp, views long, cart_adds long, orders long, "
        "units_sold long, view_to_cart_rate double, cart_to_order_rate double",
    )
    top = evaluate(spark, graph, "top_products_last_hour",
                   lambda path: {"views/product_funnel_hourly": funnel}[path])
    ranked = [(r.rank, r.product_id, r.views) for r in top.orderBy("rank").collect()]
    # The newest hour (odd products) is still filling: the last complete one (even) is ranked.
    assert ranked == [(n + 1, f"p{22 - 2 * n}", 22 - 2 * n) for n in range(10)]


def test_a_changed_select_replaces_the_table_and_its_readers_rebuild(lake, spark, tmp_path):
    base = tmp_path / "per_product.sql"
    base.write_text(
        "{{ config(materialized='table') }}\n"
        "SELECT product_id, count(*) AS views FROM {{ ref('log/page_views') }} GROUP BY product_id"
    )
    (tmp_path / "busy.sql").write_text(
        "{{ config(materialized='incremental', unique_key='product_id') }}\n"
        "SELECT product_id, views FROM {{ ref('per_product') }} WHERE views > 1"
    )
    append(lake, spark, "page_views", [view("u1", "p1", 0), view("u2", "p1", 0),
                                       view("u3", "p2", 0)])
    graph = load_models(tmp_path, {"log/page_views"})
    assert [run_model(lake, spark, graph, n).mode for n in ("per_product", "busy")] == [
        "full", "full"]
    before = lake.snapshot("views/per_product").table_id

    # New columns: the rebuild replaces the table (a new Delta table) instead of failing.
    base.write_text(base.read_text().replace(
        "count(*) AS views", "count(*) AS views, max(user_id) AS last_user"))
    graph = load_models(tmp_path, {"log/page_views"})
    assert run_model(lake, spark, graph, "per_product").mode == "full"
    assert "last_user" in stored(lake, "per_product").columns
    assert lake.snapshot("views/per_product").table_id != before
    # Its reader's recorded input version is still below the new one; the table id tells.
    reader = run_model(lake, spark, graph, "busy")
    assert (reader.mode, reader.reason) == (
        "full", "views/per_product was recreated since the last run (a new Delta table)")
    assertDataFrameEqual(stored(lake, "busy"), recomputed(lake, spark, graph, "busy"))
