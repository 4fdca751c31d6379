"""Shared fixtures: one local SparkSession for the whole test session, a fresh lake per test."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from lakelog.lake import EmbeddedLake
from lakelog.session import create_session


@pytest.fixture(scope="session")
def spark():
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
