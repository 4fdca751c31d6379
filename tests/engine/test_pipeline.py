"""The `Pipeline` declaration: what it derives from its parts, and every problem of a bad one
named in one error."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from datetime import timedelta

import pytest
from pyspark.sql import types as T

from lakelog.consumers import Consumer, Output, Role
from lakelog.demo import shop, shop_cdc
from lakelog.demo.pipeline import pipeline as shop_pipeline
from lakelog.errors import ConfigError, UnknownConsumerError, UnknownTopicError
from lakelog.log.topics import EventTime, Topic
from lakelog.pipeline import Pipeline
from lakelog.windows import Count, Tumbling, WindowedAggregate

CLICKS = Topic(
    "clicks",
    T.StructType([T.StructField("event_id", T.StringType()), T.StructField("user", T.StringType()),
                  T.StructField("at", T.TimestampType())]),
    key="user",
    time=EventTime("at"),
)
PER_MINUTE = WindowedAggregate("clicks_per_minute", ("clicks",), Tumbling(timedelta(minutes=1)),
                               (Count("clicks"),))


def copy_of(topic_name: str, output: str = "streams/copy") -> Consumer:
    return Consumer(f"copy_{topic_name}", (topic_name,), (Output(output, T.StructType([])),),
                    transform=lambda batch: {})


def test_the_demo_shop_is_one_pipeline():
    topics = shop_pipeline.all_topics
    assert set(topics) == {*shop.TOPICS, *shop_cdc.CHANGELOGS, "cart_orders",
                           "changes.tables.customers", "price_alerts"}
    assert set(shop_pipeline.landed_topics) == set(topics) - {"cart_orders",
                                                             "changes.tables.customers"}
    assert {"product_stats", "aggregate.cart", "window.user_sessions", "join.orders_as_of",
            "tables.customers", "percolate.price_alert_matches", "pattern.abandoned_carts",
            "pattern.search_refinements"} <= set(
        shop_pipeline.all_consumers)
    assert set(shop_pipeline.model_graph.models) == {
        "product_funnel_hourly", "top_products_last_hour", "customer_lifetime_value",
        "search_ctr", "inventory_remaining"}
    assert {"log/cart_orders", "tables/customers", "streams/search_clicks"} <= (
        shop_pipeline.table_paths)
    assert [t.path for t in shop_pipeline.compacted_tables] == [
        "tables/customers", "tables/products", "tables/inventory"]
    # its orders are enriched by a consumer group of two members; every other consumer runs alone
    assert {n: c.members for n, c in shop_pipeline.all_consumers.items() if c.members} == {
        "join.orders_enriched": 2}


def test_a_declaration_is_frozen_and_keeps_tuples():
    pipeline = Pipeline("mine", topics={"clicks": CLICKS}, windows=[PER_MINUTE])
    assert pipeline.topics == (CLICKS,) and pipeline.windows == (PER_MINUTE,)
    assert set(pipeline.all_consumers) == {"window.clicks_per_minute"}
    with pytest.raises(FrozenInstanceError):
        pipeline.name = "other"  # type: ignore[misc]


def test_lookups_name_what_there_is():
    pipeline = Pipeline("mine", topics=[CLICKS], windows=[PER_MINUTE])
    assert pipeline.topic("clicks") is CLICKS
    with pytest.raises(UnknownTopicError, match="unknown topic 'nope' in pipeline mine; "
                       "topics: clicks"):
        pipeline.topic("nope")
    with pytest.raises(UnknownConsumerError, match="consumers: window.clicks_per_minute"):
        pipeline.consumer("nope")


@pytest.mark.parametrize(
    ("declaration", "problems"),
    [
        (dict(name="my pipeline"), ["name 'my pipeline' must be letters"]),
        (dict(topics=[CLICKS, CLICKS]), ["topic name 'clicks' is declared more than once"]),
        (dict(topics=[CLICKS], consumers=[copy_of("views")]),
         ["consumer copy_views reads undeclared topic(s) views"]),
        (dict(topics=[CLICKS], consumers=[copy_of("clicks"), copy_of("clicks", "streams/x")]),
         ["consumer name 'copy_clicks' is declared more than once"]),
        (dict(topics=[CLICKS], consumers=[copy_of("clicks", "streams/clicks_per_minute")],
              windows=[PER_MINUTE]),
         ["table streams/clicks_per_minute is written by more than one consumer "
          "(copy_clicks, window.clicks_per_minute)"]),
        (dict(topics=[CLICKS], consumers=[CLICKS]),
         ["consumers must each be a Consumer, not Topic"]),
        (dict(topics="clicks"), ["topics must each be a Topic, not str 'clicks'"]),
        (dict(topics=[CLICKS], models="/no/such/models"),
         ["models folder /no/such/models does not exist"]),
        (dict(topics=[CLICKS, CLICKS], consumers=[copy_of("views")], models="/no/such/models"),
         ["topic name 'clicks' is declared more than once", "reads undeclared topic(s) views",
          "models folder /no/such/models does not exist"]),
        (dict(joins=[shop_pipeline.joins[1]], topics=shop.TOPICS),
         ["consumer join.orders_enriched reads tables/customers, which no consumer of the "
          "pipeline writes"]),
        (dict(topics=[CLICKS], windows=[PER_MINUTE],
              groups={"window.clicks_per_minute": 2, "nope": 2}),
         ["group 'window.clicks_per_minute': consumer window.clicks_per_minute keeps state "
          "across its log partitions", "group 'nope': no consumer of the pipeline has that name"]),
        (dict(topics=[CLICKS], consumers=[copy_of("clicks")], groups={"copy_clicks": 0}),
         ["group 'copy_clicks': members must be a whole number >= 1, not 0"]),
        (dict(topics=[CLICKS], groups=["copy_clicks"]),
         ["groups must map consumer names to member counts, not list"]),
        (dict(topics=shop.TOPICS, aggregates=[shop.CARTS], groups={"aggregate.cart": 2}),
         ["group 'aggregate.cart': an event-sourced aggregate decides each command"]),
    ],
)
def test_a_bad_declaration_is_one_error_naming_each_problem(declaration, problems):
    with pytest.raises(ConfigError) as raised:
        Pipeline(**{"name": "mine", **declaration})
    message = str(raised.value)
    assert message.startswith(f"pipeline {declaration.get('name', 'mine')}: ")
    assert "\n" not in message
    for problem in problems:
        assert problem in message


def test_a_bad_model_is_named_by_its_file(tmp_path):
    (tmp_path / "per_user.sql").write_text("SELECT user FROM {{ ref('log/views') }}\n")
    with pytest.raises(ConfigError, match=r"per_user.sql: unknown ref 'log/views'"):
        Pipeline("mine", topics=[CLICKS], models=tmp_path)
    (tmp_path / "per_user.sql").write_text("SELECT user FROM {{ ref('log/clicks') }}\n")
    assert set(Pipeline("mine", topics=[CLICKS], models=tmp_path).model_graph.models) == {
        "per_user"}


def test_a_consumer_whose_decisions_are_relayed_cannot_be_rebuilt():
    [hazard] = shop_pipeline.rebuild_hazards("aggregate.cart")
    assert "relayed to topic cart_orders" in hazard
    assert shop_pipeline.rebuild_hazards("window.user_sessions") == ()


def test_a_change_stream_names_a_keyed_table_the_pipeline_writes():
    keyed = Consumer("keyed", ("clicks",), (Output("streams/keyed", T.StructType([
        T.StructField("user", T.StringType())]), keys=("user",)),), transform=lambda b: {})
    ok = Pipeline("p", topics=[CLICKS], consumers=[keyed, copy_of("clicks")],
                  change_streams="streams/keyed")
    [stream] = ok.published_streams
    assert stream.topic.name == "changes.streams.keyed" and stream.topic in ok.all_topics.values()
    assert ok.rebuild_hazards("keyed") and not ok.rebuild_hazards("copy_clicks")
    with pytest.raises(ConfigError) as bad:
        Pipeline("p", topics=[CLICKS], consumers=[keyed, copy_of("clicks")],
                 change_streams=["streams/nowhere", "streams/copy", "streams/keyed",
                                 "streams/keyed"])
    message = str(bad.value)
    assert "streams/nowhere: no consumer of the pipeline writes it" in message
    assert "streams/copy: the table has no keys" in message
    assert "'streams/keyed' is declared more than once" in message


def test_outputs_say_their_role_where_they_are_declared():
    """The Dagster layer reads late records and compacted tables off `Output.role`, so every
    operator that builds such an output must say so (not leave it to a name or a column)."""
    outputs = [o for c in shop_pipeline.all_consumers.values() for o in c.outputs]
    by_role = {role: {o.path for o in outputs if o.role is role} for role in Role}
    assert by_role[Role.LATE] == {o.path for o in outputs if o.path.endswith("_late")} != set()
    assert by_role[Role.COMPACTED] == {t.path for t in shop_pipeline.compacted_tables} != set()
    assert {"streams/cart_rejections", "streams/customer_orders_rejected"} <= by_role[Role.REJECTED]
    assert all(p.startswith("_state/") for p in by_role[Role.STATE])
    assert "streams/product_stats" in by_role[Role.DATA]
