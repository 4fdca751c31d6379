"""Great Expectations suites on tables lakelog wrote: they pass on sound tables and report,
with samples, what is wrong with damaged ones."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T
from quality_helpers import T0, append_page_views, failed

from lakelog.demo.shop import TOPICS
from lakelog.demo.shop_cdc import COMPACTED, HISTORY
from lakelog.errors import ConfigError
from lakelog.quality import names
from lakelog.quality.rows import COUNT_METRIC, ROWS_METRIC
from lakelog.quality.suites import (
    compacted_suite,
    history_suite,
    model_suites,
    row_count_bounds,
    topic_suite,
)
from lakelog.quality.validate import validate
from lakelog.views.parse import parse_model

def test_topic_suite_finds_damage_in_a_written_topic(lake, spark):
    """(A sound topic passing the suite: tests/dagster/test_quality_checks.py.)"""
    topic = TOPICS["page_views"]
    append_page_views(lake, spark, topic, 8)
    table = lake.read(lake.snapshot(topic.path))
    row = table.orderBy("partition", "offset").first()
    head = table.where(F.col("partition") == row.partition).count()
    damage = (
        table.where((F.col("partition") == row.partition) & (F.col("offset") == 0))
        .withColumn("key", F.lit(None).cast("string"))  # a duplicate offset without a key
        .unionByName(table.where((F.col("partition") == row.partition) & (F.col("offset") == 0))
                     .withColumn("offset", F.lit(head + 2).cast("long")))  # two offsets skipped
    )
    lake.write(lake.snapshot(topic.path), damage)
    [damaged] = validate(lake.read(lake.snapshot(topic.path)), [topic_suite(topic)])
    assert damaged.blocking and damaged.suite == names.TOPIC_CHECK
    assert len(damaged.results) == len(topic.table_schema.fields) + 4  # the rest passed
    found = failed(damaged)
    assert set(found) == {"expect_column_values_to_not_be_null", "expect_no_unexpected_rows"}
    assert found["expect_column_values_to_not_be_null"].arguments == {"column": "key"}
    assert found["expect_column_values_to_not_be_null"].unexpected_sample == (
        {"partition": row.partition, "offset": 0, "key": None},
    )
    offsets = found["expect_no_unexpected_rows"]  # the repeated offset, then the gap
    assert offsets.unexpected_count == 2 and offsets.success is False
    assert sorted(offsets.unexpected_sample, key=lambda r: r["offset"]) == [
        {"partition": row.partition, "previous_offset": 0, "offset": 0},
        {"partition": row.partition, "previous_offset": head - 1, "offset": head + 2},
    ]


def test_offsets_appended_after_a_check_are_unique_and_follow_it(spark):
    """The suite of rows appended since a check: a new offset that repeats another new one,
    one at or before the last checked, one after a gap and null ones are each found."""
    topic = TOPICS["page_views"]
    fields = topic.table_schema.fieldNames()

    def rows(*offsets):
        return spark.createDataFrame(
            [{**dict.fromkeys(fields), "partition": p, "offset": o, "key": "k",
              "event_id": f"e{p}-{o}"} for p, o in offsets], topic.table_schema)

    suite = topic_suite(topic, checked={0: 5, 1: 3})  # heads: offsets 0-4 and 0-2 checked
    [sound] = validate(rows((0, 5), (0, 6), (1, 3)), [suite])
    assert sound.success, failed(sound)
    [damaged] = validate(rows((0, 5), (0, 6), (0, 6), (0, None), (0, None), (1, 1), (1, 2),
                              (1, 3), (1, 5)), [suite])
    found = failed(damaged)
    assert set(found) == {"expect_no_unexpected_rows"}
    assert sorted(((r["partition"], r["offset"]) for r in
                   found["expect_no_unexpected_rows"].unexpected_sample),
                  key=lambda r: (r[0], -1 if r[1] is None else r[1])) == [
        (0, None), (0, None), (0, 6), (1, 1), (1, 2), (1, 5)]
    # two null; a repeat; two at or before the last checked offset (2); one after a gap


def test_only_topics_whose_gaps_are_allowed_check_uniqueness_apart():
    """Compacted topics and topics with erased records have no contiguity query, so GX's
    compound-unique expectation checks their offsets; other topics' query finds repeats."""
    unique = "expect_compound_columns_to_be_unique"
    changelog = next(iter(COMPACTED.values())).topic
    for suite in (topic_suite(changelog), topic_suite(TOPICS["page_views"], erased=True)):
        assert unique in {e.expectation_type for e in suite.expectations}
    assert unique not in {e.expectation_type for e in topic_suite(TOPICS["orders"]).expectations}


