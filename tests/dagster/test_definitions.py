"""The code location: what `build_definitions` declares, and the instance config it relies on."""

from __future__ import annotations

import runpy
from pathlib import Path

import dagster as dg
import yaml
from pyspark.sql import types as T

from lakelog.assets.definitions import defs
from lakelog.assets.executor import threaded_executor
from lakelog.assets.location import build_definitions, build_location
from lakelog.assets.naming import CONSUMER_TAG
from lakelog.consumers import Consumer, Output
from lakelog.demo.pipeline import pipeline as shop_pipeline
from lakelog.demo.shop import TOPICS
from lakelog.log.topics import Topic
from lakelog.pipeline import Pipeline

REPO = Path(__file__).resolve().parents[2]


def test_shop_definitions():
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    topics = {dg.AssetKey(["log", name]) for name in [*TOPICS, "price_alerts"]}
    changelogs = {dg.AssetKey(["log", f"cdc.{t}"]) for t in ("customers", "products", "inventory")}
    tables = {dg.AssetKey([kind, t]) for kind in ("tables", "history")
              for t in ("customers", "products", "inventory")}
    capture = dg.AssetKey(["cdc", "shop"])
    erasures = dg.AssetKey(["_erasures"])
    carts = {dg.AssetKey(["streams", f"cart_{t}"])
             for t in ("state", "snapshots", "rejections", "orders")}
    windows = {"revenue_per_minute", "product_views_10m", "order_value_rolling", "user_sessions"}
    joins = {"search_clicks", "orders_enriched", "orders_as_of", "customer_orders",
             "product_stock"}
    streams = {
        *(dg.AssetKey(["streams", n]) for n in windows | joins),
        *(dg.AssetKey(["streams", f"{n}_late"]) for n in windows | {"search_clicks"}),
        dg.AssetKey(["streams", "customer_orders_rejected"]),
        dg.AssetKey(["_state", "windows", "user_sessions"]),
        dg.AssetKey(["_state", "joins", "search_clicks", "buffer"]),
        dg.AssetKey(["_state", "joins", "product_stock", "rows"]),
        dg.AssetKey(["streams", "price_alert_matches"]),
        *(dg.AssetKey(key) for name in ("abandoned_carts", "search_refinements")
          for key in (["streams", name], ["streams", f"{name}_late"],
                      ["_state", "patterns", name, "pending"])),
        dg.AssetKey(["_state", "percolators", "price_alert_matches", "queries"]),
        *(dg.AssetKey(["replays", n]) for n in windows),
    }
    views = {dg.AssetKey(["views", n]) for n in (
        "product_funnel_hourly", "top_products_last_hour", "customer_lifetime_value",
        "search_ctr", "inventory_remaining")}
    assert graph.get_all_asset_keys() == (
        topics | changelogs | tables | carts | streams | views
        | {capture, dg.AssetKey(["streams", "product_stats"]), dg.AssetKey(["log", "cart_orders"]),
           dg.AssetKey(["log", "changes.tables.customers"]), erasures}
    )
    # The erasure record: materialized by the erase_subject job alone, checked by hash.
    assert defs.resolve_job_def("erase_subject").asset_layer.executable_asset_keys == {erasures}
    assert graph.get(erasures).group_name == "erasure"
    # A percolator depends on its events and its queries.
    assert set(graph.get(dg.AssetKey(["streams", "price_alert_matches"])).parent_keys) == {
        dg.AssetKey(["log", "cdc.products"]), dg.AssetKey(["log", "price_alerts"])
    }
    # A pattern depends on the topics of its events; a changelog join on both changelogs.
    assert set(graph.get(dg.AssetKey(["streams", "abandoned_carts"])).parent_keys) == {
        dg.AssetKey(["log", "cart_events"]), dg.AssetKey(["log", "orders"])
    }
    assert set(graph.get(dg.AssetKey(["streams", "product_stock"])).parent_keys) == {
        dg.AssetKey(["log", "cdc.products"]), dg.AssetKey(["log", "cdc.inventory"])
    }
    # A lookup join depends on the table it reads; a replay on the live windows and the log.
    assert set(graph.get(dg.AssetKey(["streams", "orders_as_of"])).parent_keys) == {
        dg.AssetKey(["log", "orders"]), dg.AssetKey(["history", "customers"])
    }
    assert set(graph.get(dg.AssetKey(["replays", "revenue_per_minute"])).parent_keys) == {
        dg.AssetKey(["log", "orders"]), dg.AssetKey(["streams", "revenue_per_minute"])
    }
    assert graph.get(dg.AssetKey(["replays", "revenue_per_minute"])).partitions_def is not None
    assert set(graph.get(dg.AssetKey(["log", "cart_orders"])).parent_keys) == {
        dg.AssetKey(["streams", "cart_orders"])
    }
    # The customers table's change stream is published from the table.
    assert set(graph.get(dg.AssetKey(["log", "changes.tables.customers"])).parent_keys) == {
        dg.AssetKey(["tables", "customers"])
    }
    assert {graph.get(k).group_name for k in topics | changelogs} == {"log"}
    assert set(graph.get(dg.AssetKey(["streams", "product_stats"])).parent_keys) == {
        dg.AssetKey(["log", t]) for t in ("page_views", "cart_events", "orders")
    }
    # The changelog topics depend on the capture; the tables on their changelog.
    assert set(graph.get(dg.AssetKey(["log", "cdc.products"])).parent_keys) == {capture}
    assert set(graph.get(dg.AssetKey(["history", "products"])).parent_keys) == {
        dg.AssetKey(["log", "cdc.products"])
    }
    assert {graph.get(k).group_name for k in tables} == {"tables", "history"}
    checks = {(c.asset_key, c.name) for c in graph.asset_check_keys}
    assert {(dg.AssetKey(["tables", t]), "matches_source")
            for t in ("customers", "products", "inventory")} | {
        (dg.AssetKey(["streams", "cart_state"]), "replay_matches")} | {
        (dg.AssetKey(["replays", n]), "matches_live") for n in windows} | {
        (erasures, "no_erased_subject")} <= checks
    assert {key for key, _ in checks} >= topics | tables  # quality checks
    # One sensor, running from the start, requests runs of one job over every live asset.
    [sensor] = defs.sensors
    assert (sensor.name, sensor.job_name) == ("pipeline", "pipeline")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert sensor.minimum_interval_seconds == 4  # just under the sensor daemon's 5 s loop
    pipeline = defs.resolve_job_def("pipeline")
    assert pipeline.executor_def.name == threaded_executor.name  # steps share one process
    replays = {dg.AssetKey(["replays", n]) for n in windows}
    assert pipeline.asset_layer.executable_asset_keys == (
        graph.get_all_asset_keys() - replays - {erasures})
    assert pipeline.partitions_def == graph.get(dg.AssetKey(["views", "product_funnel_hourly"])
                                                ).partitions_def
    # Derived assets go stale in the UI when the pipeline stops; consumers' outputs are
    # skippable, so a consumer stopped by a failed check skips its downstream steps.
    derived = carts | views | {dg.AssetKey(["streams", "product_stats"])}
    assert all(graph.get(k).freshness_policy is not None for k in derived)
    assert graph.get(dg.AssetKey(["log", "orders"])).freshness_policy is None
    stats = defs.resolve_assets_def(dg.AssetKey(["streams", "product_stats"]))
    assert stats.specs_by_key[dg.AssetKey(["streams", "product_stats"])].skippable
    schedules = {s.name: s for s in defs.schedules}
    daily = schedules["daily_maintenance"]
    assert (daily.cron_schedule, daily.execution_timezone) == ("0 3 * * *", "UTC")
    assert daily.job_name == "maintenance"
    # The audits (rebuilds compared with the live state, tables with their source) run on a
    # schedule of their own, from the start; a pipeline run evaluates the other checks.
    audits = {dg.AssetCheckKey(dg.AssetKey(["tables", t]), "matches_source")
              for t in ("customers", "products", "inventory")} | {
        dg.AssetCheckKey(dg.AssetKey(["streams", "cart_state"]), "replay_matches")}
    audit = schedules["audits"]
    assert (audit.job_name, audit.cron_schedule) == ("audit", "*/10 * * * *")
    assert audit.default_status == dg.DefaultScheduleStatus.RUNNING
    assert defs.resolve_job_def("audit").asset_layer.asset_graph.asset_check_keys >= audits
    live = build_location(shop_pipeline).live
    assert audits == live.audits and not audits & live.checks
    requested = live.checks_of(live.keys)
    assert dg.AssetCheckKey(dg.AssetKey(["log", "orders"]), "log_integrity") in requested
    assert not audits & set(requested)
    assert defs.resolve_job_def("microbatch_product_stats").tags == {CONSUMER_TAG: "product_stats"}
    # The consumer group's members: one partition (member) each, and no one-run limit.
    members = defs.resolve_job_def("members_join_orders_enriched")
    assert members.partitions_def.get_partition_keys() == ["member-0", "member-1"]
    assert CONSUMER_TAG not in members.tags


