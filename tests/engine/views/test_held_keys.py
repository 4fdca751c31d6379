"""A keyed model's run on a small table, replaced in this process: null keys, many keys."""

from __future__ import annotations

import pytest
from pyspark.testing import assertDataFrameEqual
from view_helpers import append, recomputed, stored, view

from lakelog.views import held_keys, load_models, run_model

MODEL = "views_per_product"


@pytest.fixture
def graph(tmp_path):
    (tmp_path / f"{MODEL}.sql").write_text(
        "{{ config(materialized='incremental', unique_key='product_id') }}\n"
        "SELECT product_id, count(*) AS views, max(event_time) AS last_view\n"
        "FROM {{ ref('log/page_views') }} GROUP BY product_id"
    )
    return load_models(tmp_path, {"log/page_views"})


def test_a_null_key_is_replaced_like_any_other(lake, spark, graph):
    append(lake, spark, "page_views", [view("u1", "p1", 0), view("u2", None, 0),
                                       view("u3", "p2", 0)])
    assert run_model(lake, spark, graph, MODEL).mode == "full"
    assert held_keys.holds(lake.snapshot(f"views/{MODEL}"), ["product_id"])

    append(lake, spark, "page_views", [view("u4", None, 1), view("u5", "p2", 1)])
    run = run_model(lake, spark, graph, MODEL)
    assert (run.mode, run.touched) == ("incremental", 2)  # the null product and p2
    views = {r.product_id: r.views for r in stored(lake, MODEL).collect()}
    assert views == {"p1": 1, None: 2, "p2": 2}  # one row for the null key, not two
    assertDataFrameEqual(stored(lake, MODEL), recomputed(lake, spark, graph, MODEL))


def test_a_model_whose_input_log_was_trimmed_is_rebuilt(lake, spark, graph):
    append(lake, spark, "page_views", [view("u1", "p1", 0)])
    run_model(lake, spark, graph, MODEL)
    append(lake, spark, "page_views", [view("u2", "p1", 1)])
    append(lake, spark, "page_views", [view("u3", "p2", 1)])
    # An erasure trims the log before its commit: the version the model last read is gone.
    lake.forget_history("log/page_views", before=lake.snapshot("log/page_views").version)
    run = run_model(lake, spark, graph, MODEL)
    assert run.mode == "full" and "no longer in the Delta log" in run.reason
    assert {r.product_id: r.views for r in stored(lake, MODEL).collect()} == {"p1": 2, "p2": 1}


def test_more_keys_than_held_go_the_spark_way(lake, spark, graph, monkeypatch):
    append(lake, spark, "page_views", [view("u1", f"p{i}", 0) for i in range(5)])
    run_model(lake, spark, graph, MODEL)
    monkeypatch.setattr(held_keys, "HELD_KEYS", 2)
    seen = []
    collect = held_keys.collect
    monkeypatch.setattr(held_keys, "collect", lambda *a: seen.append(collect(*a)) or seen[-1])

    append(lake, spark, "page_views", [view("u2", f"p{i}", 1) for i in range(2, 7)])
    run = run_model(lake, spark, graph, MODEL)
    assert seen == [None]  # five keys touched, more than two: not held
    assert (run.mode, run.touched) == ("incremental", 5)
    assert {r.product_id: r.views for r in stored(lake, MODEL).collect()} == {
        "p0": 1, "p1": 1, "p2": 2, "p3": 2, "p4": 2, "p5": 1, "p6": 1}
    assertDataFrameEqual(stored(lake, MODEL), recomputed(lake, spark, graph, MODEL))

    append(lake, spark, "page_views", [view("u3", "p0", 2)])
    run = run_model(lake, spark, graph, MODEL)
    assert seen[-1] is not None and (run.mode, run.touched) == ("incremental", 1)
    assertDataFrameEqual(stored(lake, MODEL), recomputed(lake, spark, graph, MODEL))


def test_keys_of_several_columns_and_types(lake, spark, tmp_path):
    """A key of a string, a date and a decimal, with nulls in its later columns: each distinct
    combination is one row, replaced as a whole."""
    (tmp_path / "per_day.sql").write_text(
        "{{ config(materialized='incremental', unique_key=('product_id', 'day', 'price')) }}\n"
        "SELECT product_id, CAST(event_time AS DATE) AS day,\n"
        "       CAST(CASE WHEN product_id = 'p1' THEN 9.5 END AS DECIMAL(6, 2)) AS price,\n"
        "       count(*) AS views\n"
        "FROM {{ ref('log/page_views') }} GROUP BY 1, 2, 3"
    )
    graph = load_models(tmp_path, {"log/page_views"})
    append(lake, spark, "page_views", [view("u1", "p1", 0), view("u2", None, 0),
                                       view("u3", "p2", 30)])
    run_model(lake, spark, graph, "per_day")
    assert held_keys.holds(lake.snapshot("views/per_day"), ["product_id", "day", "price"])

    append(lake, spark, "page_views", [view("u4", None, 1), view("u5", "p2", 31),
                                       view("u6", "p1", 30)])
    run = run_model(lake, spark, graph, "per_day")
    assert (run.mode, run.touched) == ("incremental", 3)
    views = sorted((r.product_id or "", r.day.isoformat(), r.views)
                   for r in stored(lake, "per_day").collect())
    assert [v for *_, v in views] == [2, 1, 1, 2]  # null day 0, p1 days 0-1, p2 day 1
    assertDataFrameEqual(stored(lake, "per_day"), recomputed(lake, spark, graph, "per_day"))
