"""Source table declarations: validation and the Spark schema of a row."""

from __future__ import annotations

import re

import pytest
from pyspark.sql import types as T

from lakelog.cdc import SourceColumn, SourceTable
from lakelog.demo import oltp
from lakelog.errors import ConfigError

ID = SourceColumn("id", "bigint")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: SourceTable("t", (ID,), ("nope",)), "primary key column(s) ['nope']"),
        (lambda: SourceTable("t", (), ("id",)), "no columns"),
        (lambda: SourceTable("t", (ID,), ()), "no primary key"),
        (lambda: SourceTable("Bad-Name", (ID,), ("id",)), "source table 'Bad-Name'"),
        (lambda: SourceTable("_hidden", (ID,), ("id",)), "source table '_hidden'"),
        (lambda: SourceTable("t", (ID, ID), ("id",)), "repeated"),
        (lambda: SourceTable("t", (ID,), ("id", "id")), "repeats"),
        (lambda: SourceColumn("1x", "text"), "column '1x'"),
        (lambda: SourceColumn("x", "varchar"), "unknown type 'varchar'"),
        (lambda: SourceColumn("x", "numeric"), "needs precision and scale"),
        (lambda: SourceColumn("x", "numeric", precision=5, scale=6), "numeric(5,6)"),
        (lambda: SourceColumn("x", "text", precision=5), "numeric columns only"),
    ],
)
def test_bad_declarations_are_config_errors(build, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        build()


def test_spark_schema_types_every_column_nullable():
    table = SourceTable(
        "every_type",
        (
            SourceColumn("a", "bigint"),
            SourceColumn("b", "integer"),
            SourceColumn("c", "text"),
            SourceColumn("d", "double"),
            SourceColumn("e", "numeric", precision=10, scale=2),
            SourceColumn("f", "boolean"),
            SourceColumn("g", "timestamp"),
        ),
        ("a",),
    )
    assert table.spark_schema() == T.StructType(
        [
            T.StructField("a", T.LongType(), True),
            T.StructField("b", T.IntegerType(), True),
            T.StructField("c", T.StringType(), True),
            T.StructField("d", T.DoubleType(), True),
            T.StructField("e", T.DecimalType(10, 2), True),
            T.StructField("f", T.BooleanType(), True),
            T.StructField("g", T.TimestampType(), True),
        ]
    )


def test_demo_tables_are_the_changelog_topics():
    assert [t.topic for t in oltp.TABLES] == ["cdc.customers", "cdc.products", "cdc.inventory"]
    assert oltp.PRODUCTS.spark_schema()["price"].dataType == T.DecimalType(10, 2)
    assert oltp.CUSTOMERS.key({"customer_id": 7, "name": "x"}) == (7,)
