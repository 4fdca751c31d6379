"""Materializing a consumer asset runs its microbatches until caught up and reports the lag."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

import dagster as dg
import pytest
from shop_records import SHOP_RECORDS, SHOP_TOTALS

from lakelog.assets.consumers import consumer_asset, consumer_job
from lakelog.assets.naming import CONSUMER_TAG
from lakelog.consumers import BatchInput
from lakelog.consumers import checkpoints
from lakelog.demo.shop import CONSUMERS, PRODUCT_STATS, TOPICS, product_stats_transform
from lakelog.errors import ConfigError
from lakelog.resources import build_resources

STATS_KEY = dg.AssetKey(["streams", "product_stats"])
CONSUMER = CONSUMERS["product_stats"]


def stats(lake) -> dict[str, tuple]:
    rows = lake.read(lake.snapshot(PRODUCT_STATS.path)).collect()
    return {
        r.product_id: (r.views, r.cart_adds, r.cart_removes, r.orders, r.units_sold, r.revenue)
        for r in rows
    }


def metadata_of(result: dg.ExecuteInProcessResult) -> dict:
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key == STATS_KEY]
    return event.materialization.metadata


def test_consumer_asset_writes_product_totals(shop_lake, resources):
    result = dg.materialize([consumer_asset(CONSUMER, TOPICS)], resources=resources)

    assert result.success
    assert stats(shop_lake) == SHOP_TOTALS
    committed = checkpoints.load(shop_lake, CONSUMER.name).committed
    assert sum(committed.values()) == SHOP_RECORDS

    metadata = metadata_of(result)
    assert metadata["batches"].value == 1
    assert metadata["records"].value == SHOP_RECORDS
    assert metadata["batch_ids"].value == [0]
    assert metadata["lost_to_retention"].value == 0
    assert metadata["lag_total"].value == 0
    assert metadata["dagster/row_count"].value == 2
    lag_rows = [r.data for r in metadata["lag"].records]
    assert {r["topic"] for r in lag_rows} == set(CONSUMER.topics)
    assert len(lag_rows) == sum(TOPICS[t].partitions for t in CONSUMER.topics)
    assert all(r["lag"] == 0 and r["committed"] == r["head"] for r in lag_rows)
    assert sum(r["head"] for r in lag_rows) == SHOP_RECORDS

    again = metadata_of(dg.materialize([consumer_asset(CONSUMER, TOPICS)], resources=resources))
    assert (again["batches"].value, again["records"].value) == (0, 0)
    assert stats(shop_lake) == SHOP_TOTALS


def test_max_batches_stops_early_and_the_next_run_catches_up(shop_lake, resources):
    asset = consumer_asset(dataclasses.replace(CONSUMER, max_records_per_batch=5), TOPICS)
    one = dg.RunConfig({"consume_product_stats": {"config": {"max_batches": 1}}})

    first = metadata_of(dg.materialize([asset], resources=resources, run_config=one))
    assert (first["batches"].value, first["records"].value) == (1, 5)
    assert first["lag_total"].value == SHOP_RECORDS - 5

    rest = metadata_of(dg.materialize([asset], resources=resources))
    assert (rest["batches"].value, rest["batch_ids"].value) == (1, [1])
    assert rest["lag_total"].value == 0
    assert stats(shop_lake) == SHOP_TOTALS  # two microbatches add up to the one-batch totals


def test_losing_a_race_fails_the_run_with_the_engine_message(shop_lake, resources):
    """Another run of the consumer commits its checkpoint first: this run fails, clearly."""

    def racing_transform(batch: BatchInput):
        rival = checkpoints.load(batch.lake, CONSUMER.name)
        checkpoints.save_offsets(batch.lake, rival, {}, now=datetime.now(timezone.utc))
        return product_stats_transform(batch)

    racing = dataclasses.replace(CONSUMER, transform=racing_transform)

    result = dg.materialize(
        [consumer_asset(racing, TOPICS)], resources=resources, raise_on_error=False
    )

    assert not result.success
    [failure] = result.get_step_failure_events()
    message = failure.step_failure_data.user_failure_data.description
    assert message.startswith("ConcurrentWriteError: another writer committed")
    assert checkpoints.load(shop_lake, CONSUMER.name).batch == -1  # this batch never committed


def test_consumer_runs_carry_the_concurrency_tag_and_pool():
    asset = consumer_asset(CONSUMER, TOPICS)
    assert asset.keys == {STATS_KEY}
    assert asset.op.tags[CONSUMER_TAG] == "product_stats"
    assert asset.op.pool == "lakelog/consumer/product_stats"
    assert asset.group_names_by_key[STATS_KEY] == "streams"
    assert asset.specs_by_key[STATS_KEY].kinds == {"spark", "delta"}
    assert set(asset.asset_deps[STATS_KEY]) == {
        dg.AssetKey(["log", t]) for t in ("page_views", "cart_events", "orders")
    }
    defs = dg.Definitions(
        assets=[asset], jobs=[consumer_job(CONSUMER, asset)], resources=build_resources("local")
    )
    job = defs.resolve_job_def("microbatch_product_stats")
    assert job.tags[CONSUMER_TAG] == "product_stats"


def test_consumer_of_undeclared_topic_is_rejected():
    with pytest.raises(ConfigError, match="undeclared topics: orders"):
        consumer_asset(CONSUMER, {t: TOPICS[t] for t in ("page_views", "cart_events")})
