"""Engine test fixtures."""

from __future__ import annotations

import pytest
from engine_helpers import make_topic

from lakelog.log.topics import Topic


@pytest.fixture
def topic() -> Topic:
    return make_topic()
