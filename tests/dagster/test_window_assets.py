"""A windowed aggregate in Dagster: its microbatch asset, its hourly replay, the replay check, and
the pipeline sensor's idle tick; and a pattern's asset, which a watermark decides too."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import dagster as dg
import pytest
from pyspark.sql import functions as F

from lakelog.assets.consumers import consumer_asset
from lakelog.assets.location import build_definitions
from lakelog.assets.naming import output_key
from lakelog.assets.replay import replay_asset
from lakelog.consumers.watermarks import Watermark
from lakelog.demo.shop import TOPICS
from lakelog.demo.shop_patterns import ABANDONED_CARTS
from lakelog.pipeline import Pipeline
from lakelog.windows import Count, Tumbling, WindowedAggregate

VIEWS = WindowedAggregate(
    name="views",
    topics=("page_views",),
    window=Tumbling(timedelta(seconds=5)),
    aggregates=(Count("views"),),
    group_by=("user_id",),
    watermark=Watermark(lateness=timedelta(0), idle_timeout=timedelta(milliseconds=1)),
)
HOUR = "2026-01-05-08:00"


def events(result: dg.ExecuteInProcessResult, key: list[str]):
    [event] = [
        e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey(key)
    ]
    return event.materialization.metadata


def check(result: dg.ExecuteInProcessResult):
    [evaluation] = result.get_asset_check_evaluations()
    return evaluation


@pytest.fixture
def consumed(shop_lake, resources):
    result = dg.materialize([consumer_asset(VIEWS.consumer, TOPICS)], resources=resources)
    assert result.success
    return result


def test_window_asset_reports_watermark_and_replay_matches_live(shop_lake, resources, consumed):
    metadata = events(consumed, ["streams", "views"])
    newest = shop_lake.read(shop_lake.snapshot("log/page_views")).agg(F.max("event_time")).first()[0]
    assert metadata["watermark"].value == pytest.approx(newest.timestamp())
    assert metadata["late_records"].value == 0
    live = {
        (r.user_id, r.window_start.second): r.views
        for r in shop_lake.read(shop_lake.snapshot("streams/views")).collect()
    }
    # page views at 08:00:01 (u1), :02 (u2), :03 (u3), :04 (u1), :09 (u1); event time +1 s
    assert live == {("u1", 0): 1, ("u2", 0): 1, ("u3", 0): 1, ("u1", 5): 1, ("u1", 10): 1}

    replay = dg.materialize(
        [replay_asset(VIEWS, TOPICS)], resources=resources, partition_key=HOUR,
        selection=[dg.AssetKey(["replays", "views"])],
    )
    assert events(replay, ["replays", "views"])["windows"].value == 5
    passed = check(replay)
    assert passed.passed and passed.metadata["compared"].value == 5

    table = shop_lake.snapshot("streams/views")
    wrong = shop_lake.read(table).withColumn("views", F.col("views") + 1)
    shop_lake.write(table, wrong, remove=table.files())
    failed = check(dg.materialize(
        [replay_asset(VIEWS, TOPICS)], resources=resources, partition_key=HOUR,
        selection=[dg.AssetKey(["replays", "views"])],
    ))
    assert not failed.passed and failed.metadata["differing"].value == 5


def test_pipeline_sensor_ticks_a_quiet_window_consumer(shop_lake, resources, consumed):
    defs = build_definitions(Pipeline("windows", topics=TOPICS, windows=[VIEWS]),
                             resources=resources)
    sensor = defs.resolve_sensor_def("pipeline")
    with dg.build_sensor_context(
        instance=dg.DagsterInstance.ephemeral(), resources=resources
    ) as context:
        result = sensor(context)
    [request] = result.run_requests  # caught up, but its idle tick is due
    assert set(request.asset_selection) == {output_key(o) for o in VIEWS.consumer.outputs}

    before = events(consumed, ["streams", "views"])["watermark"].value
    [observed] = [e for e in result.asset_events if e.asset_key == dg.AssetKey(["streams", "views"])]
    assert observed.metadata["watermark"].value == before
    assert observed.metadata["lag_records"].value == 0
    ticked = events(
        dg.materialize([consumer_asset(VIEWS.consumer, TOPICS)], resources=resources),
        ["streams", "views"],
    )
    assert (ticked["batches"].value, ticked["records"].value) == (1, 0)
    assert ticked["watermark"].value > before  # the quiet stream's watermark moved on


def test_a_pattern_asset_writes_decided_matches_and_reports_its_watermark(shop_lake, resources):
    """Abandoned carts within 1.5 s: c-u1's add (event time 6 s) has no order by 7.5 s (it comes
    at 9 s), and the watermark has passed 7.5 s: 8 s, the time of the last cart event (the
    slower topic; no lateness); c-u2's window (7-8.5 s) is still open, so its add and the
    remove after it stay pending."""
    carts = replace(ABANDONED_CARTS, within=timedelta(seconds=1.5), watermark=Watermark())
    result = dg.materialize([consumer_asset(carts.consumer, TOPICS)], resources=resources)
    assert result.success
    metadata = events(result, ["streams", "abandoned_carts"])
    assert metadata["late_records"].value == 0
    # Each topic's greatest event time is shown: the carts' holds the watermark.
    assert metadata["watermark"].value == metadata["max_event_time of cart_events"].value < (
        metadata["max_event_time of orders"].value) == metadata["max_event_time"].value
    found = shop_lake.read(shop_lake.snapshot("streams/abandoned_carts")).collect()
    assert [(r.cart_id, r.items_added, r.first_product) for r in found] == [("c-u1", 1, "p1")]
    pending = shop_lake.read(shop_lake.snapshot("_state/patterns/abandoned_carts/pending"))
    assert sorted(r.cart_id for r in pending.collect()) == ["c-u2", "c-u2"]
