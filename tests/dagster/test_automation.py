"""The pipeline sensor turns new input into ONE run of the pipeline job per tick, and the run it
requests brings every derived table up to date."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import dagster as dg
import pytest
from instances import deploy_instance
from shop_records import SHOP_RECORDS, order, page_view

from lakelog.assets.location import build_definitions, build_location
from lakelog.assets.partitions import HOURLY
from lakelog.consumers import lag, run_until_caught_up
from lakelog.demo.pipeline import pipeline as shop
from lakelog.demo.shop import CONSUMERS, TOPICS
from lakelog.demo.shop_windows import WINDOWS
from lakelog.log import landing
from lakelog.resources import LakeResource, SourceResource, SparkResource
from lakelog.sensors.pipeline import OBSERVE_EVERY_S, queues_behind

PAGE_VIEWS = dg.AssetKey(["log", "page_views"])
ORDERS = dg.AssetKey(["log", "orders"])
STATS = dg.AssetKey(["streams", "product_stats"])
FUNNEL = dg.AssetKey(["views", "product_funnel_hourly"])
TOP = dg.AssetKey(["views", "top_products_last_hour"])
CLV = dg.AssetKey(["views", "customer_lifetime_value"])
CART_ORDERS = dg.AssetKey(["log", "cart_orders"])
#: Every consumer output reading the shop's page views, cart events or orders.
READERS = {
    dg.AssetKey(o.path.split("/"))
    for c in (*CONSUMERS.values(), *(w.consumer for w in WINDOWS.values()))
    for o in c.outputs
}
SHOP_TOPICS = {t: TOPICS[t] for t in ("page_views", "cart_events", "orders")}


class NoSpark(SparkResource):
    """Sensors run in the code server on every tick: they must not start a Spark driver there."""

    def session(self):
        raise AssertionError("a sensor asked for a Spark session")


@pytest.fixture
def instance() -> dg.DagsterInstance:
    return dg.DagsterInstance.ephemeral()


@pytest.fixture
def tick_on(lake):
    """`tick_on(instance)(cursor)` evaluates the pipeline sensor once on `instance`, as the
    daemon would, without Spark."""
    resources = {"spark": NoSpark(), "lake": LakeResource(spark=NoSpark(), root=lake.root),
                 "source": SourceResource()}
    sensor = build_definitions(shop, resources=resources).resolve_sensor_def("pipeline")

    def on(instance: dg.DagsterInstance):
        def evaluate(cursor: str | None) -> dg.SensorResult:
            with dg.build_sensor_context(
                instance=instance, cursor=cursor, resources=resources
            ) as context:
                return sensor(context)
        return evaluate

    return on


@pytest.fixture
def tick(tick_on, instance):
    """`tick(cursor)` on an instance without a run queue."""
    return tick_on(instance)


def observed(result: dg.SensorResult) -> dict[dg.AssetKey, dict]:
    return {e.asset_key: {k: v.value for k, v in e.metadata.items()}
            for e in result.asset_events if isinstance(e, dg.AssetObservation)}


def test_nothing_new_is_skipped_and_reported_once(lake, tick):
    first = tick(None)
    assert not first.run_requests
    assert first.skip_reason.skip_message.startswith("nothing new")
    assert "source shop unavailable" in first.skip_reason.skip_message  # no SQLite database
    assert observed(first)[STATS] == {"lag_records": 0, "lag_seconds": 0.0}

    second = tick(first.cursor)  # the same values: no observation adds a row again
    assert not second.run_requests and not second.asset_events


def test_new_files_and_lagging_consumers_become_one_run(shop_lake, land, tick):
    land("page_views", "c.ndjson", [page_view("v9", "u2", "p1", 30)])

    first = tick(None)

    [request] = first.run_requests
    selected = set(request.asset_selection)
    assert PAGE_VIEWS in selected  # a root: new landing files
    assert ORDERS not in selected  # upstream only: nothing to ingest
    assert READERS <= selected  # lagging consumers, and readers of page views
    assert {FUNNEL, TOP, CART_ORDERS} <= selected  # downstream: models and the orders relay
    assert not any(k.path[0] == "replays" for k in selected)
    assert CLV not in selected  # tables/customers: no source, so nothing writes it yet
    assert request.partition_key == HOURLY.get_last_partition_key()  # the hourly funnel
    # The checks that gate the selected consumers and warn on its models, not the audits
    # (without a selection Dagster would run every check of the selected assets).
    live = build_location(shop).live
    assert request.asset_check_keys == live.checks_of(selected)
    assert dg.AssetCheckKey(PAGE_VIEWS, "log_integrity") in request.asset_check_keys
    assert live.audits and not live.audits & set(request.asset_check_keys)
    assert request.run_key == tick(None).run_requests[0].run_key  # the same work, the same key

    stats = observed(first)[STATS]
    assert stats["lag_records"] == SHOP_RECORDS
    assert stats["lag_seconds"] >= timedelta(days=29).total_seconds()  # ingested 30 days ago

    again = tick(first.cursor)  # the run may still be queued: nothing is requested twice
    assert not again.run_requests
    assert "requested already" in again.skip_reason.skip_message

    land("orders", "c.ndjson", [order("o2", "u2", [("p1", 1, 2.0)], 31)])
    more = tick(first.cursor)
    [next_request] = more.run_requests
    assert {PAGE_VIEWS, ORDERS} <= set(next_request.asset_selection)
    assert next_request.run_key != request.run_key


def test_a_pipeline_run_in_progress_holds_the_next(shop_lake, tick, instance):
    running = instance.create_run_for_job(
        build_definitions(shop).resolve_job_def("pipeline"), status=dg.DagsterRunStatus.STARTED
    )

    held = tick(None)
    assert not held.run_requests
    assert running.run_id in held.skip_reason.skip_message
    assert observed(held)[STATS]["lag_records"] == SHOP_RECORDS  # lag is reported meanwhile

    soon = tick(held.cursor)  # lag was just looked up: this tick reads no metadata
    assert not soon.run_requests and not soon.asset_events and soon.cursor is None
    assert running.run_id in soon.skip_reason.skip_message

    looked_up = json.loads(held.cursor)
    looked_up["observed"] = {}  # as if nothing had been observed yet ...
    looked_up["observed_at"] = (datetime.fromisoformat(looked_up["observed_at"])
                                - timedelta(seconds=OBSERVE_EVERY_S)).isoformat()  # ... so long ago
    later = tick(json.dumps(looked_up))
    assert not later.run_requests and observed(later)[STATS]["lag_records"] == SHOP_RECORDS

    instance.report_run_failed(running)
    [request] = tick(soon.cursor or held.cursor).run_requests  # no longer held: looks at once
    assert STATS in request.asset_selection


def test_input_a_run_in_progress_will_not_take_queues_the_next_run(
    shop_lake, land, tick_on, tmp_path
):
    """On deploy/dagster.yaml's instance (a run queue, pools held per run) the next run is
    requested as soon as a run in progress has taken its share of the input, to wait in the
    queue; without a queue to hold it, it waits for the run's end."""
    instance = dg.DagsterInstance.from_config(str(deploy_instance(tmp_path / "dagster_home")))
    assert queues_behind(instance) and not queues_behind(dg.DagsterInstance.ephemeral())
    unlimited = deploy_instance(tmp_path / "unlimited", concurrency={"runs": {
        "max_concurrent_runs": 2}})  # a run queue that would start a queued run beside it
    assert not queues_behind(dg.DagsterInstance.from_config(str(unlimited)))
    tick = tick_on(instance)
    land("page_views", "c.ndjson", [page_view("v9", "u2", "p1", 30)])
    [first] = tick(None).run_requests
    cursor = json.loads(tick(None).cursor)
    batch = landing.load_manifest(shop_lake, "page_views").batch
    assert cursor["marks"] == {"topic:page_views": batch}  # what the run moves on ingesting
    running = instance.create_run_for_job(
        build_definitions(shop).resolve_job_def("pipeline"), status=dg.DagsterRunStatus.STARTED,
        tags={"dagster/run_key": first.run_key},
    )

    taken = tick(json.dumps(cursor))  # the run in progress takes these files: nothing queued
    assert not taken.run_requests and running.run_id in taken.skip_reason.skip_message

    moved = {**cursor, "marks": {"topic:page_views": batch - 1}}  # it has ingested since it was
    [queued] = tick(json.dumps(moved)).run_requests        # requested, and files are pending
    assert PAGE_VIEWS in queued.asset_selection and queued.run_key != first.run_key
    # Waiting, it will take every topic's files that land meanwhile: it selects them all.
    inputs = build_location(shop).live.inputs
    assert ORDERS in inputs and inputs <= set(queued.asset_selection)
    assert ORDERS not in first.asset_selection
    land("orders", "c.ndjson", [order("o2", "u2", [("p1", 1, 2.0)], 31)])
    [also] = tick(json.dumps(cursor)).run_requests  # a topic the run did not select
    assert ORDERS in also.asset_selection

    waiting = instance.create_run_for_job(build_definitions(shop).resolve_job_def("pipeline"),
                                          status=dg.DagsterRunStatus.NOT_STARTED)
    held = tick(json.dumps(moved))  # one run waits to start at most: it takes the rest
    assert not held.run_requests and waiting.run_id in held.skip_reason.skip_message


