"""Whose row, line or dead letter is a subject's: subject columns at the top level and in
structs, compared as text; raw text by whole token."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from lakelog.erasure.subject import (
    line_holds,
    subject_fields,
    subject_filter,
    subject_hash,
    text_filter,
)

NAMES = ("user_id", "customer_id")
CUSTOMER = T.StructType([T.StructField("customer_id", T.LongType()),
                         T.StructField("name", T.StringType())])
SCHEMA = T.StructType([
    T.StructField("id", T.IntegerType()),
    T.StructField("user_id", T.StringType()),
    T.StructField("before", CUSTOMER),
    T.StructField("after", CUSTOMER),
    T.StructField("raw", T.StringType()),
])


def test_subject_fields_are_top_level_columns_and_struct_fields():
    assert subject_fields(SCHEMA, NAMES) == ["user_id", "before.customer_id", "after.customer_id"]
    assert subject_fields(SCHEMA, ("email",)) == []


def test_rows_are_matched_by_any_subject_column_as_text(spark):
    rows = [
        (1, "u42", None, None, None),
        (2, "u4", None, None, None),
        (3, None, None, (42, "Ann"), None),  # a created customer 42
        (4, None, (42, None), None, None),  # a deleted one
        (5, None, (7, None), (7, "Bo"), None),
        (6, "u7", None, None, "a u42 line"),
    ]
    df = spark.createDataFrame(rows, SCHEMA)
    assert sorted(r.id for r in df.where(subject_filter(SCHEMA, NAMES, "u42")).collect()) == [1]
    assert sorted(r.id for r in df.where(subject_filter(SCHEMA, NAMES, "42")).collect()) == [3, 4]
    assert sorted(r.id for r in df.where(text_filter("raw", "u42")).collect()) == [6]
    assert df.where(text_filter("raw", "u4")).isEmpty()  # not a whole token of "u42"
    assert subject_filter(T.StructType([T.StructField("x", T.StringType())]), NAMES, "u4") is None


@pytest.mark.parametrize("line, held", [
    ('{"event_id":"e1","user_id":"u42","page":"home"}', True),
    ('{"event_id":"e1","user_id":"u4","page":"u42"}', False),  # u42 is not its subject column
    ('{"before":null,"after":{"customer_id":42,"name":"Ann"},"op":"c"}', True),
    ('{"before":{"customer_id":420},"after":null,"op":"d"}', False),
    ('{"event_id":"e1","user_id":"u42","amount":"lots"', True),  # malformed: by token
    ('{"event_id":"e1","user_id":"u420"', False),
    ('', False),
])
def test_landing_lines(line, held):
    subject = "42" if "customer_id" in line else "u42"
    assert line_holds(line, NAMES, subject) is held


def test_the_hash_needs_the_salt():
    assert subject_hash("u42", "s1") == subject_hash("u42", "s1") != subject_hash("u42", "s2")
    assert "u42" not in subject_hash("u42", "s1")
