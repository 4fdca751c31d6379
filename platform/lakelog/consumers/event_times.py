"""The greatest event time of each of a batch's inputs: what moves its consumer's watermark
(`lakelog.consumers.watermarks`, which follows the slowest input)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakelog.log.offsets import RangeStats


def from_stats(stats: Mapping[str, RangeStats | None],
               topics: Sequence[str]) -> dict[str, datetime | None] | None:
    """Each topic's greatest `event_time` from the batch's `RangeStats` (None for a topic with no
    record), or None when the statistics of one are not known: then only a read can tell."""
    if any(stats.get(t) is None for t in topics):
        return None
    return {t: stats[t].event_time and stats[t].event_time[1] for t in topics}


def tagged(times: Sequence[tuple[str, Column]], frames: Sequence[DataFrame], *, value: str,
           tag: str) -> tuple[DataFrame, dict[str, Column]]:
    """The inputs' times in one frame (`value`, and in `tag` the input's number), and per input
    the aggregate of its greatest time there: `times` are (input, time column) of each of
    `frames`; frames of the same input (a join of a topic with itself) count together."""
    names = list(dict.fromkeys(name for name, _ in times))
    union = reduce(DataFrame.unionByName, [
        frame.select(column.alias(value), F.lit(names.index(name)).alias(tag))
        for (name, column), frame in zip(times, frames)])
    return union, {name: F.max(F.when(F.col(tag) == i, F.col(value)))
                   for i, name in enumerate(names)}


def greatest(times: Sequence[tuple[str, DataFrame, str]]) -> dict[str, datetime | None]:
    """The greatest value of each input's times, given as (input, frame, timestamp column), in
    one Spark job; frames of the same input (a join of a topic with itself) count together."""
    union, latest = tagged([(name, F.col(column)) for name, _, column in times],
                           [frame for _, frame, _ in times], value="t", tag="input")
    row = union.agg(*(c.alias(f"t{i}") for i, c in enumerate(latest.values()))).first()
    return {name: row[i] for i, name in enumerate(latest)}
