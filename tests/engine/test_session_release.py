"""What a process's Spark Connect session leaves in the server: nothing, once the process has
exited. Its session is released at exit (else the server keeps it, and what it holds, for an
idle hour), and its local rows travel inside its plans (a relation uploaded as an artifact may
stay in the server's memory after its session is gone)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import weakref

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import types as T
from pyspark.sql.connect.client import SparkConnectClient

from processes import TEST_SERVER

from lakelog.spark.session import over_connect, release_at_exit


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


def test_only_the_process_that_built_a_session_releases_it(connect):
    # A forked child inherits its parent's session, and exits before the parent.
    release_at_exit(weakref.ref(connect), os.getpid() + 1)
    assert not connect.is_stopped
    assert _timezone_of_session(connect.client._session_id) == "UTC"


#: A child whose server stops answering once its session is open: between the two, a proxy
#: that relays bytes until told to hold them (the connection stays open, nothing comes back).
_UNANSWERED = """
import socket, sys, threading
from lakelog.spark.session import create_session

holding = threading.Event()

def relay(source, target):
    try:
        while data := source.recv(65536):
            if holding.is_set():
                threading.Event().wait()  # the request is never answered
            target.sendall(data)
    except OSError:
        pass

def accept(listener):
    while True:
        client, _ = listener.accept()
        server = socket.create_connection(("127.0.0.1", {port}))
        for pair in ((client, server), (server, client)):
            threading.Thread(target=relay, args=pair, daemon=True).start()

listener = socket.create_server(("127.0.0.1", 0))
threading.Thread(target=accept, args=(listener,), daemon=True).start()
spark = create_session(remote=f"sc://127.0.0.1:{{listener.getsockname()[1]}}")
assert spark.range(3).count() == 3
holding.set()
print(spark.client._session_id, flush=True)
"""


def test_a_process_exits_when_its_server_does_not_answer_the_release(connect):
    # Without a bound on the wait, the release (no deadline of its own) would hold the
    # process's exit for as long as the server stays silent: the timeout would end the test.
    child = subprocess.run([sys.executable, "-c", _UNANSWERED.format(port=TEST_SERVER.port)],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    # The release never reached the server: it keeps the session, for its idle hour.
    assert _timezone_of_session(child.stdout.strip()) == "UTC"


def test_local_rows_of_megabytes_travel_inside_the_plan(connect):
    table = pa.table({"x": pa.array(range(300_000), pa.int64())})  # 2.4 MB of Arrow
    frame = connect.createDataFrame(table, T.StructType([T.StructField("x", T.LongType())]))
    # Not uploaded as an artifact (`ChunkedCachedLocalRelation`, `CachedLocalRelation`) that
    # the server keeps in its block manager.
    assert type(frame._plan).__name__ == "LocalRelation"
    assert frame.agg({"x": "sum"}).first()[0] == 300_000 * 299_999 // 2
