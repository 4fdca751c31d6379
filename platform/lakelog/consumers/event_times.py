"""The greatest event time of each of a batch's inputs: what moves its consumer's watermark
(`lakelog.consumers.watermarks`, which follows the slowest input).

A batch cut short by `max_records_per_batch` (a consumer catching up) leaves records in each
log partition it read (`BatchInput.cut`). Those partitions drift apart in event time as they
drain, and a watermark pushed by the fastest would make the slower ones' waiting records late.
So such a batch also finds its `hold`: the least of the cut partitions' greatest event times,
which the watermark does not pass (less the lateness), as Flink's Kafka source keeps a
watermark per partition. A batch that took all there was holds nothing back: a partition's
records still to come are new arrivals, as in Spark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakelog.log.offsets import RangeStats

_PARTITION = "_lakelog_partition"


@dataclass(frozen=True)
class Latest:
    """Each input's greatest event time in a batch (None: no record of it), and `hold`: the
    least greatest event time of the log partitions the batch was cut short in (None: none)."""

    by_input: dict[str, datetime | None]
    hold: datetime | None = None


def from_stats(stats: Mapping[str, RangeStats | None], topics: Sequence[str],
               cut: Mapping[str, Sequence[int]] | None = None) -> Latest | None:
    """Each topic's greatest `event_time` from the batch's `RangeStats`, and the hold of the
    partitions `cut` names (per topic), or None when the statistics of one topic are not known:
    then only a read can tell."""
    if any(stats.get(t) is None for t in topics):
        return None
    held = [stats[t].latest[p] for t in topics for p in (cut or {}).get(t, ())
            if p in stats[t].latest]
    return Latest({t: stats[t].event_time and stats[t].event_time[1] for t in topics},
                  min(held) if held else None)


def tagged(times: Sequence[tuple[str, Column]], frames: Sequence[DataFrame], *, value: str,
           tag: str, cut: Mapping[str, Sequence[int]] | None = None,
           ) -> tuple[DataFrame, dict[str, Column], Column | None]:
    """The inputs' times in one frame (`value`, and in `tag` the input's number), per input the
    aggregate of its greatest time there, and the aggregate of the hold of the log partitions
    `cut` names (None: none; the frames are then a log's records, with their `partition`).
    `times` are (input, time column) of each of `frames`; frames of the same input (a join of a
    topic with itself) count together."""
    names = list(dict.fromkeys(name for name, _ in times))
    cut = {name: parts for name, parts in (cut or {}).items() if name in names and parts}
    union = reduce(DataFrame.unionByName, [
        frame.select(column.alias(value), F.lit(names.index(name)).alias(tag),
                     *([F.col("partition").alias(_PARTITION)] if cut else []))
        for (name, column), frame in zip(times, frames)])
    held = [F.max(F.when((F.col(tag) == names.index(name)) & (F.col(_PARTITION) == p),
                         F.col(value)))
            for name, parts in cut.items() for p in parts]
    hold = (held[0] if len(held) == 1 else F.least(*held)) if held else None
    return union, {name: F.max(F.when(F.col(tag) == i, F.col(value)))
                   for i, name in enumerate(names)}, hold


def greatest(times: Sequence[tuple[str, DataFrame, str]],
             cut: Mapping[str, Sequence[int]] | None = None) -> Latest:
    """The greatest value of each input's times, given as (input, frame, timestamp column), and
    the hold of the partitions `cut` names, in one Spark job; frames of the same input (a join
    of a topic with itself) count together."""
    union, latest, hold = tagged([(name, F.col(column)) for name, _, column in times],
                                 [frame for _, frame, _ in times], value="t", tag="input",
                                 cut=cut)
    row = union.agg(*(c.alias(f"t{i}") for i, c in enumerate(latest.values())),
                    *([] if hold is None else [hold.alias("hold")])).first()
    return Latest({name: row[i] for i, name in enumerate(latest)},
                  None if hold is None else row["hold"])
