"""Shared fixtures: one SparkSession for the whole test session, a fresh lake per test, a fresh
PostgreSQL database per test that asks for one, and the test run's local Spark server.

The session is classic `local[2]`; with ``--spark-connect`` it is a Spark Connect session to the
test Spark server instead, so the engine and Dagster code run over Connect. The test Spark
server (`processes.TEST_SERVER`) is also what the CLI and `dagster` subprocesses use: started
by whichever process needs it first, stopped when the test run ends.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from datetime import datetime, timezone

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from processes import TEST_SERVER, write_class_archive

from lakelog.lake import EmbeddedLake
from lakelog.spark.server import ServerError, status, stop
from lakelog.spark.session import create_session, open_session

_FOREIGN_SERVER = pytest.StashKey[bool]()


def pytest_addoption(parser):
    parser.addoption(
        "--spark-connect", action="store_true",
        help="run the in-process tests over Spark Connect (the test Spark server) instead of a "
        "classic local[2] session",
    )


def pytest_collection_modifyitems(config, items):
    """The files of slow (end-to-end) tests first. `--dist loadfile` hands whole files to the
    workers in this order: the long ones start at once and the many short engine files even
    out the two workers at the end, instead of one worker finishing a long file alone."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: each file's tests stay in order


def pytest_sessionstart(session):
    # A test Spark server already running belongs to another test run on this port: not ours
    # to stop (LAKELOG_TEST_SPARK_PORT gives concurrent runs servers of their own).
    foreign = status(TEST_SERVER).alive
    session.config.stash[_FOREIGN_SERVER] = foreign
    if foreign or hasattr(session.config, "workerinput") or session.config.option.collectonly:
        return
    # Before the workers start: the servers the tests start then map the classes. A server
    # that cannot start or ingest here is left for the tests that need one to report.
    say = session.config.get_terminal_writer().line
    try:
        written = write_class_archive()
    except (ServerError, subprocess.SubprocessError) as exc:
        stderr = getattr(exc, "stderr", None) or ""  # a timeout's is bytes, even with text=True
        if isinstance(stderr, bytes):
            stderr = stderr.decode(errors="replace")
        detail = stderr.strip().splitlines()[-1:]
        say(f"could not write the test Spark servers' class archive: {exc} {' '.join(detail)}")
        return
    if written is not None:
        say(f"wrote the test Spark servers' class archive {written}")


def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):
        return  # a worker: the controller stops the server once every worker has ended
    if not session.config.stash.get(_FOREIGN_SERVER, True):
        stop(TEST_SERVER)


@pytest.fixture(scope="session")
def spark(request):
    if request.config.getoption("--spark-connect"):
        yield open_session(server=TEST_SERVER, app_name="lakelog-tests")
        return
    session = create_session(
        master="local[2]",
        app_name="lakelog-tests",
        conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"},
    )
    yield session
    session.stop()


@pytest.fixture
def lake(spark, tmp_path):
    return EmbeddedLake(spark, str(tmp_path / "lake"))


@pytest.fixture
def now():
    return datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


PG_DSN = os.environ.get(
    "LAKELOG_TEST_PG_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
)


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The PostgreSQL server of the CDC tests (``LAKELOG_TEST_PG_DSN``, default: local).

    The tests skip only if it is unreachable; one without logical decoding is an error.
    """
    info = conninfo_to_dict(PG_DSN)
    where = f"{info.get('host')}:{info.get('port', 5432)}"
    try:
        conn = psycopg.connect(PG_DSN, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as e:
        pytest.skip(f"PostgreSQL at {where} is unreachable ({' '.join(str(e).split())})")
    with conn:
        level = conn.execute("SHOW wal_level").fetchone()[0]
    if level != "logical":
        pytest.fail(
            f"PostgreSQL at {where} runs with wal_level={level}; the CDC tests need "
            "wal_level=logical (ALTER SYSTEM SET wal_level = logical, then restart it), or "
            "LAKELOG_TEST_PG_DSN pointing at a server that has it"
        )
    return PG_DSN


@pytest.fixture
def pg_database(pg_server):
    """A new, empty database for one test; dropped afterwards with every slot in it."""
    name = f"lakelog_test_{uuid.uuid4().hex}"
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(pg_server, dbname=name)
    finally:
        with psycopg.connect(pg_server, autocommit=True) as admin:
            for _ in range(100):  # a walsender left by a failed test releases its slot on exit
                active = admin.execute(
                    "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
                    " WHERE database = %s AND active_pid IS NOT NULL", (name,),
                ).fetchall()
                if not active:
                    break
                time.sleep(0.1)
            admin.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                " WHERE database = %s", (name,),
            )
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
