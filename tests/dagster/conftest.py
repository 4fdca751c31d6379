"""Fixtures for the Dagster layer: resources on the test lake, and landing files to ingest."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

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
        path = Path(lake.root) / "landing" / topic / name
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps(r) for r in records] + list(extra_lines)
        path.write_text("\n".join(lines) + "\n")
        return path

    return write


@pytest.fixture
def resources(spark, lake) -> dict[str, Any]:
    """The resources of `build_definitions`, on the shared session and the test's lake."""
    session = SparkResource(master="local[2]", app_name="lakelog-tests", conf=SPARK_CONF)
    return {"spark": session, "lake": LakeResource(spark=session, root=lake.root)}
