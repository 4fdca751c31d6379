"""CDC fixtures: a seeded SQLite shop database, and a fresh PostgreSQL database per test.

PostgreSQL tests use ``LAKELOG_TEST_PG_DSN`` (default: the local server on 127.0.0.1:5432,
user postgres). Each test creates its own database ``lakelog_cdc_<hex>`` and drops it, with
every replication slot in it, afterwards. The tests skip only if the server is unreachable.
"""

from __future__ import annotations

import os
import sqlite3
import time
import uuid

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from lakelog.demo import oltp

PG_DSN = os.environ.get(
    "LAKELOG_TEST_PG_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
)


@pytest.fixture
def sqlite_path(tmp_path):
    """A seeded shop database (WAL mode comes with capture's install)."""
    path = str(tmp_path / "shop.db")
    conn = sqlite3.connect(path)
    oltp.create_schema(conn, "sqlite")
    oltp.seed(conn, "sqlite", customers=60, products=40, seed=3)
    conn.close()
    return path


@pytest.fixture(scope="session")
def pg_server() -> str:
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
def pg_dsn(pg_server):
    """A new database (seeded shop schema) for one test; dropped with its slots afterwards."""
    name = f"lakelog_cdc_{uuid.uuid4().hex}"
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = make_conninfo(pg_server, dbname=name)
    try:
        with psycopg.connect(dsn) as conn:
            oltp.create_schema(conn, "postgres")
            oltp.seed(conn, "postgres", customers=60, products=40, seed=3)
        yield dsn
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


@pytest.fixture
def slot() -> str:
    return f"lakelog_test_{uuid.uuid4().hex[:16]}"
