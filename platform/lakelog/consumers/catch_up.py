"""Running a consumer until it has consumed everything its topics hold: batch after batch for
a consumer alone, partition by partition for a group (`lakelog.consumers.groups`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

from lakelog.consumers import batch
from lakelog.consumers.batch import BatchResult
from lakelog.consumers.consumer import Consumer
from lakelog.consumers.groups import run_group
from lakelog.lake import Lake
from lakelog.log.topics import Topic


def run_until_caught_up(
    lake: Lake,
    consumer: Consumer,
    topics: Mapping[str, Topic],
    *,
    now: Callable[[], datetime],
    max_batches: int | None = None,
) -> list[BatchResult]:
    if consumer.members:
        return run_group(lake, consumer, topics, now=now, max_batches=max_batches)
    results: list[BatchResult] = []
    while max_batches is None or len(results) < max_batches:
        result = batch.run_batch(lake, consumer, topics, now=now())
        if result is None:
            break
        results.append(result)
        if result.records == 0:  # an idle tick: one per call is enough
            break
    return results