def test_a_declared_pipeline_becomes_assets_sensors_and_jobs():
    signups = Topic(
        "signups",
        T.StructType([T.StructField(n, T.StringType()) for n in ("event_id", "user_id")]),
        key="user_id",
        partitions=2,
    )
    counts = Consumer(
        "signup_counts",
        topics=("signups",),
        outputs=(Output("streams/signup_counts", T.StructType([])),),
        transform=lambda batch: {},
    )

    built = build_definitions(Pipeline("signups", topics=[signups], consumers=[counts]))

    dg.Definitions.validate_loadable(built)
    graph = built.resolve_asset_graph()
    assert graph.get_all_asset_keys() == {
        dg.AssetKey(["log", "signups"]), dg.AssetKey(["streams", "signup_counts"])
    }
    assert {s.name for s in built.sensors} == {"pipeline"}
    assert built.resolve_job_def("microbatch_signup_counts").tags == {CONSUMER_TAG: "signup_counts"}


def test_spark_connect_location_loads_without_its_environment():
    connect = runpy.run_path(str(REPO / "deploy" / "spark_connect.py"))["defs"]
    dg.Definitions.validate_loadable(connect)  # EnvVars resolve at run time, not at load time


def test_deploy_instance_limits_runs_for_two_cores(tmp_path):
    config = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text())
    assert set(config["storage"]) == {"postgres"}
    del config["storage"]  # no PostgreSQL here: the rest must load as it is
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(config))

    instance = dg.DagsterInstance.from_config(str(tmp_path))

    concurrency = instance.get_concurrency_config()
    assert concurrency.run_queue_config.max_concurrent_runs == 2
    limits = {c["key"]: c for c in concurrency.run_queue_config.tag_concurrency_limits}
    assert limits[CONSUMER_TAG]["limit"] == 1
    assert limits[CONSUMER_TAG]["value"] == {"applyLimitPerUniqueValue": True}
    assert concurrency.pool_config.default_pool_limit == 1
    assert concurrency.pool_config.pool_granularity.value == "run"
    assert instance.run_coordinator.dequeue_interval_seconds == 1  # a requested run starts soon
