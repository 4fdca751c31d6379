"""Replay of a windowed aggregate: a time range recomputed from the retained log, and compared
with what the live microbatches produced (DESIGN "Orchestration": replayed results must equal
the live ones).

A replay reads the records the live consumer has committed (so a lagging consumer is compared
with what it has seen), keeps those whose event time can reach a window starting in the range,
and computes the windows in one batch (`lakelog.windows.batch_windows`). The result replaces the
range in ``replays/<name>`` (files of other ranges are kept: their ``window_start`` statistics
tell them apart).

The comparison is over the windows starting in the range, on the group-by keys, the window
bounds and the public values; ``is_final``, ``revision``, ``batch`` and the ``_`` partials are
bookkeeping and left out. In ``final`` emit mode only the replayed windows the live watermark
has passed are expected live. Doubles are compared rounded to 9 decimal places, since a sum folded
over several microbatches adds the same numbers in another order. Windows that dropped a late
record (policy ``drop``) differ on purpose and are reported apart, not as differences; so are
windows that start before the oldest record retention has kept (their replay would be partial).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.consumers import checkpoints
from lakelog.consumers.watermarks import watermark_of
from lakelog.errors import ConfigError
from lakelog.lake import Lake
from lakelog.log.offsets import partition_states, read_offsets, topic_snapshot
from lakelog.log.topics import Topic
from lakelog.spark import literals
from lakelog.windows import Session, WindowedAggregate, batch_windows
from lakelog.windows.consumer import prepared

BOOKKEEPING = ("is_final", "revision", "batch")
SAMPLE = 5


def replay_path(agg: WindowedAggregate) -> str:
    return f"replays/{agg.name}"


def _reach(agg: WindowedAggregate) -> timedelta | None:
    """How far after a window's start its events can lie (None: unbounded, sessions)."""
    window = agg.window
    if isinstance(window, Session):
        return None
    return window.size


def committed_records(
    lake: Lake, agg: WindowedAggregate, topics: Mapping[str, Topic]
) -> dict[str, DataFrame]:
    """Per topic, the retained records the live consumer has committed."""
    checkpoint = checkpoints.load(lake, agg.consumer.name)
    found = {}
    for name in agg.topics:
        if name not in topics:
            raise ConfigError(f"windowed aggregate {agg.name} reads undeclared topic {name}")
        topic = topics[name]
        snapshot = topic_snapshot(lake, topic)
        ranges = {
            p: (state.start_offset, checkpoint.committed.get((name, p), state.start_offset))
            for p, state in partition_states(snapshot, topic.partitions).items()
        }
        found[name] = read_offsets(lake, snapshot, ranges)
    return found


def retained_from(
    lake: Lake, agg: WindowedAggregate, topics: Mapping[str, Topic]
) -> datetime | None:
    """The oldest event time still in the log, if retention has removed records; else None."""
    oldest = None
    for name in agg.topics:
        snapshot = topic_snapshot(lake, topics[name])
        if any(s.start_offset > 0 for s in partition_states(snapshot, topics[name].partitions).values()):
            first = lake.read(snapshot).agg(F.min("event_time")).first()[0]
            if first is not None and (oldest is None or first > oldest):
                oldest = first
    return oldest


def replay_windows(
    lake: Lake,
    agg: WindowedAggregate,
    topics: Mapping[str, Topic],
    *,
    start: datetime,
    end: datetime,
) -> DataFrame:
    """The windows starting in ``[start, end)``, recomputed from the committed, retained log."""
    if end <= start:
        raise ConfigError(f"replay of {agg.name}: empty range [{start}, {end})")
    records = committed_records(lake, agg, topics)
    reach = _reach(agg)
    if reach is not None:  # a window starting in the range ends before end + reach
        window = _between("event_time", start, end + reach)
        records = {name: df.where(window) for name, df in records.items()}
    windows = batch_windows(agg, prepared(agg, records))
    return windows.where(_between("window_start", start, end))


def _between(column: str, start: datetime, end: datetime) -> Column:
    """``start <= column < end``, the bounds sent as literals that need no round trip."""
    return (F.col(column) >= literals.timestamp(start)) & (F.col(column) < literals.timestamp(end))


