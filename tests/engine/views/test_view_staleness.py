"""Whether a model must run, from metadata: the input versions its last commit recorded."""

from __future__ import annotations

from view_helpers import append, cart_add, demo_graph, order, view

from lakelog.views import load_models, model_rows, run_model, why_stale

FUNNEL = "product_funnel_hourly"


def test_a_model_is_stale_until_it_has_applied_its_inputs_versions(lake, spark):
    graph = demo_graph()
    assert why_stale(lake, graph, FUNNEL) is None  # its inputs do not exist: it cannot run yet

    append(lake, spark, "page_views", [view("u-000001", "p1", 0)])
    append(lake, spark, "cart_events", [cart_add("u-000001", "p1", 0)])
    append(lake, spark, "orders", [order("o1", "u-000001", [("p1", 1)], 0)])
    assert why_stale(lake, graph, FUNNEL) == "never materialized"

    run_model(lake, spark, graph, FUNNEL)
    assert why_stale(lake, graph, FUNNEL) is None

    append(lake, spark, "orders", [order("o2", "u-000002", [("p1", 2)], 1)])
    assert why_stale(lake, graph, FUNNEL) == "changed: log/orders v1->v2"

    run_model(lake, spark, graph, FUNNEL)
    assert why_stale(lake, graph, FUNNEL) is None
    assert why_stale(lake, graph, "inventory_remaining") is None  # a view: computed on read


def test_a_table_runs_again_only_when_an_input_changed_or_it_reads_the_clock(
        lake, spark, tmp_path):
    (tmp_path / "counts.sql").write_text(
        "{{ config(materialized='table') }}\n"
        "SELECT product_id, count(*) AS n FROM {{ ref('log/page_views') }} GROUP BY product_id"
    )
    (tmp_path / "stamped.sql").write_text(
        "{{ config(materialized='table') }}\n"
        "SELECT count(*) AS n, current_timestamp() AS at FROM {{ ref('log/page_views') }}"
    )
    graph = load_models(tmp_path, {"log/page_views"})
    append(lake, spark, "page_views", [view("u1", "p1", 0)])
    first = run_model(lake, spark, graph, "counts")
    again = run_model(lake, spark, graph, "counts")
    assert (first.mode, again.mode) == ("full", "unchanged")
    assert again.version == first.version == lake.snapshot("views/counts").version
    assert why_stale(lake, graph, "counts") is None

    append(lake, spark, "page_views", [view("u2", "p1", 1)])
    changed = run_model(lake, spark, graph, "counts")
    assert changed.mode == "full" and changed.reason.endswith("an input changed")
    assert [tuple(r) for r in model_rows(lake, spark, graph.models["counts"], changed)
            .collect()] == [("p1", 2)]

    stamped = [run_model(lake, spark, graph, "stamped") for _ in range(2)]
    assert [r.mode for r in stamped] == ["full", "full"]
    assert stamped[1].reason.endswith("its SQL reads the clock or randomness")
    assert stamped[1].version == stamped[0].version + 1
