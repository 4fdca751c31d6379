"""What a process's Spark Connect session leaves in the server: nothing, once the process has
exited. Its session is released at exit (else the server keeps it, and what it holds, for an
idle hour), and its local rows travel inside its plans (a relation uploaded as an artifact may
stay in the server's memory after its session is gone)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import types as T
from pyspark.sql.connect.client import SparkConnectClient

from processes import TEST_SERVER

from lakelog.spark.session import over_connect


@pytest.fixture
def connect(spark):
    if not over_connect(spark):
        pytest.skip("a classic session lives and ends with its own process's JVM")
    return spark


def _timezone_of_session(session_id: str) -> str:
    """The session's time zone, asked of the test server by a client of its own that joins
    session `session_id` (and leaves it to its owner: closing the channel releases nothing)."""
    client = SparkConnectClient(f"{TEST_SERVER.url}/;session_id={session_id}")
    client.set_retry_policies([])
    try:
        return client.get_configs("spark.sql.session.timeZone")[0]
    finally:
        client.close()


def test_a_process_releases_its_connect_session_as_it_exits(connect):
    # A session that lives answers a second client that names it: so a released one would too.
    assert _timezone_of_session(connect.client._session_id) == "UTC"
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        from lakelog.spark.session import create_session
        spark = create_session(remote={TEST_SERVER.url!r})
        assert spark.range(3).count() == 3
        print(spark.client._session_id)
        """)], capture_output=True, text=True, timeout=300, check=True)
    session_id = child.stdout.strip()
    with pytest.raises(PySparkException, match="SESSION_CLOSED"):
        _timezone_of_session(session_id)


def test_local_rows_of_megabytes_travel_inside_the_plan(connect):
    table = pa.table({"x": pa.array(range(300_000), pa.int64())})  # 2.4 MB of Arrow
    frame = connect.createDataFrame(table, T.StructType([T.StructField("x", T.LongType())]))
    # Not uploaded as an artifact (`ChunkedCachedLocalRelation`, `CachedLocalRelation`) that
    # the server keeps in its block manager.
    assert type(frame._plan).__name__ == "LocalRelation"
    assert frame.agg({"x": "sum"}).first()[0] == 300_000 * 299_999 // 2