def write_replay(
    lake: Lake, agg: WindowedAggregate, rows: DataFrame, *, start: datetime, end: datetime
) -> int:
    """Replace ``[start, end)`` of ``replays/<name>`` with `rows`; returns the Delta version."""
    path = replay_path(agg)
    lake.create_table(path, agg.windows.schema)
    snapshot = lake.snapshot(path)
    old = [f for f in snapshot.files() if f.overlaps("window_start", start, end - timedelta(microseconds=1))]
    kept = lake.read(snapshot, files=old).where(~_between("window_start", start, end))
    return lake.write(
        snapshot,
        kept.unionByName(rows.select(*agg.windows.schema.fieldNames())),
        remove=old,
        metadata={"lakelog.replay": {"start": start.isoformat(), "end": end.isoformat()}},
    )


@dataclass(frozen=True)
class Comparison:
    """Live windows against replayed ones over one range (see the module docstring)."""

    compared: int
    missing: int  # in the replay, not live
    extra: int  # live, not in the replay
    differing: int  # both, other values
    dropped_late: int  # windows left out: a late record was dropped from them on purpose
    beyond_retention: int  # windows left out: they start before the oldest retained record
    samples: tuple[dict, ...]

    @property
    def matches(self) -> bool:
        return self.missing == 0 and self.extra == 0 and self.differing == 0


def _comparable(agg: WindowedAggregate, df: DataFrame) -> DataFrame:
    columns = []
    for field in agg.windows.schema.fields:
        if field.name.startswith("_") or field.name in BOOKKEEPING:
            continue
        column = F.col(field.name)
        if isinstance(field.dataType, (T.DoubleType, T.FloatType)):
            column = F.round(column, 9)
        columns.append(column.alias(field.name))
    return df.select(*columns)


def compare(
    lake: Lake,
    agg: WindowedAggregate,
    *,
    start: datetime,
    end: datetime,
    replayed: DataFrame | None = None,
    retained: datetime | None = None,
) -> Comparison:
    """Compare the live windows starting in ``[start, end)`` with the replay of that range.

    `retained` is the oldest event time the log still holds (`retained_from`), if retention
    removed records; windows starting before it are counted apart.
    """
    in_range = _between("window_start", start, end)
    if replayed is None:
        replayed = lake.read(lake.snapshot(replay_path(agg))).where(in_range)
    live_path = agg.windows.path
    live = lake.read(lake.snapshot(live_path)).where(in_range) if lake.exists(live_path) else (
        replayed.limit(0)
    )
    if agg.emit == "final":  # the live table publishes a window once the watermark passed it
        mark = watermark_of(checkpoints.load(lake, agg.consumer.name).state)
        replayed = replayed.where(F.lit(mark is not None) & (F.col("window_end") <= literals.timestamp(mark)))
    keys = list(agg.keys)
    beyond = 0
    if retained is not None:
        old = F.col("window_start") < literals.timestamp(retained)
        beyond = live.where(old).count()
        live, replayed = live.where(~old), replayed.where(~old)
    if agg.late == "drop" and lake.exists(agg.late_records.path):
        on = [k for k in keys if k != "event_id"]  # a sliding window's late event: its window
        dropped = (
            lake.read(lake.snapshot(agg.late_records.path))
            .where(in_range & (F.col("policy") == "drop") & F.col("window_start").isNotNull())
            .select(*on).distinct()
        )
        affected = replayed.select(*on).unionByName(live.select(*on)).distinct()
        dropped_count = affected.join(dropped, on, "left_semi").count()
        live = live.join(dropped, on, "left_anti")
        replayed = replayed.join(dropped, on, "left_anti")
    else:
        dropped_count = 0
    a, b = _comparable(agg, live).alias("live"), _comparable(agg, replayed).alias("replay")
    a, b = a.persist(), b.persist()
    try:
        only_replay = b.join(a.select(*keys), keys, "left_anti")
        only_live = a.join(b.select(*keys), keys, "left_anti")
        both_keys = a.select(*keys).join(b.select(*keys), keys, "inner")
        columns = a.columns  # a join on key names moves the keys first
        changed = a.join(both_keys, keys, "left_semi").select(*columns).exceptAll(
            b.select(*columns)
        )
        counts = (only_replay.count(), only_live.count(), changed.count())
        samples = [
            {"kind": kind, **{k: str(v) for k, v in row.asDict().items()}}
            for kind, df in (("missing", only_replay), ("extra", only_live), ("differing", changed))
            for row in df.limit(SAMPLE).collect()
        ]
        return Comparison(a.count(), *counts, dropped_count, beyond, tuple(samples[:SAMPLE]))
    finally:
        a.unpersist()
        b.unpersist()
