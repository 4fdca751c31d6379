"""Fixtures for the Dagster layer: resources on the test lake, and landing files to ingest."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from shop_records import SHOP_FILES, land_file
from processes import TEST_SERVER

from lakelog.demo.shop import TOPICS
from lakelog.lake import EmbeddedLake
from lakelog.log.ingest import ingest
from lakelog.resources import LakeResource, SparkResource

#: Same settings as the session fixture, so the resource's getOrCreate leaves them unchanged.
SPARK_CONF = {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"}


Land = Callable[..., Path]


@pytest.fixture
def land(lake) -> Land:
    """`land(topic, name, records, extra_lines=())` writes an NDJSON file to the landing zone."""

    def write(
        topic: str, name: str, records: Sequence[dict[str, Any]], extra_lines: Sequence[str] = ()
    ) -> Path:
        return land_file(lake.root, topic, name, records, extra_lines)

    return write


@pytest.fixture
def spark_resource(spark, request) -> SparkResource:
    """A Spark resource whose session is the shared one: classic, or with ``--spark-connect``
    the test Spark server's."""
    if request.config.getoption("--spark-connect"):
        return SparkResource(remote=TEST_SERVER.url, app_name="lakelog-tests")
    return SparkResource(master="local[2]", app_name="lakelog-tests", conf=SPARK_CONF)


@pytest.fixture
def resources(spark_resource, lake) -> dict[str, Any]:
    """The resources of `build_definitions`, on the shared session and the test's lake."""
    return {"spark": spark_resource, "lake": LakeResource(spark=spark_resource, root=lake.root)}


@pytest.fixture(scope="session")
def shop_template(spark, tmp_path_factory) -> Path:
    """A lake whose shop topics hold `SHOP_FILES`, ingested once per test session.

    Ingested 30 days ago by the wall clock the maintenance job uses, so the 7-day retention
    finds every batch but the newest of each log partition expired.
    """
    root = tmp_path_factory.mktemp("shop") / "lake"
    template = EmbeddedLake(spark, str(root))
    month_ago = datetime.now(timezone.utc) - timedelta(days=30)
    for (topic, name), records in SHOP_FILES.items():
        land_file(root, topic, name, records)
        ingest(template, spark, TOPICS[topic], now=month_ago)
    return root


@pytest.fixture
def shop_lake(lake, shop_template):
    """The test's own copy of `shop_template`."""
    shutil.copytree(shop_template, lake.root, dirs_exist_ok=True)
    return lake
