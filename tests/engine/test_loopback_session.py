"""A Spark Connect session to a server of this machine runs its queries without reattachable
execution: there is no network between the two to break a stream of results, and keeping the
results for a reattach cost an RPC after every query. A server elsewhere keeps it."""

from __future__ import annotations

from concurrent.futures import wait

import pytest

from lakelog.spark.session import on_loopback, over_connect


@pytest.mark.parametrize("url, local", [
    ("sc://127.0.0.1:15002", True),
    ("sc://127.0.0.2:15002", True),  # all of 127.0.0.0/8 is loopback
    ("sc://localhost:15002/;user_id=me", True),
    ("sc://[::1]:15002", True),
    ("sc://spark-connect:15002", False),  # a name other than localhost may be any host
    ("sc://10.1.2.3:15002", False),
    ("sc://[2001:db8::1]:15002/;token=x", False),
])
def test_a_connect_url_names_this_machine_by_a_loopback_address_or_localhost(url, local):
    assert on_loopback(url) is local


def test_queries_on_a_server_of_this_machine_leave_no_results_to_release(spark):
    if not over_connect(spark):
        pytest.skip("a classic session's queries run in this process")
    stub = spark.client._stub
    released = []
    real = stub.ReleaseExecute
    stub.ReleaseExecute = lambda *args, **kwargs: released.append(args) or real(*args, **kwargs)
    try:
        assert [r.id for r in spark.range(3).collect()] == [0, 1, 2]
        assert spark.range(5).localCheckpoint().count() == 5
        # A reattachable query releases its results on a thread of the client's, after it.
        wait(list(getattr(spark.client, "_release_futures", ())), timeout=60)
    finally:
        stub.ReleaseExecute = real
    assert released == []