def test_caught_up_consumers_are_observed_once(shop_lake, tick, now):
    run_until_caught_up(shop_lake, CONSUMERS["product_stats"], TOPICS, now=lambda: now)

    first = tick(None)
    assert observed(first)[STATS] == {"lag_records": 0, "lag_seconds": 0.0}
    [request] = first.run_requests
    assert STATS not in request.asset_selection  # caught up, and no new input upstream
    assert dg.AssetKey(["streams", "cart_state"]) in request.asset_selection

    assert STATS not in observed(tick(first.cursor))


def test_the_requested_run_brings_every_derived_table_up_to_date(
    shop_lake, land, tick, resources, instance
):
    view = page_view("v9", "u2", "p1")  # in the next hour: 08:00 becomes the last complete one
    land("page_views", "c.ndjson", [{k: v.replace("T08:", "T09:") for k, v in view.items()}])
    first = tick(None)
    [request] = first.run_requests

    run_resources = {**resources, "source": SourceResource()}
    result = build_definitions(shop, resources=run_resources).resolve_job_def("pipeline").execute_in_process(
        instance=instance, asset_selection=request.asset_selection,
        partition_key=request.partition_key,
    )

    assert result.success
    assert not landing.pending_files(shop_lake, landing.load_manifest(shop_lake, "page_views"))
    for consumer in (*CONSUMERS.values(), *(w.consumer for w in WINDOWS.values())):
        assert all(x.lag == 0 for x in lag(shop_lake, consumer, TOPICS)), consumer.name
    assert sum(x.head for x in lag(shop_lake, CONSUMERS["product_stats"], SHOP_TOPICS)) == (
        SHOP_RECORDS + 1
    )
    funnel = shop_lake.read(shop_lake.snapshot("views/product_funnel_hourly")).collect()
    assert sum(r.views for r in funnel) == 5  # p1: v1 v2 v9, p2: v3 v5
    top = shop_lake.read(shop_lake.snapshot("views/top_products_last_hour")).collect()
    assert sorted((r.product_id, r.views) for r in top) == [("p1", 2), ("p2", 2)]
    materialized = {e.asset_key for e in result.get_asset_materialization_events()}
    assert set(request.asset_selection) <= materialized

    after = tick(first.cursor)  # everything is up to date: the pipeline comes to rest
    assert not after.run_requests
    assert after.skip_reason.skip_message.startswith("nothing new")
    assert observed(after)[STATS] == {"lag_records": 0, "lag_seconds": 0.0}