def test_compacted_topic_suite_allows_gaps():
    suite = topic_suite(TOPICS["orders"])
    changelog = topic_suite(next(iter(COMPACTED.values())).topic)
    queries = [e for e in suite.expectations if e.expectation_type == "expect_no_unexpected_rows"]
    assert len(queries) == 1
    assert not [e for e in changelog.expectations
                if e.expectation_type == "expect_no_unexpected_rows"]


def test_a_topic_with_struct_columns_matches_its_own_schema(spark):
    """GX lists a struct's fields as columns of their own (``after.name``); the schema
    expectation of a Debezium-shaped changelog topic must expect them."""
    topic = next(iter(COMPACTED.values())).topic
    [outcome] = validate(spark.createDataFrame([], topic.table_schema), [topic_suite(topic)])
    assert outcome.success, failed(outcome)
    [columns] = [e for e in topic_suite(topic).expectations
                 if e.expectation_type == "expect_table_columns_to_match_ordered_list"]
    assert "after.customer_id" in columns.column_list
    shuffled = T.StructType(list(reversed(topic.table_schema.fields)))
    [wrong] = validate(spark.createDataFrame([], shuffled), [topic_suite(topic)])
    assert "expect_table_columns_to_match_ordered_list" in failed(wrong)


def customer_rows(spark, table, rows):
    return spark.createDataFrame(rows, table.output.schema)


def test_compacted_suite_requires_a_unique_primary_key(lake, spark):
    table = COMPACTED["customers"]
    lake.create_table(table.path, table.output.schema)

    def row(key: int, name: str, position: str):
        return (key, name, f"{name}@x", "NL", T0, position, "c", False, T0)

    rows = [row(1, "a", "01"), row(2, "b", "02"), row(2, "b2", "03")]
    lake.write(lake.snapshot(table.path), customer_rows(spark, table, rows))
    [damaged] = validate(lake.read(lake.snapshot(table.path)), [compacted_suite(table)])
    assert damaged.blocking and damaged.suite == names.COMPACTED_CHECK
    [duplicate] = damaged.failures
    assert duplicate.expectation == "expect_column_values_to_be_unique"
    assert duplicate.arguments == {"column": "customer_id"}
    assert duplicate.unexpected_count == 2
    assert {(r["customer_id"], r["_position"]) for r in duplicate.unexpected_sample} == {
        (2, "02"), (2, "03"),
    }


def test_history_suite_requires_one_current_row_and_disjoint_intervals(lake, spark):
    table = HISTORY["customers"]
    t1, t2 = T0 + timedelta(hours=1), T0 + timedelta(hours=2)

    def version(key, name, start, end, current, position):
        return (key, name, None, None, T0, start, end, current, position, "u", False, start)

    # Customer 1's versions are sound; customer 2 has two current versions that overlap.
    rows = [version(1, "a", T0, t1, False, "01"), version(1, "b", t1, None, True, "02"),
            version(2, "c", T0, None, True, "03"), version(2, "d", t2, None, True, "04")]
    lake.create_table(table.path, table.output.schema)
    lake.write(lake.snapshot(table.path), customer_rows(spark, table, rows))
    [damaged] = validate(lake.read(lake.snapshot(table.path)), [history_suite(table)])
    assert damaged.blocking and damaged.suite == names.HISTORY_CHECK
    found = failed(damaged)
    current = found["expect_column_values_to_be_unique"]
    assert current.arguments["row_condition"]["pass_through_filter"] == "is_current"
    assert current.unexpected_count == 2
    assert {r["customer_id"] for r in current.unexpected_sample} == {2}
    overlap = found["expect_no_unexpected_rows"]
    assert overlap.unexpected_count == 1
    [sample] = overlap.unexpected_sample
    assert (sample["customer_id"], sample["valid_to"]) == (2, None)
    assert sample["next_valid_from"] is not None


@pytest.mark.parametrize(("previous", "change", "bounds"),
                         [(100, 1.0, (50, 200)), (10, 0.5, (6, 15)), (3, 2.0, (1, 9))])
