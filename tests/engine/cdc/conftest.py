"""CDC fixtures: a seeded SQLite shop database, and a fresh PostgreSQL database per test.

PostgreSQL tests use ``LAKELOG_TEST_PG_DSN`` (default: the local server on 127.0.0.1:5432,
user postgres). Each test creates its own database (tests/conftest.py's `pg_database`) and
drops it, with every replication slot in it, afterwards. The tests skip only if the server is
unreachable.
"""

from __future__ import annotations

import sqlite3
import uuid

import psycopg
import pytest

from lakelog.demo import oltp


@pytest.fixture
def sqlite_path(tmp_path):
    """A seeded shop database (WAL mode comes with capture's install)."""
    path = str(tmp_path / "shop.db")
    conn = sqlite3.connect(path)
    oltp.create_schema(conn, "sqlite")
    oltp.seed(conn, "sqlite", customers=60, products=40, seed=3)
    conn.close()
    return path


@pytest.fixture
def pg_dsn(pg_database):
    """A new database with the seeded shop schema, for one test; dropped with its slots."""
    with psycopg.connect(pg_database) as conn:
        oltp.create_schema(conn, "postgres")
        oltp.seed(conn, "postgres", customers=60, products=40, seed=3)
    return pg_database


@pytest.fixture
def slot() -> str:
    return f"lakelog_test_{uuid.uuid4().hex[:16]}"
