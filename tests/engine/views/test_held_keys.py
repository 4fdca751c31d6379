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
