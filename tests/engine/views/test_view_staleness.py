"""Whether a model must run, from metadata: the input versions its last commit recorded."""

from __future__ import annotations

from view_helpers import append, cart_add, demo_graph, order, view

from lakelog.views import run_model, why_stale

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
