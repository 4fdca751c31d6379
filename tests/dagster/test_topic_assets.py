"""Materializing a topic asset ingests its landing files into the log, exactly once."""

from __future__ import annotations

import dagster as dg
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType
from shop_records import cart_event, order, page_view

from lakelog.assets.naming import topic_key
from lakelog.assets.topics import topic_asset, topic_assets
from lakelog.demo.shop import CART_EVENTS, PAGE_VIEWS, TOPICS

KEY = topic_key(PAGE_VIEWS)


def materialized(result: dg.ExecuteInProcessResult, key: dg.AssetKey = KEY) -> dict:
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key == key]
    return event.materialization.metadata


def test_ingest_appends_landing_records_with_offsets(lake, land, resources):
    land(
        "page_views",
        "2026-01-05/a.ndjson",
        [page_view(f"e{i}", f"u{i % 3}", f"p{i % 2}", second=i) for i in range(6)],
        extra_lines=["{not json"],
    )

    result = dg.materialize([topic_asset(PAGE_VIEWS)], resources=resources)

    assert result.success
    log = lake.read(lake.snapshot(PAGE_VIEWS.path))
    assert log.count() == 6
    assert sorted(r.event_id for r in log.collect()) == [f"e{i}" for i in range(6)]
    offsets = log.groupBy("partition").agg(
        F.min("offset").alias("lo"), F.max("offset").alias("hi"), F.count("*").alias("n")
    )
    for row in offsets.collect():  # contiguous from 0 in every log partition
        assert (row.lo, row.hi + 1) == (0, row.n)
    dead = lake.read(lake.snapshot("log/_dead_letters")).where(F.col("topic") == "page_views")
    assert dead.count() == 1

    metadata = materialized(result)
    assert metadata["files"].value == 1
    assert metadata["records_read"].value == 7
    assert metadata["records_appended"].value == 6
    assert metadata["duplicates"].value == 0
    assert metadata["dead_letters"].value == 1
    assert metadata["batch"].value == 0
    assert metadata["head_total"].value == 6
    assert metadata["dagster/row_count"].value == 6
    rows = {r.data["partition"]: r.data for r in metadata["log_partitions"].records}
    assert sorted(rows) == list(range(PAGE_VIEWS.partitions))
    assert sum(r["records"] for r in rows.values()) == 6
    heads = {r.partition: r.hi + 1 for r in offsets.collect()}
    assert {p: r["head"] for p, r in rows.items() if r["head"]} == heads
    assert all(r["start_offset"] == 0 for r in rows.values())


def test_each_landing_file_is_ingested_once(lake, land, resources):
    asset = topic_asset(PAGE_VIEWS)
    land("page_views", "a.ndjson", [page_view("e1", "u1", "p1"), page_view("e2", "u2", None)])
    land("page_views", "b.ndjson", [page_view("e2", "u2", None), page_view("e3", "u1", "p2")])
    one_file = dg.RunConfig({"ingest": {"config": {"max_files": 1}}})

    first = materialized(dg.materialize([asset], resources=resources, run_config=one_file))
    assert (first["files"].value, first["batch"].value, first["head_total"].value) == (1, 0, 2)

    second = materialized(dg.materialize([asset], resources=resources))
    assert (second["files"].value, second["batch"].value) == (1, 1)
    assert (second["records_appended"].value, second["duplicates"].value) == (1, 1)  # e2 again
    assert second["head_total"].value == 3

    third = materialized(dg.materialize([asset], resources=resources))  # nothing new
    assert (third["files"].value, third["batch"].value, third["head_total"].value) == (0, None, 3)
    log = lake.read(lake.snapshot(PAGE_VIEWS.path))
    assert sorted(r.event_id for r in log.collect()) == ["e1", "e2", "e3"]


def test_topic_asset_definition():
    asset = topic_asset(PAGE_VIEWS)
    assert asset.key == dg.AssetKey(["log", "page_views"])
    assert asset.group_names_by_key[asset.key] == "log"
    assert asset.specs_by_key[asset.key].kinds == {"spark", "delta"}
    assert asset.op.pool == "lakelog/ingest"  # deploy/dagster.yaml: one ingest step at a time


def test_one_step_ingests_the_selected_topics_and_only_those(lake, land, resources):
    every = topic_assets(list(TOPICS.values()))
    assert every.keys == {topic_key(t) for t in TOPICS.values()} and every.can_subset
    land("page_views", "a.ndjson", [page_view("e1", "u1", "p1"), page_view("e2", "u2", None)])
    land("cart_events", "a.ndjson", [cart_event("c1", "u1", "add", "p1")])
    land("orders", "a.ndjson", [order("o1", "u1", [("p1", 1, 10.0)])])

    chosen = [topic_key(PAGE_VIEWS), topic_key(CART_EVENTS)]
    result = dg.materialize([every], resources=resources, selection=chosen)

    assert result.success
    assert len({e.step_key for e in result.get_step_success_events()}) == 1  # one step
    assert materialized(result)["records_appended"].value == 2
    assert materialized(result, topic_key(CART_EVENTS))["records_appended"].value == 1
    reported = {e.asset_key for e in result.get_asset_materialization_events()}
    assert reported == set(chosen)
    assert not lake.exists(TOPICS["orders"].path)  # not selected: its landing file waits


def test_a_topic_that_fails_fails_the_step_and_the_others_are_still_reported(
    lake, land, resources
):
    every = topic_assets(list(TOPICS.values()))
    land("page_views", "a.ndjson", [page_view("e1", "u1", "p1")])
    land("cart_events", "a.ndjson", [cart_event("c1", "u1", "add", "p1")])
    lake.create_table(CART_EVENTS.path, StructType([StructField("other", StringType())]))

    chosen = [topic_key(PAGE_VIEWS), topic_key(CART_EVENTS)]
    result = dg.materialize([every], resources=resources, selection=chosen, raise_on_error=False)

    assert not result.success
    [failure] = result.get_step_failure_events()
    assert "cart_events" in failure.step_failure_data.error.message
    reported = {e.asset_key for e in result.get_asset_materialization_events()}
    assert reported == {topic_key(PAGE_VIEWS)}  # committed, and said so
    assert lake.read(lake.snapshot(PAGE_VIEWS.path)).count() == 1
