"""A classic session finds Spark's Java helpers once: later calls send only the call itself."""

from __future__ import annotations

import threading

import pytest
from pyspark.sql import functions as F
from py4j.java_gateway import JavaClass

from lakelog.spark import java_lookups
from lakelog.spark.session import over_connect


@pytest.fixture
def sent(spark):
    """The py4j commands the test's own thread sends while the test runs (not the deletions
    py4j's finalizer thread sends for Java objects let go, whenever it wakes)."""
    if over_connect(spark):
        pytest.skip("a classic session's py4j gateway")
    client = spark.sparkContext._gateway._gateway_client
    commands: list[str] = []
    real, mine = client.send_command, threading.get_ident()

    def send(command: str, *args, **kwargs):
        if threading.get_ident() == mine:
            commands.append(command)
        return real(command, *args, **kwargs)

    client.send_command = send
    try:
        yield commands
    finally:
        del client.send_command


def test_a_column_by_name_is_one_call_once_its_method_was_found(spark, sent):
    F.col("warm"), F.lit(0)  # looked up on the first use (maybe by another test before)
    sent.clear()
    column, literal = F.col("id"), F.lit(7)
    assert [c.split("\n")[:3] for c in sent] == [
        ["c", "z:org.apache.spark.sql.functions", "col"],
        ["c", "z:org.apache.spark.sql.functions", "lit"],
    ]
    rows = spark.range(2).select(column, literal.alias("seven"), column.cast("string")).collect()
    assert [tuple(r) for r in rows] == [(0, 7, "0"), (1, 7, "1")]


def test_the_view_holds_one_class_per_helper_under_each_name(spark, sent):
    jvm = spark.sparkContext._jvm
    assert jvm.functions is getattr(jvm, "org.apache.spark.sql.functions")
    assert all(isinstance(vars(jvm)[name], java_lookups.KeptMethods)
               for name in ("functions", "PythonUtils", "PythonSQLUtils"))
    java_lookups.keep(jvm)  # again: nothing is looked up again, nothing replaced
    assert not sent and jvm.functions is getattr(jvm, "org.apache.spark.sql.functions")


def test_fields_are_read_each_time_and_unknown_members_still_fail(spark, sent):
    client = spark.sparkContext._gateway._gateway_client
    integer = java_lookups.KeptMethods("java.lang.Integer", client)
    assert integer.MAX_VALUE == 2**31 - 1 and integer.MAX_VALUE == 2**31 - 1
    assert "MAX_VALUE" not in vars(integer)
    assert sum(c.startswith("r\nm\njava.lang.Integer\nMAX_VALUE") for c in sent) == 2
    assert integer.valueOf("12") == 12 and "valueOf" in vars(integer)
    with pytest.raises(Exception, match="does not exist"):
        integer.noSuchMember
    assert isinstance(integer, JavaClass)
