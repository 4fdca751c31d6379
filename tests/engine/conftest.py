"""Engine test fixtures."""

from __future__ import annotations

import pytest
from engine_helpers import make_topic

from lakelog.lake import one_partition
from lakelog.log.topics import Topic


@pytest.fixture
def topic() -> Topic:
    return make_topic()


@pytest.fixture(params=["one partition", "spread"])
def partitions(request, monkeypatch) -> str:
    """A test's batches worked on as lakelog works on few rows, in one partition, or spread
    over partitions and shuffled, as it works on many (`lakelog.lake.one_partition`)."""
    if request.param == "spread":
        monkeypatch.setattr(one_partition, "FEW_RECORDS", -1)
    return request.param
