"""A topic's declaration is checked when it is made: a clear error names what is wrong."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from lakelog.errors import ConfigError
from lakelog.log.topics import Topic


def fields(*names):
    return T.StructType([T.StructField(n, T.StringType()) for n in names])


def test_a_sound_topic_is_taken():
    topic = Topic("clicks", fields("event_id", "user_id", "error", "value"), key="user_id")
    assert topic.table_schema.fieldNames()[:2] == ["partition", "offset"]


@pytest.mark.parametrize("schema, key, problem", [
    (fields("event_id", "user_id", "offset"), "user_id", "'offset' is a reserved column name"),
    (fields("event_id", "user_id", "headers"), "user_id", "'headers' is a reserved column name"),
    (fields("event_id", "user_id"), "account", "field 'account' is not in the schema"),
    # An ingest batch's bad lines carry their error and text in these columns.
    (fields("event_id", "user_id", "_lakelog_error"), "user_id",
     "'_lakelog_error' starts with '_lakelog_'"),
    (fields("event_id", "user_id", "_LAKELOG_line"), "user_id",
     "'_LAKELOG_line' starts with '_lakelog_'"),
])
def test_a_bad_topic_is_refused_with_its_reason(schema, key, problem):
    with pytest.raises(ConfigError, match=problem):
        Topic("clicks", schema, key=key)


def test_a_bad_name_or_partition_count_is_refused():
    with pytest.raises(ConfigError, match="must be lowercase"):
        Topic("Clicks", fields("event_id", "user_id"), key="user_id")
    with pytest.raises(ConfigError, match="partitions must be >= 1"):
        Topic("clicks", fields("event_id", "user_id"), key="user_id", partitions=0)