def test_row_count_bounds_are_a_factor_either_way(previous, change, bounds):
    assert row_count_bounds(previous, change) == bounds


def test_a_model_declares_its_own_expectations(spark):
    model = parse_model(
        "{{ config(materialized='table', expect=[('expect_column_values_to_not_be_null',"
        " {'column': 'query'}), ('expect_column_values_to_match_regex', {'column': 'query',"
        " 'regex': '^[a-z ]+$'})]) }}\nSELECT 'x' AS query",
        name="m", file="m.sql", folder="f",
    )
    assert names.model_checks(model) == (names.EXPECTATIONS,)
    [suite] = model_suites(model, previous_rows=None)
    rows = spark.createDataFrame([("shoes",), (None,), ("Hats!",)], "query string")
    [outcome] = validate(rows, [suite])
    assert not outcome.blocking and not outcome.success
    found = failed(outcome)
    assert found["expect_column_values_to_not_be_null"].unexpected_count == 1
    assert found["expect_column_values_to_match_regex"].unexpected_sample == ("Hats!",)

    typo = parse_model(
        "{{ config(materialized='table', expect=[('expect_column_to_be_nice', {})]) }}\nSELECT 1",
        name="m", file="models/m.sql", folder="f",
    )
    with pytest.raises(ConfigError, match="^models/m.sql: 'expect_column_to_be_nice' is not a "):
        model_suites(typo, previous_rows=None)
    wrong = parse_model(
        "{{ config(materialized='table', expect=[('expect_column_values_to_not_be_null',"
        " {'colum': 'query'})]) }}\nSELECT 1",
        name="m", file="models/m.sql", folder="f",
    )
    with pytest.raises(ConfigError, match="^models/m.sql: expect_column_values_to_not_be_null"):
        model_suites(wrong, previous_rows=None)


def test_model_suites_follow_the_config_header():
    model = parse_model(
        "{{ config(materialized='incremental', unique_key='id', ranges={'n': (0, 5)},"
        " row_count_change=1.0) }}\nSELECT 1 AS id, 2 AS n",
        name="m", file="m.sql", folder="f",
    )
    suites = {s.name: s for s in model_suites(model, previous_rows=40)}
    assert set(suites) == set(names.model_checks(model)) == {
        names.VALUE_RANGES, names.ROW_COUNT_CHANGE, names.UNIQUE_KEY,
    }
    assert not any(s.blocking for s in suites.values())
    [between] = suites[names.VALUE_RANGES].expectations
    assert (between.column, between.min_value, between.max_value) == ("n", 0, 5)
    [count] = suites[names.ROW_COUNT_CHANGE].expectations
    assert (count.min_value, count.max_value) == (20, 80)
    first = {s.name: s for s in model_suites(model, previous_rows=0)}
    assert first[names.ROW_COUNT_CHANGE].expectations == ()


def test_a_row_query_is_only_counted_when_success_alone_is_asked_for():
    """GX's UnexpectedRowsExpectation fetches a query's rows and counts them whatever the result
    format; ExpectNoUnexpectedRows only counts them for BOOLEAN_ONLY."""
    [query] = [e for e in topic_suite(TOPICS["page_views"]).expectations
               if e.expectation_type == "expect_no_unexpected_rows"]

    def metrics(result_format):
        found = query.get_validation_dependencies(
            runtime_configuration={"result_format": result_format})
        return set(found.get_metric_names())

    assert metrics("BOOLEAN_ONLY") == {COUNT_METRIC}
    assert metrics("COMPLETE") == metrics("SUMMARY") == {COUNT_METRIC, ROWS_METRIC}


def test_a_passing_row_query_runs_once(lake, spark, monkeypatch):
    """A sound topic's offsets query runs as one count, not also as a fetch of its rows; a
    damaged topic's is run again for the rows (the first test above)."""
    topic = TOPICS["page_views"]
    append_page_views(lake, spark, topic, 5)
    queries = []
    sql = type(spark).sql

    def counted(self, query, *args, **kwargs):
        if "previous_offset" in query:
            queries.append(query)
        return sql(self, query, *args, **kwargs)

    monkeypatch.setattr(type(spark), "sql", counted)
    [outcome] = validate(lake.read(lake.snapshot(topic.path)), [topic_suite(topic)], cache=False)
    assert outcome.success, failed(outcome)
    assert len(queries) == 1  # GX's own UnexpectedRowsExpectation: 2
